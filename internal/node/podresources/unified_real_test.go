//go:build linux

package podresources

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/internal/base/cgroupmount"
)

// realUnified is the cgroup2 mount the real test uses: a hybrid host's
// unified hierarchy (on this project's machine it offers only hugetlb).
const realUnified = "/sys/fs/cgroup/unified"

// TestUnifiedRealCgroup2 runs the cgroupfs driver against the kernel's
// cgroup2 filesystem at realUnified, under a test-only top cgroup
// ("nodelet-cgv2-test-<pid>"): the strict mode's error for the missing
// cpu, memory and pids controllers, then, requiring only what the mount
// has, the layout, subtree_control, hugetlb limits, the no internal
// processes rule, cgroup.kill of a leftover process and removal. The
// root's cgroup.subtree_control is restored.
func TestUnifiedRealCgroup2(t *testing.T) {
	if testing.Short() {
		t.Skip("touches the host's cgroups")
	}
	if os.Geteuid() != 0 {
		t.Skipf("needs root to create cgroups under %s (euid %d)", realUnified, os.Geteuid())
	}
	if v, err := cgroupmount.Version(realUnified); err != nil || v != 2 {
		t.Skipf("needs a cgroup2 filesystem mounted at %s (statfs: version %d, %v)", realUnified, v, err)
	}
	rootFS := OSFS(realUnified)
	avail, err := rootFS.ReadFile(fileControllers)
	if err != nil {
		t.Fatal(err)
	}
	before, err := rootFS.ReadFile(fileSubtreeControl)
	if err != nil {
		t.Fatal(err)
	}
	testTop := "nodelet-cgv2-test-" + strconv.Itoa(os.Getpid())
	top := testTop + "/kubepods"
	t.Cleanup(func() {
		// Whatever is left, deepest first, then the root as it was.
		var dirs []string
		var walk func(string)
		walk = func(rel string) {
			dirs = append(dirs, rel)
			cs, _ := rootFS.Children(rel)
			for _, c := range cs {
				walk(join(rel, c))
			}
		}
		if _, err := rootFS.ReadFile(join(testTop, fileControllers)); err == nil {
			walk(testTop)
		}
		slices.Reverse(dirs)
		for _, d := range dirs {
			_ = rootFS.WriteFile(join(d, fileKill), []byte("1"))
			if err := rootFS.Rmdir(d); err != nil {
				t.Errorf("cleanup %s: %v", d, err)
			}
		}
		now, _ := rootFS.ReadFile(fileSubtreeControl)
		for _, c := range strings.Fields(string(now)) {
			if !slices.Contains(strings.Fields(string(before)), c) {
				if err := rootFS.WriteFile(fileSubtreeControl, []byte("-"+c)); err != nil {
					t.Errorf("restore the root's subtree_control (-%s): %v", c, err)
				}
			}
		}
	})

	// The kernel refuses a controller the cgroup does not have: what the
	// fake models.
	if !slices.Contains(strings.Fields(string(avail)), "cpu") {
		err := rootFS.WriteFile(fileSubtreeControl, []byte("+cpu"))
		if !errors.Is(err, syscall.ENOENT) {
			t.Errorf("kernel: +cpu without the controller: %v, want ENOENT", err)
		}
	}

	// Strict (production): the missing controllers are an error naming one.
	strict, err := NewUnified(rootFS, UnifiedOptions{CgroupRoot: CgroupRoot{testTop}})
	if err != nil {
		t.Fatal(err)
	}
	var missing []string
	for _, c := range RequiredControllers {
		if !slices.Contains(strings.Fields(string(avail)), c) {
			missing = append(missing, c)
		}
	}
	err = strict.EnsureQoS()
	t.Logf("strict mode on %s (controllers %q): %v", realUnified, strings.TrimSpace(string(avail)), err)
	if len(missing) > 0 {
		if !errors.Is(err, ErrControllerMissing) || !strings.Contains(err.Error(), strconv.Quote(missing[0])) {
			t.Errorf("strict EnsureQoS on a mount without %v: %v", missing, err)
		}
		if _, err := rootFS.ReadFile(join(testTop, fileControllers)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("strict mode created cgroups before failing: %v", err)
		}
	} else if err != nil {
		t.Errorf("strict EnsureQoS with every controller: %v", err)
	}

	// Lenient: require only what the mount offers.
	required := slices.DeleteFunc(strings.Fields(string(avail)), func(c string) bool {
		return !slices.Contains(controllerOrder, c)
	})
	if len(required) == 0 {
		t.Skipf("%s offers no controller (cgroup.controllers %q): nothing to enable", realUnified, avail)
	}
	if err := os.Mkdir(realUnified+"/"+testTop, 0o755); err != nil {
		t.Fatal(err)
	}
	m, err := NewUnified(rootFS, UnifiedOptions{CgroupRoot: CgroupRoot{testTop}, Required: required})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.EnsureQoS(); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"", testTop, top, top + "/burstable", top + "/besteffort"} {
		on, err := rootFS.ReadFile(join(d, fileSubtreeControl))
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range required {
			if !slices.Contains(strings.Fields(string(on)), c) {
				t.Errorf("%s: subtree_control %q lacks %s", name(d), on, c)
			}
		}
	}
	huge := slices.Contains(required, "hugetlb")
	g := unifiedPod("nodelet-test-g", rr("100m", "64Mi", "100m", "64Mi"))
	var sizes []string
	if huge {
		files, _ := rootFS.Files(top + "/burstable")
		for _, f := range files {
			if _, ok := hugetlbFileSize(f); ok {
				sizes = append(sizes, f)
			}
		}
		if len(sizes) == 0 {
			t.Fatalf("hugetlb enabled but no hugetlb.<size>.max in %s/burstable", top)
		}
		if slices.Contains(sizes, "hugetlb.2MB.max") {
			g.Spec.Containers[0].Resources.Requests["hugepages-2Mi"] = resource.MustParse("4Mi")
			g.Spec.Containers[0].Resources.Limits["hugepages-2Mi"] = resource.MustParse("4Mi")
		}
	}
	b := unifiedPod("nodelet-test-b", rr("100m", "", "", ""))
	for _, p := range []*v1.Pod{g, b} {
		parent, err := m.EnsurePod(p)
		if err != nil {
			t.Fatal(err)
		}
		if want := "/" + top + "/" + map[types.UID]string{g.UID: "", b.UID: "burstable/"}[p.UID] + "pod" + string(p.UID); parent != want {
			t.Errorf("parent %q, want %q", parent, want)
		}
	}
	gDir, bDir := top+"/podnodelet-test-g", top+"/burstable/podnodelet-test-b"
	if huge {
		for _, f := range sizes {
			want := "0"
			if f == "hugetlb.2MB.max" {
				want = "4194304"
			}
			if got := read2(t, rootFS, join(gDir, f)); got != want {
				t.Errorf("kernel %s/%s = %s, want %s", gDir, f, got, want)
			}
			if got := read2(t, rootFS, join(top+"/burstable", f)); got != "max" {
				t.Errorf("kernel burstable %s = %s, want max", f, got)
			}
		}
	}
	t.Logf("hugetlb files checked in the kernel: %v", sizes)
	uids, err := m.Pods()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(uids, []types.UID{"nodelet-test-b", "nodelet-test-g"}) {
		t.Errorf("Pods = %v", uids)
	}

	// A process in a container cgroup under the pod, as runc puts one.
	sleep := exec.Command("sleep", "60")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	// Killed and reaped before the cleanup: a zombie keeps its cgroup busy.
	reaped := false
	defer func() {
		if !reaped {
			_ = sleep.Process.Kill()
			_ = sleep.Wait()
		}
	}()
	pid := []byte(strconv.Itoa(sleep.Process.Pid))
	if err := rootFS.WriteFile(join(bDir, fileProcs), pid); !errors.Is(err, syscall.EBUSY) {
		t.Errorf("kernel: joining the pod cgroup, which has controllers for children: %v, want EBUSY", err)
	}
	ctr := join(bDir, "ctr")
	if err := rootFS.Mkdir(ctr); err != nil {
		t.Fatal(err)
	}
	if err := rootFS.WriteFile(join(ctr, fileProcs), pid); err != nil {
		t.Fatal(err)
	}
	if err := rootFS.Rmdir(ctr); !errors.Is(err, syscall.EBUSY) {
		t.Errorf("kernel: rmdir of a cgroup with a process: %v, want EBUSY", err)
	}
	if err := m.RemovePod(b.UID, ""); !errors.Is(err, ErrPodCgroupBusy) {
		t.Fatalf("RemovePod with a process: %v", err)
	}
	err = sleep.Wait()
	reaped = true
	if err == nil || !strings.Contains(err.Error(), "killed") {
		t.Errorf("the leftover process was not killed through cgroup.kill: %v", err)
	} else {
		t.Logf("leftover process: %v", err)
	}
	// The kernel empties cgroup.procs once the process is reaped.
	if err := m.RemovePod(b.UID, ""); err != nil {
		t.Fatal(err)
	}
	if err := m.RemovePod(g.UID, ""); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{bDir, gDir, ctr} {
		if _, err := os.Stat(realUnified + "/" + d); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s left: %v", d, err)
		}
	}
	if uids, _ := m.Pods(); len(uids) != 0 {
		t.Errorf("Pods after removal: %v", uids)
	}
}
