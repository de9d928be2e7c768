package registry

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

func startServer(t *testing.T, s *Store) *Server {
	t.Helper()
	srv := NewServer(s, "127.0.0.1:0", testLogger(t))
	if err := srv.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Error(err)
		}
	})
	return srv
}

// pull fetches ref from the server at addr over plain HTTP and checks that
// it has the digest the store holds for storeRef and that its blobs are
// served intact.
func pull(t *testing.T, addr, ref string, s *Store, storeRef string) {
	t.Helper()
	r, err := name.ParseReference(addr+"/"+ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	img, err := remote.Image(r, remote.WithContext(t.Context()))
	if err != nil {
		t.Fatalf("pulling %s: %v", r, err)
	}
	stored, err := s.Image(storeRef)
	if err != nil {
		t.Fatal(err)
	}
	assertSameLayers(t, img, stored)
	if _, err := img.ConfigFile(); err != nil {
		t.Errorf("reading config of %s: %v", r, err)
	}
}

func TestServerServesStoredImages(t *testing.T) {
	s, dir := openTestStore(t)
	seedWithHostBusybox(t, s)
	srv := NewServer(s, "127.0.0.1:0", testLogger(t))
	if err := srv.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	if !strings.HasPrefix(srv.Addr(), "127.0.0.1:") || strings.HasSuffix(srv.Addr(), ":0") {
		t.Fatalf("Addr = %q", srv.Addr())
	}
	pull(t, srv.Addr(), "library/busybox:1.35", s, BusyboxRef)
	pull(t, srv.Addr(), "library/busybox:latest", s, BusyboxLatestRef)
	pull(t, srv.Addr(), "pause:3.10", s, PauseRef)
	pull(t, srv.Addr(), "docker.io/library/busybox:1.35", s, BusyboxRef)
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}

	reopened, err := OpenStore(dir, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	again := startServer(t, reopened)
	pull(t, again.Addr(), "library/busybox:1.35", reopened, BusyboxRef)
	pull(t, again.Addr(), "pause:3.10", reopened, PauseRef)
}

// An image written to the store while the server runs, by this process
// or by another one (`nodelet images import`), is served at once.
func TestServerServesNewImageAtOnce(t *testing.T) {
	s, dir := openTestStore(t)
	srv := startServer(t, s)
	if _, err := s.Put("example.com/team/app:v1", randomImage(t)); err != nil {
		t.Fatal(err)
	}
	pull(t, srv.Addr(), "team/app:v1", s, "example.com/team/app:v1")
	other, err := OpenStore(dir, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Put("example.com/team/app:v2", randomImage(t)); err != nil {
		t.Fatal(err)
	}
	pull(t, srv.Addr(), "team/app:v2", s, "example.com/team/app:v2")
	pull(t, srv.Addr(), "example.com/team/app:v2", s, "example.com/team/app:v2")
	if code, _ := headManifest(t, "http://"+srv.Addr()+"/v2/team/absent/manifests/v1"); code != http.StatusNotFound {
		t.Errorf("HEAD of an absent image = %d, want 404", code)
	}
}

// TestServerNamespaces shows containerd's ?ns= parameter picking between
// images of different registries that share a repository path.
func TestServerNamespaces(t *testing.T) {
	s, _ := openTestStore(t)
	hub, quay := randomImage(t), randomImage(t)
	if _, err := s.Put("docker.io/team/app:v1", hub); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put("quay.io/team/app:v1", quay); err != nil {
		t.Fatal(err)
	}
	srv := startServer(t, s)
	tests := []struct {
		ns   string
		want v1.Hash
		code int
	}{
		{"docker.io", digestOf(t, hub), http.StatusOK},
		{"index.docker.io", digestOf(t, hub), http.StatusOK},
		{"quay.io", digestOf(t, quay), http.StatusOK},
		{"registry.k8s.io", v1.Hash{}, http.StatusNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.ns, func(t *testing.T) {
			code, digest := headManifest(t, "http://"+srv.Addr()+"/v2/team/app/manifests/v1?ns="+tt.ns)
			if code != tt.code || (tt.code == http.StatusOK && digest != tt.want.String()) {
				t.Errorf("HEAD with ns=%s = %d %s, want %d %s", tt.ns, code, digest, tt.code, tt.want)
			}
		})
	}
}

func headManifest(t *testing.T, url string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodHead, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Docker-Content-Digest")
}

func TestServerStopsWhenContextDone(t *testing.T) {
	s, _ := openTestStore(t)
	ctx, cancel := context.WithCancel(t.Context())
	srv := NewServer(s, "127.0.0.1:0", testLogger(t))
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	addr := srv.Addr()
	cancel()
	select {
	case <-srv.done:
	case <-time.After(10 * time.Second):
		t.Fatal("server still serving after its context ended")
	}
	if conn, err := net.Dial("tcp", addr); err == nil {
		conn.Close()
		t.Error("server still accepts connections after its context ended")
	}
	if err := srv.Close(); err != nil {
		t.Error(err)
	}
}

func TestServerRefusesNonLoopback(t *testing.T) {
	s, _ := openTestStore(t)
	for _, addr := range []string{"0.0.0.0:0", ":0", "192.0.2.1:5050", "localhost:0", "[::]:0", "127.0.0.1"} {
		srv := NewServer(s, addr, testLogger(t))
		if err := srv.Start(t.Context()); err == nil {
			srv.Close()
			t.Errorf("Start on %q succeeded", addr)
		}
	}
}

func TestServerStartTwice(t *testing.T) {
	s, _ := openTestStore(t)
	srv := startServer(t, s)
	if err := srv.Start(t.Context()); err == nil {
		t.Error("second Start succeeded")
	}
}
