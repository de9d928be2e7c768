package volume

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
)

// The kubelet's ownership masks.
const (
	rwMask   = 0o660
	roMask   = 0o440
	execMask = 0o110
)

// ApplyFSGroup gives gid group ownership of dir and everything below it the
// way the kubelet applies a pod's fsGroup to a read-write volume: every file
// and directory gets group gid and g+rw, directories also g+x and setgid.
// Symlinks get the group but are not followed, and no mode is changed
// through them. SetUp already does this for the volumes it creates.
func ApplyFSGroup(dir string, gid int64) error {
	return applyFSGroup(dir, gid, false)
}

// applyFSGroup is ApplyFSGroup; with readOnly, files get g+r instead of
// g+rw (configMap, secret, downwardAPI and projected content).
func applyFSGroup(dir string, gid int64, readOnly bool) error {
	return fsGroupPath(dir, gid, readOnly, true)
}

// chownGroup applies the fsGroup (read-only mask) to dir itself only.
func chownGroup(dir string, gid int64) error {
	return fsGroupPath(dir, gid, true, false)
}

func fsGroupPath(path string, gid int64, readOnly, recursive bool) error {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("applying fsGroup %d to %s: %w", gid, path, err)
	}
	defer unix.Close(fd)
	if err := fsGroupAt(fd, path, int(gid), readOnly, recursive); err != nil {
		return fmt.Errorf("applying fsGroup %d: %w", gid, err)
	}
	return nil
}

// fsGroupAt applies the group to the file open as fd (O_PATH|O_NOFOLLOW),
// and below it when recursive: the children first and the directory last,
// as the kubelet walks, so that a walk cut short leaves the root
// unchanged and OnRootMismatch does it again. Working on descriptors keeps
// a rename or a planted symlink from redirecting a chown or chmod
// elsewhere.
func fsGroupAt(fd int, path string, gid int, readOnly, recursive bool) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("stat %s: %w", path, err)
	}
	typ := st.Mode & unix.S_IFMT
	if typ == unix.S_IFDIR && recursive {
		if err := fsGroupChildren(fd, path, gid, readOnly); err != nil {
			return err
		}
	}
	if err := unix.Fchownat(fd, "", -1, gid, unix.AT_EMPTY_PATH); err != nil {
		return fmt.Errorf("chown %s: %w", path, err)
	}
	if typ == unix.S_IFLNK {
		return nil
	}
	mask := uint32(rwMask)
	if readOnly {
		mask = roMask
	}
	if typ == unix.S_IFDIR {
		mask |= unix.S_ISGID | execMask
	}
	if err := unix.Chmod(procFD(fd), st.Mode&0o7777|mask); err != nil {
		return fmt.Errorf("chmod %s: %w", path, err)
	}
	return nil
}

// fsGroupChildren applies the group to everything below the directory
// open as fd.
func fsGroupChildren(fd int, path string, gid int, readOnly bool) error {
	names, err := readDirNames(fd)
	if err != nil {
		return fmt.Errorf("listing %s: %w", path, err)
	}
	for _, name := range names {
		child, err := unix.Openat(fd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOENT) {
			continue
		}
		if err != nil {
			return fmt.Errorf("opening %s: %w", filepath.Join(path, name), err)
		}
		err = fsGroupAt(child, filepath.Join(path, name), gid, readOnly, true)
		unix.Close(child)
		if err != nil {
			return err
		}
	}
	return nil
}

// setVolumeOwnership applies a pod's fsGroup to a read-write volume it
// mounts, as the kubelet's SetVolumeOwnership: nothing without an fsGroup;
// with fsGroupChangePolicy OnRootMismatch, nothing when the volume's root
// already has the group, g+rwx and setgid; else every file and directory.
func setVolumeOwnership(dir string, gid *int64, policy *v1.PodFSGroupChangePolicy) error {
	if gid == nil {
		return nil
	}
	if policy != nil && *policy == v1.FSGroupChangeOnRootMismatch {
		var st unix.Stat_t
		if err := unix.Stat(dir, &st); err == nil && rootOwnershipMatches(st.Mode, st.Gid, *gid) {
			return nil
		}
	}
	return applyFSGroup(dir, *gid, false)
}

// rootOwnershipMatches tells whether a read-write volume's root of this
// mode and group needs no ownership change under OnRootMismatch: a
// directory of group gid with at least g+rw, ug+x (the kubelet's masks)
// and setgid.
func rootOwnershipMatches(mode, group uint32, gid int64) bool {
	want := uint32(rwMask | execMask)
	return int64(group) == gid && mode&unix.S_IFMT == unix.S_IFDIR && mode&want == want && mode&unix.S_ISGID != 0
}

// groupMatches reports whether fi has the writer's fsGroup (always true
// without one).
func (w *atomicWriter) groupMatches(fi fs.FileInfo) bool {
	if w.fsGroup == nil {
		return true
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && int64(st.Gid) == *w.fsGroup
}

// ownerMatches reports whether fi is owned by uid, or by this process
// when uid is nil (a file written without an owner).
func ownerMatches(fi fs.FileInfo, uid *int64) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return false
	}
	if uid == nil {
		return int(st.Uid) == os.Geteuid()
	}
	return int64(st.Uid) == *uid
}

// readDirNames lists the directory open as fd (any open mode, O_PATH too).
func readDirNames(fd int) ([]string, error) {
	dfd, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(dfd), ".")
	defer f.Close()
	return f.Readdirnames(-1)
}

// procFD is the magic link to the file open as fd.
func procFD(fd int) string { return fmt.Sprintf("/proc/self/fd/%d", fd) }
