package registry

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// blobFiles are the blob paths of img in the store at dir: manifest,
// config and layers.
func blobFiles(t *testing.T, dir string, img v1.Image) (manifest, config string, layers []string) {
	t.Helper()
	path := func(h v1.Hash) string { return filepath.Join(dir, "blobs", h.Algorithm, h.Hex) }
	cfg, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	ls, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range ls {
		d, err := l.Digest()
		if err != nil {
			t.Fatal(err)
		}
		layers = append(layers, path(d))
	}
	return path(digestOf(t, img)), path(cfg), layers
}

// A crash can leave a blob short (written but not synced) or missing; the
// next Put of the same image, which Seed does at every start, repairs it
// although index.json already names the image.
func TestStoreRepairsBlobs(t *testing.T) {
	damage := map[string]func(t *testing.T, path string){
		"truncated": func(t *testing.T, path string) {
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(path, fi.Size()/2); err != nil {
				t.Fatal(err)
			}
		},
		"deleted": func(t *testing.T, path string) {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
		},
		"overwritten": func(t *testing.T, path string) {
			if err := os.WriteFile(path, []byte("not the blob"), 0o600); err != nil {
				t.Fatal(err)
			}
		},
		"replaced by a symlink": func(t *testing.T, path string) {
			good := path + ".elsewhere"
			if err := os.Rename(path, good); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(good, path); err != nil {
				t.Fatal(err)
			}
		},
	}
	for how, hurt := range damage {
		for _, which := range []string{"manifest", "config", "layer"} {
			t.Run(how+" "+which, func(t *testing.T) {
				s, dir := openTestStore(t)
				img := randomImage(t)
				if _, err := s.Put("example.com/app:v1", img); err != nil {
					t.Fatal(err)
				}
				manifest, config, layers := blobFiles(t, dir, img)
				target := map[string]string{"manifest": manifest, "config": config, "layer": layers[1]}[which]
				hurt(t, target)
				changed, err := s.Put("example.com/app:v1", img)
				if err != nil {
					t.Fatal(err)
				}
				if !changed {
					t.Error("Put that repaired a blob reported no change")
				}
				assertBlobsIntact(t, dir, img)
			})
		}
	}
}

// TestSeedRepairsTornBlob is the start of a nodelet after a crash tore the
// busybox layer: Seed writes it again and the image reads back intact.
func TestSeedRepairsTornBlob(t *testing.T) {
	s, dir := openTestStore(t)
	seedWithHostBusybox(t, s)
	img, err := s.Image(BusyboxRef)
	if err != nil {
		t.Fatal(err)
	}
	_, _, layers := blobFiles(t, dir, img)
	if err := os.Truncate(layers[0], 1000); err != nil {
		t.Fatal(err)
	}
	reopened, err := OpenStore(dir, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	seedWithHostBusybox(t, reopened)
	assertBlobsIntact(t, dir, img)
	again, err := reopened.Image(BusyboxLatestRef)
	if err != nil {
		t.Fatal(err)
	}
	assertSameLayers(t, again, img)
}

func assertBlobsIntact(t *testing.T, dir string, img v1.Image) {
	t.Helper()
	manifest, config, layers := blobFiles(t, dir, img)
	for _, p := range append([]string{manifest, config}, layers...) {
		fi, err := os.Lstat(p)
		if err != nil {
			t.Errorf("blob %s: %v", p, err)
			continue
		}
		if !fi.Mode().IsRegular() {
			t.Errorf("blob %s is %v, not a regular file", p, fi.Mode())
			continue
		}
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		got, _, err := v1.SHA256(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if got.Hex != filepath.Base(p) {
			t.Errorf("blob %s holds content with digest %s", p, got)
		}
	}
}

// The store's own files are written with a temp file and rename, leave no
// temp files behind, and no other user can read or write them.
func TestStoreFilesArePrivate(t *testing.T) {
	s, dir := openTestStore(t)
	img := randomImage(t)
	if _, err := s.Put("example.com/app:v1", img); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put("example.com/app:v2", randomImage(t)); err != nil {
		t.Fatal(err)
	}
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if strings.HasPrefix(fi.Name(), ".tmp-") {
			t.Errorf("temp file left behind: %s", p)
		}
		if fi.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s has mode %v; other users must not reach the store", p, fi.Mode())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	assertBlobsIntact(t, dir, img)
}

// An existing store from an older nodelet (0755 directory, 0644 files) is
// closed to other users when it is opened.
func TestOpenStoreTightensMode(t *testing.T) {
	_, dir := openTestStore(t)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenStore(dir, testLogger(t)); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o700 {
		t.Errorf("store directory mode %v, want 0700", fi.Mode().Perm())
	}
}

// TestStoreConcurrentWriters runs several Store values on one directory,
// as nodelet's seeding and `nodelet images import` are two processes:
// every image written ends up in index.json.
func TestStoreConcurrentWriters(t *testing.T) {
	_, dir := openTestStore(t)
	const writers, rounds = 4, 5
	want := map[string]v1.Image{}
	for w := range writers {
		for r := range rounds {
			want[fmt.Sprintf("example.com/w%d:r%d", w, r)] = randomImage(t)
		}
	}
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := OpenStore(dir, testLogger(t))
			if err != nil {
				t.Error(err)
				return
			}
			for r := range rounds {
				ref := fmt.Sprintf("example.com/w%d:r%d", w, r)
				if _, err := s.Put(ref, want[ref]); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	s, err := OpenStore(dir, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	entries, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]v1.Hash{}
	for _, e := range entries {
		got[e.Ref] = e.Digest
	}
	for ref, img := range want {
		if got[ref] != digestOf(t, img) {
			t.Errorf("%s: stored %v, want %s", ref, got[ref], digestOf(t, img))
		}
	}
}

// TestStoreLockSerializesWriters makes the race of two processes writing
// the store deterministic: while store a holds index.json read but not yet
// written, store b (a second open of the same directory, as `nodelet
// images import` is to nodelet) stores another image. b must wait for a,
// and both images end up in index.json.
func TestStoreLockSerializesWriters(t *testing.T) {
	_, dir := openTestStore(t)
	a, err := OpenStore(dir, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	b, err := OpenStore(dir, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	imgA, imgB := randomImage(t), randomImage(t)
	bWaits := make(chan struct{}, 1)
	bDone := make(chan error, 1)
	b.lockWait = func() { bWaits <- struct{}{} }
	a.indexRead = func() {
		a.indexRead = nil
		go func() {
			_, err := b.Put("example.com/b:v1", imgB)
			bDone <- err
		}()
		// Without a lock b finishes here and a then overwrites its
		// index.json; with the lock b waits for a.
		select {
		case <-bWaits:
		case err := <-bDone:
			bDone <- err
		}
	}
	if _, err := a.Put("example.com/a:v1", imgA); err != nil {
		t.Fatal(err)
	}
	if err := <-bDone; err != nil {
		t.Fatal(err)
	}
	assertList(t, a, []Entry{
		{Ref: "example.com/a:v1", Digest: digestOf(t, imgA)},
		{Ref: "example.com/b:v1", Digest: digestOf(t, imgB)},
	})
}
