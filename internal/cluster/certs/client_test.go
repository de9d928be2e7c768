package certs

import (
	"context"
	"crypto/tls"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	"k8s.io/client-go/rest"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/base/testutil"
)

const bootstrapServer = "https://api.example:6443"

type env struct {
	dir, certDir, kubeconfig, bootstrap string
	ca                                  *testCA
	srv                                 *csrServer
	clk                                 *testingclock.FakeClock
	// clients are the configurations clientsets were made from.
	clients []*rest.Config
}

func newEnv(t *testing.T) *env {
	dir := t.TempDir()
	e := &env{
		dir: dir, certDir: filepath.Join(dir, "pki"),
		kubeconfig: filepath.Join(dir, "etc", "kubelet.conf"), bootstrap: filepath.Join(dir, "etc", "bootstrap-kubelet.conf"),
		ca: newTestCA(t), clk: testingclock.NewFakeClock(time.Now()),
	}
	e.srv = newCSRServer(t, e.ca)
	writeTestKubeconfig(t, e.bootstrap, bootstrapServer, e.ca.certPEM, clientcmdapi.AuthInfo{Token: "abcdef.0123456789abcdef"})
	return e
}

func (e *env) config() ClientConfig {
	return ClientConfig{Kubeconfig: e.kubeconfig, BootstrapKubeconfig: e.bootstrap, CertDir: e.certDir, NodeName: "node-a", QPS: 50, Burst: 100}
}

func (e *env) deps(t *testing.T) Deps {
	return Deps{Clock: e.clk, Log: testLog(t), NewClientset: e.srv.newClientset(&e.clients)}
}

// The kubeconfig written after bootstrapping names the stored pair, the
// bootstrap kubeconfig's server and CA, and nothing of its token.
func checkWrittenKubeconfig(t *testing.T, e *env) *rest.Config {
	t.Helper()
	if m := fileMode(t, e.kubeconfig); m != 0o600 {
		t.Errorf("kubeconfig mode %o, want 600", m)
	}
	// Written by a rename: no temporary file is left next to it.
	entries, err := os.ReadDir(filepath.Dir(e.kubeconfig))
	if err != nil {
		t.Fatal(err)
	}
	for _, de := range entries {
		if de.Name() != filepath.Base(e.kubeconfig) && de.Name() != filepath.Base(e.bootstrap) {
			t.Errorf("left next to the kubeconfig: %s", de.Name())
		}
	}
	data, err := os.ReadFile(e.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), "abcdef") {
		t.Errorf("kubeconfig holds the bootstrap token:\n%s", data)
	}
	kc, err := loadKubeconfig(e.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	current := filepath.Join(e.certDir, "kubelet-client-current.pem")
	if kc.CertFile != current || kc.KeyFile != current {
		t.Errorf("kubeconfig names cert %q and key %q, want %q", kc.CertFile, kc.KeyFile, current)
	}
	if kc.Host != bootstrapServer || string(kc.CAData) != string(e.ca.certPEM) || kc.BearerToken != "" {
		t.Errorf("kubeconfig server %q, CA %d bytes, token %q", kc.Host, len(kc.CAData), kc.BearerToken)
	}
	if err := clientCertProblem(kc, "node-a", e.clk.Now()); err != nil {
		t.Errorf("written kubeconfig: %v", err)
	}
	return kc
}

