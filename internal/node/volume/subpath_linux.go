package volume

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/nodelet/nodelet/internal/base/beneath"
	"github.com/nodelet/nodelet/internal/base/mountinfo"
)

// bindSubPath resolves subPath below the volume at volPath (creating the
// missing directories as the kubelet does), and bind-mounts what it
// resolved to onto target, which it returns. The runtime is then given
// target: a mount of the inode that was verified to be inside the volume,
// not a path a container could change in the meantime.
func bindSubPath(volPath, subPath, target string) (string, error) {
	root, err := unix.Open(volPath, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", fmt.Errorf("opening volume path %s: %w", volPath, err)
	}
	defer unix.Close(root)

	fd, err := openSubPath(root, subPath)
	if err != nil {
		return "", err
	}
	defer unix.Close(fd)
	if err := mountFD(fd, target); err != nil {
		return "", fmt.Errorf("subPath %q: %w", subPath, err)
	}
	return target, nil
}

// openSubPath opens subPath below root (O_PATH), creating it and its
// missing parents as directories with the mode of root when it does not
// exist.
func openSubPath(root int, subPath string) (int, error) {
	fd, err := beneath.Open(root, subPath, beneath.FollowSymlinks)
	if errors.Is(err, unix.ENOENT) {
		var st unix.Stat_t
		if err := unix.Fstat(root, &st); err != nil {
			return -1, fmt.Errorf("stat volume root: %w", err)
		}
		if err := safeMakeDirs(root, subPath, st.Mode&0o7777); err != nil {
			return -1, fmt.Errorf("creating subPath directory %q: %w", subPath, err)
		}
		fd, err = beneath.Open(root, subPath, beneath.FollowSymlinks)
	}
	if err != nil {
		return -1, subPathError(subPath, err)
	}
	return fd, nil
}

// subPathError explains a failed resolution.
func subPathError(subPath string, err error) error {
	switch {
	case errors.Is(err, unix.EXDEV):
		return fmt.Errorf("subPath %q leads outside of the volume: %w", subPath, err)
	case errors.Is(err, unix.ELOOP):
		return fmt.Errorf("subPath %q: too many or forbidden symlinks: %w", subPath, err)
	default:
		return fmt.Errorf("opening subPath %q: %w", subPath, err)
	}
}

// safeMakeDirs creates the missing directories of rel below root, one at a
// time, each with mkdirat in a directory descriptor resolved below root,
// and gives each the mode perm whatever the umask (the kubelet's
// SafeMakeDir).
func safeMakeDirs(root int, rel string, perm uint32) error {
	els := splitPath(rel)
	for i := range els {
		fd, err := beneath.Open(root, strings.Join(els[:i+1], "/"), beneath.FollowSymlinks)
		if err == nil {
			unix.Close(fd)
			continue
		}
		if !errors.Is(err, unix.ENOENT) {
			return err
		}
		parent, err := beneath.Open(root, strings.Join(els[:i], "/"), beneath.FollowSymlinks)
		if err != nil {
			return err
		}
		err = mkdirChmod(parent, els[i], perm)
		unix.Close(parent)
		if err != nil {
			return err
		}
	}
	return nil
}

// mkdirChmod creates the directory name in the directory open as parent,
// with mode perm. An entry that appeared meanwhile is left to the caller's
// next resolution to judge.
func mkdirChmod(parent int, name string, perm uint32) error {
	err := unix.Mkdirat(parent, name, perm&0o777)
	if errors.Is(err, unix.EEXIST) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("mkdir %s: %w", name, err)
	}
	fd, err := unix.Openat(parent, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening new directory %s: %w", name, err)
	}
	defer unix.Close(fd)
	if err := unix.Fchmod(fd, perm); err != nil {
		return fmt.Errorf("chmod new directory %s: %w", name, err)
	}
	return nil
}

// mountFD bind-mounts the file open as fd onto target through
// /proc/self/fd, creating target (a directory or an empty file, as the
// source is) and its parents. A bind mount of the same file already on
// target is kept; one of another file is replaced.
func mountFD(fd int, target string) error {
	var src unix.Stat_t
	if err := unix.Fstat(fd, &src); err != nil {
		return fmt.Errorf("stat resolved subPath: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(target), 0o750); err != nil {
		return fmt.Errorf("creating subPath mount directory: %w", err)
	}
	same, err := clearTarget(target, &src)
	if err != nil || same {
		return err
	}

	isDir := src.Mode&unix.S_IFMT == unix.S_IFDIR
	created, err := makeTarget(target, isDir)
	if err != nil {
		return err
	}
	if err := unix.Mount(procFD(fd), target, "", unix.MS_BIND, ""); err != nil {
		if created {
			_ = os.Remove(target)
		}
		return fmt.Errorf("bind-mounting onto %s: %w", target, err)
	}
	return nil
}

// clearTarget reports whether target already is a bind mount of src and
// otherwise unmounts whatever is mounted there.
func clearTarget(target string, src *unix.Stat_t) (bool, error) {
	for range 8 {
		var cur unix.Stat_t
		if err := unix.Lstat(target, &cur); err != nil {
			if errors.Is(err, unix.ENOENT) {
				return false, nil
			}
			return false, fmt.Errorf("stat subPath mount target: %w", err)
		}
		mounted, err := mountinfo.IsMountPoint(target)
		if err != nil || !mounted {
			return false, err
		}
		if cur.Dev == src.Dev && cur.Ino == src.Ino {
			return true, nil
		}
		err = unix.Unmount(target, unix.UMOUNT_NOFOLLOW)
		if errors.Is(err, unix.EBUSY) {
			err = unix.Unmount(target, unix.UMOUNT_NOFOLLOW|unix.MNT_DETACH)
		}
		if err != nil {
			return false, fmt.Errorf("unmounting stale subPath mount %s: %w", target, err)
		}
	}
	return false, fmt.Errorf("%s stays mounted", target)
}

// makeTarget makes target a directory or an empty file, replacing an
// unmounted entry of the other kind, and reports whether it created it.
func makeTarget(target string, isDir bool) (bool, error) {
	fi, err := os.Lstat(target)
	switch {
	case err == nil && fi.IsDir() == isDir && (isDir || fi.Mode().IsRegular()):
		return false, nil
	case err == nil:
		if err := os.Remove(target); err != nil {
			return false, fmt.Errorf("replacing subPath mount target: %w", err)
		}
	case !errors.Is(err, fs.ErrNotExist):
		return false, fmt.Errorf("stat subPath mount target: %w", err)
	}
	if isDir {
		if err := os.Mkdir(target, 0o750); err != nil {
			return false, fmt.Errorf("creating subPath mount target: %w", err)
		}
		return true, nil
	}
	f, err := os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o640)
	if err != nil {
		return false, fmt.Errorf("creating subPath mount target: %w", err)
	}
	return true, f.Close()
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
