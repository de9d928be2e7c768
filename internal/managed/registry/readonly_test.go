package registry

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// TestServerRefusesWrites plays a local user who tries to replace
// busybox:latest, delete its blobs and list the catalog: every request is
// refused and the store is unchanged, byte for byte.
func TestServerRefusesWrites(t *testing.T) {
	s, dir := openTestStore(t)
	stored, other := randomImage(t), randomImage(t)
	if _, err := s.Put(BusyboxLatestRef, stored); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put("example.com/other:v1", other); err != nil {
		t.Fatal(err)
	}
	srv := startServer(t, s)
	before := snapshotDir(t, dir)

	otherManifest, err := other.RawManifest()
	if err != nil {
		t.Fatal(err)
	}
	layers, err := stored.Layers()
	if err != nil {
		t.Fatal(err)
	}
	layer, err := layers[0].Digest()
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + srv.Addr() + "/v2/"
	manifestType := "application/vnd.oci.image.manifest.v1+json"
	tests := []struct {
		method, path, contentType string
		body                      []byte
	}{
		{http.MethodPut, "library/busybox/manifests/latest", manifestType, otherManifest},
		{http.MethodPut, "library/busybox/manifests/latest?ns=docker.io", manifestType, otherManifest},
		{http.MethodPut, "docker.io/library/busybox/manifests/latest", manifestType, otherManifest},
		{http.MethodPut, "library/evil/manifests/latest", manifestType, otherManifest},
		{http.MethodPost, "library/busybox/blobs/uploads/", "", nil},
		{http.MethodPost, "library/busybox/blobs/uploads/?digest=" + layer.String(), "application/octet-stream", []byte("evil")},
		{http.MethodPatch, "library/busybox/blobs/uploads/1", "application/octet-stream", []byte("evil")},
		{http.MethodPut, "library/busybox/blobs/uploads/1?digest=" + layer.String(), "application/octet-stream", []byte("evil")},
		{http.MethodDelete, "library/busybox/blobs/" + layer.String(), "", nil},
		{http.MethodDelete, "library/busybox/manifests/latest", "", nil},
		{http.MethodDelete, "library/busybox/manifests/" + digestOf(t, stored).String(), "", nil},
		{http.MethodGet, "_catalog", "", nil},
		{http.MethodGet, "_catalog?ns=docker.io", "", nil},
		{http.MethodGet, "library/busybox/tags/list", "", nil},
	}
	for _, tt := range tests {
		code := do(t, tt.method, base+tt.path, tt.contentType, tt.body)
		if code < 400 || code >= 500 {
			t.Errorf("%s /v2/%s = %d, want a 4xx refusal", tt.method, tt.path, code)
		}
	}
	if after := snapshotDir(t, dir); !mapsEqual(before, after) {
		t.Errorf("the store changed:\nbefore %v\nafter  %v", before, after)
	}
	if code, digest := headManifest(t, base+"library/busybox/manifests/latest"); code != http.StatusOK || digest != digestOf(t, stored).String() {
		t.Errorf("busybox:latest = %d %s, want %s", code, digest, digestOf(t, stored))
	}
	// What a client library does to push: it must fail too.
	target, err := name.ParseReference(srv.Addr()+"/library/busybox:latest", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(target, randomImage(t), remote.WithContext(t.Context())); err == nil {
		t.Error("remote.Write to the registry succeeded")
	}
	if after := snapshotDir(t, dir); !mapsEqual(before, after) {
		t.Errorf("remote.Write changed the store:\nbefore %v\nafter  %v", before, after)
	}
	pull(t, srv.Addr(), "library/busybox:latest", s, BusyboxLatestRef)
}

// TestServerRefusesLargeBody sends a 256 MiB upload: the server answers
// without reading it, so the client gets to send little more than what
// the socket buffers hold.
func TestServerRefusesLargeBody(t *testing.T) {
	s, _ := openTestStore(t)
	if _, err := s.Put(BusyboxLatestRef, randomImage(t)); err != nil {
		t.Fatal(err)
	}
	srv := startServer(t, s)
	const size = 256 << 20
	for _, method := range []string{http.MethodPut, http.MethodPatch, http.MethodPost, http.MethodGet} {
		t.Run(method, func(t *testing.T) {
			body := &countingReader{r: io.LimitReader(zeros{}, size)}
			req, err := http.NewRequestWithContext(t.Context(), method, "http://"+srv.Addr()+"/v2/library/busybox/manifests/latest", body)
			if err != nil {
				t.Fatal(err)
			}
			req.ContentLength = size
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode < 400 || resp.StatusCode >= 500 {
					t.Errorf("%s with a %d-byte body = %d, want a 4xx refusal", method, size, resp.StatusCode)
				}
			}
			// A transport error (the server closed the connection while
			// the client was still sending) is a refusal too.
			if n := body.n.Load(); n > 32<<20 {
				t.Errorf("the server let the client send %d of %d bytes", n, size)
			}
		})
	}
}

