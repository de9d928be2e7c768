package beneath

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// liveness bounds how long a call that must return at once may take
// before the test declares it hung (on a FIFO, say). It is generous on
// purpose: it only separates "returns" from "never returns".
const liveness = 30 * time.Second

// returns runs f in the background and fails the test if it does not
// return within the liveness bound.
func returns[T any](t *testing.T, what string, f func() (T, error)) (T, error) {
	t.Helper()
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := f()
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-time.After(liveness):
		t.Fatalf("%s did not return: it blocks", what)
		panic("unreachable")
	}
}

// logWorld is a root with ns/app/0.log and, outside it, secret.
type logWorld struct {
	root, outside string
	d             *Dir
}

func newLogWorld(t *testing.T) *logWorld {
	t.Helper()
	w := &logWorld{root: t.TempDir(), outside: t.TempDir()}
	mustWrite(t, filepath.Join(w.root, "ns/app/0.log"), "log")
	mustWrite(t, filepath.Join(w.outside, "secret"), "SECRET")
	mustWrite(t, filepath.Join(w.outside, "app/0.log"), "OUTSIDE LOG")
	d, err := OpenRoot(w.root)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	w.d = d
	return w
}

func (w *logWorld) symlink(t *testing.T, target, name string) {
	t.Helper()
	if err := os.Symlink(target, filepath.Join(w.root, name)); err != nil {
		t.Fatal(err)
	}
}

func TestOpenFile(t *testing.T) {
	w := newLogWorld(t)
	w.symlink(t, filepath.Join(w.outside, "secret"), "ns/app/abs.log")
	w.symlink(t, "0.log", "ns/app/rel.log") // stays inside, still refused
	w.symlink(t, filepath.Join(w.outside, "app"), "ns/evil")
	w.symlink(t, "app", "ns/alias")
	w.symlink(t, "/proc/self/fd/0", "ns/app/magic.log")
	if err := unix.Mkfifo(filepath.Join(w.root, "ns/app/fifo.log"), 0o600); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		// A character device like /dev/zero (1, 5): opening it would
		// succeed and reading it would never end.
		if err := unix.Mknod(filepath.Join(w.root, "ns/app/dev.log"), unix.S_IFCHR|0o600, int(unix.Mkdev(1, 5))); err != nil {
			t.Fatal(err)
		}
	}

	f, err := w.d.OpenFile("ns/app/0.log")
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(f)
	f.Close()
	if err != nil || string(b) != "log" {
		t.Fatalf("read %q, %v", b, err)
	}

	for _, tc := range []struct {
		rel  string
		want error
	}{
		{"ns/app/abs.log", ErrSymlink},
		{"ns/app/rel.log", ErrSymlink},
		{"ns/app/magic.log", ErrSymlink},
		{"ns/evil/0.log", ErrSymlink},
		{"ns/alias/0.log", ErrSymlink},
		{"ns/app/fifo.log", ErrNotRegular},
		{"ns/app/dev.log", ErrNotRegular}, // missing when not root: ENOENT
		{"ns/app", ErrNotRegular},
		{"../" + filepath.Base(w.outside) + "/secret", ErrOutside},
		{"ns/app/missing.log", fs.ErrNotExist},
	} {
		if tc.rel == "ns/app/dev.log" && os.Geteuid() != 0 {
			continue
		}
		f, err := returns(t, "OpenFile("+tc.rel+")", func() (*os.File, error) { return w.d.OpenFile(tc.rel) })
		if err == nil {
			f.Close()
		}
		if !errors.Is(err, tc.want) {
			t.Errorf("OpenFile(%s) error = %v, want %v", tc.rel, err, tc.want)
		}
	}
}

