package certstore

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/base/beneath"
	"github.com/nodelet/nodelet/internal/base/bounded"
)

var errCrash = errors.New("crashed")

var testPair = Pair{Prefix: "test-server", Legacy: []string{"test.crt", "test.key"}}

var testUnit = Unit{
	Prefix: "creds",
	Files:  []File{{Name: "ca.crt", Mode: 0o644}, {Name: "ca.key", Mode: 0o600}},
	Links:  []string{"ca.crt"},
	Legacy: []string{"ca.crt", "ca.key"},
}

func clk() *testingclock.FakePassiveClock {
	return testingclock.NewFakePassiveClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
}

// open opens dir's store; afterStep may be nil.
func open(t *testing.T, dir string, afterStep func(string) error) *Store {
	t.Helper()
	s, err := Open(dir, Options{Clock: clk(), AfterStep: afterStep})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// recordSteps is an AfterStep that records every step.
func recordSteps(steps *[]string) func(string) error {
	return func(step string) error { *steps = append(*steps, step); return nil }
}

// crashAt is an AfterStep that fails the k-th step (0-based).
func crashAt(k int) func(string) error {
	n := 0
	return func(string) error {
		n++
		if n == k+1 {
			return errCrash
		}
		return nil
	}
}

func names(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	slices.Sort(out)
	return out
}

func sorted(s ...string) []string {
	slices.Sort(s)
	return s
}

// A crash between any two steps of replacing a pair leaves the old pair
// current until the link is renamed, the new one after; Clean then leaves
// the link and its pair only.
func TestPairSwapSurvivesACrashAtEveryStep(t *testing.T) {
	oldData, newData := []byte("old pair"), []byte("new pair")
	for _, first := range []bool{true, false} {
		setup := func(t *testing.T, dir string) {
			if first {
				for _, l := range testPair.Legacy {
					if err := os.WriteFile(filepath.Join(dir, l), oldData, 0o600); err != nil {
						t.Fatal(err)
					}
				}
				return
			}
			if _, err := open(t, dir, nil).Install(testPair, oldData); err != nil {
				t.Fatal(err)
			}
		}
		replace := func(s *Store) error {
			if _, err := s.Install(testPair, newData); err != nil {
				return err
			}
			return s.Clean(testPair)
		}
		var steps []string
		dir := t.TempDir()
		setup(t, dir)
		if err := replace(open(t, dir, recordSteps(&steps))); err != nil {
			t.Fatal(err)
		}
		swap := slices.Index(steps, "rename "+testPair.Link())
		if swap < 0 || len(steps) < 6 {
			t.Fatalf("steps %q", steps)
		}
		for k := range steps {
			dir := t.TempDir()
			setup(t, dir)
			if err := replace(open(t, dir, crashAt(k))); !errors.Is(err, errCrash) {
				t.Fatalf("crash after %q: %v", steps[k], err)
			}
			s := open(t, dir, nil)
			got, name, err := s.Current(testPair)
			switch {
			case k < swap && first:
				if !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("first, crash after %q: current %q, %v; want none", steps[k], got, err)
				}
				continue
			case k < swap:
				if err != nil || !bytes.Equal(got, oldData) {
					t.Errorf("crash after %q: current %q, %v; want the old pair", steps[k], got, err)
				}
			default:
				if err != nil || !bytes.Equal(got, newData) {
					t.Errorf("crash after %q: current %q, %v; want the new pair", steps[k], got, err)
				}
			}
			if err := s.Clean(testPair); err != nil {
				t.Fatalf("clean after a crash after %q: %v", steps[k], err)
			}
			if got, want := names(t, dir), sorted(testPair.Link(), name); !slices.Equal(got, want) {
				t.Errorf("crash after %q, cleaned: %q, want %q", steps[k], got, want)
			}
		}
	}
}

