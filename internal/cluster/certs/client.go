package certs

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/certificate"

	"github.com/nodelet/nodelet/internal/base/certstore"
)

// ClientConfig says where the node's API credentials are and how its
// clients behave; the names are the kubelet's flags.
type ClientConfig struct {
	// Kubeconfig is the node's kubeconfig (--kubeconfig). With
	// BootstrapKubeconfig, nodelet writes it.
	Kubeconfig string
	// BootstrapKubeconfig (--bootstrap-kubeconfig), when set, is used to
	// request a client certificate whenever Kubeconfig is missing or its
	// certificate cannot be used.
	BootstrapKubeconfig string
	// CertDir holds the client certificates (--cert-dir).
	CertDir string
	// NodeName is the node the certificate is for (system:node:<name>).
	NodeName string
	// RotateCertificates requests a new certificate before the current
	// one expires (--rotate-certificates).
	RotateCertificates bool
	// QPS and Burst limit each clientset made from RESTConfig
	// (kubeAPIQPS, kubeAPIBurst); ContentType is what they send
	// (contentType; empty is protobuf).
	QPS         float32
	Burst       int
	ContentType string
	// BootstrapTimeout bounds the wait for the bootstrap CSR to be
	// approved and issued; 0 is an hour, as the kubelet waits.
	BootstrapTimeout time.Duration
}

// DefaultBootstrapTimeout is how long LoadClient waits for the bootstrap
// CSR when ClientConfig.BootstrapTimeout is 0.
const DefaultBootstrapTimeout = time.Hour

// expiredExit is how long Run goes on without a usable client
// certificate while the API server answers: then it returns an error, so
// that the node restarts and bootstraps again, as the kubelet exits.
const expiredExit = 5 * time.Minute

// checkPeriod is how often Run looks at the client certificate's expiry.
const checkPeriod = 10 * time.Second

// Client is the node's API client configuration, with the certificate
// manager that rotates its certificate when rotation is on.
type Client struct {
	cfg     *rest.Config
	rot     *rotatingCert
	manager certificate.Manager
	deps    Deps
}

// LoadClient makes the node's API client configuration, bootstrapping
// a client certificate first when needed. It starts nothing; with
// rotation on, Run rotates. Its steps:
//
//  1. With BootstrapKubeconfig, check Kubeconfig: it must exist and name
//     a client certificate and key that match and have not expired.
//  2. If not, bootstrap: send a CSR for system:node:<NodeName> (group
//     system:nodes, an ECDSA P-256 key, usages digital signature and
//     client auth, signer kubernetes.io/kube-apiserver-client-kubelet)
//     with the bootstrap credentials, wait (at most BootstrapTimeout)
//     until it is approved and issued, store certificate and key as
//     CertDir/kubelet-client-current.pem and write Kubeconfig (0600)
//     pointing at that file.
//  3. Read Kubeconfig into the client configuration, with QPS, Burst
//     and ContentType.
//  4. With RotateCertificates and a client certificate in Kubeconfig,
//     set up client-go's certificate manager over CertDir, and give the
//     configuration a transport that always presents the manager's
//     current certificate.
func LoadClient(ctx context.Context, cfg ClientConfig, deps Deps) (*Client, error) {
	deps = deps.withDefaults()
	if cfg.Kubeconfig == "" {
		return nil, errors.New("cluster mode needs --kubeconfig")
	}
	if cfg.NodeName == "" || cfg.CertDir == "" {
		return nil, errors.New("client certificate: node name and --cert-dir must be set")
	}
	if err := os.MkdirAll(cfg.CertDir, 0o700); err != nil {
		return nil, fmt.Errorf("--cert-dir: %w", err)
	}
	if cfg.BootstrapKubeconfig != "" {
		if err := ensureClientCert(ctx, cfg, deps); err != nil {
			return nil, err
		}
	}
	base, err := loadKubeconfig(cfg.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig: %w", err)
	}
	if certPEM, _, err := clientCertPEM(base); err == nil {
		if certs, err := certutil.ParseCertsPEM(certPEM); err == nil {
			if err := certNodeProblem(certs[0], cfg.NodeName); err != nil {
				return nil, fmt.Errorf("--kubeconfig %s: %w: the API server would refuse its requests; "+
					"give the node that name (--hostname-override), or a --bootstrap-kubeconfig to get one for this node", cfg.Kubeconfig, err)
			}
		}
	}
	applyClientSettings(base, cfg)
	c := &Client{cfg: base, deps: deps}
	if !cfg.RotateCertificates {
		return c, nil
	}
	if _, _, err := clientCertPEM(base); err != nil {
		deps.Log.Warn("--rotate-certificates: the kubeconfig does not authenticate with a client certificate; nothing to rotate",
			"kubeconfig", cfg.Kubeconfig, "reason", err)
		return c, nil
	}
	if err := c.setUpRotation(cfg, base); err != nil {
		return nil, err
	}
	return c, nil
}

