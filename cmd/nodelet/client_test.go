package main

import (
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/serve/server"
)

// startNodeletAPI serves the secure API with the credentials nodelet
// makes under rootDir.
func startNodeletAPI(t *testing.T, rootDir string) string {
	t.Helper()
	dir := server.PKIDir(rootDir)
	clk := testingclock.NewFakePassiveClock(time.Now())
	cert, err := server.LoadOrCreateServingCert(dir, "", "", []string{"node-a"}, clk)
	if err != nil {
		t.Fatal(err)
	}
	creds, err := server.EnsureAdminCredentials(dir, clk)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := server.LoadCertPool(creds.CACert)
	if err != nil {
		t.Fatal(err)
	}
	cfg := server.Config{TLS: cert, ClientCA: pool, AuthorizationMode: server.AuthorizationNodeletGroups, NodeName: "node-a"}
	h, err := server.NewSecure(cfg, server.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.TLS = cfg.TLSConfig()
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv.URL
}

// The CLI reads the admin credentials of --root-dir: talking to a nodelet
// that runs with another one says so, and what to do.
func TestClientWithAnotherRootDir(t *testing.T) {
	rootA, rootB := t.TempDir(), t.TempDir()
	url := startNodeletAPI(t, rootA)
	startNodeletAPI(t, rootB)

	f := &clientFlags{rootDir: &rootA, server: url, timeout: 10 * time.Second}
	c, err := f.client()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Pods(t.Context()); err != nil {
		t.Fatalf("the nodelet's own --root-dir: %v", err)
	}

	f.rootDir = &rootB
	if c, err = f.client(); err != nil {
		t.Fatal(err)
	}
	_, err = c.Pods(t.Context())
	for _, want := range []string{
		"the nodelet at " + url + " presented a certificate not signed by the CA in " + filepath.Join(rootB, "pki"),
		"pass the --root-dir that nodelet runs with, or the --server of the nodelet that uses " + rootB,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("another --root-dir: got %v, want it to contain %q", err, want)
		}
	}

	empty := t.TempDir()
	f.rootDir = &empty
	if _, err := f.client(); err == nil || !strings.Contains(err.Error(), "has nodelet run with --root-dir "+empty) {
		t.Errorf("no credentials: %v", err)
	}
}