// No kubeconfig: the bootstrap credentials send one CSR for the node's
// client certificate, it is stored as kubelet-client-current.pem (0600,
// in a 0700 directory) and the kubeconfig written to point at it.
func TestBootstrapWithoutKubeconfig(t *testing.T) {
	e := newEnv(t)
	e.srv.approveAll()
	c, err := LoadClient(t.Context(), e.config(), e.deps(t))
	if err != nil {
		t.Fatal(err)
	}
	csrs := e.srv.createdCSRs()
	if len(csrs) != 1 {
		t.Fatalf("%d CSRs created, want 1", len(csrs))
	}
	checkGolden(t, "client-bootstrap-csr.golden", describeCSR(t, csrs[0]))
	if len(e.clients) != 1 || e.clients[0].BearerToken != "abcdef.0123456789abcdef" {
		t.Errorf("CSR client configurations %v, want the bootstrap kubeconfig's", e.clients)
	}
	checkWrittenKubeconfig(t, e)
	current := filepath.Join(e.certDir, "kubelet-client-current.pem")
	target, err := os.Readlink(current)
	if err != nil {
		t.Fatalf("kubelet-client-current.pem is not a link: %v", err)
	}
	if !strings.HasPrefix(filepath.Base(target), "kubelet-client-2") {
		t.Errorf("current links to %s", target)
	}
	target = filepath.Join(e.certDir, target) // the store links within the directory
	if m := fileMode(t, target); m != 0o600 {
		t.Errorf("%s mode %o, want 600", target, m)
	}
	if m := fileMode(t, e.certDir); m != 0o700 {
		t.Errorf("cert dir mode %o, want 700", m)
	}
	if _, err := os.Stat(filepath.Join(e.certDir, bootstrapKeyFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("bootstrap key left behind: %v", err)
	}
	cfg := c.RESTConfig()
	if cfg.QPS != 50 || cfg.Burst != 100 || cfg.ContentType != ProtobufContentType || !strings.HasPrefix(cfg.AcceptContentTypes, ProtobufContentType) {
		t.Errorf("client settings QPS %v Burst %v content %q accept %q", cfg.QPS, cfg.Burst, cfg.ContentType, cfg.AcceptContentTypes)
	}
	if cfg.CertFile != current {
		t.Errorf("rest config cert %q, want %q (rotation off)", cfg.CertFile, current)
	}
}

// A kubeconfig whose certificate is valid is used as it is: no CSR, no
// client made from the bootstrap credentials, the file left alone.
func TestValidKubeconfigSkipsBootstrap(t *testing.T) {
	e := newEnv(t)
	now := e.clk.Now()
	cert, key := e.ca.clientPair(t, "node-a", now.Add(-time.Hour), now.Add(time.Hour))
	writeTestKubeconfig(t, e.kubeconfig, "https://other.example:6443", e.ca.certPEM, clientcmdapi.AuthInfo{ClientCertificateData: cert, ClientKeyData: key})
	before, _ := os.ReadFile(e.kubeconfig)
	c, err := LoadClient(t.Context(), e.config(), e.deps(t))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(e.srv.client.Actions()); n != 0 || len(e.clients) != 0 {
		t.Errorf("%d API calls, %d clients: want none", n, len(e.clients))
	}
	after, _ := os.ReadFile(e.kubeconfig)
	if string(before) != string(after) {
		t.Error("kubeconfig rewritten")
	}
	if got := c.RESTConfig(); got.Host != "https://other.example:6443" || string(got.CertData) != string(cert) {
		t.Errorf("rest config host %q", got.Host)
	}
}

// A kubeconfig whose certificate expired, or that cannot be used, is
// replaced by bootstrapping.
func TestUnusableKubeconfigBootstraps(t *testing.T) {
	for name, write := range map[string]func(e *env){
		"expired": func(e *env) {
			now := e.clk.Now()
			cert, key := e.ca.clientPair(t, "node-a", now.Add(-2*time.Hour), now.Add(-time.Hour))
			writeTestKubeconfig(t, e.kubeconfig, bootstrapServer, e.ca.certPEM, clientcmdapi.AuthInfo{ClientCertificateData: cert, ClientKeyData: key})
		},
		"key does not match": func(e *env) {
			now := e.clk.Now()
			cert, _ := e.ca.clientPair(t, "node-a", now.Add(-time.Hour), now.Add(time.Hour))
			_, key := e.ca.clientPair(t, "node-a", now.Add(-time.Hour), now.Add(time.Hour))
			writeTestKubeconfig(t, e.kubeconfig, bootstrapServer, e.ca.certPEM, clientcmdapi.AuthInfo{ClientCertificateData: cert, ClientKeyData: key})
		},
		"certificate file missing": func(e *env) {
			writeTestKubeconfig(t, e.kubeconfig, bootstrapServer, e.ca.certPEM, clientcmdapi.AuthInfo{
				ClientCertificate: filepath.Join(e.certDir, "kubelet-client-current.pem"), ClientKey: filepath.Join(e.certDir, "kubelet-client-current.pem")})
		},
		"another node's": func(e *env) { // the node was renamed
			now := e.clk.Now()
			cert, key := e.ca.clientPair(t, "node-b", now.Add(-time.Hour), now.Add(time.Hour))
			writeTestKubeconfig(t, e.kubeconfig, bootstrapServer, e.ca.certPEM, clientcmdapi.AuthInfo{ClientCertificateData: cert, ClientKeyData: key})
		},
		"token only": func(e *env) {
			writeTestKubeconfig(t, e.kubeconfig, bootstrapServer, e.ca.certPEM, clientcmdapi.AuthInfo{Token: "x"})
		},
		"not a kubeconfig": func(e *env) {
			if err := os.WriteFile(e.kubeconfig, []byte("{{{"), 0o600); err != nil {
				t.Fatal(err)
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			write(e)
			e.srv.approveAll()
			if _, err := LoadClient(t.Context(), e.config(), e.deps(t)); err != nil {
				t.Fatal(err)
			}
			if n := len(e.srv.createdCSRs()); n != 1 {
				t.Fatalf("%d CSRs, want 1", n)
			}
			checkWrittenKubeconfig(t, e)
		})
	}
}

// Without --bootstrap-kubeconfig the kubeconfig is used as it is, as the
// kubelet does; a missing one is an error that says so.
func TestNoBootstrapKubeconfig(t *testing.T) {
	e := newEnv(t)
	cfg := e.config()
	cfg.BootstrapKubeconfig = ""
	_, err := LoadClient(t.Context(), cfg, e.deps(t))
	if err == nil || !strings.Contains(err.Error(), "--kubeconfig") || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing kubeconfig: %v", err)
	}
	writeTestKubeconfig(t, e.kubeconfig, bootstrapServer, e.ca.certPEM, clientcmdapi.AuthInfo{Token: "admin-token"})
	c, err := LoadClient(t.Context(), cfg, e.deps(t))
	if err != nil {
		t.Fatal(err)
	}
	if c.RESTConfig().BearerToken != "admin-token" || len(e.srv.createdCSRs()) != 0 {
		t.Errorf("token kubeconfig not used as is")
	}
	// Another node's certificate: refused at once, saying what to do,
	// rather than every request refused by the Node authorizer.
	now := e.clk.Now()
	cert, key := e.ca.clientPair(t, "node-b", now.Add(-time.Hour), now.Add(time.Hour))
	writeTestKubeconfig(t, e.kubeconfig, bootstrapServer, e.ca.certPEM, clientcmdapi.AuthInfo{ClientCertificateData: cert, ClientKeyData: key})
	if _, err := LoadClient(t.Context(), cfg, e.deps(t)); err == nil || !strings.Contains(err.Error(), "system:node:node-b") ||
		!strings.Contains(err.Error(), "--hostname-override") {
		t.Errorf("another node's certificate: %v", err)
	}
}

