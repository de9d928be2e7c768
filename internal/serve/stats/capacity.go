package stats

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// The node's size, as cAdvisor's machine info gives it to the kubelet for
// the Node's capacity, and its task count, as the kubelet's pid.available
// eviction signal reads it. They are read at each call: CPUs and huge
// pages can change while nodelet runs.

// NumCPU is the number of online logical CPUs: the cpuN lines of
// /proc/stat (cAdvisor's NumCores). Unlike runtime.NumCPU it does not
// depend on nodelet's own CPU affinity.
func (m *HostMachine) NumCPU() (int, error) {
	path := filepath.Join(m.ProcDir, "stat")
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("count CPUs: %w", err)
	}
	n := 0
	for line := range bytes.Lines(data) {
		rest, ok := bytes.CutPrefix(line, []byte("cpu"))
		if ok && len(rest) > 0 && rest[0] >= '0' && rest[0] <= '9' {
			n++
		}
	}
	if n == 0 {
		return 0, fmt.Errorf("count CPUs: no cpuN line in %s", path)
	}
	return n, nil
}

// MemoryCapacity is MemTotal of /proc/meminfo, in bytes (cAdvisor's
// MemoryCapacity).
func (m *HostMachine) MemoryCapacity() (uint64, error) {
	meminfo, err := readKeyValues(filepath.Join(m.ProcDir, "meminfo"))
	if err != nil {
		return 0, fmt.Errorf("memory capacity: %w", err)
	}
	total, ok := meminfo["MemTotal"]
	if !ok {
		return 0, errors.New("memory capacity: no MemTotal in meminfo")
	}
	return total * 1024, nil
}

// HugePages are the node's huge page pools, page size in bytes to the
// number of pages: nr_hugepages of each
// <SysDir>/kernel/mm/hugepages/hugepages-<size>kB. A kernel without huge
// pages (or an empty SysDir) has none.
func (m *HostMachine) HugePages() (map[uint64]uint64, error) {
	out := map[uint64]uint64{}
	if m.SysDir == "" {
		return out, nil
	}
	dir := filepath.Join(m.SysDir, "kernel", "mm", "hugepages")
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("huge pages: %w", err)
	}
	for _, e := range entries {
		kb, ok := strings.CutPrefix(e.Name(), "hugepages-")
		kb, ok2 := strings.CutSuffix(kb, "kB")
		if !ok || !ok2 {
			continue
		}
		size, err := strconv.ParseUint(kb, 10, 64)
		if err != nil {
			continue
		}
		pages, err := readUint(filepath.Join(dir, e.Name(), "nr_hugepages"))
		if err != nil {
			return nil, fmt.Errorf("huge pages: %w", err)
		}
		out[size*1024] = pages
	}
	return out, nil
}

// Processes is the number of tasks on the node (threads included: the
// total of the fourth field of /proc/loadavg) and the most there may be
// (the least of kernel.pid_max and kernel.threads-max), as the kubelet
// reads them for its pid.available eviction signal.
func (m *HostMachine) Processes() (running, limit uint64, err error) {
	path := filepath.Join(m.ProcDir, "loadavg")
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, fmt.Errorf("count processes: %w", err)
	}
	// 1.36 3.49 4.53 2/3518 3715089
	f := strings.Fields(string(data))
	if len(f) < 5 {
		return 0, 0, fmt.Errorf("count processes: unexpected %s: %q", path, data)
	}
	_, total, ok := strings.Cut(f[3], "/")
	if !ok {
		return 0, 0, fmt.Errorf("count processes: unexpected %s: %q", path, data)
	}
	if running, err = strconv.ParseUint(total, 10, 64); err != nil {
		return 0, 0, fmt.Errorf("count processes: parse %s: %w", path, err)
	}
	for _, name := range []string{"pid_max", "threads-max"} {
		v, err := readUint(filepath.Join(m.ProcDir, "sys", "kernel", name))
		if err != nil {
			return 0, 0, fmt.Errorf("process limit: %w", err)
		}
		if limit == 0 || v < limit {
			limit = v
		}
	}
	return running, limit, nil
}
