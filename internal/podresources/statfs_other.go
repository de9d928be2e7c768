//go:build !linux

package podresources

// Without Linux there are no cgroups: every tree is a plain directory tree.

func isCgroup2(string) bool  { return false }
func isCgroupFS(string) bool { return false }

func cgroupVersion(string) (int, error) { return 1, nil }