// Nobody approves: LoadClient waits, and once an administrator approves
// and the signer issues, it finishes.
func TestBootstrapWaitsForApproval(t *testing.T) {
	e := newEnv(t)
	done := make(chan error, 1)
	go func() {
		_, err := LoadClient(t.Context(), e.config(), e.deps(t))
		done <- err
	}()
	testutil.Eventually(t, "the CSR is created", func() bool { return len(e.srv.createdCSRs()) == 1 })
	select {
	case err := <-done:
		t.Fatalf("LoadClient returned before the CSR was approved: %v", err)
	default:
	}
	if n := e.srv.approvePending(t); n != 1 {
		t.Fatalf("approved %d CSRs", n)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	checkWrittenKubeconfig(t, e)
}

// Nobody approves for BootstrapTimeout: the error names the CSR and says
// what to check. The key stays, so that the next start finds the same
// CSR (by its name) instead of sending another, and finishes once it is
// approved.
func TestBootstrapTimeoutThenRestart(t *testing.T) {
	e := newEnv(t)
	cfg := e.config()
	cfg.BootstrapTimeout = 10 * time.Minute
	done := make(chan error, 1)
	go func() {
		_, err := LoadClient(t.Context(), cfg, e.deps(t))
		done <- err
	}()
	testutil.Eventually(t, "the CSR is created", func() bool { return len(e.srv.createdCSRs()) == 1 })
	name := e.srv.createdCSRs()[0].Name
	e.clk.Step(10*time.Minute + time.Second)
	err := <-done
	if err == nil {
		t.Fatal("LoadClient succeeded with nobody approving")
	}
	for _, want := range []string{name, "not approved and issued within 10m0s", "kubectl certificate approve " + name, "csrapproving", "system:bootstrappers"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if _, err := os.Stat(filepath.Join(e.certDir, bootstrapKeyFile)); err != nil {
		t.Fatalf("bootstrap key gone after a timeout: %v", err)
	}
	if m := fileMode(t, filepath.Join(e.certDir, bootstrapKeyFile)); m != 0o600 {
		t.Errorf("bootstrap key mode %o", m)
	}

	// Restart: the same CSR is found (create answers AlreadyExists), and
	// an approval finishes the bootstrap.
	go func() {
		_, err := LoadClient(t.Context(), cfg, e.deps(t))
		done <- err
	}()
	testutil.Eventually(t, "the restarted bootstrap finds the CSR", func() bool { return e.srv.countActions("get") == 1 })
	if n := e.srv.approvePending(t); n != 1 {
		t.Fatalf("approved %d CSRs", n)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	list, _ := e.srv.client.CertificatesV1().CertificateSigningRequests().List(t.Context(), metavListAll)
	if len(list.Items) != 1 || list.Items[0].Name != name {
		t.Errorf("CSRs after restart: %d, want only %s", len(list.Items), name)
	}
}

// A denied CSR and credentials the API server refuses are errors at once,
// naming the CSR.
func TestBootstrapRefused(t *testing.T) {
	for name, answer := range map[string]func(*certificatesv1.CertificateSigningRequest) error{
		"denied": func(csr *certificatesv1.CertificateSigningRequest) error {
			csr.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{{
				Type: certificatesv1.CertificateDenied, Status: "True", Reason: "NotMyNode", Message: "go away"}}
			return nil
		},
		"forbidden": forbidden,
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			e.srv.answer = answer
			_, err := LoadClient(t.Context(), e.config(), e.deps(t))
			if err == nil || !strings.Contains(err.Error(), "CSR node-csr-") {
				t.Fatalf("err = %v, want one naming the CSR", err)
			}
			if name == "denied" && !strings.Contains(err.Error(), "NotMyNode") {
				t.Errorf("err = %v, want the reason", err)
			}
			if _, err := os.Stat(e.kubeconfig); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("kubeconfig written: %v", err)
			}
		})
	}
}