// applyClientSettings sets the client behaviour the kubelet's flags set.
func applyClientSettings(c *rest.Config, cfg ClientConfig) {
	c.QPS, c.Burst = cfg.QPS, cfg.Burst
	c.ContentType = cfg.ContentType
	if c.ContentType == "" {
		c.ContentType = ProtobufContentType
	}
	if c.ContentType == ProtobufContentType {
		c.AcceptContentTypes = ProtobufContentType + ",application/json"
	}
}

// ensureClientCert is steps 1 and 2 of LoadClient.
func ensureClientCert(ctx context.Context, cfg ClientConfig, deps Deps) error {
	log := deps.Log
	kc, err := loadKubeconfig(cfg.Kubeconfig)
	switch {
	case err == nil:
		if err = clientCertProblem(kc, cfg.NodeName, deps.Clock.Now()); err == nil {
			log.Debug("kubeconfig is valid: no bootstrap", "kubeconfig", cfg.Kubeconfig)
			return nil
		}
		log.Info("bootstrapping a client certificate: the kubeconfig cannot be used", "kubeconfig", cfg.Kubeconfig, "reason", err)
	case errors.Is(err, os.ErrNotExist):
		log.Info("bootstrapping a client certificate: no kubeconfig yet", "kubeconfig", cfg.Kubeconfig)
	default:
		log.Warn("bootstrapping a client certificate: the kubeconfig cannot be read", "kubeconfig", cfg.Kubeconfig, "err", err)
	}
	boot, err := loadKubeconfig(cfg.BootstrapKubeconfig)
	if err != nil {
		return fmt.Errorf("--bootstrap-kubeconfig: %w", err)
	}
	applyClientSettings(boot, cfg)
	client, err := deps.NewClientset(boot)
	if err != nil {
		return fmt.Errorf("--bootstrap-kubeconfig: %w", err)
	}
	return bootstrap(ctx, cfg, boot, client, deps)
}

// bootstrap is step 2 of LoadClient: the CSR, the stored pair, the
// kubeconfig. The key waits in CertDir until the certificate is stored.
func bootstrap(ctx context.Context, cfg ClientConfig, boot *rest.Config, client kubernetes.Interface, deps Deps) error {
	store, err := newPairStore(cfg.CertDir, clientPairPrefix, "", "", certstore.Options{Clock: deps.Clock})
	if err != nil {
		return fmt.Errorf("client certificate store: %w", err)
	}
	keyPEM, key, err := loadOrCreateKey(store.store, bootstrapKeyFile)
	if err != nil {
		return fmt.Errorf("bootstrap key: %w", err)
	}
	timeout := cfg.BootstrapTimeout
	if timeout == 0 {
		timeout = DefaultBootstrapTimeout
	}
	certPEM, err := csrRequest{
		client: client, clock: deps.Clock, log: deps.Log, signer: ClientSigner,
		tmpl: clientTemplate(cfg.NodeName), key: key, timeout: timeout, hint: clientHint,
	}.do(ctx)
	if err != nil {
		return fmt.Errorf("client certificate bootstrap: %w", err)
	}
	stored, err := store.Update(certPEM, keyPEM)
	if err != nil {
		return fmt.Errorf("store the client certificate: %w", err)
	}
	if err := store.store.Remove(bootstrapKeyFile); err != nil {
		deps.Log.Warn("cannot remove the bootstrap key", "path", filepath.Join(cfg.CertDir, bootstrapKeyFile), "err", err)
	}
	if err := writeKubeconfig(cfg.Kubeconfig, boot, store.CurrentPath()); err != nil {
		return err
	}
	deps.Log.Info("client certificate issued", "subject", stored.Leaf.Subject.String(), "notAfter", stored.Leaf.NotAfter, "kubeconfig", cfg.Kubeconfig)
	return nil
}

