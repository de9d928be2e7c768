package stats

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/nodelet/nodelet/internal/base/bounded"
)

// What one container's cgroup and processes hold, as read for
// /metrics/cadvisor. Every reading is bounded: a file is read up to
// maxCgroupFile bytes, at most maxProcs processes and maxFds descriptors
// per container are looked at.
const (
	maxCgroupFile = 64 << 10
	maxProcs      = 4096
	maxFds        = 16384
)

// cgroupStats is one cgroup's readings, in cAdvisor's units: times in
// nanoseconds, memory in bytes. A reading that is not there is zero.
type cgroupStats struct {
	hasCPU, hasMemory, hasPids bool

	cpuTotal, cpuUser, cpuSystem             uint64
	cfsPeriods, cfsThrottled, cfsThrottledNs uint64
	cfsBursts, cfsBurstNs                    uint64
	cpuPeriod, cpuShares                     uint64
	cpuQuota                                 int64

	memUsage, memMaxUsage, memFailcnt, memKernel          uint64
	memCache, memRSS, memMappedFile, memSwap              uint64
	memWorkingSet, memActiveFile, memInactiveFile         uint64
	memPgfault, memPgmajfault                             uint64
	memDirty, memWriteback                                uint64
	memPgscan, memPgsteal, memRefaultFile, memRefaultAnon uint64
	memEventsHigh, memEventsMax, oomKills                 uint64
	memLimit, memReservation, memSwapLimit                uint64

	// io is per device: bytes and operations read and written.
	io []deviceIO

	threads, threadsMax uint64
}

// deviceIO is one block device's I/O of a cgroup.
type deviceIO struct {
	major, minor                             uint64
	readBytes, writeBytes, readOps, writeOps uint64
	// ops holds the blkio operations as cgroup v1 names them (Read,
	// Write, Sync, Async, Discard, Total), bytes.
	ops map[string]uint64
}

// readBounded reads path, whole: one of more than maxCgroupFile bytes is
// an error naming it, never a prefix parsed as if it were all.
func readBounded(path string) ([]byte, error) { return bounded.ReadFile(path, maxCgroupFile) }

// readUintFile reads a file holding one number ("max" is MaxUint64).
func readUintFile(path string) (uint64, bool) {
	data, err := readBounded(path)
	if err != nil {
		return 0, false
	}
	s := strings.TrimSpace(string(data))
	if s == "max" {
		return math.MaxUint64, true
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		// cpu.cfs_quota_us is -1 when unlimited.
		if n, err := strconv.ParseInt(s, 10, 64); err == nil && n < 0 {
			return 0, true
		}
		return 0, false
	}
	return v, true
}

// readFlatKeyed reads "key value" lines (memory.stat, cpu.stat,
// memory.events, cpuacct.stat).
func readFlatKeyed(path string) (map[string]uint64, bool) {
	data, err := readBounded(path)
	if err != nil {
		return nil, false
	}
	out := make(map[string]uint64, 48)
	for line := range bytes.Lines(data) {
		k, v, ok := bytes.Cut(bytes.TrimSpace(line), []byte{' '})
		if !ok {
			continue
		}
		n, err := strconv.ParseUint(string(bytes.TrimSpace(v)), 10, 64)
		if err != nil {
			continue
		}
		out[string(k)] = n
	}
	return out, true
}

