package atomicfile

import (
	"os"
	"path/filepath"
	"testing"
)

// writers are the two ways to write a file; they differ only in the
// fsyncs, which a test cannot see.
var writers = []struct {
	name  string
	write func(string, []byte, os.FileMode) error
}{{"Write", Write}, {"Replace", Replace}}

// oldFile is a directory with one file, f, that holds "old".
func oldFile(t *testing.T) (dir, path string) {
	t.Helper()
	dir = t.TempDir()
	path = filepath.Join(dir, "f")
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, path
}

func TestWriteReplacesWithMode(t *testing.T) {
	for _, w := range writers {
		t.Run(w.name, func(t *testing.T) {
			dir, path := oldFile(t)
			if err := w.write(path, []byte("new"), 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(path)
			if err != nil || string(got) != "new" {
				t.Errorf("content %q (%v), want new", got, err)
			}
			if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
				t.Errorf("mode %v (%v), want 0600", fi.Mode(), err)
			}
			entries, _ := os.ReadDir(dir)
			if len(entries) != 1 {
				t.Errorf("left over: %v", entries)
			}
		})
	}
}

// A write that fails leaves the old file as it was and no temp file.
func TestWriteFailureKeepsOldFile(t *testing.T) {
	for _, w := range writers {
		t.Run(w.name, func(t *testing.T) {
			dir, path := oldFile(t)
			// A directory in path's place cannot be renamed over.
			target := filepath.Join(dir, "d")
			if err := os.MkdirAll(filepath.Join(target, "x"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := w.write(target, []byte("new"), 0o600); err == nil {
				t.Fatal("replacing a non-empty directory succeeded")
			}
			if got, _ := os.ReadFile(path); string(got) != "old" {
				t.Errorf("old file now %q", got)
			}
			entries, _ := os.ReadDir(dir)
			if len(entries) != 2 {
				t.Errorf("left over: %v", entries)
			}
		})
	}
}
