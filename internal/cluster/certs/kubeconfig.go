package certs

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	certutil "k8s.io/client-go/util/cert"

	"github.com/nodelet/nodelet/internal/base/atomicfile"
	"github.com/nodelet/nodelet/internal/base/bounded"
)

// maxFileSize bounds what is read of a kubeconfig or a certificate file.
const maxFileSize = 1 << 20

// readBounded reads path, refusing more than maxFileSize bytes.
func readBounded(path string) ([]byte, error) { return bounded.ReadFile(path, maxFileSize) }

// loadKubeconfig reads the kubeconfig at path into a client
// configuration, its relative paths taken from path's directory as
// kubectl does. It never reads the environment (no $KUBECONFIG).
func loadKubeconfig(path string) (*rest.Config, error) {
	data, err := readBounded(path)
	if err != nil {
		return nil, err
	}
	kc, err := clientcmd.Load(data)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	for _, c := range kc.Clusters {
		c.LocationOfOrigin = abs
	}
	for _, a := range kc.AuthInfos {
		a.LocationOfOrigin = abs
	}
	if err := clientcmd.ResolveLocalPaths(kc); err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	cfg, err := clientcmd.NewNonInteractiveClientConfig(*kc, kc.CurrentContext, &clientcmd.ConfigOverrides{}, nil).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	return cfg, nil
}

// errNoClientCert is clientCertPEM's answer for a configuration that
// authenticates otherwise (a token, say).
var errNoClientCert = errors.New("it has no client certificate")

// clientCertPEM returns cfg's client certificate and key, from the
// kubeconfig itself or from the files it names.
func clientCertPEM(cfg *rest.Config) (certPEM, keyPEM []byte, err error) {
	certPEM, keyPEM = cfg.CertData, cfg.KeyData
	if len(certPEM) == 0 && cfg.CertFile != "" {
		if certPEM, err = readBounded(cfg.CertFile); err != nil {
			return nil, nil, err
		}
	}
	if len(keyPEM) == 0 && cfg.KeyFile != "" {
		if keyPEM, err = readBounded(cfg.KeyFile); err != nil {
			return nil, nil, err
		}
	}
	if len(certPEM) == 0 || len(keyPEM) == 0 {
		return nil, nil, errNoClientCert
	}
	return certPEM, keyPEM, nil
}

// clientCertProblem says why the client certificate cfg names cannot be
// used by node nodeName at now, as the kubelet judges a kubeconfig before
// bootstrapping: missing, unreadable, not matching its key, or expired;
// and, beyond the kubelet, issued to another node (the node was renamed:
// the Node authorizer would refuse every request). nil: usable.
func clientCertProblem(cfg *rest.Config, nodeName string, now time.Time) error {
	certPEM, keyPEM, err := clientCertPEM(cfg)
	if err != nil {
		return err
	}
	if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
		return fmt.Errorf("its client certificate and key cannot be used: %w", err)
	}
	certs, err := certutil.ParseCertsPEM(certPEM)
	if err != nil {
		return fmt.Errorf("its client certificate cannot be read: %w", err)
	}
	for _, c := range certs {
		if now.After(c.NotAfter) {
			return fmt.Errorf("its client certificate %s expired at %s", subject(c), c.NotAfter.UTC().Format(time.RFC3339))
		}
	}
	return certNodeProblem(certs[0], nodeName)
}

// certNodeProblem says whether c, a node's client certificate, is another
// node's than nodeName's.
func certNodeProblem(c *x509.Certificate, nodeName string) error {
	if want := "system:node:" + nodeName; c.Subject.CommonName != want {
		return fmt.Errorf("its client certificate is %s's, not this node's (%s)", c.Subject.CommonName, want)
	}
	return nil
}

func subject(c *x509.Certificate) string {
	return c.Subject.String()
}

// writeKubeconfig writes the kubeconfig at path (0600, atomically) that
// reaches the API server as server does and authenticates with the
// certificate and key in pemPath: the node's kubeconfig after
// bootstrapping. Its directory is created (0700) if missing.
func writeKubeconfig(path string, server *rest.Config, pemPath string) error {
	cluster := &clientcmdapi.Cluster{
		Server:                server.Host,
		TLSServerName:         server.ServerName,
		InsecureSkipTLSVerify: server.Insecure,
		CertificateAuthority:  server.CAFile,
	}
	if server.CAFile == "" {
		cluster.CertificateAuthorityData = server.CAData
	}
	kc := clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{"default-cluster": cluster},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{"default-auth": {ClientCertificate: pemPath, ClientKey: pemPath}},
		Contexts:       map[string]*clientcmdapi.Context{"default-context": {Cluster: "default-cluster", AuthInfo: "default-auth", Namespace: "default"}},
		CurrentContext: "default-context",
	}
	data, err := clientcmd.Write(kc)
	if err != nil {
		return fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	return atomicfile.Write(path, data, 0o600)
}
