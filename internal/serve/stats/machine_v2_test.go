package stats

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/nodelet/nodelet/internal/base/cgroupmount"
)

// kernelV2Root is a cgroup v2 root directory as kernel 6.x lays it out
// with the cpu and memory controllers on the unified hierarchy: the root
// has cpu.stat and memory.stat but no memory.current, memory.max or
// cpu.max (those are in the children only), and a child holding pods.
func kernelV2Root(t *testing.T, dir string) {
	t.Helper()
	writeFiles(t, dir, map[string]string{
		"cgroup.controllers":     "cpuset cpu io memory hugetlb pids rdma misc\n",
		"cgroup.subtree_control": "cpuset cpu io memory pids\n",
		"cgroup.procs":           "1\n",
		"cgroup.max.depth":       "max\n",
		"cgroup.stat":            "nr_descendants 12\nnr_dying_descendants 0\n",
		"cpu.stat": "usage_usec 22928530656\nuser_usec 15963091429\nsystem_usec 6965439226\nnice_usec 92888057\n" +
			"core_sched.force_idle_usec 0\n",
		"cpu.pressure": "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
		"memory.stat": "anon 3000000000\nfile 5000000000\nkernel 400000000\nkernel_stack 20000000\npagetables 30000000\n" +
			"sec_pagetables 0\npercpu 5000000\nsock 1000000\nvmalloc 2000000\nshmem 100000000\nzswap 0\nzswapped 0\n" +
			"file_mapped 600000000\nfile_dirty 1000000\nfile_writeback 0\nswapcached 0\nanon_thp 0\nfile_thp 0\nshmem_thp 0\n" +
			"inactive_anon 200000000\nactive_anon 2800000000\ninactive_file 2000000000\nactive_file 3000000000\nunevictable 0\n" +
			"slab_reclaimable 150000000\nslab_unreclaimable 50000000\nslab 200000000\nworkingset_refault_anon 0\n" +
			"workingset_refault_file 1234\nworkingset_activate_anon 0\nworkingset_activate_file 99\n" +
			"workingset_restore_anon 0\nworkingset_restore_file 5\nworkingset_nodereclaim 0\npgscan 100\npgsteal 90\n" +
			"pgscan_kswapd 100\npgscan_direct 0\npgsteal_kswapd 90\npgsteal_direct 0\npgfault 987654\npgmajfault 321\n" +
			"pgrefill 10\npgactivate 20\npgdeactivate 30\npglazyfree 0\npglazyfreed 0\nthp_fault_alloc 0\nthp_collapse_alloc 0\n",
		"memory.pressure":  "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
		"memory.numa_stat": "anon N0=3000000000\nfile N0=5000000000\n",
		"io.stat":          "",
		// A child: its own memory.current must not be taken for the node's.
		"kubepods/cgroup.controllers": "cpu io memory pids\n",
		"kubepods/memory.current":     "1234\n",
		"kubepods/memory.stat":        "anon 1\nfile 2\ninactive_file 1\n",
		"kubepods/cpu.stat":           "usage_usec 5\n",
	})
}

func TestHostMachineCgroupV2(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"proc/stat": fakeProcStat, "proc/meminfo": fakeMeminfo})
	kernelV2Root(t, filepath.Join(dir, "cgroup"))
	m := &HostMachine{ProcDir: filepath.Join(dir, "proc"), CgroupDir: filepath.Join(dir, "cgroup"), Cgroup: CgroupV2}

	cpu, err := m.NodeCPUUsage()
	if err != nil || cpu != 22928530656*1000 {
		t.Errorf("NodeCPUUsage = %d, %v; want usage_usec in ns", cpu, err)
	}
	ws, usage, avail, rss, pf, mpf, err := m.NodeMemory()
	if err != nil {
		t.Fatal(err)
	}
	// usage = anon + file; working set = usage - inactive_file.
	const wantUsage, wantWS = 8000000000, 6000000000
	if usage != wantUsage || ws != wantWS || avail != 16000000*1024-wantWS || rss != 3000000000 || pf != 987654 || mpf != 321 {
		t.Errorf("NodeMemory = ws %d usage %d avail %d rss %d pf %d mpf %d", ws, usage, avail, rss, pf, mpf)
	}

	// A cgroup namespace's root has memory.current: it is the usage.
	writeFiles(t, dir, map[string]string{"cgroup/memory.current": "7000000000\n"})
	if ws, usage, _, _, _, _, err := m.NodeMemory(); err != nil || usage != 7000000000 || ws != 5000000000 {
		t.Errorf("with memory.current: ws %d usage %d, %v", ws, usage, err)
	}
}

