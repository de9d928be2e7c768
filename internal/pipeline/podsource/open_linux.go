package podsource

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// manifestHandle is a manifest file found by openManifest: known to be a
// regular file, not opened for reading yet.
type manifestHandle struct {
	path string
	fd   int // O_PATH: no read access, nothing of the file's driver run
	id   fileID
}

// openManifest resolves path (following symlinks) to a regular file without
// opening it for reading: an O_PATH descriptor neither blocks on a FIFO nor
// runs a device's open (a watchdog, a tape rewind), and fstat of that
// descriptor tells what it is. A directory is errIsDir; anything else that
// is not a regular file is an error naming its type.
func openManifest(path string) (*manifestHandle, error) {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		_ = unix.Close(fd)
		return nil, &fs.PathError{Op: "stat", Path: path, Err: err}
	}
	if kind := fileKind(st.Mode & unix.S_IFMT); kind != "" {
		_ = unix.Close(fd)
		if kind == "directory" {
			return nil, errIsDir
		}
		return nil, fmt.Errorf("%s is not a regular file", kind)
	}
	return &manifestHandle{path: path, fd: fd, id: fileID{
		dev: st.Dev, ino: st.Ino, size: st.Size,
		mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano(),
	}}, nil
}

func fileKind(format uint32) string {
	switch format {
	case unix.S_IFREG:
		return ""
	case unix.S_IFDIR:
		return "directory"
	case unix.S_IFIFO:
		return "named pipe"
	case unix.S_IFSOCK:
		return "socket"
	case unix.S_IFCHR, unix.S_IFBLK:
		return "device"
	default:
		return "special file"
	}
}

// read returns the content of the file, refusing more than limit bytes.
// The file read is the one fstat looked at: it is reopened through
// /proc/self/fd, not by its path, which may point elsewhere by now.
func (h *manifestHandle) read(limit int) ([]byte, error) {
	f, err := os.OpenFile("/proc/self/fd/"+strconv.Itoa(h.fd), os.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if errors.Is(err, fs.ErrNotExist) {
		// No /proc: open the path again, and make sure it is the same file.
		f, err = os.OpenFile(h.path, os.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	info, err := f.Stat() // fstat; f.Fd() would make f blocking
	if err != nil {
		return nil, err
	}
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok || st.Dev != h.id.dev || st.Ino != h.id.ino || !info.Mode().IsRegular() {
		return nil, fmt.Errorf("open %s: replaced while being opened", h.path)
	}
	return readLimited(f, limit, "file")
}

func (h *manifestHandle) close() { _ = unix.Close(h.fd) }
