package stats

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

func writeFiles(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		path := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

const (
	fakeProcStat = "cpu  100 20 30 400 50 6 7 8 9 10\ncpu0 1 2 3 4 5 6 7 8 9 10\nbtime 1700000000\nprocesses 42\n"
	fakeMeminfo  = "MemTotal:       16000000 kB\nMemFree:         4000000 kB\nInactive(file):  2000000 kB\nAnonPages:       3000000 kB\n"
)

func TestHostMachineCgroupV1(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"proc/stat":                           fakeProcStat,
		"proc/meminfo":                        fakeMeminfo,
		"cgroup/cpuacct/cpuacct.usage":        "123456789\n",
		"cgroup/memory/memory.usage_in_bytes": "10000\n",
		"cgroup/memory/memory.stat":           "cache 1\nrss 2\ntotal_rss 3000\ntotal_inactive_file 4000\ntotal_pgfault 77\ntotal_pgmajfault 7\n",
	})
	m := &HostMachine{ProcDir: filepath.Join(dir, "proc"), CgroupDir: filepath.Join(dir, "cgroup")}
	boot, err := m.BootTime()
	if err != nil || !boot.Equal(time.Unix(1700000000, 0)) {
		t.Errorf("BootTime = %v, %v", boot, err)
	}
	cpu, err := m.NodeCPUUsage()
	if err != nil || cpu != 123456789 {
		t.Errorf("NodeCPUUsage = %d, %v", cpu, err)
	}
	ws, usage, avail, rss, pf, mpf, err := m.NodeMemory()
	if err != nil {
		t.Fatal(err)
	}
	if ws != 6000 || usage != 10000 || avail != 16000000*1024-6000 || rss != 3000 || pf != 77 || mpf != 7 {
		t.Errorf("NodeMemory = ws %d usage %d avail %d rss %d pf %d mpf %d", ws, usage, avail, rss, pf, mpf)
	}
}

func TestHostMachineProcFallback(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"proc/stat":    fakeProcStat,
		"proc/meminfo": fakeMeminfo,
		"proc/vmstat":  "nr_free_pages 1\npgfault 555\npgmajfault 5\n",
	})
	m := &HostMachine{ProcDir: filepath.Join(dir, "proc"), CgroupDir: filepath.Join(dir, "cgroup")}
	cpu, err := m.NodeCPUUsage()
	// user+nice+system+irq+softirq+steal = 100+20+30+6+7+8 ticks of 10 ms.
	if err != nil || cpu != 171*uint64(10*time.Millisecond) {
		t.Errorf("NodeCPUUsage = %d, %v", cpu, err)
	}
	ws, usage, avail, rss, pf, mpf, err := m.NodeMemory()
	if err != nil {
		t.Fatal(err)
	}
	const k = 1024
	if usage != 12000000*k || ws != 10000000*k || avail != 6000000*k || rss != 3000000*k || pf != 555 || mpf != 5 {
		t.Errorf("NodeMemory = ws %d usage %d avail %d rss %d pf %d mpf %d", ws, usage, avail, rss, pf, mpf)
	}
}

// TestHostMachineReal reads the machine the test runs on.
func TestHostMachineReal(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("HostMachine reads Linux interfaces")
	}
	m := NewHostMachine()
	boot, err := m.BootTime()
	if err != nil {
		t.Fatal(err)
	}
	if boot.Before(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)) || boot.After(time.Now()) {
		t.Errorf("boot time %v", boot)
	}
	cpu1, err := m.NodeCPUUsage()
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(50 * time.Millisecond)
	for time.Now().Before(deadline) { // burn some CPU
	}
	cpu2, err := m.NodeCPUUsage()
	if err != nil {
		t.Fatal(err)
	}
	if cpu1 == 0 || cpu2 <= cpu1 {
		t.Errorf("node cpu usage %d then %d", cpu1, cpu2)
	}
	ws, usage, avail, _, pf, _, err := m.NodeMemory()
	if err != nil {
		t.Fatal(err)
	}
	if ws == 0 || ws > usage || avail == 0 || pf == 0 {
		t.Errorf("NodeMemory: working set %d usage %d available %d page faults %d", ws, usage, avail, pf)
	}

	dir := t.TempDir()
	capacity, available, used, inodes, inodesFree, err := m.FsStats(dir)
	if err != nil {
		t.Fatal(err)
	}
	if capacity == 0 || available > capacity || used > capacity || inodesFree > inodes {
		t.Errorf("FsStats = %d %d %d %d %d", capacity, available, used, inodes, inodesFree)
	}
	if _, _, _, _, _, err := m.FsStats(filepath.Join(dir, "missing")); err == nil {
		t.Error("FsStats of a missing path: no error")
	}

	// 3 files (one hard-linked twice), 1 subdirectory and the root.
	writeFiles(t, dir, map[string]string{"a": string(make([]byte, 10000)), "sub/b": "x", "sub/c": "y"})
	if err := os.Link(filepath.Join(dir, "a"), filepath.Join(dir, "sub", "a-link")); err != nil {
		t.Fatal(err)
	}
	du, files, err := m.DiskUsage(dir)
	if err != nil {
		t.Fatal(err)
	}
	if files != 5 {
		t.Errorf("inodes used = %d, want 5", files)
	}
	if du < 10000 {
		t.Errorf("disk usage = %d, want at least 10000", du)
	}
	if _, _, err := m.DiskUsage(filepath.Join(dir, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("DiskUsage of a missing path: %v", err)
	}
	if tmp, err := m.IsTmpfs("/dev/shm"); err == nil && !tmp {
		t.Log("/dev/shm is not a tmpfs here")
	}
	if tmp, err := m.IsTmpfs("/proc"); err != nil || tmp {
		t.Errorf("IsTmpfs(/proc) = %v, %v", tmp, err)
	}
}

