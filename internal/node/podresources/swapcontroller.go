package podresources

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"

	"github.com/nodelet/nodelet/internal/base/cgroupmount"
)

// SwapController tells whether the kernel accounts swap in memory cgroups
// under mountDir, and whether that is cgroup v2, as the kubelet's
// swapControllerAvailable looks: on v1 the memory hierarchy's
// memory.memsw.limit_in_bytes (swapaccount=1), on v2 memory.swap.max in
// nodelet's own cgroup (/proc/self/cgroup; the root cgroup has none).
// What cannot be read is no controller.
func SwapController(mountDir string) (controller, v2 bool) {
	if !cgroupmount.IsCgroup2(mountDir) {
		_, err := os.Stat(filepath.Join(mountDir, "memory", "memory.memsw.limit_in_bytes"))
		return err == nil, false
	}
	self, ok := ownCgroupV2()
	if !ok {
		return false, true
	}
	_, err := os.Stat(filepath.Join(mountDir, filepath.Clean("/"+self), fileSwapMax))
	return err == nil, true
}

// ownCgroupV2 is this process's cgroup v2 path ("0::<path>" in
// /proc/self/cgroup).
func ownCgroupV2() (string, bool) {
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		return "", false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for n := 0; sc.Scan() && n < 256; n++ {
		if path, ok := strings.CutPrefix(sc.Text(), "0::"); ok {
			return path, true
		}
	}
	return "", false
}