// The same for a unit: its files are replaced together, never mixed, and
// CleanUnit points the stable names into the current one.
func TestUnitSwapSurvivesACrashAtEveryStep(t *testing.T) {
	oldFiles := map[string][]byte{"ca.crt": []byte("old crt"), "ca.key": []byte("old key")}
	newFiles := map[string][]byte{"ca.crt": []byte("new crt"), "ca.key": []byte("new key")}
	setup := func(t *testing.T, dir string) {
		s := open(t, dir, nil)
		if _, err := s.InstallUnit(testUnit, oldFiles); err != nil {
			t.Fatal(err)
		}
		if err := s.CleanUnit(testUnit); err != nil {
			t.Fatal(err)
		}
	}
	replace := func(s *Store) error {
		if _, err := s.InstallUnit(testUnit, newFiles); err != nil {
			return err
		}
		return s.CleanUnit(testUnit)
	}
	var steps []string
	dir := t.TempDir()
	setup(t, dir)
	if err := replace(open(t, dir, recordSteps(&steps))); err != nil {
		t.Fatal(err)
	}
	swap := slices.Index(steps, "rename "+testUnit.Link())
	if swap < 0 || len(steps) < 8 {
		t.Fatalf("steps %q", steps)
	}
	for k := range steps {
		dir := t.TempDir()
		setup(t, dir)
		if err := replace(open(t, dir, crashAt(k))); !errors.Is(err, errCrash) {
			t.Fatalf("crash after %q: %v", steps[k], err)
		}
		s := open(t, dir, nil)
		got, name, err := s.CurrentUnit(testUnit)
		if err != nil {
			t.Fatalf("crash after %q: %v", steps[k], err)
		}
		want := newFiles
		if k < swap {
			want = oldFiles
		}
		for n, data := range want {
			if !bytes.Equal(got[n], data) {
				t.Errorf("crash after %q: %s is %q, want %q", steps[k], n, got[n], data)
			}
		}
		if err := s.CleanUnit(testUnit); err != nil {
			t.Fatalf("clean after a crash after %q: %v", steps[k], err)
		}
		if got, want := names(t, dir), sorted(testUnit.Link(), name, "ca.crt"); !slices.Equal(got, want) {
			t.Errorf("crash after %q, cleaned: %q, want %q", steps[k], got, want)
		}
		if data, err := os.ReadFile(filepath.Join(dir, "ca.crt")); err != nil || !bytes.Equal(data, want["ca.crt"]) {
			t.Errorf("crash after %q: the stable ca.crt reads %q, %v", steps[k], data, err)
		}
	}
}

// A crash while a file is replaced leaves the old or the new content, and
// the next write removes the temporary file a crash left.
func TestWriteFileSurvivesACrashAtEveryStep(t *testing.T) {
	var steps []string
	dir := t.TempDir()
	if err := open(t, dir, nil).WriteFile("k.key", []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := open(t, dir, recordSteps(&steps)).WriteFile("k.key", []byte("new"), 0o600); err != nil {
		t.Fatal(err)
	}
	swap := slices.Index(steps, "rename k.key")
	for k := range steps {
		dir := t.TempDir()
		if err := open(t, dir, nil).WriteFile("k.key", []byte("old"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := open(t, dir, crashAt(k)).WriteFile("k.key", []byte("new"), 0o600); !errors.Is(err, errCrash) {
			t.Fatalf("crash after %q: %v", steps[k], err)
		}
		want := "new"
		if k < swap {
			want = "old"
		}
		s := open(t, dir, nil)
		if got, err := s.ReadFile("k.key"); err != nil || string(got) != want {
			t.Errorf("crash after %q: %q, %v; want %q", steps[k], got, err, want)
		}
		if err := s.WriteFile("k.key", []byte("next"), 0o600); err != nil {
			t.Fatal(err)
		}
		if got := names(t, dir); !slices.Equal(got, []string{"k.key"}) {
			t.Errorf("crash after %q, written again: %q", steps[k], got)
		}
		if fi, err := os.Stat(filepath.Join(dir, "k.key")); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("k.key mode %v, %v", fi.Mode(), err)
		}
	}
}

// The directory is 0700 even if it existed otherwise; pairs and key files
// 0600; a unit's directory 0700 and its files their own modes.
func TestModes(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	s := open(t, dir, nil)
	pair, err := s.Install(testPair, []byte("pair"))
	if err != nil {
		t.Fatal(err)
	}
	unit, err := s.InstallUnit(testUnit, map[string][]byte{"ca.crt": []byte("c"), "ca.key": []byte("k")})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.WriteFile("k.key", []byte("k"), 0o600); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]os.FileMode{
		dir:                                           0o700,
		filepath.Join(dir, pair):                      0o600,
		filepath.Join(dir, unit):                      0o700,
		filepath.Join(dir, unit, "ca.crt"):            0o644,
		filepath.Join(dir, unit, "ca.key"):            0o600,
		filepath.Join(dir, "k.key"):                   0o600,
		filepath.Join(dir, testPair.Link()):           0o600,
		filepath.Join(dir, testUnit.Link()):           0o700,
		filepath.Join(dir, testUnit.Link(), "ca.key"): 0o600,
	} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s is %v, want %v", path, fi.Mode().Perm(), want)
		}
	}
}