// TestServerServesManifestsAndBlobs checks the headers containerd relies
// on, for GET and HEAD, under the mirror path, the qualified path and ?ns=.
func TestServerServesManifestsAndBlobs(t *testing.T) {
	s, _ := openTestStore(t)
	img := randomImage(t)
	if _, err := s.Put("quay.io/team/app:v1", img); err != nil {
		t.Fatal(err)
	}
	srv := startServer(t, s)
	manifest, err := img.RawManifest()
	if err != nil {
		t.Fatal(err)
	}
	mediaType, err := img.MediaType()
	if err != nil {
		t.Fatal(err)
	}
	cfgName, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.RawConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	digest := digestOf(t, img)
	base := "http://" + srv.Addr() + "/v2/"
	for _, path := range []string{"team/app", "quay.io/team/app", "team/app/@ns=quay.io"} {
		repo, query := path, ""
		if p, ns, ok := strings.Cut(path, "/@ns="); ok {
			repo, query = p, "?ns="+ns
		}
		for _, ref := range []string{"v1", digest.String()} {
			for _, method := range []string{http.MethodGet, http.MethodHead} {
				url := base + repo + "/manifests/" + ref + query
				assertResponse(t, method, url, string(mediaType), digest, manifest)
			}
		}
		for _, method := range []string{http.MethodGet, http.MethodHead} {
			assertResponse(t, method, base+repo+"/blobs/"+cfgName.String()+query, "application/octet-stream", cfgName, cfg)
		}
	}
	ping := do(t, http.MethodGet, base, "", nil)
	if ping != http.StatusOK {
		t.Errorf("GET /v2/ = %d, want 200", ping)
	}
	for _, path := range []string{
		"team/app/manifests/v2",                            // unknown tag
		"team/app/manifests/v1?ns=docker.io",               // other registry
		"team/other/manifests/v1",                          // unknown repository
		"team/app/blobs/sha256:" + strings.Repeat("0", 64), // unknown blob
		"team/app/blobs/sha256:../../index.json",           // not a digest
		"team/app/blobs/" + strings.ToUpper(cfgName.String()),
		"team/app/blobs/.tmp-x",
	} {
		if code := do(t, http.MethodGet, base+path, "", nil); code != http.StatusNotFound {
			t.Errorf("GET /v2/%s = %d, want 404", path, code)
		}
	}
}

func assertResponse(t *testing.T, method, url, contentType string, digest v1.Hash, want []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Errorf("%s %s = %d, want 200", method, url, resp.StatusCode)
		return
	}
	if got := resp.Header.Get("Content-Type"); got != contentType {
		t.Errorf("%s %s: Content-Type %q, want %q", method, url, got, contentType)
	}
	if got := resp.Header.Get("Docker-Content-Digest"); got != digest.String() {
		t.Errorf("%s %s: Docker-Content-Digest %q, want %q", method, url, got, digest)
	}
	if got := resp.Header.Get("Content-Length"); got != strconv.Itoa(len(want)) {
		t.Errorf("%s %s: Content-Length %q, want %d", method, url, got, len(want))
	}
	if method == http.MethodGet && !bytes.Equal(body, want) {
		t.Errorf("%s %s: body differs from the stored content", method, url)
	}
}

func do(t *testing.T, method, url, contentType string, body []byte) int {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body == nil {
		req.Body, req.ContentLength = nil, 0
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// snapshotDir maps every path under dir to its mode and content hash.
func snapshotDir(t *testing.T, dir string) map[string]string {
	t.Helper()
	snap := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		entry := fi.Mode().String()
		if fi.Mode().IsRegular() {
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(data)
			entry += " " + hex.EncodeToString(sum[:])
		}
		snap[p] = entry
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}
