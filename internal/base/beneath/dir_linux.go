package beneath

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

var (
	// ErrOutside is wrapped by Rel when a path is not below the directory
	// it must be in, and by a Dir when a path resolves above it.
	ErrOutside = errors.New("outside of the directory")
	// ErrSymlink is wrapped when a Dir meets a symlink on a path.
	ErrSymlink = errors.New("symlink refused")
	// ErrNotRegular is wrapped when a file to read is not a regular file
	// (a FIFO, a socket, a device or a directory).
	ErrNotRegular = errors.New("not a regular file")
	// ErrBadName is wrapped when a name given to a Dir is not one path
	// element.
	ErrBadName = errors.New("not a single path element")
)

// Rel returns path relative to root when path is absolute and, after both
// are cleaned, lexically strictly below root; otherwise an error wrapping
// ErrOutside. It does not look at the file system: resolving the result
// with a Dir is what keeps symlinks from leading out.
func Rel(root, path string) (string, error) {
	if !filepath.IsAbs(path) {
		return "", fmt.Errorf("%q is not an absolute path: %w", path, ErrOutside)
	}
	rel, err := filepath.Rel(filepath.Clean(root), filepath.Clean(path))
	if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", fmt.Errorf("%q is not below %s: %w", path, root, ErrOutside)
	}
	return rel, nil
}

// Dir is a directory held open. Paths given to its methods are resolved
// below it and never through a symlink; names (for Lstat, Rename, Remove
// and Create) are single elements, acted on in this very directory
// whatever its path names now. Its methods may run concurrently, but not
// with Close.
type Dir struct {
	fd   int
	name string // the path it was opened at, for errors and logs
}

// OpenRoot opens the directory at path. path is trusted (the
// administrator's configuration): symlinks in it are followed. What lies
// below it is not trusted: that is what the Dir's methods are for.
func OpenRoot(path string) (*Dir, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	return &Dir{fd: fd, name: path}, nil
}

// Name is the path the directory was opened at (it may have moved since).
func (d *Dir) Name() string { return d.name }

// ProcPath names this very directory through /proc/self/fd, for the
// interfaces that only take a path (inotify); it is valid while d is open.
func (d *Dir) ProcPath() string { return procFD(d.fd) }

// Close closes the directory; closing it again does nothing.
func (d *Dir) Close() error {
	if d.fd < 0 {
		return nil
	}
	err := unix.Close(d.fd)
	d.fd = -1
	return err
}

// OpenDir opens the directory rel below d, following no symlink.
func (d *Dir) OpenDir(rel string) (*Dir, error) {
	name := d.join(rel)
	p, err := Open(d.fd, rel, NoSymlinks)
	if err != nil {
		return nil, pathError("open", name, err)
	}
	defer unix.Close(p)
	// "." through the O_PATH descriptor opens that very inode, and fails
	// with ENOTDIR if it is not a directory.
	fd, err := unix.Openat(p, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, pathError("open", name, err)
	}
	return &Dir{fd: fd, name: name}, nil
}

