package server

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"
)

// With GetCertificate (serverTLSBootstrap), Load makes no self-signed
// certificate and the port serves what GetCertificate gives: nothing
// (the handshake fails) while it has none, then its certificate, and the
// next one once it changes.
func TestSecurePortServesGetCertificate(t *testing.T) {
	root := t.TempDir()
	clk := testingclock.NewFakePassiveClock(time.Now())
	var current atomic.Pointer[tls.Certificate]
	get := func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
		if c := current.Load(); c != nil {
			return c, nil
		}
		return nil, errors.New("no serving certificate yet")
	}
	cfg, err := Settings{RootDir: root, NodeName: "node-a", Auth: Auth{AuthorizationMode: AuthorizationAlwaysAllow}, GetCertificate: get}.Load(clk)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(PKIDir(root), ServingCurrentFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a self-signed serving certificate was made: %v", err)
	}
	tlsCfg := cfg.TLSConfig()
	if len(tlsCfg.Certificates) != 0 || tlsCfg.GetCertificate == nil {
		t.Fatalf("TLS config: %d certificates, GetCertificate %v", len(tlsCfg.Certificates), tlsCfg.GetCertificate != nil)
	}
	// Not httptest's StartTLS: it adds a certificate of its own.
	ln, err := tls.Listen("tcp", "127.0.0.1:0", tlsCfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}), ReadHeaderTimeout: time.Minute, ErrorLog: log.New(io.Discard, "", 0)}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	// Two certificates for node-a from another directory's self-signed
	// store stand in for the issued ones.
	issue := func() *tls.Certificate {
		c, err := LoadOrCreateServingCert(t.TempDir(), "", "", []string{"node-a", "127.0.0.1"}, clk)
		if err != nil {
			t.Fatal(err)
		}
		return &c
	}
	seen := func() (*x509.Certificate, error) {
		conn, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12})
		if err != nil {
			return nil, err
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0], nil
	}
	if c, err := seen(); err == nil {
		t.Fatalf("handshake without a certificate succeeded, serving %s", c.Subject)
	}
	first, second := issue(), issue()
	current.Store(first)
	if c, err := seen(); err != nil || !c.Equal(first.Leaf) {
		t.Fatalf("served %v, %v; want the first certificate", c, err)
	}
	current.Store(second)
	if c, err := seen(); err != nil || !c.Equal(second.Leaf) {
		t.Fatalf("served %v, %v; want the second certificate", c, err)
	}
}

// Without GetCertificate the self-signed path stays: Load makes the
// certificate and the TLS configuration serves it.
func TestSecurePortSelfSignedWithoutGetCertificate(t *testing.T) {
	root := t.TempDir()
	cfg, err := Settings{RootDir: root, NodeName: "node-a", Auth: Auth{AuthorizationMode: AuthorizationAlwaysAllow}}.Load(testingclock.NewFakePassiveClock(time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	tlsCfg := cfg.TLSConfig()
	if tlsCfg.GetCertificate != nil || len(tlsCfg.Certificates) != 1 || tlsCfg.Certificates[0].Leaf == nil {
		t.Fatalf("TLS config: %d certificates, GetCertificate %v", len(tlsCfg.Certificates), tlsCfg.GetCertificate != nil)
	}
	if _, err := os.Lstat(filepath.Join(PKIDir(root), ServingCurrentFile)); err != nil {
		t.Errorf("no self-signed serving certificate: %v", err)
	}
}
