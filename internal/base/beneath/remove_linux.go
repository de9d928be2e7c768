package beneath

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// ErrOtherMount is wrapped by RemoveAll when it meets a directory on
// another mount (a volume still mounted): it never removes across one.
var ErrOtherMount = errors.New("on another mount: not removed")

// RemoveAll removes the entry name of the directory open as parent and,
// for a directory, everything below it. Each directory is opened with
// O_NOFOLLOW relative to its parent's descriptor, so a symlink is removed
// as a symlink and never followed, and nothing is entered that is on
// another mount than parent (an error wrapping ErrOtherMount; what is
// beside it is still removed). A missing entry is already removed. path
// names the entry in errors only.
func RemoveAll(parent int, name, path string) error {
	if err := checkName(name); err != nil {
		return pathError("remove", path, err)
	}
	parentMnt, err := mountKeyOf(parent)
	if err != nil {
		return fmt.Errorf("%s: %w", filepath.Dir(path), err)
	}
	return removeAllAt(parent, name, path, parentMnt)
}

// RemoveAll removes the entry name of d and everything below it, as the
// function RemoveAll.
func (d *Dir) RemoveAll(name string) error { return RemoveAll(d.fd, name, d.join(name)) }

// mountKey identifies the mount a file is on: the mount ID where statx has
// it, else only the device.
type mountKey struct {
	mntID uint64
	dev   uint64
}

func mountKeyOf(fd int) (mountKey, error) {
	var stx unix.Statx_t
	if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH, unix.STATX_TYPE|unix.STATX_MNT_ID, &stx); err != nil {
		return mountKey{}, fmt.Errorf("statx: %w", err)
	}
	k := mountKey{dev: unix.Mkdev(stx.Dev_major, stx.Dev_minor)}
	if stx.Mask&unix.STATX_MNT_ID != 0 {
		k.mntID = stx.Mnt_id
	}
	return k, nil
}

func removeAllAt(parent int, name, path string, parentMnt mountKey) error {
	fd, err := unix.Openat(parent, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, unix.ENOENT):
		return nil
	case errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.ELOOP):
		if err := unix.Unlinkat(parent, name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("removing %s: %w", path, err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("opening %s: %w", path, err)
	}
	dir := os.NewFile(uintptr(fd), path)
	defer dir.Close()

	mnt, err := mountKeyOf(fd)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if mnt != parentMnt {
		return fmt.Errorf("%s is %w", path, ErrOtherMount)
	}
	var errs []error
	for {
		names, err := dir.Readdirnames(1024)
		for _, n := range names {
			if err := removeAllAt(fd, n, filepath.Join(path, n), mnt); err != nil {
				errs = append(errs, err)
			}
		}
		if errors.Is(err, io.EOF) || len(names) == 0 {
			break
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("listing %s: %w", path, err))
			break
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if err := unix.Unlinkat(parent, name, unix.AT_REMOVEDIR); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("removing %s: %w", path, err)
	}
	return nil
}
