package beneath

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// RemoveAll never descends into a mount that is still there (a tmpfs
// here, a hostPath bind in real life), never follows a symlink, and
// removes what is beside them.
func TestRemoveAllStopsAtMountsAndSymlinks(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount")
	}
	base, outside := t.TempDir(), t.TempDir()
	mnt := filepath.Join(base, "tree/mnt")
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(mnt, unix.MNT_DETACH) })
	mustWrite(t, filepath.Join(mnt, "precious"), "P")
	mustWrite(t, filepath.Join(base, "tree/plain"), "x")
	mustWrite(t, filepath.Join(outside, "kept"), "K")
	if err := os.Symlink(outside, filepath.Join(base, "tree/out")); err != nil {
		t.Fatal(err)
	}

	root, err := OpenRoot(base)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if err := root.RemoveAll("tree"); !errors.Is(err, ErrOtherMount) {
		t.Fatalf("RemoveAll() = %v, want a refusal wrapping ErrOtherMount", err)
	}
	if data, err := os.ReadFile(filepath.Join(mnt, "precious")); err != nil || string(data) != "P" {
		t.Fatal("content of the mount was removed")
	}
	for _, gone := range []string{"tree/plain", "tree/out"} {
		if _, err := os.Lstat(filepath.Join(base, gone)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s beside the mount: %v, want removed", gone, err)
		}
	}
	if data, err := os.ReadFile(filepath.Join(outside, "kept")); err != nil || string(data) != "K" {
		t.Fatal("a symlink was followed")
	}
	if err := unix.Unmount(mnt, 0); err != nil {
		t.Fatal(err)
	}
	if err := root.RemoveAll("tree"); err != nil {
		t.Fatal(err)
	}
	if err := root.RemoveAll("tree"); err != nil {
		t.Fatalf("removing what is gone: %v", err)
	}
	if err := root.RemoveAll(".."); err == nil {
		t.Fatal("RemoveAll(\"..\") accepted")
	}
}
