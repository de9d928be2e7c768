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
)

// userHZ is the unit of the times in /proc/stat (sysconf(_SC_CLK_TCK),
// 100 on every Linux architecture nodelet runs on).
const userHZ = 100

// HostMachine reads the facts of the node it runs on: /proc, the root of
// the cgroup v1 hierarchy and statfs(2). Where the cgroup v1 files are
// missing (cgroup v2 hosts) it falls back to /proc alone.
type HostMachine struct {
	// ProcDir is where procfs is mounted (/proc).
	ProcDir string
	// CgroupDir is where the cgroup hierarchies are mounted
	// (/sys/fs/cgroup).
	CgroupDir string
	// SysDir is where sysfs is mounted (/sys); empty: no huge pages are
	// read.
	SysDir string

	bootOnce sync.Once
	boot     time.Time
	bootErr  error
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

// NodeCPUUsage is cpuacct.usage of the root cgroup (what cAdvisor reports
// for the node), or the busy time of the "cpu" line of /proc/stat without
// a cgroup v1 cpuacct hierarchy.
func (m *HostMachine) NodeCPUUsage() (uint64, error) {
	for _, dir := range []string{"cpuacct", "cpu,cpuacct"} {
		v, err := readUint(filepath.Join(m.CgroupDir, dir, "cpuacct.usage"))
		if err == nil {
			return v, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return 0, fmt.Errorf("node cpu usage: %w", err)
		}
	}
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

// NodeMemory is the memory use of the root cgroup v1, as cAdvisor reports
// it for the node: usage is memory.usage_in_bytes, the working set is
// usage minus total_inactive_file of memory.stat, RSS and page faults are
// its total_rss, total_pgfault and total_pgmajfault; available is MemTotal
// minus the working set. Without the cgroup v1 memory hierarchy, usage is
// MemTotal minus MemFree, the working set usage minus Inactive(file), RSS
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
	memDir := filepath.Join(m.CgroupDir, "memory")
	usage, err = readUint(filepath.Join(memDir, "memory.usage_in_bytes"))
	switch {
	case err == nil:
		st, err := readKeyValues(filepath.Join(memDir, "memory.stat"))
		if err != nil {
			return 0, 0, 0, 0, 0, 0, fmt.Errorf("node memory: %w", err)
		}
		inactiveFile, rss = st["total_inactive_file"], st["total_rss"]
		pageFaults, majorPageFaults = st["total_pgfault"], st["total_pgmajfault"]
	case errors.Is(err, fs.ErrNotExist):
		free := meminfo["MemFree"] * 1024
		usage = total - min(total, free)
		inactiveFile, rss = meminfo["Inactive(file)"]*1024, meminfo["AnonPages"]*1024
		vm, err := readKeyValues(filepath.Join(m.ProcDir, "vmstat"))
		if err != nil {
			return 0, 0, 0, 0, 0, 0, fmt.Errorf("node memory: %w", err)
		}
		pageFaults, majorPageFaults = vm["pgfault"], vm["pgmajfault"]
	default:
		return 0, 0, 0, 0, 0, 0, fmt.Errorf("node memory: %w", err)
	}
	workingSet = usage - min(usage, inactiveFile)
	available = total - min(total, workingSet)
	return workingSet, usage, available, rss, pageFaults, majorPageFaults, nil
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