// readCgroupV1 reads the container's cgroup rel under the v1 controllers
// mounted in root.
func readCgroupV1(root, rel string) cgroupStats {
	var s cgroupStats
	cpuacct := filepath.Join(root, "cpuacct", rel)
	if v, ok := readUintFile(filepath.Join(cpuacct, "cpuacct.usage")); ok {
		s.hasCPU = true
		s.cpuTotal = v
		if st, ok := readFlatKeyed(filepath.Join(cpuacct, "cpuacct.stat")); ok {
			s.cpuUser = st["user"] * (1e9 / userHZ)
			s.cpuSystem = st["system"] * (1e9 / userHZ)
		}
	}
	cpu := filepath.Join(root, "cpu", rel)
	if st, ok := readFlatKeyed(filepath.Join(cpu, "cpu.stat")); ok {
		s.cfsPeriods, s.cfsThrottled, s.cfsThrottledNs = st["nr_periods"], st["nr_throttled"], st["throttled_time"]
		s.cfsBursts, s.cfsBurstNs = st["nr_bursts"], st["burst_time"]
	}
	s.cpuPeriod, _ = readUintFile(filepath.Join(cpu, "cpu.cfs_period_us"))
	if q, ok := readUintFile(filepath.Join(cpu, "cpu.cfs_quota_us")); ok {
		s.cpuQuota = int64(min(q, math.MaxInt64))
	}
	s.cpuShares, _ = readUintFile(filepath.Join(cpu, "cpu.shares"))

	mem := filepath.Join(root, "memory", rel)
	if v, ok := readUintFile(filepath.Join(mem, "memory.usage_in_bytes")); ok {
		s.hasMemory = true
		s.memUsage = v
		s.memMaxUsage, _ = readUintFile(filepath.Join(mem, "memory.max_usage_in_bytes"))
		s.memFailcnt, _ = readUintFile(filepath.Join(mem, "memory.failcnt"))
		s.memKernel, _ = readUintFile(filepath.Join(mem, "memory.kmem.usage_in_bytes"))
		s.memLimit, _ = readUintFile(filepath.Join(mem, "memory.limit_in_bytes"))
		s.memReservation, _ = readUintFile(filepath.Join(mem, "memory.soft_limit_in_bytes"))
		s.memSwapLimit, _ = readUintFile(filepath.Join(mem, "memory.memsw.limit_in_bytes"))
		if st, ok := readFlatKeyed(filepath.Join(mem, "memory.stat")); ok {
			s.memCache, s.memRSS, s.memMappedFile, s.memSwap = st["total_cache"], st["total_rss"], st["total_mapped_file"], st["total_swap"]
			s.memActiveFile, s.memInactiveFile = st["total_active_file"], st["total_inactive_file"]
			s.memPgfault, s.memPgmajfault = st["pgfault"], st["pgmajfault"]
			s.memDirty, s.memWriteback = st["total_dirty"], st["total_writeback"]
		}
		if st, ok := readFlatKeyed(filepath.Join(mem, "memory.oom_control")); ok {
			s.oomKills = st["oom_kill"]
		}
		s.memWorkingSet = workingSet(s.memUsage, s.memInactiveFile)
	}

	blkio := filepath.Join(root, "blkio", rel)
	s.io = readBlkioV1(blkio)

	pids := filepath.Join(root, "pids", rel)
	if v, ok := readUintFile(filepath.Join(pids, "pids.current")); ok {
		s.hasPids = true
		s.threads = v
		s.threadsMax, _ = readUintFile(filepath.Join(pids, "pids.max"))
	}
	return s
}

// readBlkioV1 reads the blkio controller's counters as runc does for
// cAdvisor: the CFQ/BFQ files where the scheduler fills them, else the
// throttling layer's (what blk-mq kernels have).
func readBlkioV1(dir string) []deviceIO {
	for _, prefix := range []string{"blkio.bfq.", "blkio.", "blkio.throttle."} {
		bytesFile, opsFile := prefix+"io_service_bytes_recursive", prefix+"io_serviced_recursive"
		byDev := map[[2]uint64]*deviceIO{}
		var order []*deviceIO
		parseBlkio(filepath.Join(dir, bytesFile), func(maj, mnr uint64, op string, v uint64) {
			d := byDev[[2]uint64{maj, mnr}]
			if d == nil {
				d = &deviceIO{major: maj, minor: mnr, ops: map[string]uint64{}}
				byDev[[2]uint64{maj, mnr}] = d
				order = append(order, d)
			}
			d.ops[op] = v
			switch op {
			case "Read":
				d.readBytes = v
			case "Write":
				d.writeBytes = v
			}
		})
		if len(order) == 0 {
			continue
		}
		parseBlkio(filepath.Join(dir, opsFile), func(maj, mnr uint64, op string, v uint64) {
			d := byDev[[2]uint64{maj, mnr}]
			if d == nil {
				return
			}
			switch op {
			case "Read":
				d.readOps = v
			case "Write":
				d.writeOps = v
			}
		})
		out := make([]deviceIO, len(order))
		for i, d := range order {
			out[i] = *d
		}
		return out
	}
	return nil
}

