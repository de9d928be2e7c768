package certs

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/certificate"

	"github.com/nodelet/nodelet/internal/base/certstore"
)

// ServingConfig says what the secure port's certificate is requested for
// when serverTLSBootstrap is set.
type ServingConfig struct {
	// NodeName is the subject: system:node:<name> in system:nodes.
	NodeName string
	// CertDir holds the serving certificates (--cert-dir):
	// kubelet-server-current.pem links to the one in use.
	CertDir string
	// Addresses are the node's addresses: host names become DNS names,
	// IP addresses IP addresses of the certificate. They are asked again
	// every second; when the certificate lacks one of them, a new one is
	// requested. StaticAddresses makes one from the node name and IPs.
	Addresses func() []v1.NodeAddress
	// TLSCertFile and TLSPrivateKeyFile (--tls-cert-file and
	// --tls-private-key-file), when set, are served until the first
	// certificate is issued, as the kubelet does.
	TLSCertFile, TLSPrivateKeyFile string
}

// Serving is the secure port's certificate when serverTLSBootstrap is
// set: client-go's certificate manager requests it with a CSR for signer
// kubernetes.io/kubelet-serving (usages digital signature and server
// auth) and requests the next before it expires. kube-controller-manager
// does not approve these CSRs: an administrator or an approver for
// kubelet-serving must.
type Serving struct {
	cfg     ServingConfig
	manager certificate.Manager
	deps    Deps
}

// servingWarnAfter is how long Run waits for the first serving
// certificate before it says why the secure port refuses handshakes, and
// servingWarnEvery how often it says it again.
const (
	servingWarnAfter = time.Minute
	servingWarnEvery = 10 * time.Minute
)

// NewServing sets up the certificate manager of the serving certificate;
// it starts nothing (Run does). client sends the CSRs: the node's own
// client (the Node authorizer lets a node request its serving
// certificate).
func NewServing(cfg ServingConfig, client kubernetes.Interface, deps Deps) (*Serving, error) {
	deps = deps.withDefaults()
	if cfg.NodeName == "" || cfg.CertDir == "" || cfg.Addresses == nil {
		return nil, errors.New("serving certificate: node name, --cert-dir and the node's addresses must be set")
	}
	if client == nil {
		return nil, errors.New("serverTLSBootstrap needs an API client")
	}
	if err := os.MkdirAll(cfg.CertDir, 0o700); err != nil {
		return nil, fmt.Errorf("--cert-dir: %w", err)
	}
	store, err := newPairStore(cfg.CertDir, servingPairPrefix, cfg.TLSCertFile, cfg.TLSPrivateKeyFile, certstore.Options{Clock: deps.Clock})
	if err != nil {
		return nil, fmt.Errorf("serving certificate store: %w", err)
	}
	kctx := klogContext(deps.Log)
	m, err := certificate.NewManager(&certificate.Config{
		ClientsetFn: func(*tls.Certificate) (kubernetes.Interface, error) { return client, nil },
		GetTemplate: func() *x509.CertificateRequest { return servingTemplate(cfg.NodeName, cfg.Addresses()) },
		SignerName:  ServingSigner,
		// Key encipherment only for an RSA key; the manager makes ECDSA
		// P-256 keys.
		GetUsages:        certificate.DefaultKubeletServingGetUsages,
		CertificateStore: store,
		Name:             "kubelet-serving",
		Ctx:              &kctx,
	})
	if err != nil {
		return nil, fmt.Errorf("serving certificate manager: %w", err)
	}
	return &Serving{cfg: cfg, manager: m, deps: deps}, nil
}

// errNoServingCert fails TLS handshakes until a serving certificate is
// issued: the port serves no certificate rather than a wrong one.
var errNoServingCert = errors.New("no serving certificate yet: the node's kubernetes.io/kubelet-serving CSR is not issued")

// GetCertificate is the secure port's tls.Config.GetCertificate: the
// current serving certificate, or an error (the handshake fails) while
// there is none.
func (s *Serving) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if c := s.manager.Current(); c != nil {
		return c, nil
	}
	return nil, errNoServingCert
}

// Run requests and rotates the serving certificate until ctx ends. While
// there is none, it says every so often what to approve.
func (s *Serving) Run(ctx context.Context) {
	s.manager.Start()
	defer s.manager.Stop()
	clk, log := s.deps.Clock, s.deps.Log
	start, warned, had := clk.Now(), time.Time{}, false
	for {
		select {
		case <-ctx.Done():
			return
		case <-clk.After(checkPeriod):
		}
		now, c := clk.Now(), s.manager.Current()
		switch {
		case c != nil && !had:
			log.Info("serving certificate issued", "subject", c.Leaf.Subject.String(), "dnsNames", c.Leaf.DNSNames, "ips", c.Leaf.IPAddresses, "notAfter", c.Leaf.NotAfter)
		case c == nil && now.Sub(start) >= servingWarnAfter && now.Sub(warned) >= servingWarnEvery:
			log.Warn("the secure port refuses TLS handshakes until the node's serving certificate is issued: "+
				"kube-controller-manager does not approve kubernetes.io/kubelet-serving CSRs; approve it with "+
				"kubectl certificate approve (kubectl get csr lists it) or run an approver for them",
				"node", s.cfg.NodeName, "signer", ServingSigner)
			warned = now
		}
		had = c != nil
	}
}
