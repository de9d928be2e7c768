package stats

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nodelet/nodelet/internal/base/cgroupmount"
)

// userHZ is the unit of the times in /proc/stat (sysconf(_SC_CLK_TCK),
// 100 on every Linux architecture nodelet runs on).
const userHZ = 100

// HostMachine reads the facts of the node it runs on: /proc, the root of
// the cgroup hierarchy and statfs(2). The node's CPU and memory are the
// root cgroup's, as cAdvisor reports them to the kubelet, read from the
// cgroup v1 controllers or from the cgroup v2 root (see NodeCPUUsage and
// NodeMemory); where the cgroup files are missing it falls back to /proc.
type HostMachine struct {
	// ProcDir is where procfs is mounted (/proc).
	ProcDir string
	// CgroupDir is where the cgroup hierarchies are mounted
	// (/sys/fs/cgroup): the v1 controllers' directories, or the v2 root.
	CgroupDir string
	// SysDir is where sysfs is mounted (/sys); empty: no huge pages are
	// read.
	SysDir string
	// Cgroup is the hierarchy at CgroupDir; CgroupDetect (the zero
	// value) tells it from statfs(2) of CgroupDir, once.
	Cgroup CgroupVersion
	// PodCgroups are the QoS hierarchy's top cgroups, relative to each
	// hierarchy's root, under which the pod cgroups are looked for:
	// nodelet's own under its cgroupRoot ("nodelet-a/kubepods"), never
	// another instance's. Empty is the root cgroup's kubepods and
	// kubepods.slice.
	PodCgroups []string

	bootOnce sync.Once
	boot     time.Time
	bootErr  error

	cgroupOnce sync.Once
	cgroup     CgroupVersion
}

// CgroupVersion is a cgroup hierarchy.
type CgroupVersion int

const (
	// CgroupDetect tells the hierarchy from the filesystem at CgroupDir:
	// cgroup2 (CGROUP2_SUPER_MAGIC) is v2; anything else (the tmpfs
	// holding the v1 controllers, of a v1 or hybrid host) is v1.
	CgroupDetect CgroupVersion = iota
	// CgroupV1 has a directory per controller (cpuacct, memory).
	CgroupV1
	// CgroupV2 is the unified hierarchy: CgroupDir is its root cgroup.
	CgroupV2
)

// cgroupVersion is Cgroup, detected once when CgroupDetect.
func (m *HostMachine) cgroupVersion() CgroupVersion {
	if m.Cgroup != CgroupDetect {
		return m.Cgroup
	}
	m.cgroupOnce.Do(func() {
		m.cgroup = CgroupV1
		if cgroupmount.IsCgroup2(m.CgroupDir) {
			m.cgroup = CgroupV2
		}
	})
	return m.cgroup
}

// NewHostMachine returns the HostMachine of /proc, /sys and
// /sys/fs/cgroup.
func NewHostMachine() *HostMachine {
	return &HostMachine{ProcDir: "/proc", CgroupDir: "/sys/fs/cgroup", SysDir: "/sys"}
}

// BootTime is btime of /proc/stat (read once).
func (m *HostMachine) BootTime() (time.Time, error) {
	m.bootOnce.Do(func() {
		var btime uint64
		btime, m.bootErr = m.procStatField("btime")
		if m.bootErr == nil {
			m.boot = time.Unix(int64(btime), 0)
		}
	})
	return m.boot, m.bootErr
}

func (m *HostMachine) procStatField(name string) (uint64, error) {
	path := filepath.Join(m.ProcDir, "stat")
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("read boot time: %w", err)
	}
	for line := range bytes.Lines(data) {
		f := strings.Fields(string(line))
		if len(f) == 2 && f[0] == name {
			v, err := strconv.ParseUint(f[1], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("parse %s of %s: %w", name, path, err)
			}
			return v, nil
		}
	}
	return 0, fmt.Errorf("no %s in %s", name, path)
}

// NodeCPUUsage is the CPU time of the root cgroup, what cAdvisor reports
// for the node: cpuacct.usage of the v1 cpuacct controller, or usage_usec
// of the v2 root's cpu.stat. Without either it is the busy time of the
// "cpu" line of /proc/stat.
func (m *HostMachine) NodeCPUUsage() (uint64, error) {
	if m.cgroupVersion() == CgroupV2 {
		st, err := readKeyValues(filepath.Join(m.CgroupDir, "cpu.stat"))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return 0, fmt.Errorf("node cpu usage: %w", err)
		}
		if usec, ok := st["usage_usec"]; ok {
			return usec * uint64(time.Microsecond), nil
		}
		return m.procCPUUsage()
	}
	for _, dir := range []string{"cpuacct", "cpu,cpuacct"} {
		v, err := readUint(filepath.Join(m.CgroupDir, dir, "cpuacct.usage"))
		if err == nil {
			return v, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return 0, fmt.Errorf("node cpu usage: %w", err)
		}
	}
	return m.procCPUUsage()
}