// The cgroup v2 root of a host whose memory controller is elsewhere (a
// hybrid host's unified mount) or absent: memory from /proc, CPU from
// cpu.stat, and from /proc/stat without it.
func TestHostMachineCgroupV2WithoutControllers(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"proc/stat":                 fakeProcStat,
		"proc/meminfo":              fakeMeminfo,
		"proc/vmstat":               "pgfault 555\npgmajfault 5\n",
		"cgroup/cgroup.controllers": "hugetlb\n",
		"cgroup/cpu.stat":           "usage_usec 1000\nuser_usec 600\nsystem_usec 400\n",
		"cgroup/memory.pressure":    "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
	})
	m := &HostMachine{ProcDir: filepath.Join(dir, "proc"), CgroupDir: filepath.Join(dir, "cgroup"), Cgroup: CgroupV2}
	if cpu, err := m.NodeCPUUsage(); err != nil || cpu != 1000*1000 {
		t.Errorf("NodeCPUUsage = %d, %v", cpu, err)
	}
	const k = 1024
	if ws, usage, _, rss, pf, _, err := m.NodeMemory(); err != nil || usage != 12000000*k || ws != 10000000*k || rss != 3000000*k || pf != 555 {
		t.Errorf("NodeMemory = ws %d usage %d rss %d pf %d, %v", ws, usage, rss, pf, err)
	}
	if err := os.Remove(filepath.Join(dir, "cgroup/cpu.stat")); err != nil {
		t.Fatal(err)
	}
	if cpu, err := m.NodeCPUUsage(); err != nil || cpu != 171*uint64(10*time.Millisecond) {
		t.Errorf("NodeCPUUsage without cpu.stat = %d, %v; want /proc/stat's", cpu, err)
	}
	// A cpu.stat that cannot be read is an error, not a silent fallback.
	writeFiles(t, dir, map[string]string{"cgroup/cpu.stat/x": ""})
	if _, err := m.NodeCPUUsage(); err == nil {
		t.Error("NodeCPUUsage with an unreadable cpu.stat: no error")
	}
}

// A v1 host's cgroup directory is not detected as v2, even with v2-like
// files in it: the detection is the filesystem's, not the files'.
func TestCgroupDetection(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("statfs of Linux")
	}
	dir := t.TempDir()
	kernelV2Root(t, dir)
	if v := (&HostMachine{CgroupDir: dir}).cgroupVersion(); v != CgroupV1 {
		t.Errorf("a temporary directory detected as %d, want v1", v)
	}
	if v := (&HostMachine{CgroupDir: filepath.Join(dir, "missing")}).cgroupVersion(); v != CgroupV1 {
		t.Errorf("a missing directory detected as %d, want v1", v)
	}
	if v := (&HostMachine{CgroupDir: dir, Cgroup: CgroupV2}).cgroupVersion(); v != CgroupV2 {
		t.Errorf("an explicit v2 detected as %d", v)
	}
}

// The real cgroup2 mount of this host (the unified hierarchy of a hybrid
// host at /sys/fs/cgroup/unified, or /sys/fs/cgroup of a v2 host): it is
// detected as v2 and the node's CPU is its root cpu.stat's usage_usec.
func TestHostMachineRealCgroupV2(t *testing.T) {
	var root string
	for _, dir := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		if cgroupmount.IsCgroup2(dir) {
			root = dir
			break
		}
	}
	if root == "" {
		t.Skip("no cgroup2 mount at /sys/fs/cgroup or /sys/fs/cgroup/unified")
	}
	usec := func() uint64 {
		t.Helper()
		st, err := readKeyValues(filepath.Join(root, "cpu.stat"))
		if errors.Is(err, fs.ErrNotExist) {
			t.Skipf("%s has no cpu.stat", root)
		}
		if err != nil {
			t.Fatal(err)
		}
		v, ok := st["usage_usec"]
		if !ok {
			t.Skipf("%s/cpu.stat has no usage_usec", root)
		}
		return v
	}
	m := &HostMachine{ProcDir: "/proc", CgroupDir: root}
	if v := m.cgroupVersion(); v != CgroupV2 {
		t.Fatalf("%s detected as %d, want v2", root, v)
	}
	before := usec()
	cpu, err := m.NodeCPUUsage()
	after := usec()
	if err != nil || cpu < before*1000 || cpu > after*1000 {
		t.Errorf("NodeCPUUsage = %d, %v; want usage_usec between %d and %d, in ns", cpu, err, before, after)
	}
	ws, usage, avail, _, _, _, err := m.NodeMemory()
	if err != nil || usage == 0 || ws > usage || avail == 0 {
		t.Errorf("NodeMemory = ws %d usage %d avail %d, %v", ws, usage, avail, err)
	}
	t.Logf("%s: cpu %d ns, memory usage %d, working set %d", root, cpu, usage, ws)
}
