package bounded

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
)

// At the limit a read succeeds; one byte over is ErrTooLarge, naming what
// was read; nothing is ever returned cut short.
func TestLimits(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	fsys := fstest.MapFS{}
	for _, tc := range []struct {
		size, limit int64
		ok          bool
	}{{0, 0, true}, {1, 0, false}, {10, 10, true}, {11, 10, false}, {4097, 4096, false}} {
		content := strings.Repeat("x", int(tc.size))
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		fsys["f"] = &fstest.MapFile{Data: []byte(content)}
		reads := map[string]func() ([]byte, error){
			"ReadAll":  func() ([]byte, error) { return ReadAll(strings.NewReader(content), tc.limit, "the body") },
			"ReadFile": func() ([]byte, error) { return ReadFile(path, tc.limit) },
			"ReadFS":   func() ([]byte, error) { return ReadFS(fsys, "f", tc.limit) },
		}
		names := map[string]string{"ReadAll": "the body", "ReadFile": path, "ReadFS": "f"}
		for name, read := range reads {
			data, err := read()
			switch {
			case tc.ok && (err != nil || string(data) != content):
				t.Errorf("%s of %d bytes, limit %d: %d bytes, %v", name, tc.size, tc.limit, len(data), err)
			case !tc.ok && (!errors.Is(err, ErrTooLarge) || data != nil || !strings.Contains(err.Error(), names[name])):
				t.Errorf("%s of %d bytes, limit %d: %d bytes, %v; want ErrTooLarge naming %q", name, tc.size, tc.limit, len(data), err, names[name])
			}
		}
	}
}

func TestMissingFile(t *testing.T) {
	if _, err := ReadFile(filepath.Join(t.TempDir(), "none"), 10); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v, want fs.ErrNotExist", err)
	}
	if _, err := ReadFS(fstest.MapFS{}, "none", 10); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file in an FS: %v, want fs.ErrNotExist", err)
	}
}
