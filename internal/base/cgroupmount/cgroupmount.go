// Package cgroupmount is a shared leaf beside the pipeline: the one place
// that tells which cgroup filesystem a path is on, by its statfs magic
// number as runc's IsCgroup2UnifiedMode does. A cgroup2 mount at the
// cgroup root is the unified hierarchy (cgroup v2); anything else there
// (the tmpfs that holds the v1 hierarchies, or a hybrid layout) is v1.
// Off Linux there are no cgroups: every path is a plain directory.
package cgroupmount

import "fmt"

// Filesystem magic numbers (linux/magic.h).
const (
	cgroupSuperMagic  = 0x27e0eb
	cgroup2SuperMagic = 0x63677270
)

// Version is 2 when root is a cgroup2 mount, else 1; an error when root
// cannot be looked at.
func Version(root string) (int, error) {
	magic, err := fsMagic(root)
	if err != nil {
		return 0, fmt.Errorf("cgroup root %s: %w", root, err)
	}
	if magic == cgroup2SuperMagic {
		return 2, nil
	}
	return 1, nil
}

// IsCgroup2 tells whether path is on a cgroup v2 filesystem (false when
// it cannot be looked at).
func IsCgroup2(path string) bool {
	magic, err := fsMagic(path)
	return err == nil && magic == cgroup2SuperMagic
}

// IsCgroup tells whether path is on a cgroup filesystem, v1 or v2, where
// rmdir removes a cgroup with its interface files.
func IsCgroup(path string) bool {
	magic, err := fsMagic(path)
	return err == nil && (magic == cgroupSuperMagic || magic == cgroup2SuperMagic)
}