// parseBlkio calls f for every "MAJ:MIN Op value" line of a blkio file.
func parseBlkio(path string, f func(maj, mnr uint64, op string, v uint64)) {
	data, err := readBounded(path)
	if err != nil {
		return
	}
	for line := range strings.Lines(string(data)) {
		fields := strings.Fields(line)
		if len(fields) != 3 {
			continue
		}
		maj, mnr, ok := parseMajMin(fields[0])
		v, err := strconv.ParseUint(fields[2], 10, 64)
		if !ok || err != nil {
			continue
		}
		f(maj, mnr, fields[1], v)
	}
}

func parseMajMin(s string) (uint64, uint64, bool) {
	a, b, ok := strings.Cut(s, ":")
	if !ok {
		return 0, 0, false
	}
	maj, err1 := strconv.ParseUint(a, 10, 64)
	mnr, err2 := strconv.ParseUint(b, 10, 64)
	return maj, mnr, err1 == nil && err2 == nil
}

// readCgroupV2 reads the container's cgroup rel under the unified
// hierarchy mounted at root.
func readCgroupV2(root, rel string) cgroupStats {
	var s cgroupStats
	dir := filepath.Join(root, rel)
	if st, ok := readFlatKeyed(filepath.Join(dir, "cpu.stat")); ok {
		s.hasCPU = true
		s.cpuTotal, s.cpuUser, s.cpuSystem = st["usage_usec"]*1000, st["user_usec"]*1000, st["system_usec"]*1000
		s.cfsPeriods, s.cfsThrottled, s.cfsThrottledNs = st["nr_periods"], st["nr_throttled"], st["throttled_usec"]*1000
		s.cfsBursts, s.cfsBurstNs = st["nr_bursts"], st["burst_usec"]*1000
	}
	if data, err := readBounded(filepath.Join(dir, "cpu.max")); err == nil {
		quota, period, _ := strings.Cut(strings.TrimSpace(string(data)), " ")
		s.cpuPeriod, _ = strconv.ParseUint(period, 10, 64)
		if quota != "max" {
			s.cpuQuota, _ = strconv.ParseInt(quota, 10, 64)
		}
	}
	if w, ok := readUintFile(filepath.Join(dir, "cpu.weight")); ok && w >= 1 && w <= 10000 {
		// cAdvisor's conversion of cpu.weight [1, 10000] back to shares
		// [2, 262144].
		s.cpuShares = 2 + ((w-1)*262142)/9999
	}

	if v, ok := readUintFile(filepath.Join(dir, "memory.current")); ok {
		s.hasMemory = true
		s.memUsage = v
		s.memMaxUsage, _ = readUintFile(filepath.Join(dir, "memory.peak"))
		s.memSwap, _ = readUintFile(filepath.Join(dir, "memory.swap.current"))
		s.memLimit, _ = readUintFile(filepath.Join(dir, "memory.max"))
		s.memReservation, _ = readUintFile(filepath.Join(dir, "memory.min"))
		s.memSwapLimit, _ = readUintFile(filepath.Join(dir, "memory.swap.max"))
		if st, ok := readFlatKeyed(filepath.Join(dir, "memory.stat")); ok {
			s.memCache, s.memRSS, s.memMappedFile = st["file"], st["anon"], st["file_mapped"]
			s.memActiveFile, s.memInactiveFile = st["active_file"], st["inactive_file"]
			s.memPgfault, s.memPgmajfault = st["pgfault"], st["pgmajfault"]
			s.memDirty, s.memWriteback = st["file_dirty"], st["file_writeback"]
			s.memPgscan, s.memPgsteal = st["pgscan"], st["pgsteal"]
			s.memRefaultFile, s.memRefaultAnon = st["workingset_refault_file"], st["workingset_refault_anon"]
			s.memKernel = st["kernel"]
			if _, ok := st["kernel"]; !ok {
				s.memKernel = st["kernel_stack"] + st["pagetables"] + st["slab"] + st["sock"] + st["percpu"]
			}
		}
		if ev, ok := readFlatKeyed(filepath.Join(dir, "memory.events")); ok {
			// No failcnt on v2: runc leaves it zero for cAdvisor.
			s.memEventsHigh, s.memEventsMax, s.oomKills = ev["high"], ev["max"], ev["oom_kill"]
		}
		s.memWorkingSet = workingSet(s.memUsage, s.memInactiveFile)
	}

	s.io = readIOStatV2(filepath.Join(dir, "io.stat"))

	if v, ok := readUintFile(filepath.Join(dir, "pids.current")); ok {
		s.hasPids = true
		s.threads = v
		s.threadsMax, _ = readUintFile(filepath.Join(dir, "pids.max"))
	}
	return s
}