func TestOpenDir(t *testing.T) {
	w := newLogWorld(t)
	w.symlink(t, filepath.Join(w.outside, "app"), "ns/evil")
	w.symlink(t, "app", "ns/alias")
	for _, tc := range []struct {
		rel  string
		want error
	}{
		{"ns/app", nil},
		{".", nil},
		{"ns/evil", ErrSymlink},
		{"ns/alias", ErrSymlink},
		{"ns/app/0.log", unix.ENOTDIR},
		{"..", ErrOutside},
	} {
		d, err := w.d.OpenDir(tc.rel)
		if !errors.Is(err, tc.want) {
			t.Errorf("OpenDir(%s) error = %v, want %v", tc.rel, err, tc.want)
		}
		if err == nil {
			d.Close()
		}
	}
}

// TestDirActsInTheHeldDirectory: once open, a Dir renames, removes and
// creates in the directory it holds, even when its path is swapped for a
// symlink to a directory outside; and it never follows a symlink entry.
func TestDirActsInTheHeldDirectory(t *testing.T) {
	w := newLogWorld(t)
	d, err := w.d.OpenDir("ns/app")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	// The attacker moves the directory away and puts a symlink in its
	// place.
	if err := os.Rename(filepath.Join(w.root, "ns/app"), filepath.Join(w.root, "ns/moved")); err != nil {
		t.Fatal(err)
	}
	w.symlink(t, filepath.Join(w.outside, "app"), "ns/app")
	w.symlink(t, filepath.Join(w.outside, "secret"), "ns/moved/link")

	if err := d.Rename("0.log", "0.log.1"); err != nil {
		t.Fatal(err)
	}
	if err := d.Remove("link"); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Create("0.log.1", 0o640); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("Create over an existing file: %v", err)
	}
	f, err := d.Create("new", 0o640)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := d.Sync(); err != nil {
		t.Fatal(err)
	}
	names, err := d.Names()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(names)
	if want := []string{"0.log.1", "new"}; !slices.Equal(names, want) {
		t.Errorf("names = %v, want %v", names, want)
	}
	for _, p := range []string{"secret", "app/0.log"} {
		if _, err := os.Stat(filepath.Join(w.outside, p)); err != nil {
			t.Errorf("outside %s: %v", p, err)
		}
	}
	if _, err := os.Stat(filepath.Join(w.outside, "app/0.log.1")); err == nil {
		t.Error("renamed outside")
	}

	// A symlink entry is described, renamed and removed itself.
	w.symlink(t, filepath.Join(w.outside, "secret"), "ns/moved/s")
	fi, err := d.Lstat("s")
	if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		t.Fatalf("Lstat of a symlink: %v, %v", fi, err)
	}
	if _, err := d.Create("s", 0o640); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("Create over a symlink: %v", err)
	}
	if err := d.Remove("s"); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(w.outside, "secret")); err != nil || string(b) != "SECRET" {
		t.Fatalf("outside secret: %q, %v", b, err)
	}

	for _, bad := range []string{"", ".", "..", "a/b"} {
		if err := d.Remove(bad); !errors.Is(err, ErrBadName) {
			t.Errorf("Remove(%q) error = %v, want ErrBadName", bad, err)
		}
	}
}

func TestRel(t *testing.T) {
	for _, tc := range []struct {
		root, path, want string
	}{
		{"/var/log/pods", "/var/log/pods/ns_p_u/app/0.log", "ns_p_u/app/0.log"},
		{"/var/log/pods/", "/var/log/pods//ns_p_u/./app/0.log", "ns_p_u/app/0.log"},
		{"/var/log/pods", "/var/log/pods", ""},
		{"/var/log/pods", "/var/log/pods/..", ""},
		{"/var/log/pods", "/var/log/pods/../../etc/shadow", ""},
		{"/var/log/pods", "/var/log/pods2/x", ""},
		{"/var/log/pods", "/etc/shadow", ""},
		{"/var/log/pods", "ns_p_u/app/0.log", ""},
		{"/var/log/pods", "", ""},
	} {
		got, err := Rel(tc.root, tc.path)
		if tc.want == "" {
			if !errors.Is(err, ErrOutside) {
				t.Errorf("Rel(%q, %q) = %q, %v; want ErrOutside", tc.root, tc.path, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("Rel(%q, %q) = %q, %v; want %q", tc.root, tc.path, got, err, tc.want)
		}
	}
}
