package registry

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

func TestImportDockerArchive(t *testing.T) {
	foo, bar := randomImage(t), randomImage(t)
	archive := filepath.Join(t.TempDir(), "images.tar")
	refs := map[name.Reference]v1.Image{
		mustTag(t, "example.com/foo:v1"): foo,
		mustTag(t, "busybox:9.9"):        bar,
	}
	if err := tarball.MultiRefWriteToFile(archive, refs); err != nil {
		t.Fatal(err)
	}
	s, _ := openTestStore(t)
	got, err := Import(s, archive, DefaultImportLimits())
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	want := []string{"docker.io/library/busybox:9.9", "example.com/foo:v1"}
	if !slices.Equal(got, want) {
		t.Errorf("Import = %q, want %q", got, want)
	}
	assertStoredConfig(t, s, "example.com/foo:v1", foo)
	assertStoredConfig(t, s, "busybox:9.9", bar)
}

func TestImportOCIArchive(t *testing.T) {
	plain, named, host, foreign := randomImage(t), randomImage(t), randomImage(t), randomImage(t)
	dir := t.TempDir()
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	appendImage(t, lp, plain, map[string]string{RefNameAnnotation: "example.com/plain:v1"})
	// Docker and containerd put the full name in io.containerd.image.name
	// and only the tag in ref.name.
	appendImage(t, lp, named, map[string]string{containerdNameAnnotation: "docker.io/library/named:v2", RefNameAnnotation: "v2"})
	// A bare tag names nothing.
	appendImage(t, lp, randomImage(t), map[string]string{RefNameAnnotation: "latest"})
	multi := mutate.AppendManifests(empty.Index,
		mutate.IndexAddendum{Add: foreign, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "s390x-not-" + runtime.GOARCH}}},
		mutate.IndexAddendum{Add: host, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: runtime.GOARCH}}},
	)
	if err := lp.AppendIndex(multi, layout.WithAnnotations(map[string]string{RefNameAnnotation: "example.com/multi:v3"})); err != nil {
		t.Fatal(err)
	}
	archive := tarDir(t, dir)

	s, _ := openTestStore(t)
	got, err := Import(s, archive, DefaultImportLimits())
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	want := []string{"docker.io/library/named:v2", "example.com/multi:v3", "example.com/plain:v1"}
	if !slices.Equal(got, want) {
		t.Errorf("Import = %q, want %q", got, want)
	}
	assertStoredDigest(t, s, "example.com/plain:v1", plain)
	assertStoredDigest(t, s, "named:v2", named)
	assertStoredDigest(t, s, "example.com/multi:v3", host)
	leftovers, err := filepath.Glob(filepath.Join(s.Dir(), ".import-*"))
	if err != nil || len(leftovers) != 0 {
		t.Errorf("extraction directories left behind: %q, %v", leftovers, err)
	}
}

func TestImportWithoutNames(t *testing.T) {
	t.Run("docker archive without RepoTags", func(t *testing.T) {
		archive := filepath.Join(t.TempDir(), "untagged.tar")
		if err := tarball.WriteToFile(archive, mustTag(t, "example.com/foo:v1"), randomImage(t)); err != nil {
			t.Fatal(err)
		}
		dropRepoTags(t, archive)
		assertImportFails(t, archive, "no RepoTags")
	})
	t.Run("OCI layout without annotations", func(t *testing.T) {
		dir := t.TempDir()
		lp, err := layout.Write(dir, empty.Index)
		if err != nil {
			t.Fatal(err)
		}
		appendImage(t, lp, randomImage(t), nil)
		assertImportFails(t, tarDir(t, dir), "names no image")
	})
	t.Run("not an image archive", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "hello.txt"), []byte("hi"), 0o644); err != nil {
			t.Fatal(err)
		}
		assertImportFails(t, tarDir(t, dir), "neither")
	})
	t.Run("missing file", func(t *testing.T) {
		assertImportFails(t, filepath.Join(t.TempDir(), "absent.tar"), "no such file")
	})
}

func TestImportRefusesEscapingEntries(t *testing.T) {
	archive := filepath.Join(t.TempDir(), "evil.tar")
	writeTar(t, archive, map[string][]byte{
		"oci-layout":  []byte(layoutJSON),
		"index.json":  []byte(`{"schemaVersion":2,"manifests":[]}`),
		"../escaped":  []byte("x"),
		"blobs/dummy": []byte("x"),
	})
	assertImportFails(t, archive, "leaves the archive")
}

func assertImportFails(t *testing.T, archive, want string) {
	t.Helper()
	s, _ := openTestStore(t)
	refs, err := Import(s, archive, DefaultImportLimits())
	if err == nil {
		t.Fatalf("Import = %q, want an error", refs)
	}
	if !strings.Contains(err.Error(), archive) || !strings.Contains(err.Error(), want) {
		t.Errorf("error %q should name %s and say %q", err, archive, want)
	}
	if entries, _ := s.List(); len(entries) != 0 {
		t.Errorf("store holds %v after a failed import", entries)
	}
}

func mustTag(t *testing.T, s string) name.Tag {
	t.Helper()
	tag, err := name.NewTag(s)
	if err != nil {
		t.Fatal(err)
	}
	return tag
}

func appendImage(t *testing.T, lp layout.Path, img v1.Image, annotations map[string]string) {
	t.Helper()
	if err := lp.AppendImage(img, layout.WithAnnotations(annotations)); err != nil {
		t.Fatal(err)
	}
}

// assertStoredConfig compares the config of the stored image, since a
// docker save archive keeps the config but not the manifest.
func assertStoredConfig(t *testing.T, s *Store, ref string, want v1.Image) {
	t.Helper()
	got, err := s.Image(ref)
	if err != nil {
		t.Fatal(err)
	}
	gotCfg, err := got.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	wantCfg, err := want.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	if gotCfg != wantCfg {
		t.Errorf("%s: config %s, want %s", ref, gotCfg, wantCfg)
	}
	layers, err := got.Layers()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range layers {
		assertLayerReadable(t, l)
	}
}

func assertStoredDigest(t *testing.T, s *Store, ref string, want v1.Image) {
	t.Helper()
	got, err := s.Image(ref)
	if err != nil {
		t.Fatal(err)
	}
	assertSameLayers(t, got, want)
}

// tarDir archives dir the way `tar -C dir -cf out.tar .` does.
func tarDir(t *testing.T, dir string) string {
	t.Helper()
	files := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		data, err := os.ReadFile(p)
		files["./"+filepath.ToSlash(rel)] = data
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "archive.tar")
	writeTar(t, out, files)
	return out
}

func writeTar(t *testing.T, out string, files map[string][]byte) {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		if err := tw.WriteHeader(&tar.Header{Name: n, Mode: 0o644, Size: int64(len(files[n])), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(files[n]); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(out, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// dropRepoTags rewrites the manifest.json of a docker save archive without
// its RepoTags.
func dropRepoTags(t *testing.T, archive string) {
	t.Helper()
	files := readTar(t, archive)
	var manifest []map[string]any
	if err := json.Unmarshal(files["manifest.json"], &manifest); err != nil {
		t.Fatal(err)
	}
	for _, m := range manifest {
		delete(m, "RepoTags")
	}
	data, err := json.Marshal(manifest)
	if err != nil {
		t.Fatal(err)
	}
	files["manifest.json"] = data
	writeTar(t, archive, files)
}

func readTar(t *testing.T, archive string) map[string][]byte {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	files := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[hdr.Name] = data
	}
}