// readIOStatV2 reads io.stat lines "MAJ:MIN rbytes=.. wbytes=.. rios=..
// wios=.. dbytes=.. dios=..". The blkio operations are named as runc
// names them converting to v1 (Read, Write, Discard).
func readIOStatV2(path string) []deviceIO {
	data, err := readBounded(path)
	if err != nil {
		return nil
	}
	var out []deviceIO
	for line := range strings.Lines(string(data)) {
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue
		}
		maj, mnr, ok := parseMajMin(fields[0])
		if !ok {
			continue
		}
		d := deviceIO{major: maj, minor: mnr, ops: map[string]uint64{}}
		for _, kv := range fields[1:] {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				continue
			}
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				continue
			}
			switch k {
			case "rbytes":
				d.readBytes, d.ops["Read"] = n, n
			case "wbytes":
				d.writeBytes, d.ops["Write"] = n, n
			case "dbytes":
				d.ops["Discard"] = n
			case "rios":
				d.readOps = n
			case "wios":
				d.writeOps = n
			}
		}
		out = append(out, d)
	}
	return out
}

func workingSet(usage, inactiveFile uint64) uint64 {
	if inactiveFile >= usage {
		return 0
	}
	return usage - inactiveFile
}

// procStats is what a container's processes hold.
type procStats struct {
	processes, fds, sockets, threads uint64
	// nofile is the soft "Max open files" of the container's first
	// process; hasNofile says it was read.
	nofile    int64
	hasNofile bool
}

