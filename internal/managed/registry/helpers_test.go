package registry

import (
	"archive/tar"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/random"
)

const hostBusybox = "/bin/busybox"

// requireBusybox skips the test when Debian's static busybox is missing.
func requireBusybox(t *testing.T) string {
	t.Helper()
	if _, err := os.Stat(hostBusybox); err != nil {
		t.Skipf("%s not found (apt-get install busybox-static): %v", hostBusybox, err)
	}
	return hostBusybox
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(string(p))
	return len(p), nil
}

func openTestStore(t *testing.T) (*Store, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "images")
	s, err := OpenStore(dir, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	return s, dir
}

func randomImage(t *testing.T) v1.Image {
	t.Helper()
	img, err := random.Image(512, 2)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func digestOf(t *testing.T, img v1.Image) v1.Hash {
	t.Helper()
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// seedWithHostBusybox seeds s, using the static busybox as a stand-in for
// the pause program too (PauseImage only wraps the file).
func seedWithHostBusybox(t *testing.T, s *Store) {
	t.Helper()
	bb := requireBusybox(t)
	if _, err := Seed(s, SeedSpec{PauseBinary: bb, BusyboxBinary: bb}, testLogger(t)); err != nil {
		t.Fatal(err)
	}
}

// layerEntries reads the single layer of img into a map from path to tar
// header (data of regular files under "data").
func layerEntries(t *testing.T, img v1.Image) (map[string]*tar.Header, []string, map[string][]byte) {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 1 {
		t.Fatalf("image has %d layers, want 1", len(layers))
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	headers := map[string]*tar.Header{}
	data := map[string][]byte{}
	var order []string
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return headers, order, data
		}
		if err != nil {
			t.Fatal(err)
		}
		headers[hdr.Name] = hdr
		order = append(order, hdr.Name)
		if hdr.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			data[hdr.Name] = b
		}
	}
}