// What another user or program planted in the directory is refused, not
// followed or read to its end: a current link out of the directory or to
// a name the store does not write, a symlink where a file is read, a
// FIFO, and a file larger than MaxFileSize.
func TestPlantedSymlinkOrOversizeIsRefused(t *testing.T) {
	outside := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(outside, []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	plant := func(t *testing.T, dir, name, target string) {
		t.Helper()
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name  string
		plant func(t *testing.T, dir string)
		read  func(s *Store) error
		want  error
	}{
		{"current pair links out (absolute)", func(t *testing.T, dir string) { plant(t, dir, testPair.Link(), outside) },
			func(s *Store) error { _, _, err := s.Current(testPair); return err }, ErrBadLink},
		{"current pair links out (relative)", func(t *testing.T, dir string) { plant(t, dir, testPair.Link(), "../test-server-x.pem") },
			func(s *Store) error { _, _, err := s.Current(testPair); return err }, ErrBadLink},
		{"current pair links to a name not a pair's", func(t *testing.T, dir string) { plant(t, dir, testPair.Link(), "k.key") },
			func(s *Store) error { _, _, err := s.Current(testPair); return err }, ErrBadLink},
		{"the pair the link names is a symlink", func(t *testing.T, dir string) {
			plant(t, dir, "test-server-x.pem", outside)
			plant(t, dir, testPair.Link(), "test-server-x.pem")
		}, func(s *Store) error { _, _, err := s.Current(testPair); return err }, beneath.ErrSymlink},
		{"a current pair larger than the limit", func(t *testing.T, dir string) {
			if err := os.WriteFile(filepath.Join(dir, "test-server-x.pem"), bytes.Repeat([]byte("x"), MaxFileSize+1), 0o600); err != nil {
				t.Fatal(err)
			}
			plant(t, dir, testPair.Link(), "test-server-x.pem")
		}, func(s *Store) error { _, _, err := s.Current(testPair); return err }, bounded.ErrTooLarge},
		{"current unit links out", func(t *testing.T, dir string) { plant(t, dir, testUnit.Link(), filepath.Dir(outside)) },
			func(s *Store) error { _, _, err := s.CurrentUnit(testUnit); return err }, ErrBadLink},
		{"a file of the current unit is a symlink", func(t *testing.T, dir string) {
			if err := os.Mkdir(filepath.Join(dir, "creds-x"), 0o700); err != nil {
				t.Fatal(err)
			}
			plant(t, dir, "creds-x/ca.crt", outside)
			plant(t, dir, "creds-x/ca.key", outside)
			plant(t, dir, testUnit.Link(), "creds-x")
		}, func(s *Store) error { _, _, err := s.CurrentUnit(testUnit); return err }, beneath.ErrSymlink},
		{"a key file is a symlink", func(t *testing.T, dir string) { plant(t, dir, "k.key", outside) },
			func(s *Store) error { _, err := s.ReadFile("k.key"); return err }, beneath.ErrSymlink},
		{"a key file is a FIFO", func(t *testing.T, dir string) {
			if err := syscall.Mkfifo(filepath.Join(dir, "k.key"), 0o600); err != nil {
				t.Fatal(err)
			}
		}, func(s *Store) error { _, err := s.ReadFile("k.key"); return err }, beneath.ErrNotRegular},
		{"a key file larger than the limit", func(t *testing.T, dir string) {
			if err := os.WriteFile(filepath.Join(dir, "k.key"), bytes.Repeat([]byte("x"), MaxFileSize+1), 0o600); err != nil {
				t.Fatal(err)
			}
		}, func(s *Store) error { _, err := s.ReadFile("k.key"); return err }, bounded.ErrTooLarge},
	} {
		dir := t.TempDir()
		tc.plant(t, dir)
		if err := tc.read(open(t, dir, nil)); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	// Nor do the paths handed to clients lead out.
	dir := t.TempDir()
	plant(t, dir, testPair.Link(), outside)
	plant(t, dir, testUnit.Link(), filepath.Dir(outside))
	if p, err := CurrentPath(dir, testPair); !errors.Is(err, ErrBadLink) {
		t.Errorf("CurrentPath = %q, %v; want ErrBadLink", p, err)
	}
	if p, err := CurrentUnitPath(dir, testUnit); !errors.Is(err, ErrBadLink) {
		t.Errorf("CurrentUnitPath = %q, %v; want ErrBadLink", p, err)
	}
	// And Clean never follows them: what they point to stays.
	if err := open(t, dir, nil).Clean(testPair); !errors.Is(err, ErrBadLink) {
		t.Errorf("Clean: %v, want ErrBadLink", err)
	}
	if _, err := os.Stat(outside); err != nil {
		t.Errorf("the file a planted link named: %v", err)
	}
}

// What client-go's file store wrote stays readable: a link with an
// absolute target in the directory, <prefix>-<time>.pem names, a swap it
// left half done (only <prefix>-updated.pem), a regular file in the
// link's place (read, not replaced); with KeepReplaced, rotated pairs
// stay, as the kubelet keeps them.
func TestClientGoLayouts(t *testing.T) {
	p := Pair{Prefix: "kubelet-client", KeepReplaced: true}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "kubelet-client-2024-01-01-00-00-00.pem"), []byte("v1"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "kubelet-client-2024-01-01-00-00-00.pem"), filepath.Join(dir, p.Link())); err != nil {
		t.Fatal(err)
	}
	s := open(t, dir, nil)
	if got, _, err := s.Current(p); err != nil || string(got) != "v1" {
		t.Errorf("absolute target: %q, %v", got, err)
	}
	if path, err := CurrentPath(dir, p); err != nil || path != filepath.Join(dir, "kubelet-client-2024-01-01-00-00-00.pem") {
		t.Errorf("CurrentPath = %q, %v", path, err)
	}

	// A swap client-go's store left half done.
	if err := os.WriteFile(filepath.Join(dir, "kubelet-client-2024-02-01-00-00-00.pem"), []byte("v2"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, p.Link())); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "kubelet-client-2024-02-01-00-00-00.pem"), filepath.Join(dir, "kubelet-client-updated.pem")); err != nil {
		t.Fatal(err)
	}
	if err := s.Clean(p); err != nil {
		t.Fatal(err)
	}
	if got, _, err := s.Current(p); err != nil || string(got) != "v2" {
		t.Errorf("after recovery: %q, %v", got, err)
	}
	if _, err := s.Install(p, []byte("v3")); err != nil {
		t.Fatal(err)
	}
	if err := s.Clean(p); err != nil {
		t.Fatal(err)
	}
	got := names(t, dir)
	if len(got) != 4 || !slices.Contains(got, "kubelet-client-2024-01-01-00-00-00.pem") || !slices.Contains(got, "kubelet-client-2024-02-01-00-00-00.pem") {
		t.Errorf("rotated pairs not kept: %q", got)
	}

	// A regular file in the link's place.
	dir = t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, p.Link()), []byte("copied"), 0o600); err != nil {
		t.Fatal(err)
	}
	s = open(t, dir, nil)
	if got, _, err := s.Current(p); err != nil || string(got) != "copied" {
		t.Errorf("regular current file: %q, %v", got, err)
	}
	if _, err := s.Install(p, []byte("new")); err == nil || !strings.Contains(err.Error(), "not a link") {
		t.Errorf("replacing a regular current file: %v", err)
	}
}
