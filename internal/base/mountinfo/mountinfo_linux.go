// Package mountinfo is a base package: the mount table of this process's
// mount namespace (/proc/self/mountinfo, read bounded) and whether a path
// is the root of a mount. The volume manager and the CSI mounter ask it
// before they mount or unmount, so that a restarted nodelet neither mounts
// twice nor unmounts what is not there.
package mountinfo

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/nodelet/nodelet/internal/base/bounded"
)

// maxTable bounds the mount table read: a node with many pods has a few
// thousand lines of a few hundred bytes; a pod cannot grow the host's
// table past this without the node being unusable anyway.
const maxTable = 16 << 20

// Mount is one line of the mount table.
type Mount struct {
	ID         int
	Dev        string // major:minor of the file system
	Root       string // the file system's directory mounted here (a bind's source)
	MountPoint string
	FsType     string
	Options    string // per-mount options
	SuperOpts  string // per-superblock options (tmpfs size= is here)
	Shared     bool   // in a shared peer group ("shared:N" optional field)
}

// Read reads the mount table of this process's mount namespace.
func Read() ([]Mount, error) {
	data, err := bounded.ReadFile("/proc/self/mountinfo", maxTable)
	if err != nil {
		return nil, fmt.Errorf("reading the mount table: %w", err)
	}
	return Parse(data)
}

// Parse parses mountinfo(5) lines:
//
//	36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
func Parse(data []byte) ([]Mount, error) {
	var out []Mount
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
		m := Mount{ID: id, Dev: fields[2], Root: unescape(fields[3]), MountPoint: unescape(fields[4]),
			Options: fields[5], FsType: tail[0]}
		for _, opt := range fields[6:] {
			if strings.HasPrefix(opt, "shared:") {
				m.Shared = true
			}
		}
		if len(tail) > 2 {
			m.SuperOpts = tail[2]
		}
		out = append(out, m)
	}
	return out, sc.Err()
}

// IsMountPoint reports whether path (not followed if a symlink) is the
// root of a mount: statx's STATX_ATTR_MOUNT_ROOT, or on kernels before
// 5.8 the mount table. A missing path is an error (fs.ErrNotExist).
func IsMountPoint(path string) (bool, error) {
	var stx unix.Statx_t
	err := unix.Statx(unix.AT_FDCWD, path, unix.AT_SYMLINK_NOFOLLOW|unix.AT_NO_AUTOMOUNT, unix.STATX_TYPE, &stx)
	if err != nil {
		return false, &os.PathError{Op: "statx", Path: path, Err: err}
	}
	if stx.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT != 0 {
		return stx.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0, nil
	}
	real, err := filepath.EvalSymlinks(filepath.Dir(path))
	if err != nil {
		return false, fmt.Errorf("resolving %s: %w", path, err)
	}
	real = filepath.Join(real, filepath.Base(path))
	mounts, err := Read()
	if err != nil {
		return false, err
	}
	for _, m := range mounts {
		if m.MountPoint == real {
			return true, nil
		}
	}
	return false, nil
}

// unescape undoes the kernel's octal escapes (\040 for a space, \011,
// \012, \134).
func unescape(s string) string {
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
