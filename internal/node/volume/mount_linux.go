package volume

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodelet/nodelet/internal/base/beneath"
)

// ensureTmpfs mounts a tmpfs on dir unless one is mounted there already,
// with size= when size is set, and reports whether it mounted one.
func ensureTmpfs(dir string, size *resource.Quantity) (bool, error) {
	mounted, err := isMountPoint(dir)
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

// isMountPoint reports whether path (not followed if a symlink) is the
// root of a mount.
func isMountPoint(path string) (bool, error) {
	var stx unix.Statx_t
	err := unix.Statx(unix.AT_FDCWD, path, unix.AT_SYMLINK_NOFOLLOW|unix.AT_NO_AUTOMOUNT, unix.STATX_TYPE, &stx)
	if err != nil {
		return false, fmt.Errorf("statx %s: %w", path, err)
	}
	if stx.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT != 0 {
		return stx.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0, nil
	}
	// Kernels before 5.8: look the path up in the mount table.
	real, err := filepath.EvalSymlinks(filepath.Dir(path))
	if err != nil {
		return false, fmt.Errorf("resolving %s: %w", path, err)
	}
	real = filepath.Join(real, filepath.Base(path))
	mounts, err := readMountInfo()
	if err != nil {
		return false, err
	}
	for _, mi := range mounts {
		if mi.mountPoint == real {
			return true, nil
		}
	}
	return false, nil
}

// mountInfo is one line of /proc/self/mountinfo.
type mountInfo struct {
	id         int
	dev        string // major:minor of the file system
	root       string // the file system's directory mounted here (a bind's source)
	mountPoint string
	fsType     string
	options    string // per-mount options
	superOpts  string // per-superblock options (tmpfs size= is here)
	shared     bool   // a shared peer group ("shared:N" optional field)
}

// readMountInfo reads the mount table of this process's mount namespace.
func readMountInfo() ([]mountInfo, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("reading the mount table: %w", err)
	}
	return parseMountInfo(data)
}

// parseMountInfo parses mountinfo(5) lines:
//
//	36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
func parseMountInfo(data []byte) ([]mountInfo, error) {
	var out []mountInfo
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		pre, post, ok := strings.Cut(line, " - ")
		fields, tail := strings.Fields(pre), strings.Fields(post)
		if !ok || len(fields) < 6 || len(tail) < 2 {
			return nil, fmt.Errorf("malformed mountinfo line %q", line)
		}
		id, err := strconv.Atoi(fields[0])
		if err != nil {
			return nil, fmt.Errorf("malformed mountinfo line %q: %w", line, err)
		}
		mi := mountInfo{id: id, dev: fields[2], root: unescapeMountInfo(fields[3]), mountPoint: unescapeMountInfo(fields[4]),
			options: fields[5], fsType: tail[0]}
		for _, opt := range fields[6:] {
			if strings.HasPrefix(opt, "shared:") {
				mi.shared = true
			}
		}
		if len(tail) > 2 {
			mi.superOpts = tail[2]
		}
		out = append(out, mi)
	}
	return out, sc.Err()
}

// otherMounts counts the mounts below under that show what the mount at
// mountPoint shows (the same file system and directory: binds of one
// source), mountPoint itself aside: the kubelet's GetMountRefs filtered
// to the pods directory.
func otherMounts(mounts []mountInfo, mountPoint, under string) int {
	var self *mountInfo
	for i := range mounts {
		if mounts[i].mountPoint == mountPoint {
			self = &mounts[i] // the last one: the mount on top
		}
	}
	if self == nil {
		return 0
	}
	n := 0
	for _, mi := range mounts {
		if _, below := relBelow(under, mi.mountPoint); below && mi.mountPoint != mountPoint && mi.dev == self.dev && mi.root == self.root {
			n++
		}
	}
	return n
}

// unescapeMountInfo undoes the kernel's octal escapes (\040 for a space,
// \011, \012, \134).
func unescapeMountInfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
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
