package certs

import (
	"context"
	"crypto/tls"
	"encoding/pem"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/base/testutil"
)

var metavListAll = metav1.ListOptions{}

// peerServer is an HTTPS server that answers every request with the
// serial number of the client certificate the connection presented.
type peerServer struct {
	*httptest.Server
	caPEM      []byte
	handshakes atomic.Int64
}

func newPeerServer(t *testing.T) *peerServer {
	p := &peerServer{}
	p.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(r.TLS.PeerCertificates) == 0 {
			http.Error(w, "no client certificate", http.StatusUnauthorized)
			return
		}
		io.WriteString(w, r.TLS.PeerCertificates[0].SerialNumber.String())
	}))
	p.Server.TLS = &tls.Config{ClientAuth: tls.RequestClientCert}
	p.Server.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			p.handshakes.Add(1)
		}
	}
	p.StartTLS()
	t.Cleanup(p.Close)
	p.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: p.Certificate().Raw})
	return p
}

// get asks the server through a client made from rc, and returns what
// it answered: the serial number of the certificate it saw.
func (p *peerServer) get(t *testing.T, rc *rest.Config) string {
	t.Helper()
	hc, err := rest.HTTPClientFor(rc)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Get(p.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET: %d %s", resp.StatusCode, b)
	}
	return strings.TrimSpace(string(b))
}

// A changed certificate closes the connections made with the old one; the
// same certificate set again does not.
func TestRotatingCertClosesConnectionsOnChange(t *testing.T) {
	ca := newTestCA(t)
	srv := newPeerServer(t)
	now := time.Now()
	clk := testingclock.NewFakeClock(now)
	pair := func() *tls.Certificate {
		certPEM, keyPEM := ca.clientPair(t, "node-a", now.Add(-time.Hour), now.Add(time.Hour))
		c, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		return &c
	}
	r := newRotatingCert(clk, testLog(t))
	rc, err := r.restConfig(&rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{CAData: srv.caPEM}})
	if err != nil {
		t.Fatal(err)
	}
	// No certificate yet: the handshake presents none.
	resp, err := mustClient(t, rc).Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("without a certificate: %d, want 401", resp.StatusCode)
	}
	a, b := pair(), pair()
	r.set(a)
	if got := srv.get(t, rc); got != a.Leaf.SerialNumber.String() {
		t.Fatalf("saw %s, want %s", got, a.Leaf.SerialNumber)
	}
	conns := srv.handshakes.Load()
	r.set(a)
	srv.get(t, rc)
	if n := srv.handshakes.Load(); n != conns {
		t.Errorf("setting the same certificate made %d new connections", n-conns)
	}
	r.set(b)
	if got := srv.get(t, rc); got != b.Leaf.SerialNumber.String() {
		t.Errorf("after the change saw %s, want %s", got, b.Leaf.SerialNumber)
	}
	// Expired on the clock: presented no more.
	clk.Step(2 * time.Hour)
	if r.current() != nil {
		t.Error("an expired certificate is current")
	}
}

func mustClient(t *testing.T, rc *rest.Config) *http.Client {
	t.Helper()
	hc, err := rest.HTTPClientFor(rc)
	if err != nil {
		t.Fatal(err)
	}
	return hc
}

// fakeManager is a certificate manager whose state the test sets.
type fakeManager struct {
	healthy atomic.Bool
	started atomic.Bool
	stopped atomic.Bool
}

func (m *fakeManager) Start()                    { m.started.Store(true) }
func (m *fakeManager) Stop()                     { m.stopped.Store(true) }
func (m *fakeManager) Current() *tls.Certificate { return nil }
func (m *fakeManager) ServerHealthy() bool       { return m.healthy.Load() }

// Without a usable certificate for 5 minutes while the API server answers,
// Run returns an error (the node restarts and bootstraps again, as the
// kubelet exits); while the server does not answer, it waits.
func TestRunGivesUpWithoutCertificate(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Now())
	m := &fakeManager{}
	c := &Client{manager: m, rot: newRotatingCert(clk, testLog(t)), deps: Deps{Clock: clk, Log: testLog(t)}.withDefaults()}
	done := make(chan error, 1)
	go func() { done <- c.Run(t.Context()) }()
	waiting := func() { testutil.Eventually(t, "Run waits on the clock", clk.HasWaiters) }
	waiting()
	for range int(expiredExit/checkPeriod) + 1 { // past 5 minutes, the server not answering
		clk.Step(checkPeriod)
		waiting() // Run looked, and goes on
	}
	m.healthy.Store(true)
	clk.Step(checkPeriod)
	err := <-done
	if err == nil || !strings.Contains(err.Error(), "no usable client certificate") {
		t.Fatalf("Run = %v", err)
	}
	if !m.started.Load() || !m.stopped.Load() {
		t.Error("manager not started and stopped")
	}
}

// Run stops the manager when its context ends.
func TestRunStopsManager(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Now())
	m := &fakeManager{}
	c := &Client{manager: m, rot: newRotatingCert(clk, testLog(t)), deps: Deps{Clock: clk, Log: testLog(t)}.withDefaults()}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := c.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if !m.stopped.Load() {
		t.Error("manager not stopped")
	}
}
