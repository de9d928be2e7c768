package beneath

import (
	"errors"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Symlinks says what a resolution does with symlinks.
type Symlinks int

const (
	// FollowSymlinks follows symlinks as long as they stay below the root.
	FollowSymlinks Symlinks = iota
	// NoSymlinks fails with ELOOP at any symlink, the last element's too.
	NoSymlinks
)

// maxSymlinkHops bounds symlink expansion in walk (the kernel's limit).
const maxSymlinkHops = 40

// Open opens rel below the directory open as root and returns an O_PATH
// descriptor of the file it names. Resolution never leaves root: ".."
// cannot climb above it, an absolute symlink or one that climbs above it
// fails with EXDEV, magic links (/proc/self/fd/...) fail and with
// NoSymlinks every symlink fails with ELOOP. With FollowSymlinks a final
// symlink is followed (below root). An empty rel names root itself.
func Open(root int, rel string, symlinks Symlinks) (int, error) {
	if rel == "" {
		rel = "."
	}
	resolve := uint64(unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS)
	if symlinks == NoSymlinks {
		resolve |= unix.RESOLVE_NO_SYMLINKS
	}
	how := &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: resolve}
	for range 64 {
		fd, err := unix.Openat2(root, rel, how)
		switch {
		case err == nil:
			return fd, nil
		case errors.Is(err, unix.EAGAIN), errors.Is(err, unix.EINTR):
			// A concurrent rename or mount: the kernel refused to
			// guess; try again.
			continue
		case errors.Is(err, unix.ENOSYS):
			return walk(root, rel, symlinks, nil)
		default:
			return -1, err
		}
	}
	return -1, unix.EAGAIN
}

// walk is Open without openat2: it keeps a stack of O_PATH descriptors
// from root to the current directory, opens each element with O_NOFOLLOW
// relative to the top one, expands symlinks itself (relative ones only)
// and climbs ".." by popping the stack, so what it returns is always
// reached from root through directories it held open.
//
// The only step that consults a name (and so the only one a concurrent
// rename can influence) is the openat of an element; step, if not nil, is
// called right before each, so that tests can change the tree at every
// point where it matters.
func walk(root int, rel string, symlinks Symlinks, step func()) (int, error) {
	start, err := unix.Openat(root, ".", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	stack := []int{start}
	defer func() {
		for _, fd := range stack {
			unix.Close(fd)
		}
	}()

	pending := splitPath(rel)
	hops := 0
	for len(pending) > 0 {
		el := pending[0]
		pending = pending[1:]
		if el == ".." {
			if len(stack) == 1 {
				return -1, unix.EXDEV
			}
			unix.Close(stack[len(stack)-1])
			stack = stack[:len(stack)-1]
			continue
		}
		if step != nil {
			step()
		}
		fd, err := unix.Openat(stack[len(stack)-1], el, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return -1, err
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return -1, err
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFLNK:
			target, err := readlinkFD(fd)
			unix.Close(fd)
			switch {
			case err != nil:
				return -1, err
			case symlinks == NoSymlinks:
				return -1, unix.ELOOP
			case hops >= maxSymlinkHops:
				return -1, unix.ELOOP
			case filepath.IsAbs(target):
				return -1, unix.EXDEV
			}
			hops++
			pending = append(splitPath(target), pending...)
		case unix.S_IFDIR:
			stack = append(stack, fd)
		default:
			if len(pending) > 0 {
				unix.Close(fd)
				return -1, unix.ENOTDIR
			}
			stack = append(stack, fd)
		}
	}
	top := stack[len(stack)-1]
	stack = stack[:len(stack)-1]
	return top, nil
}

// readlinkFD reads the symlink open as fd (O_PATH|O_NOFOLLOW).
func readlinkFD(fd int) (string, error) {
	for size := 256; ; size *= 2 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(fd, "", buf)
		if err != nil {
			return "", err
		}
		if n < size {
			return string(buf[:n]), nil
		}
	}
}

// splitPath splits a slash-separated path into its elements, dropping
// empty and "." ones.
func splitPath(p string) []string {
	var out []string
	for _, el := range strings.Split(p, "/") {
		if el != "" && el != "." {
			out = append(out, el)
		}
	}
	return out
}
