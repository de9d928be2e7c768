package volume

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"maps"
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
	for _, p := range []string{
		"", "/abs", "../x", "a/../../x", "..data", "..x/y", ".", strings.Repeat("x", 256),
		// Reserved or empty once cleaned.
		"./..data", "a/../..data", "..data/x", "./..data_tmp", "./..2026_01_01_00_00_00.000000000",
		".//..data", "./", "a/..", "./.", "//abs",
	} {
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
// version, never a mix or a partial file. An open whose path walk went
// through "..data" just before a swap and reaches the previous directory
// after its removal finds nothing (ENOENT): the kubelet's layout has that
// window, and how often a reader falls in it depends on the scheduler, so
// such reads are counted, not failed.
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
	var reads, missing [2]int
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
				if errors.Is(err, fs.ErrNotExist) {
					missing[i]++
					continue
				}
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
	t.Logf("reads during 200 updates: %v, and %v in the removal window", reads, missing)
	if got := mustRead(t, filepath.Join(w.dir, "config.yaml")); got != string(content(200)) {
		t.Fatal("final content is not the last version")
	}
	if n := len(tsDirs(t, w.dir)); n != 1 {
		t.Fatalf("%d timestamped dirs left, want 1", n)
	}
}

// Keys are cleaned; two that clean to the same path, or a file that would
// also be a directory, are refused whole: one of them would be lost.
func TestAtomicWriterCleansKeys(t *testing.T) {
	w := newWriter(t, clock.RealClock{})
	mustWriteAtomic(t, w, map[string]fileProjection{"a//b": {data: []byte("B"), mode: 0o644}, "./c": {data: []byte("C"), mode: 0o644}})
	if want := []string{"<ts>/", "..data -> <ts>", "a -> ..data/a", "c -> ..data/c"}; !slices.Equal(listDir(t, w.dir), want) {
		t.Fatalf("layout %q, want %q", listDir(t, w.dir), want)
	}
	if got := mustRead(t, filepath.Join(w.dir, "a/b")); got != "B" {
		t.Fatalf("a/b = %q", got)
	}
	for _, keys := range [][]string{{"a/b", "a//b"}, {"x", "./x"}, {"d/", "d"}, {"f", "f/g"}, {"f/g/h", "./f/g"}} {
		w := newWriter(t, clock.RealClock{})
		payload := map[string]fileProjection{}
		for i, k := range keys {
			payload[k] = fileProjection{data: []byte{byte('0' + i)}, mode: 0o644}
		}
		if _, err := w.write(payload); err == nil {
			t.Errorf("keys %q accepted", keys)
		}
		if entries, _ := os.ReadDir(w.dir); len(entries) != 0 {
			t.Errorf("keys %q: wrote %d entries", keys, len(entries))
		}
	}
}

// A key that cleans to "..data", once gone from the payload, must not take
// the real "..data" with it.
func TestAtomicWriterKeyCannotRemoveData(t *testing.T) {
	w := newWriter(t, clock.RealClock{})
	mustWriteAtomic(t, w, map[string]fileProjection{"a": {data: []byte("A"), mode: 0o644}})
	_, _ = w.write(map[string]fileProjection{"a": {data: []byte("A"), mode: 0o644}, "./..data": {data: []byte("x"), mode: 0o644}})
	_, _ = w.write(map[string]fileProjection{"a": {data: []byte("A2"), mode: 0o644}})
	if target, err := os.Readlink(filepath.Join(w.dir, "..data")); err != nil || !tsDirRE.MatchString(target) {
		t.Fatalf("..data -> %q, %v", target, err)
	}
	if got := mustRead(t, filepath.Join(w.dir, "a")); got != "A2" {
		t.Fatalf("a = %q, want A2", got)
	}
}

// crashed is what a crash hook panics with.
type crashed struct{ step writeStep }