// readPids reads the first maxProcs process IDs of cgroup.procs in dir,
// a line at a time: a cgroup of many processes costs no more than that.
func readPids(dir string) ([]int, error) {
	f, err := os.Open(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var pids []int
	sc := bufio.NewScanner(f)
	for sc.Scan() && len(pids) < maxProcs {
		if pid, err := strconv.Atoi(strings.TrimSpace(sc.Text())); err == nil && pid > 0 {
			pids = append(pids, pid)
		}
	}
	return pids, sc.Err()
}

// readProcs reads the processes' descriptors, sockets, threads and the
// open files limit of the lowest process ID (the container's init, as a
// runtime starts it first). A process that exits meanwhile is skipped.
func readProcs(procDir string, pids []int, countThreads bool) procStats {
	var s procStats
	first := 0
	fdsLeft := maxFds
	for _, pid := range pids {
		base := filepath.Join(procDir, strconv.Itoa(pid))
		fdDir := filepath.Join(base, "fd")
		names, err := readDirNames(fdDir, fdsLeft)
		if err != nil {
			continue
		}
		s.processes++
		if first == 0 || pid < first {
			first = pid
		}
		fdsLeft -= len(names)
		s.fds += uint64(len(names))
		for _, n := range names {
			if target, err := os.Readlink(filepath.Join(fdDir, n)); err == nil && strings.HasPrefix(target, "socket:") {
				s.sockets++
			}
		}
		if countThreads {
			s.threads += statusThreads(filepath.Join(base, "status"))
		}
	}
	if first != 0 {
		s.nofile, s.hasNofile = openFilesLimit(filepath.Join(procDir, strconv.Itoa(first), "limits"))
	}
	return s
}

// readDirNames lists at most n names of dir.
func readDirNames(dir string, n int) ([]string, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if n <= 0 {
		return nil, nil
	}
	names, err := f.Readdirnames(n)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return names, nil
}

// statusThreads is the Threads: line of /proc/<pid>/status.
func statusThreads(path string) uint64 {
	data, err := readBounded(path)
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(line, "Threads:"); ok {
			n, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

// openFilesLimit is the soft "Max open files" of /proc/<pid>/limits (-1:
// unlimited).
func openFilesLimit(path string) (int64, bool) {
	data, err := readBounded(path)
	if err != nil {
		return 0, false
	}
	for line := range strings.Lines(string(data)) {
		rest, ok := strings.CutPrefix(line, "Max open files")
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			return 0, false
		}
		if fields[0] == "unlimited" {
			return -1, true
		}
		v, err := strconv.ParseInt(fields[0], 10, 64)
		return v, err == nil
	}
	return 0, false
}

// netDev is one interface's counters of /proc/<pid>/net/dev.
type netDev struct {
	name                                    string
	rxBytes, rxPackets, rxErrors, rxDropped uint64
	txBytes, txPackets, txErrors, txDropped uint64
}

// readNetDev reads /proc/<pid>/net/dev, leaving out the interfaces
// cAdvisor ignores (lo, veth*, docker*, nerdctl*).
func readNetDev(path string) ([]netDev, error) {
	data, err := readBounded(path)
	if err != nil {
		return nil, err
	}
	var out []netDev
	for line := range strings.Lines(string(data)) {
		name, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		name = strings.TrimSpace(name)
		if ignoredInterface(name) {
			continue
		}
		f := strings.Fields(rest)
		if len(f) < 16 {
			continue
		}
		var v [16]uint64
		for i := range v {
			v[i], _ = strconv.ParseUint(f[i], 10, 64)
		}
		out = append(out, netDev{name: name,
			rxBytes: v[0], rxPackets: v[1], rxErrors: v[2], rxDropped: v[3],
			txBytes: v[8], txPackets: v[9], txErrors: v[10], txDropped: v[11]})
	}
	return out, nil
}

func ignoredInterface(name string) bool {
	lower := strings.ToLower(name)
	for _, p := range []string{"lo", "veth", "docker", "nerdctl"} {
		if strings.HasPrefix(lower, p) {
			return true
		}
	}
	return false
}

// containerIDInName finds a container ID (64 hex digits) in a cgroup
// directory's name: "<id>" (cgroupfs driver), "cri-containerd-<id>.scope",
// "crio-<id>.scope", "docker-<id>.scope" (systemd driver).
var containerIDInName = regexp.MustCompile(`(?:^|-)([0-9a-f]{64})(?:\.scope)?$`)

// findCgroups walks the pod cgroups under top (the QoS hierarchy's root,
// relative to hierarchy) at most four levels down and returns the
// directory of every container ID in want, relative to hierarchy ("/"
// separated, leading "/"), as cAdvisor names a container's cgroup.
func findCgroups(hierarchy string, tops []string, want map[string]bool) map[string]string {
	found := make(map[string]string, len(want))
	var walk func(rel string, depth int)
	walk = func(rel string, depth int) {
		if depth > 4 || len(found) == len(want) {
			return
		}
		entries, err := os.ReadDir(filepath.Join(hierarchy, rel))
		if err != nil {
			return
		}
		for _, e := range entries {
			if !e.IsDir() {
				continue
			}
			name := e.Name()
			child := rel + "/" + name
			if m := containerIDInName.FindStringSubmatch(name); m != nil {
				if want[m[1]] {
					found[m[1]] = child
				}
				continue // a container's cgroup has no containers below
			}
			walk(child, depth+1)
		}
	}
	for _, top := range tops {
		walk("/"+top, 1)
	}
	return found
}