// setUpRotation is step 4 of LoadClient. The certificate manager starts
// from the newest pair in CertDir, else the files or data the kubeconfig
// names (kubeadm's kubelet.conf embeds them: they are then copied into
// CertDir and replaced at once, as the kubelet does).
func (c *Client) setUpRotation(cfg ClientConfig, base *rest.Config) error {
	log := c.deps.Log
	c.rot = newRotatingCert(c.deps.Clock, log)
	store, err := newPairStore(cfg.CertDir, clientPairPrefix, base.CertFile, base.KeyFile, certstore.Options{Clock: c.deps.Clock})
	if err != nil {
		return fmt.Errorf("client certificate store: %w", err)
	}
	store.onUpdate = c.rot.set
	rotating, err := c.rot.restConfig(base)
	if err != nil {
		return err
	}
	var boot *rest.Config
	if cfg.BootstrapKubeconfig != "" {
		if boot, err = loadKubeconfig(cfg.BootstrapKubeconfig); err != nil {
			return fmt.Errorf("--bootstrap-kubeconfig: %w", err)
		}
		applyClientSettings(boot, cfg)
	}
	kctx := klogContext(log)
	c.manager, err = certificate.NewManager(&certificate.Config{
		// With a usable certificate, new ones are requested with it; with
		// none (it expired), with the bootstrap credentials if given.
		ClientsetFn: func(current *tls.Certificate) (kubernetes.Interface, error) {
			if current != nil {
				return c.deps.NewClientset(rotating)
			}
			if boot != nil {
				return c.deps.NewClientset(boot)
			}
			return nil, errors.New("the client certificate expired and there is no --bootstrap-kubeconfig to request another")
		},
		Template:                clientTemplate(cfg.NodeName),
		SignerName:              ClientSigner,
		GetUsages:               certificate.DefaultKubeletClientGetUsages,
		CertificateStore:        store,
		BootstrapCertificatePEM: base.CertData,
		BootstrapKeyPEM:         base.KeyData,
		Name:                    "kubelet-client",
		Ctx:                     &kctx,
	})
	if err != nil {
		return fmt.Errorf("client certificate manager: %w", err)
	}
	c.rot.set(c.manager.Current())
	c.cfg = rotating
	return nil
}

// RESTConfig is the configuration of the node's API clients: a copy,
// with its QPS, Burst and content type. With rotation on, every copy
// shares one transport that presents the current client certificate.
// Each clientset made from it has its own QPS/Burst limit.
func (c *Client) RESTConfig() *rest.Config {
	return rest.CopyConfig(c.cfg)
}

// Current is the client certificate in use with rotation on (nil when
// there is none, or rotation is off).
func (c *Client) Current() *tls.Certificate {
	if c.rot == nil {
		return nil
	}
	return c.rot.current()
}

// Run rotates the client certificate until ctx ends (with rotation off
// it only waits). It returns an error when there has been no usable
// client certificate for 5 minutes while the API server answers the
// requests for a new one, as the kubelet exits then: restarted, nodelet
// bootstraps again with --bootstrap-kubeconfig. Once ctx ended it
// returns nil.
func (c *Client) Run(ctx context.Context) error {
	if c.manager == nil {
		<-ctx.Done()
		return nil
	}
	c.manager.Start()
	defer c.manager.Stop()
	lastUsable := c.deps.Clock.Now()
	var lastWarned time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-c.deps.Clock.After(checkPeriod):
		}
		now := c.deps.Clock.Now()
		if c.rot.current() != nil {
			lastUsable = now
			continue
		}
		if now.Sub(lastUsable) < expiredExit {
			continue
		}
		if c.manager.ServerHealthy() && ctx.Err() == nil {
			return fmt.Errorf("no usable client certificate since %s and the API server does not issue a new one: "+
				"restart nodelet with --bootstrap-kubeconfig to bootstrap again", lastUsable.UTC().Format(time.RFC3339))
		}
		if now.Sub(lastWarned) >= expiredExit {
			c.deps.Log.Error("no usable client certificate and the API server does not answer; a restart may be needed to bootstrap again",
				"since", lastUsable)
			lastWarned = now
		}
	}
}
