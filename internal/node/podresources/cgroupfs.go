package podresources

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/nodelet/nodelet/internal/base/bounded"
)

// FS is a cgroup v2 (unified) hierarchy as the unified manager uses it:
// paths are relative to the hierarchy's root, "/"-separated, "" being the
// root cgroup. Errors are the kernel's (fs.ErrNotExist, fs.ErrExist,
// syscall.EBUSY...), wrapped. The production FS is OSFS; tests use a fake
// that behaves like the kernel's cgroup2 filesystem.
type FS interface {
	// Mkdir creates cgroup rel; its parent must exist.
	Mkdir(rel string) error
	// Rmdir removes cgroup rel, which must have no process and no child.
	Rmdir(rel string) error
	// ReadFile reads an interface file (bounded).
	ReadFile(rel string) ([]byte, error)
	// WriteFile writes an existing interface file, in one write.
	WriteFile(rel string, data []byte) error
	// Children is the names of cgroup rel's child cgroups.
	Children(rel string) ([]string, error)
	// Files is the names of cgroup rel's interface files.
	Files(rel string) ([]string, error)
}

// maxInterfaceFile bounds what is read of one interface file (a
// cgroup.procs of many processes included).
const maxInterfaceFile = 1 << 20

// OSFS is the cgroup2 filesystem mounted at a directory
// ("/sys/fs/cgroup").
type OSFS string

func (o OSFS) path(rel string) string { return filepath.Join(string(o), filepath.FromSlash(rel)) }

// Mkdir creates a cgroup. The kernel decides its mode; 0755 is what
// runc and the kubelet ask for.
func (o OSFS) Mkdir(rel string) error { return os.Mkdir(o.path(rel), 0o755) }

func (o OSFS) Rmdir(rel string) error { return os.Remove(o.path(rel)) }

func (o OSFS) ReadFile(rel string) ([]byte, error) {
	return bounded.ReadFile(o.path(rel), maxInterfaceFile)
}

// WriteFile writes an interface file that must exist: a cgroup file is
// never created, and the kernel takes one write as one command.
func (o OSFS) WriteFile(rel string, data []byte) error {
	f, err := os.OpenFile(o.path(rel), os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return &fs.PathError{Op: "write", Path: o.path(rel), Err: errors.Unwrap(err)}
	}
	return f.Close()
}

func (o OSFS) Children(rel string) ([]string, error) { return o.list(rel, true) }

func (o OSFS) Files(rel string) ([]string, error) { return o.list(rel, false) }

func (o OSFS) list(rel string, dirs bool) ([]string, error) {
	entries, err := os.ReadDir(o.path(rel))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() == dirs {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// join is cgroup paths joined with "/", empty elements dropped.
func join(elems ...string) string {
	var parts []string
	for _, e := range elems {
		if e = strings.Trim(e, "/"); e != "" {
			parts = append(parts, e)
		}
	}
	return strings.Join(parts, "/")
}
