package volume

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodelet/nodelet/internal/base/beneath"
	"github.com/nodelet/nodelet/internal/base/mountinfo"
)

// ensureTmpfs mounts a tmpfs on dir unless one is mounted there already,
// with size= when size is set, and reports whether it mounted one.
func ensureTmpfs(dir string, size *resource.Quantity) (bool, error) {
	mounted, err := mountinfo.IsMountPoint(dir)
	if err != nil {
		return false, err
	}
	if mounted {
		var st unix.Statfs_t
		if err := unix.Statfs(dir, &st); err != nil {
			return false, fmt.Errorf("statfs %s: %w", dir, err)
		}
		if st.Type != unix.TMPFS_MAGIC {
			return false, fmt.Errorf("%s is a mount point, but not of a tmpfs", dir)
		}
		return false, nil
	}
	var opts string
	if size != nil {
		opts = fmt.Sprintf("size=%d", size.Value())
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, opts); err != nil {
		return false, fmt.Errorf("mounting tmpfs on %s: %w", dir, err)
	}
	return true, nil
}

// otherMounts counts the mounts below under that show what the mount at
// mountPoint shows (the same file system and directory: binds of one
// source), mountPoint itself aside: the kubelet's GetMountRefs filtered
// to the pods directory.
func otherMounts(mounts []mountinfo.Mount, mountPoint, under string) int {
	var self *mountinfo.Mount
	for i := range mounts {
		if mounts[i].MountPoint == mountPoint {
			self = &mounts[i] // the last one: the mount on top
		}
	}
	if self == nil {
		return 0
	}
	n := 0
	for _, mi := range mounts {
		if _, below := relBelow(under, mi.MountPoint); below && mi.MountPoint != mountPoint && mi.Dev == self.Dev && mi.Root == self.Root {
			n++
		}
	}
	return n
}

// unmountBelow unmounts the mount whose mount point is rel below the
// directory open as dirFD, without following any symlink on the way (a
// container may have replaced a path element): the mount point is opened
// with RESOLVE_NO_SYMLINKS and unmounted through its /proc/self/fd link.
// A busy mount is detached.
func unmountBelow(dirFD int, rel string) error {
	fd, err := beneath.Open(dirFD, rel, beneath.NoSymlinks)
	if err != nil {
		return fmt.Errorf("opening mount point %s: %w", rel, err)
	}
	defer unix.Close(fd)
	err = unix.Unmount(procFD(fd), 0)
	if errors.Is(err, unix.EBUSY) {
		err = unix.Unmount(procFD(fd), unix.MNT_DETACH)
	}
	if err != nil {
		return fmt.Errorf("unmounting %s: %w", rel, err)
	}
	return nil
}
