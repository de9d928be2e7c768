package stats

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// FsStats is statfs(2) of path.
func (m *HostMachine) FsStats(path string) (capacity, available, used, inodes, inodesFree uint64, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, 0, 0, 0, 0, fmt.Errorf("statfs %s: %w", path, err)
	}
	bs := uint64(st.Bsize)
	capacity = st.Blocks * bs
	available = st.Bavail * bs
	used = (st.Blocks - min(st.Blocks, st.Bfree)) * bs
	return capacity, available, used, st.Files, st.Ffree, nil
}

// IsTmpfs reports whether path is a tmpfs mounted there: its own
// filesystem (a memory-backed emptyDir), not a directory of a tmpfs
// mounted above it (a disk emptyDir of a root directory on a tmpfs).
func (m *HostMachine) IsTmpfs(path string) (bool, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return false, fmt.Errorf("statfs %s: %w", path, err)
	}
	if st.Type != unix.TMPFS_MAGIC {
		return false, nil
	}
	var self, parent unix.Stat_t
	if err := unix.Stat(path, &self); err != nil {
		return false, fmt.Errorf("stat %s: %w", path, err)
	}
	if err := unix.Stat(filepath.Dir(path), &parent); err != nil {
		return false, fmt.Errorf("stat %s: %w", filepath.Dir(path), err)
	}
	return self.Dev != parent.Dev || self.Ino == parent.Ino, nil
}

// DiskUsage walks the tree at path like du -x -s -B1 and counts its inodes
// like find -xdev | wc -l: allocated blocks, hard-linked files once, other
// filesystems mounted below path skipped. Entries vanishing during the
// walk are ignored.
func (m *HostMachine) DiskUsage(path string) (usedBytes, inodesUsed uint64, err error) {
	var root unix.Stat_t
	if err := unix.Lstat(path, &root); err != nil {
		return 0, 0, fmt.Errorf("disk usage of %s: %w", path, err)
	}
	type inode struct{ dev, ino uint64 }
	var links map[inode]bool
	err = filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if st.Dev != root.Dev {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if st.Nlink > 1 && !d.IsDir() {
			k := inode{uint64(st.Dev), st.Ino}
			if links[k] {
				return nil
			}
			if links == nil {
				links = map[inode]bool{}
			}
			links[k] = true
		}
		usedBytes += uint64(st.Blocks) * 512
		inodesUsed++
		return nil
	})
	if err != nil {
		return 0, 0, fmt.Errorf("disk usage of %s: %w", path, err)
	}
	return usedBytes, inodesUsed, nil
}

// deviceOf is the device number of the filesystem holding path.
func deviceOf(path string) (major, minor uint64, ok bool) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, 0, false
	}
	return uint64(unix.Major(st.Dev)), uint64(unix.Minor(st.Dev)), true
}
