package podsource

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/nodelet/nodelet/internal/pure/podspec"
)

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return info.Sys().(*syscall.Stat_t).Ino
}

// rewriteInPlace writes content into the existing file (same inode) and
// sets its mtime.
func rewriteInPlace(t *testing.T, path, content string, mtime time.Time) {
	t.Helper()
	before := inode(t, path)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(content); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, mtime, mtime); err != nil {
		t.Fatal(err)
	}
	if inode(t, path) != before {
		t.Fatal("the rewrite made a new inode")
	}
}

func TestManifestCacheReusesTheLastParse(t *testing.T) {
	path := filepath.Join(t.TempDir(), "web.yaml")
	writeFile(t, path, goodPod)
	c := newManifestCache("n")
	first := c.read(path, true)
	if first.err != nil || c.reads != 1 || c.decodes != 1 {
		t.Fatalf("first read: %v, %d reads, %d decodes", first.err, c.reads, c.decodes)
	}
	// Same fileID, trusted: not even read.
	if r := c.read(path, true); c.reads != 1 || c.decodes != 1 || r.pods[0] != first.pods[0] {
		t.Fatalf("unchanged: %d reads, %d decodes", c.reads, c.decodes)
	}
	// Not trusted: read, but the same content is not decoded again.
	if c.read(path, false); c.reads != 2 || c.decodes != 1 {
		t.Fatalf("untrusted: %d reads, %d decodes", c.reads, c.decodes)
	}
	// Touched: read, not decoded.
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(path, later, later); err != nil {
		t.Fatal(err)
	}
	if c.read(path, true); c.reads != 3 || c.decodes != 1 {
		t.Fatalf("touched: %d reads, %d decodes", c.reads, c.decodes)
	}

	// Changed in place: same inode, new content and mtime.
	rewriteInPlace(t, path, podYAML("web", "busybox:1.36"), later.Add(time.Hour))
	changed := c.read(path, true)
	if changed.err != nil || c.decodes != 2 || changed.pods[0].Spec.Containers[0].Image != "busybox:1.36" {
		t.Fatalf("changed in place: %v, %d decodes", changed.err, c.decodes)
	}

	// Changed in place with the same size, and the mtime set back: only
	// the ctime tells.
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	rewriteInPlace(t, path, podYAML("web", "busybox:1.37"), info.ModTime())
	if again := c.read(path, true); again.err != nil || again.pods[0].Spec.Containers[0].Image != "busybox:1.37" {
		t.Fatalf("changed with the mtime set back: %v, image %s", again.err, again.pods[0].Spec.Containers[0].Image)
	}
}

// writeManifests writes n one-pod manifests into dir.
func writeManifests(tb testing.TB, dir string, n int) {
	tb.Helper()
	for i := range n {
		content := strings.NewReplacer("name: web", fmt.Sprintf("name: web%d", i)).Replace(goodPod)
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("web%03d.yaml", i)), []byte(content), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
}

// watchedSource is a FileSource on dir whose watch is set up, as Run does,
// without running it: the test calls scan itself. Events are not read, as
// if they had not arrived yet.
func watchedSource(tb testing.TB, dir string) *FileSource {
	tb.Helper()
	w, err := fsnotify.NewWatcher()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { w.Close() })
	s := NewFileSource(dir, "node1", 0, newNotifyClock(), nil, nil, nil)
	s.ensureWatch(w)
	if s.watched != dir {
		tb.Fatalf("watching %q", s.watched)
	}
	return s
}

func TestFileSourceRescanDecodesOnlyChangedFiles(t *testing.T) {
	dir := t.TempDir()
	writeManifests(t, dir, 5)
	s := watchedSource(t, dir)

	if u := s.scan(); len(u.Pods) != 5 || s.cache.decodes != 5 {
		t.Fatalf("first scan: %d pods, %d decodes", len(u.Pods), s.cache.decodes)
	}
	reads := s.cache.reads
	if u := s.scan(); len(u.Pods) != 5 || s.cache.decodes != 5 || s.cache.reads != reads {
		t.Fatalf("second scan: %d pods, %d decodes, %d reads (was %d)", len(u.Pods), s.cache.decodes, s.cache.reads, reads)
	}

	// The target of a symlink can change without an event in the
	// directory: its fileID is never trusted.
	if s.trusted(candidate{path: filepath.Join(dir, "web000.yaml"), link: true}) {
		t.Error("a symlink is trusted")
	}

	// A change in place that no event told about (yet) is seen by its
	// fileID.
	path := filepath.Join(dir, "web002.yaml")
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	rewriteInPlace(t, path, strings.Replace(goodPod, "name: web", "name: web2", 1)+"# edited\n", info.ModTime().Add(time.Second))
	u := s.scan()
	if s.cache.decodes != 6 {
		t.Fatalf("decodes %d after one file changed, want 6", s.cache.decodes)
	}
	for _, p := range u.Pods {
		if p.Name == "web2-node1" && !strings.Contains(p.Annotations[podspec.AnnotationConfigFile], "web002") {
			t.Errorf("pod web2 from %s", p.Annotations[podspec.AnnotationConfigFile])
		}
	}

	// A file an event named is read again even if its fileID did not
	// change; its content did not either, so it is not decoded again.
	reads = s.cache.reads
	s.relevant(nil, fsnotify.Event{Name: path, Op: fsnotify.Write})
	s.scan()
	if s.cache.reads != reads+1 || s.cache.decodes != 6 {
		t.Errorf("after an event: %d reads (was %d), %d decodes", s.cache.reads, reads, s.cache.decodes)
	}

	// Gone files leave the cache.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if u := s.scan(); len(u.Pods) != 4 || len(s.cache.entries) != 4 {
		t.Errorf("after remove: %d pods, %d cache entries", len(u.Pods), len(s.cache.entries))
	}
}

// BenchmarkRescan measures one rescan of a directory of 200 unchanged
// manifests: with the cache trusting the fileIDs (the usual rescan), with
// the cache reading and hashing every file (after a lost event, or
// without a watch), and without the cache (every file decoded, as before
// the cache).
func BenchmarkRescan(b *testing.B) {
	dir := b.TempDir()
	writeManifests(b, dir, 200)
	for _, mode := range []string{"stat", "hash", "decode"} {
		b.Run(mode, func(b *testing.B) {
			s := watchedSource(b, dir)
			s.scan()
			b.ReportAllocs()
			for b.Loop() {
				switch mode {
				case "hash":
					s.dirtyAll = true
				case "decode":
					s.cache = newManifestCache(s.nodeName)
				}
				if u := s.scan(); len(u.Pods) != 200 {
					b.Fatalf("%d pods", len(u.Pods))
				}
			}
		})
	}
}