func TestHostMachineCapacity(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"proc/stat":                   "cpu  1 2 3 4 5 6 7 8 9 10\ncpu0 1 2 3 4 5 6 7 8 9 10\ncpu3 1 2 3 4 5 6 7 8 9 10\nintr 1\nbtime 1700000000\n",
		"proc/meminfo":                fakeMeminfo,
		"proc/loadavg":                "1.36 3.49 4.53 2/3518 3715089\n",
		"proc/sys/kernel/pid_max":     "4194304\n",
		"proc/sys/kernel/threads-max": "126423\n",
		"sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages":    "4\n",
		"sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages": "0\n",
	})
	m := &HostMachine{ProcDir: filepath.Join(dir, "proc"), SysDir: filepath.Join(dir, "sys")}
	if n, err := m.NumCPU(); err != nil || n != 2 {
		t.Errorf("NumCPU = %d, %v; want 2 (cpu0 and cpu3)", n, err)
	}
	if b, err := m.MemoryCapacity(); err != nil || b != 16000000*1024 {
		t.Errorf("MemoryCapacity = %d, %v", b, err)
	}
	hp, err := m.HugePages()
	if err != nil || len(hp) != 2 || hp[2<<20] != 4 || hp[1<<30] != 0 {
		t.Errorf("HugePages = %v, %v", hp, err)
	}
	running, limit, err := m.Processes()
	if err != nil || running != 3518 || limit != 126423 {
		t.Errorf("Processes = %d, %d, %v", running, limit, err)
	}

	none := &HostMachine{ProcDir: filepath.Join(dir, "proc"), SysDir: filepath.Join(dir, "missing")}
	if hp, err := none.HugePages(); err != nil || len(hp) != 0 {
		t.Errorf("HugePages without sysfs = %v, %v", hp, err)
	}
	if _, err := (&HostMachine{ProcDir: filepath.Join(dir, "missing")}).NumCPU(); err == nil {
		t.Error("NumCPU without /proc: no error")
	}
}

func TestHostMachineCapacityReal(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("HostMachine reads Linux interfaces")
	}
	m := NewHostMachine()
	if n, err := m.NumCPU(); err != nil || n < 1 {
		t.Errorf("NumCPU = %d, %v", n, err)
	}
	if b, err := m.MemoryCapacity(); err != nil || b < 64<<20 {
		t.Errorf("MemoryCapacity = %d, %v", b, err)
	}
	if _, err := m.HugePages(); err != nil {
		t.Errorf("HugePages: %v", err)
	}
	if running, limit, err := m.Processes(); err != nil || running == 0 || limit < running {
		t.Errorf("Processes = %d, %d, %v", running, limit, err)
	}
}

// A directory of a tmpfs is not a tmpfs of its own: a disk emptyDir of a
// root directory on a tmpfs counts as ephemeral storage.
func TestIsTmpfsOnlyAtItsMount(t *testing.T) {
	m := NewHostMachine()
	if tmp, err := m.IsTmpfs("/dev/shm"); err != nil || !tmp {
		t.Skipf("/dev/shm is not a tmpfs here (%v, %v)", tmp, err)
	}
	dir, err := os.MkdirTemp("/dev/shm", "istmpfs")
	if err != nil {
		t.Skip(err)
	}
	defer os.RemoveAll(dir)
	if tmp, err := m.IsTmpfs(dir); err != nil || tmp {
		t.Errorf("IsTmpfs(%s) = %v, %v; want false: it is a directory of /dev/shm", dir, tmp, err)
	}
}
