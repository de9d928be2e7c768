package podresources

import (
	"fmt"
	"syscall"
)

// Filesystem magic numbers (linux/magic.h).
const (
	cgroupSuperMagic  = 0x27e0eb
	cgroup2SuperMagic = 0x63677270
)

// fsMagic is the type of the filesystem holding path, 0 when unknown.
func fsMagic(path string) int64 {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return 0
	}
	return int64(st.Type)
}

// isCgroup2 tells whether path is on a cgroup v2 filesystem.
func isCgroup2(path string) bool { return fsMagic(path) == cgroup2SuperMagic }

// isCgroupFS tells whether path is on a cgroup (v1 or v2) filesystem, where
// rmdir removes a cgroup with its interface files.
func isCgroupFS(path string) bool {
	m := fsMagic(path)
	return m == cgroupSuperMagic || m == cgroup2SuperMagic
}

// cgroupVersion is 2 when root is a cgroup2 mount (the unified hierarchy,
// as runc's IsCgroup2UnifiedMode tells it), else 1 (v1 or hybrid: a tmpfs
// with the v1 hierarchies mounted in it).
func cgroupVersion(root string) (int, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(root, &st); err != nil {
		return 0, fmt.Errorf("cgroup root %s: %w", root, err)
	}
	if int64(st.Type) == cgroup2SuperMagic {
		return 2, nil
	}
	return 1, nil
}