// An API server that cannot be reached is tried again (on the clock)
// until the request goes through.
func TestBootstrapRetriesUnreachableServer(t *testing.T) {
	e := newEnv(t)
	fails := 2
	e.srv.answer = func(csr *certificatesv1.CertificateSigningRequest) error {
		if fails > 0 {
			fails--
			return errors.New("connection refused")
		}
		e.srv.issue(csr)
		return nil
	}
	done := make(chan error, 1)
	go func() {
		_, err := LoadClient(t.Context(), e.config(), e.deps(t))
		done <- err
	}()
	for range 2 {
		// The bootstrap's bound and the retry's wait.
		testutil.Eventually(t, "a retry waits on the clock", func() bool { return e.clk.Waiters() == 2 })
		e.clk.Step(createRetryMax)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// With rotation on, the client configuration presents whatever the
// certificate manager holds: when it rotates (here at once: the
// certificate is past its rotation deadline), the connections are closed
// and the next request shows the new certificate.
func TestRotationPresentsTheNewCertificate(t *testing.T) {
	e := newEnv(t)
	e.srv.approveAll()
	srv := newPeerServer(t)
	now := time.Now()
	cert, key := e.ca.clientPair(t, "node-a", now.Add(-10*time.Hour), now.Add(time.Hour))
	writeTestKubeconfig(t, e.kubeconfig, srv.URL, srv.caPEM, clientcmdapi.AuthInfo{ClientCertificateData: cert, ClientKeyData: key})
	cfg := e.config()
	cfg.RotateCertificates = true
	cfg.BootstrapKubeconfig = ""
	c, err := LoadClient(t.Context(), cfg, e.deps(t))
	if err != nil {
		t.Fatal(err)
	}
	rc := c.RESTConfig()
	if rc.CertData != nil || rc.CertFile != "" || rc.Transport == nil || rc.QPS != 50 || rc.ContentType != ProtobufContentType {
		t.Fatalf("rotating config: cert %d bytes %q, transport %v", len(rc.CertData), rc.CertFile, rc.Transport)
	}
	first := c.Current()
	if first == nil || first.Leaf.NotAfter.Sub(now) > 2*time.Hour {
		t.Fatalf("current certificate before rotation: %v", first)
	}
	if got := srv.get(t, rc); got != first.Leaf.SerialNumber.String() {
		t.Fatalf("server saw serial %s, want %s", got, first.Leaf.SerialNumber)
	}

	ctx, cancel := context.WithCancel(t.Context())
	runDone := make(chan error, 1)
	go func() { runDone <- c.Run(ctx) }()
	testutil.Eventually(t, "the certificate is rotated", func() bool {
		cur := c.Current()
		return cur != nil && cur.Leaf.SerialNumber.Cmp(first.Leaf.SerialNumber) != 0
	})
	rotated := c.Current()
	if got := srv.get(t, rc); got != rotated.Leaf.SerialNumber.String() {
		t.Errorf("after rotation the server saw serial %s, want the new %s", got, rotated.Leaf.SerialNumber)
	}
	csrs := e.srv.createdCSRs()
	if len(csrs) != 1 {
		t.Fatalf("%d CSRs, want 1", len(csrs))
	}
	checkGolden(t, "client-rotation-csr.golden", describeCSR(t, csrs[0]))
	// The new pair is in the store, for the next start.
	stored, err := tls.LoadX509KeyPair(filepath.Join(e.certDir, "kubelet-client-current.pem"), filepath.Join(e.certDir, "kubelet-client-current.pem"))
	if err != nil {
		t.Fatal(err)
	}
	if string(stored.Certificate[0]) != string(rotated.Certificate[0]) {
		t.Error("kubelet-client-current.pem is not the rotated certificate")
	}
	cancel()
	if err := <-runDone; err != nil {
		t.Fatal(err)
	}
}

// Rotation on, but the kubeconfig authenticates with a token: nothing to
// rotate, the configuration is used as it is.
func TestRotationWithTokenKubeconfig(t *testing.T) {
	e := newEnv(t)
	writeTestKubeconfig(t, e.kubeconfig, bootstrapServer, e.ca.certPEM, clientcmdapi.AuthInfo{Token: "admin-token"})
	cfg := e.config()
	cfg.RotateCertificates, cfg.BootstrapKubeconfig = true, ""
	c, err := LoadClient(t.Context(), cfg, e.deps(t))
	if err != nil {
		t.Fatal(err)
	}
	if c.RESTConfig().BearerToken != "admin-token" || c.manager != nil {
		t.Error("token kubeconfig not used as is")
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := c.Run(ctx); err != nil {
		t.Fatal(err)
	}
}
