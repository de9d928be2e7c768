package volume

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
)

var tsDirRE = regexp.MustCompile(`^\.\.\d{4}_\d\d_\d\d_\d\d_\d\d_\d\d\.\d{9}(_\d+)?$`)

func newWriter(t *testing.T, clk clock.PassiveClock) *atomicWriter {
	return &atomicWriter{dir: t.TempDir(), clock: clk}
}

func mustWriteAtomic(t *testing.T, w *atomicWriter, payload map[string]fileProjection) bool {
	t.Helper()
	changed, err := w.write(payload)
	if err != nil {
		t.Fatal(err)
	}
	return changed
}

// tsDirs lists the timestamped directories of dir.
func tsDirs(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if tsDirRE.MatchString(e.Name()) {
			out = append(out, e.Name())
		}
	}
	return out
}

// listDir describes every entry of dir: "name -> target" for symlinks,
// "name/" for directories, "name" for files.
func listDir(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		switch {
		case e.Type()&os.ModeSymlink != 0:
			target, _ := os.Readlink(filepath.Join(dir, e.Name()))
			if tsDirRE.MatchString(target) {
				target = "<ts>"
			}
			out = append(out, e.Name()+" -> "+target)
		case e.IsDir() && tsDirRE.MatchString(e.Name()):
			out = append(out, "<ts>/")
		case e.IsDir():
			out = append(out, e.Name()+"/")
		default:
			out = append(out, e.Name())
		}
	}
	return out
}

func TestAtomicWriterLayout(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 11, 21, 20, 0, 0, 123456789, time.UTC))
	w := newWriter(t, clk)
	if !mustWriteAtomic(t, w, map[string]fileProjection{
		"a":       {data: []byte("A"), mode: 0o644},
		"dir/b":   {data: []byte("B"), mode: 0o600},
		"dir/c/d": {data: []byte("D"), mode: 0o400},
	}) {
		t.Fatal("first write reported no change")
	}
	want := []string{"..2026_11_21_20_00_00.123456789/", "..data -> <ts>", "a -> ..data/a", "dir -> ..data/dir"}
	got := listDir(t, w.dir)
	got[0] = strings.Replace(got[0], "<ts>", "..2026_11_21_20_00_00.123456789", 1)
	if !slices.Equal(got, want) {
		t.Fatalf("layout = %q, want %q", got, want)
	}
	if target, _ := os.Readlink(filepath.Join(w.dir, "..data")); target != "..2026_11_21_20_00_00.123456789" {
		t.Fatalf("..data -> %q", target)
	}
	for path, want := range map[string]struct {
		content string
		mode    os.FileMode
	}{"a": {"A", 0o644}, "dir/b": {"B", 0o600}, "dir/c/d": {"D", 0o400}} {
		full := filepath.Join(w.dir, path)
		if got := mustRead(t, full); got != want.content {
			t.Errorf("%s = %q, want %q", path, got, want.content)
		}
		fi, err := os.Stat(full)
		if err != nil || fi.Mode().Perm() != want.mode {
			t.Errorf("%s mode = %v (%v), want %v", path, fi.Mode().Perm(), err, want.mode)
		}
	}
	if fi, _ := os.Stat(filepath.Join(w.dir, "..data")); fi.Mode().Perm() != 0o755 {
		t.Errorf("timestamped dir mode = %v, want 0755", fi.Mode().Perm())
	}
}