// writeCrashing writes payload and reports the step it crashed after, or
// "" when it ran to the end.
func writeCrashing(t *testing.T, w *atomicWriter, payload map[string]fileProjection) (at writeStep) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			c, ok := r.(crashed)
			if !ok {
				panic(r)
			}
			at = c.step
		}
	}()
	if _, err := w.write(payload); err != nil {
		t.Fatalf("write: %v", err)
	}
	return ""
}

// view reads every key through the volume as a container would: its
// content, or "-" when it is not there.
func view(t *testing.T, dir string, keys []string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, k := range keys {
		b, err := os.ReadFile(filepath.Join(dir, k))
		switch {
		case err == nil:
			out[k] = string(b)
		case os.IsNotExist(err):
			out[k] = "-"
		default:
			t.Fatalf("read %s: %v", k, err)
		}
	}
	return out
}

// expect is what a reader sees of keys when the volume holds exactly p.
func expect(p map[string]fileProjection, keys []string) map[string]string {
	out := map[string]string{}
	for _, k := range keys {
		out[k] = "-"
		if f, ok := p[k]; ok {
			out[k] = string(f.data)
		}
	}
	return out
}

// layoutOf is the volume's top level when it holds exactly p.
func layoutOf(p map[string]fileProjection) []string {
	out := []string{"<ts>/", "..data -> <ts>"}
	seen := map[string]bool{}
	for k := range p {
		top, _, _ := strings.Cut(k, "/")
		if !seen[top] {
			seen[top] = true
			out = append(out, top+" -> ..data/"+top)
		}
	}
	slices.Sort(out[2:])
	return out
}

