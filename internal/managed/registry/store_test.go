package registry

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

func TestStorePutListImage(t *testing.T) {
	s, dir := openTestStore(t)
	img := randomImage(t)

	changed, err := s.Put("busybox:1.35", img)
	if err != nil || !changed {
		t.Fatalf("first Put = %v, %v; want true, nil", changed, err)
	}
	before := statIndex(t, dir)
	changed, err = s.Put("docker.io/library/busybox:1.35", img)
	if err != nil || changed {
		t.Fatalf("second Put of the same image = %v, %v; want false, nil", changed, err)
	}
	if !os.SameFile(before, statIndex(t, dir)) {
		t.Error("unchanged Put rewrote index.json")
	}

	other := randomImage(t)
	if _, err := s.Put("registry.k8s.io/pause:3.10", other); err != nil {
		t.Fatal(err)
	}
	want := []Entry{
		{Ref: "docker.io/library/busybox:1.35", Digest: digestOf(t, img)},
		{Ref: "registry.k8s.io/pause:3.10", Digest: digestOf(t, other)},
	}
	assertList(t, s, want)

	got, err := s.Image("busybox:1.35")
	if err != nil {
		t.Fatal(err)
	}
	if digestOf(t, got) != digestOf(t, img) {
		t.Errorf("Image digest = %s, want %s", digestOf(t, got), digestOf(t, img))
	}
	if _, err := s.Image("busybox:9.9"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Image of an absent ref: err = %v, want ErrNotFound", err)
	}
}

func TestStorePutReplacesRef(t *testing.T) {
	s, _ := openTestStore(t)
	if _, err := s.Put("example.com/app:v1", randomImage(t)); err != nil {
		t.Fatal(err)
	}
	newer := randomImage(t)
	changed, err := s.Put("example.com/app:v1", newer)
	if err != nil || !changed {
		t.Fatalf("Put of a new image = %v, %v; want true, nil", changed, err)
	}
	assertList(t, s, []Entry{{Ref: "example.com/app:v1", Digest: digestOf(t, newer)}})
}

func TestStoreSurvivesReopen(t *testing.T) {
	s, dir := openTestStore(t)
	img := randomImage(t)
	if _, err := s.Put("example.com/app:v1", img); err != nil {
		t.Fatal(err)
	}
	reopened, err := OpenStore(dir, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	assertList(t, reopened, []Entry{{Ref: "example.com/app:v1", Digest: digestOf(t, img)}})
	got, err := reopened.Image("example.com/app:v1")
	if err != nil {
		t.Fatal(err)
	}
	assertSameLayers(t, got, img)
	index, err := os.ReadFile(filepath.Join(dir, "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(index), `"org.opencontainers.image.ref.name": "example.com/app:v1"`) {
		t.Errorf("index.json lacks the ref.name annotation:\n%s", index)
	}
	if _, err := os.Stat(filepath.Join(dir, "oci-layout")); err != nil {
		t.Error(err)
	}
}

func TestStoreRejectsBadRef(t *testing.T) {
	s, _ := openTestStore(t)
	if _, err := s.Put("Not A Ref", randomImage(t)); err == nil {
		t.Error("Put with an invalid reference succeeded")
	}
}

func statIndex(t *testing.T, dir string) os.FileInfo {
	t.Helper()
	fi, err := os.Stat(filepath.Join(dir, "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	return fi
}

func assertList(t *testing.T, s *Store, want []Entry) {
	t.Helper()
	got, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("List = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("List[%d] = %v, want %v", i, got[i], want[i])
		}
	}
}

// assertSameLayers checks that got has the digest of want and that every
// layer of got can be read and matches its digest.
func assertSameLayers(t *testing.T, got, want v1.Image) {
	t.Helper()
	if digestOf(t, got) != digestOf(t, want) {
		t.Errorf("digest = %s, want %s", digestOf(t, got), digestOf(t, want))
	}
	layers, err := got.Layers()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range layers {
		assertLayerReadable(t, l)
	}
}

func assertLayerReadable(t *testing.T, l v1.Layer) {
	t.Helper()
	want, err := l.Digest()
	if err != nil {
		t.Fatal(err)
	}
	rc, err := l.Compressed()
	if err != nil {
		t.Fatalf("opening layer %s: %v", want, err)
	}
	defer rc.Close()
	got, _, err := v1.SHA256(rc)
	if err != nil {
		t.Fatalf("reading layer %s: %v", want, err)
	}
	if got != want {
		t.Errorf("layer %s has content with digest %s", want, got)
	}
}
