//go:build !linux

package stats

import (
	"errors"
	"fmt"
)

var errNotLinux = errors.New("not supported on this platform")

// FsStats is not supported off Linux.
func (m *HostMachine) FsStats(path string) (capacity, available, used, inodes, inodesFree uint64, err error) {
	return 0, 0, 0, 0, 0, fmt.Errorf("statfs %s: %w", path, errNotLinux)
}

// IsTmpfs is not supported off Linux.
func (m *HostMachine) IsTmpfs(path string) (bool, error) {
	return false, fmt.Errorf("statfs %s: %w", path, errNotLinux)
}

// DiskUsage is not supported off Linux.
func (m *HostMachine) DiskUsage(path string) (usedBytes, inodesUsed uint64, err error) {
	return 0, 0, fmt.Errorf("disk usage of %s: %w", path, errNotLinux)
}

// deviceOf is not supported off Linux.
func deviceOf(string) (major, minor uint64, ok bool) { return 0, 0, false }