// procCPUUsage is the busy time of the "cpu" line of /proc/stat.
func (m *HostMachine) procCPUUsage() (uint64, error) {
	path := filepath.Join(m.ProcDir, "stat")
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("node cpu usage: %w", err)
	}
	line, _, _ := bytes.Cut(data, []byte("\n"))
	f := strings.Fields(string(line))
	// cpu user nice system idle iowait irq softirq steal guest guest_nice;
	// guest time is already in user and nice.
	if len(f) < 9 || f[0] != "cpu" {
		return 0, fmt.Errorf("node cpu usage: unexpected first line of %s: %q", path, line)
	}
	var ticks uint64
	for _, i := range []int{1, 2, 3, 6, 7, 8} {
		v, err := strconv.ParseUint(f[i], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("node cpu usage: parse %s: %w", path, err)
		}
		ticks += v
	}
	return ticks * uint64(time.Second/userHZ), nil
}

// NodeMemory is the memory use of the root cgroup, as cAdvisor reports
// it for the node; available is MemTotal minus the working set, which is
// usage minus the inactive file pages.
//
// cgroup v1: usage is memory.usage_in_bytes of the memory controller's
// root, the inactive file pages, RSS and page faults are total_inactive_file,
// total_rss, total_pgfault and total_pgmajfault of its memory.stat.
//
// cgroup v2: the root cgroup has no memory.current; as runc does for
// cAdvisor, usage is anon + file of the root's memory.stat (memory.current
// where there is one: a cgroup namespace's root), the inactive file pages,
// RSS and page faults are its inactive_file, anon, pgfault and pgmajfault.
//
// Without those files (no memory controller at CgroupDir), usage is
// MemTotal minus MemFree, the inactive file pages Inactive(file), RSS
// AnonPages (all of /proc/meminfo) and page faults come from /proc/vmstat.
func (m *HostMachine) NodeMemory() (workingSet, usage, available, rss, pageFaults, majorPageFaults uint64, err error) {
	meminfo, err := readKeyValues(filepath.Join(m.ProcDir, "meminfo"))
	if err != nil {
		return 0, 0, 0, 0, 0, 0, fmt.Errorf("node memory: %w", err)
	}
	total, ok := meminfo["MemTotal"]
	if !ok {
		return 0, 0, 0, 0, 0, 0, errors.New("node memory: no MemTotal in meminfo")
	}
	total *= 1024

	var inactiveFile uint64
	var found bool
	if m.cgroupVersion() == CgroupV2 {
		found, usage, inactiveFile, rss, pageFaults, majorPageFaults, err = m.cgroup2Memory()
	} else {
		found, usage, inactiveFile, rss, pageFaults, majorPageFaults, err = m.cgroup1Memory()
	}
	if err != nil {
		return 0, 0, 0, 0, 0, 0, fmt.Errorf("node memory: %w", err)
	}
	if !found {
		free := meminfo["MemFree"] * 1024
		usage = total - min(total, free)
		inactiveFile, rss = meminfo["Inactive(file)"]*1024, meminfo["AnonPages"]*1024
		vm, err := readKeyValues(filepath.Join(m.ProcDir, "vmstat"))
		if err != nil {
			return 0, 0, 0, 0, 0, 0, fmt.Errorf("node memory: %w", err)
		}
		pageFaults, majorPageFaults = vm["pgfault"], vm["pgmajfault"]
	}
	workingSet = usage - min(usage, inactiveFile)
	available = total - min(total, workingSet)
	return workingSet, usage, available, rss, pageFaults, majorPageFaults, nil
}

// cgroup1Memory reads the v1 memory controller's root; found is false
// without one.
func (m *HostMachine) cgroup1Memory() (found bool, usage, inactiveFile, rss, pf, mpf uint64, err error) {
	memDir := filepath.Join(m.CgroupDir, "memory")
	usage, err = readUint(filepath.Join(memDir, "memory.usage_in_bytes"))
	if errors.Is(err, fs.ErrNotExist) {
		return false, 0, 0, 0, 0, 0, nil
	}
	if err != nil {
		return false, 0, 0, 0, 0, 0, err
	}
	st, err := readKeyValues(filepath.Join(memDir, "memory.stat"))
	if err != nil {
		return false, 0, 0, 0, 0, 0, err
	}
	return true, usage, st["total_inactive_file"], st["total_rss"], st["total_pgfault"], st["total_pgmajfault"], nil
}

// cgroup2Memory reads the v2 root's memory.stat; found is false without
// one (the memory controller is not on the v2 hierarchy).
func (m *HostMachine) cgroup2Memory() (found bool, usage, inactiveFile, rss, pf, mpf uint64, err error) {
	st, err := readKeyValues(filepath.Join(m.CgroupDir, "memory.stat"))
	if errors.Is(err, fs.ErrNotExist) {
		return false, 0, 0, 0, 0, 0, nil
	}
	if err != nil {
		return false, 0, 0, 0, 0, 0, err
	}
	usage, err = readUint(filepath.Join(m.CgroupDir, "memory.current"))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		usage = st["anon"] + st["file"]
	case err != nil:
		return false, 0, 0, 0, 0, 0, err
	}
	return true, usage, st["inactive_file"], st["anon"], st["pgfault"], st["pgmajfault"], nil
}

func readUint(path string) (uint64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse %s: %w", path, err)
	}
	return v, nil
}

// readKeyValues reads "key value [unit]" lines (memory.stat, vmstat) and
// "Key: value kB" ones (meminfo); units are left to the caller.
func readKeyValues(path string) (map[string]uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := make(map[string]uint64, 64)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			continue
		}
		v, err := strconv.ParseUint(fields[1], 10, 64)
		if err != nil {
			continue
		}
		out[strings.TrimSuffix(fields[0], ":")] = v
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return out, nil
}

var _ Machine = (*HostMachine)(nil)
