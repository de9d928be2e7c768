package cgroupmount

import (
	"os"
	"slices"
	"strings"
	"testing"
)

// A plain directory is no cgroup and reads as v1; a missing one is an
// error for Version and false for the others. The machine's own
// /sys/fs/cgroup is checked against what /proc/self/mountinfo says.
func TestVersion(t *testing.T) {
	dir := t.TempDir()
	if v, err := Version(dir); err != nil || v != 1 {
		t.Errorf("Version(tempdir) = %d, %v; want 1", v, err)
	}
	if IsCgroup2(dir) || IsCgroup(dir) {
		t.Errorf("a temp dir taken for a cgroup filesystem")
	}
	if _, err := Version(dir + "/none"); err == nil {
		t.Error("Version of a missing path: no error")
	}
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Skip("no /proc/self/mountinfo:", err)
	}
	v, err := Version("/sys/fs/cgroup")
	if err != nil {
		t.Skip("no /sys/fs/cgroup:", err)
	}
	unified := false
	for line := range strings.Lines(string(mounts)) {
		if f := strings.Fields(line); len(f) > 4 && f[4] == "/sys/fs/cgroup" && slices.Contains(f, "cgroup2") {
			unified = true
		}
	}
	if (v == 2) != unified {
		t.Errorf("Version(/sys/fs/cgroup) = %d, mountinfo says unified %v", v, unified)
	}
}