// A crash after any step of a write leaves a volume that readers see
// wholly old or wholly new, and that the next sync, with the new payload
// or the old one again, brings to exactly that payload and nothing else.
func TestAtomicWriterCrashConsistency(t *testing.T) {
	old := map[string]fileProjection{
		"a": {data: []byte("old a"), mode: 0o644}, "gone": {data: []byte("old gone"), mode: 0o644},
		"dir/x": {data: []byte("old x"), mode: 0o644}, "same": {data: []byte("same"), mode: 0o644},
	}
	updated := map[string]fileProjection{
		"a": {data: []byte("new a"), mode: 0o600}, "fresh": {data: []byte("new fresh"), mode: 0o644},
		"dir/y": {data: []byte("new y"), mode: 0o644}, "same": {data: []byte("same"), mode: 0o644},
	}
	var keys []string
	for k := range old {
		keys = append(keys, k)
	}
	for k := range updated {
		if _, ok := old[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	wantOld, wantNew := expect(old, keys), expect(updated, keys)

	seen := map[writeStep]bool{}
	for _, next := range []struct {
		name    string
		payload map[string]fileProjection
	}{{"next sync has the new payload", updated}, {"next sync has the old payload again", old}} {
		for k := 1; ; k++ {
			clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
			w := newWriter(t, clk)
			mustWriteAtomic(t, w, old)
			n := 0
			w.afterStep = func(s writeStep) {
				if n++; n == k {
					panic(crashed{s})
				}
			}
			at := writeCrashing(t, w, updated)
			w.afterStep = nil
			if at == "" {
				if k == 1 {
					t.Fatal("the write has no crash points")
				}
				break
			}
			seen[at] = true
			if got := view(t, w.dir, keys); !maps.Equal(got, wantOld) && !maps.Equal(got, wantNew) {
				t.Errorf("%s: crash after %q (point %d): readers see %v, neither old %v nor new %v", next.name, at, k, got, wantOld, wantNew)
			}
			// The next sync, at the same instant (the same directory name
			// is wanted again) and a second later.
			for _, step := range []time.Duration{0, time.Second} {
				clk.Step(step)
				mustWriteAtomic(t, w, next.payload)
				if got, want := view(t, w.dir, keys), expect(next.payload, keys); !maps.Equal(got, want) {
					t.Errorf("%s: crash after %q: next sync shows %v, want %v", next.name, at, got, want)
				}
				if got, want := listDir(t, w.dir), layoutOf(next.payload); !slices.Equal(got, want) {
					t.Errorf("%s: crash after %q: next sync leaves %q, want %q", next.name, at, got, want)
				}
			}
		}
	}
	for _, s := range []writeStep{stepWroteTsDir, stepLinkedUserVisible, stepCreatedTmpLink, stepRenamedData, stepRemovedStaleLinks, stepRemovedOldTsDirs} {
		if !seen[s] {
			t.Errorf("never crashed after %q", s)
		}
	}
}

// FuzzAtomicWriterKeys writes payloads whose key names come from the fuzz
// input (NUL-separated), then every other one of them: no write lands
// outside the volume, "..data" always points at a timestamped directory in
// it, and every key a write accepted reads back as written.
func FuzzAtomicWriterKeys(f *testing.F) {
	for _, seed := range []string{
		"a\x00b/c", "./..data\x00a", "a/../..data", "..data/x", "/abs\x00../x", "a//b\x00a/b", "./\x00.",
		"x\x00./x", "f\x00f/g", "../../etc/passwd", "a/b/../../..data", "...\x00..\x00.", "./..data_tmp",
		"..2026_01_01_00_00_00.000000000/x", "a\x00./a/", "d/./e\x00d//e", "sub/..data\x00..data",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, in string) {
		keys := strings.Split(in, "\x00")
		if len(keys) > 16 {
			keys = keys[:16]
		}
		parent := t.TempDir()
		vol := filepath.Join(parent, "vol")
		if err := os.Mkdir(vol, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(parent, "outside"), []byte("keep"), 0o644); err != nil {
			t.Fatal(err)
		}
		w := &atomicWriter{dir: vol, clock: clock.RealClock{}}
		everyOther := func(ks []string) []string {
			var out []string
			for i := 0; i < len(ks); i += 2 {
				out = append(out, ks[i])
			}
			return out
		}
		written := false
		for round, ks := range [][]string{keys, everyOther(keys), nil} {
			payload := map[string]fileProjection{}
			for i, k := range ks {
				payload[k] = fileProjection{data: []byte(fmt.Sprintf("%d:%d", round, i)), mode: 0o644}
			}
			_, err := w.write(payload)
			written = written || err == nil
			checkConfined(t, parent, vol, written)
			if err != nil {
				continue
			}
			for k, f := range payload {
				if got, err := os.ReadFile(filepath.Join(vol, k)); err != nil || !bytes.Equal(got, f.data) {
					t.Fatalf("round %d: key %q reads %q, %v; want %q", round, k, got, err, f.data)
				}
			}
		}
	})
}

// checkConfined fails unless parent holds only "outside" (untouched) and
// vol, vol's "..data" (there once a write succeeded) points at a
// timestamped directory in vol, and every link in vol stays in it.
func checkConfined(t *testing.T, parent, vol string, written bool) {
	t.Helper()
	entries, err := os.ReadDir(parent)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != "outside" && e.Name() != "vol" {
			t.Fatalf("written outside the volume: %s", e.Name())
		}
	}
	if got := mustRead(t, filepath.Join(parent, "outside")); got != "keep" {
		t.Fatalf("file outside the volume changed: %q", got)
	}
	target, err := os.Readlink(filepath.Join(vol, "..data"))
	switch {
	case err != nil && written:
		t.Fatalf("..data: %v", err)
	case err == nil:
		if !tsDirRE.MatchString(target) {
			t.Fatalf("..data -> %q, not a timestamped directory", target)
		}
		if fi, err := os.Lstat(filepath.Join(vol, target)); err != nil || !fi.IsDir() {
			t.Fatalf("..data -> %q, not a directory in the volume: %v", target, err)
		}
	}
	err = filepath.WalkDir(vol, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type()&fs.ModeSymlink == 0 {
			return nil
		}
		target, err := os.Readlink(path)
		if err != nil {
			return err
		}
		resolved := filepath.Join(filepath.Dir(path), target)
		if filepath.IsAbs(target) || (resolved != vol && !strings.HasPrefix(resolved, vol+"/")) {
			t.Fatalf("link %s -> %s leaves the volume", path, target)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