// OpenFile opens the regular file rel below d for reading, following no
// symlink. Anything else fails with an error wrapping ErrNotRegular and is
// never opened: it is looked at through an O_PATH descriptor, which the
// file is then reopened through (/proc/self/fd), so what is read is the
// inode that was checked.
func (d *Dir) OpenFile(rel string) (*os.File, error) {
	name := d.join(rel)
	p, err := Open(d.fd, rel, NoSymlinks)
	if err != nil {
		return nil, pathError("open", name, err)
	}
	defer unix.Close(p)
	var st unix.Stat_t
	if err := unix.Fstat(p, &st); err != nil {
		return nil, pathError("stat", name, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, pathError("open", name, fmt.Errorf("%w: it is a %s", ErrNotRegular, kind(st.Mode)))
	}
	fd, err := unix.Open(procFD(p), unix.O_RDONLY|unix.O_NOCTTY|unix.O_LARGEFILE|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, pathError("reopen", name, err)
	}
	return os.NewFile(uintptr(fd), name), nil
}

// Lstat describes the entry name of d without following it.
func (d *Dir) Lstat(name string) (fs.FileInfo, error) {
	if err := checkName(name); err != nil {
		return nil, pathError("lstat", d.join(name), err)
	}
	fd, err := unix.Openat(d.fd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, pathError("lstat", d.join(name), err)
	}
	f := os.NewFile(uintptr(fd), d.join(name))
	defer f.Close()
	return f.Stat()
}

// Rename renames the entry oldName of d to newName, in d. A symlink is
// renamed itself.
func (d *Dir) Rename(oldName, newName string) error {
	for _, n := range []string{oldName, newName} {
		if err := checkName(n); err != nil {
			return pathError("rename", d.join(n), err)
		}
	}
	if err := unix.Renameat(d.fd, oldName, d.fd, newName); err != nil {
		return &os.LinkError{Op: "rename", Old: d.join(oldName), New: d.join(newName), Err: err}
	}
	return nil
}

// Remove unlinks the entry name of d, which must not be a directory. A
// symlink is removed itself.
func (d *Dir) Remove(name string) error {
	if err := checkName(name); err != nil {
		return pathError("remove", d.join(name), err)
	}
	if err := unix.Unlinkat(d.fd, name, 0); err != nil {
		return pathError("remove", d.join(name), err)
	}
	return nil
}

// Create creates the file name in d for writing with mode perm (less the
// umask). It fails if anything, a symlink included, is already there.
func (d *Dir) Create(name string, perm fs.FileMode) (*os.File, error) {
	if err := checkName(name); err != nil {
		return nil, pathError("create", d.join(name), err)
	}
	fd, err := unix.Openat(d.fd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_LARGEFILE|unix.O_CLOEXEC, uint32(perm.Perm()))
	if err != nil {
		return nil, pathError("create", d.join(name), err)
	}
	return os.NewFile(uintptr(fd), d.join(name)), nil
}

// Names lists the names of the entries of d, in directory order.
func (d *Dir) Names() ([]string, error) {
	fd, err := unix.Openat(d.fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, pathError("open", d.name, err)
	}
	f := os.NewFile(uintptr(fd), d.name)
	defer f.Close()
	return f.Readdirnames(-1)
}

// Sync makes the directory's entries durable (fsync).
func (d *Dir) Sync() error {
	if err := unix.Fsync(d.fd); err != nil {
		return pathError("sync", d.name, err)
	}
	return nil
}

func (d *Dir) join(rel string) string {
	return filepath.Join(d.name, rel)
}

func checkName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsRune(name, '/') {
		return ErrBadName
	}
	return nil
}

// pathError wraps err, explaining the errors of a resolution below a Dir.
func pathError(op, path string, err error) error {
	switch {
	case errors.Is(err, unix.ELOOP):
		err = explained{ErrSymlink, err}
	case errors.Is(err, unix.EXDEV):
		err = explained{ErrOutside, err}
	}
	return &fs.PathError{Op: op, Path: path, Err: err}
}

// explained is an errno that reads as what it means below a Dir (ELOOP's
// "too many levels of symbolic links" would mislead when any symlink is
// refused) and matches both.
type explained struct{ meaning, errno error }

func (e explained) Error() string   { return e.meaning.Error() }
func (e explained) Unwrap() []error { return []error{e.meaning, e.errno} }

func procFD(fd int) string {
	return "/proc/self/fd/" + strconv.Itoa(fd)
}

// kind names a file type for error messages.
func kind(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFDIR:
		return "directory"
	case unix.S_IFIFO:
		return "FIFO"
	case unix.S_IFSOCK:
		return "socket"
	case unix.S_IFCHR:
		return "character device"
	case unix.S_IFBLK:
		return "block device"
	case unix.S_IFLNK:
		return "symlink"
	default:
		return fmt.Sprintf("file of type %#o", mode&unix.S_IFMT)
	}
}