func TestAtomicWriterUpdates(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	w := newWriter(t, clk)
	v1 := map[string]fileProjection{"a": {data: []byte("1"), mode: 0o644}, "b": {data: []byte("1"), mode: 0o644}}
	mustWriteAtomic(t, w, v1)
	first := tsDirs(t, w.dir)

	clk.Step(time.Second)
	if mustWriteAtomic(t, w, v1) {
		t.Fatal("unchanged payload reported a change")
	}
	if got := tsDirs(t, w.dir); !slices.Equal(got, first) {
		t.Fatalf("unchanged payload: ts dirs %v, want %v", got, first)
	}

	clk.Step(time.Second)
	v2 := map[string]fileProjection{"a": {data: []byte("2"), mode: 0o644}}
	if !mustWriteAtomic(t, w, v2) {
		t.Fatal("changed payload reported no change")
	}
	if got := tsDirs(t, w.dir); len(got) != 1 || got[0] == first[0] {
		t.Fatalf("after update: ts dirs %v (first was %v), want one new", got, first)
	}
	if want := []string{"<ts>/", "..data -> <ts>", "a -> ..data/a"}; !slices.Equal(listDir(t, w.dir), want) {
		t.Fatalf("removed key: layout %q, want %q", listDir(t, w.dir), want)
	}
	if got := mustRead(t, filepath.Join(w.dir, "a")); got != "2" {
		t.Fatalf("a = %q, want 2", got)
	}

	// A mode change alone is a change.
	clk.Step(time.Second)
	if !mustWriteAtomic(t, w, map[string]fileProjection{"a": {data: []byte("2"), mode: 0o600}}) {
		t.Fatal("mode change reported no change")
	}
	if fi, _ := os.Stat(filepath.Join(w.dir, "a")); fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode = %v, want 0600", fi.Mode().Perm())
	}

	// The same clock reading twice still gives distinct directories.
	if !mustWriteAtomic(t, w, map[string]fileProjection{"a": {data: []byte("3"), mode: 0o600}}) ||
		!mustWriteAtomic(t, w, map[string]fileProjection{"a": {data: []byte("4"), mode: 0o600}}) {
		t.Fatal("writes at one instant reported no change")
	}
	if got := mustRead(t, filepath.Join(w.dir, "a")); got != "4" {
		t.Fatalf("a = %q, want 4", got)
	}

	// Emptying the volume leaves only the bookkeeping.
	if !mustWriteAtomic(t, w, nil) {
		t.Fatal("emptying reported no change")
	}
	if want := []string{"<ts>/", "..data -> <ts>"}; !slices.Equal(listDir(t, w.dir), want) {
		t.Fatalf("empty: layout %q, want %q", listDir(t, w.dir), want)
	}
}

func TestAtomicWriterRejectsBadPaths(t *testing.T) {
	for _, p := range []string{"", "/abs", "../x", "a/../../x", "..data", "..x/y", ".", strings.Repeat("x", 256)} {
		w := newWriter(t, clock.RealClock{})
		if _, err := w.write(map[string]fileProjection{p: {data: []byte("x"), mode: 0o644}}); err == nil {
			t.Errorf("path %q accepted", p)
		}
		if entries, _ := os.ReadDir(w.dir); len(entries) != 0 {
			t.Errorf("path %q: wrote %d entries", p, len(entries))
		}
	}
}

// TestAtomicWriterReadersSeeWholeVersions reads a file in a loop while
// the writer replaces it 200 times: every read returns one complete
// version, never a mix, a partial file or nothing.
func TestAtomicWriterReadersSeeWholeVersions(t *testing.T) {
	w := newWriter(t, clock.RealClock{})
	content := func(v int) []byte {
		return bytes.Repeat([]byte(fmt.Sprintf("version %04d;", v)), 4096)
	}
	valid := func(b []byte) bool {
		if len(b) < 13 {
			return false
		}
		var v int
		if _, err := fmt.Sscanf(string(b[:13]), "version %04d;", &v); err != nil {
			return false
		}
		return bytes.Equal(b, content(v))
	}
	payload := func(v int) map[string]fileProjection {
		return map[string]fileProjection{
			"config.yaml":   {data: content(v), mode: 0o644},
			"nested/values": {data: content(v), mode: 0o644},
		}
	}
	mustWriteAtomic(t, w, payload(0))

	done := make(chan struct{})
	var wg sync.WaitGroup
	var reads [2]int
	for i, name := range []string{"config.yaml", "nested/values"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				b, err := os.ReadFile(filepath.Join(w.dir, name))
				if err != nil {
					t.Errorf("read %s: %v", name, err)
					return
				}
				if !valid(b) {
					t.Errorf("read %s: torn content (%d bytes, starts %q)", name, len(b), b[:min(len(b), 20)])
					return
				}
				reads[i]++
			}
		}()
	}
	for v := 1; v <= 200; v++ {
		mustWriteAtomic(t, w, payload(v))
	}
	close(done)
	wg.Wait()
	t.Logf("reads during 200 updates: %v", reads)
	if got := mustRead(t, filepath.Join(w.dir, "config.yaml")); got != string(content(200)) {
		t.Fatal("final content is not the last version")
	}
	if n := len(tsDirs(t, w.dir)); n != 1 {
		t.Fatalf("%d timestamped dirs left, want 1", n)
	}
}
