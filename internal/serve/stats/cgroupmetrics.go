package stats

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/pure/podspec"
)

// ContainerMetricsRuntime is the part of the CRI client ContainerMetrics
// uses: three list calls per scrape, whatever the number of pods.
type ContainerMetricsRuntime interface {
	ListPodSandbox(ctx context.Context, filter *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error)
	ListContainers(ctx context.Context, filter *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error)
	ListContainerStats(ctx context.Context, filter *runtimeapi.ContainerStatsFilter) ([]*runtimeapi.ContainerStats, error)
}

// ContainerMetrics is the kubelet's /metrics/cadvisor as cAdvisor gives
// it to the kubelet (PodAndContainerStatsFromCRI off, the default): the
// container_* metrics of every running container and ready sandbox
// (container "POD") nodelet manages, read from their cgroups and
// processes at each scrape. It is a prometheus.Collector and a
// prometheus.Gatherer; it is safe for concurrent use.
type ContainerMetrics struct {
	rt      ContainerMetricsRuntime
	machine *HostMachine
	clk     clock.PassiveClock
	log     *slog.Logger
	d       *cadvisorDescs
	reg     *prometheus.Registry

	// statDevice is the device number of the filesystem holding a path
	// (deviceOf; tests replace it).
	statDevice func(path string) (major, minor uint64, ok bool)

	netnsOnce sync.Once
	selfNetns string
}

// NewContainerMetrics returns the cgroup-based /metrics/cadvisor of the
// containers rt runs on machine (whose ProcDir, CgroupDir, SysDir and
// Cgroup say where to read). Nothing is read before the first scrape.
func NewContainerMetrics(rt ContainerMetricsRuntime, machine *HostMachine, clk clock.PassiveClock, log *slog.Logger) *ContainerMetrics {
	m := &ContainerMetrics{rt: rt, machine: machine, clk: clk, log: log, d: newCadvisorDescs(), statDevice: deviceOf}
	m.reg = prometheus.NewRegistry()
	m.reg.MustRegister(m)
	return m
}

// Gather implements prometheus.Gatherer: one scrape of every container.
func (m *ContainerMetrics) Gather() ([]*dto.MetricFamily, error) { return m.reg.Gather() }

// cadvisorBaseLabels are the labels the kubelet puts on every container
// metric of cAdvisor (containerPrometheusLabelsFunc).
var cadvisorBaseLabels = []string{"container", "id", "image", "name", "namespace", "pod"}

type cadvisorDescs struct {
	all []*prometheus.Desc

	scrapeError                                                          *prometheus.Desc
	lastSeen, creation, start                                            *prometheus.Desc
	cpuUser, cpuSystem, cpuUsage                                         *prometheus.Desc
	cfsPeriods, cfsThrottledPeriods, cfsThrottledSecs, cfsBurstPeriods   *prometheus.Desc
	cfsBurstSecs                                                         *prometheus.Desc
	memCache, memRSS, memKernel, memMapped, memSwap, memFailcnt          *prometheus.Desc
	memUsage, memMaxUsage, memWorkingSet, memActiveFile, memInactiveFile *prometheus.Desc
	memFailures, memEventsHigh, memEventsMax, memDirty, memWriteback     *prometheus.Desc
	memPgscan, memPgsteal, memRefaultFile, memRefaultAnon                *prometheus.Desc
	oomEvents                                                            *prometheus.Desc
	fsUsage                                                              *prometheus.Desc
	fsReadsBytes, fsReads, fsWritesBytes, fsWrites, blkio                *prometheus.Desc
	netRxBytes, netRxPackets, netRxDropped, netRxErrors                  *prometheus.Desc
	netTxBytes, netTxPackets, netTxDropped, netTxErrors                  *prometheus.Desc
	processes, fds, sockets, threadsMax, threads, ulimits                *prometheus.Desc
	specCPUPeriod, specCPUQuota, specCPUShares                           *prometheus.Desc
	specMemLimit, specMemSwapLimit, specMemReservation                   *prometheus.Desc
}

// newCadvisorDescs names the metrics, help texts and labels as cAdvisor
// (v0.60) exposes them with the kubelet's metric set (CPU, memory, disk
// I/O, disk usage, network, processes, OOM events).
func newCadvisorDescs() *cadvisorDescs {
	d := &cadvisorDescs{}
	desc := func(name, help string, extra ...string) *prometheus.Desc {
		labels := append(append([]string(nil), cadvisorBaseLabels...), extra...)
		pd := prometheus.NewDesc(name, help, labels, nil)
		d.all = append(d.all, pd)
		return pd
	}
	d.scrapeError = prometheus.NewDesc("container_scrape_error", "1 if there was an error while getting container metrics, 0 otherwise", nil, nil)
	d.all = append(d.all, d.scrapeError)
	d.lastSeen = desc("container_last_seen", "Last time a container was seen by the exporter")
	d.creation = desc("container_creation_time_seconds", "Container creation time since unix epoch in seconds.")
	d.start = desc("container_start_time_seconds", "Start time of the container since unix epoch in seconds.")

	d.cpuUser = desc("container_cpu_user_seconds_total", "Cumulative user cpu time consumed in seconds.")
	d.cpuSystem = desc("container_cpu_system_seconds_total", "Cumulative system cpu time consumed in seconds.")
	d.cpuUsage = desc("container_cpu_usage_seconds_total", "Cumulative cpu time consumed in seconds.", "cpu")
	d.cfsPeriods = desc("container_cpu_cfs_periods_total", "Number of elapsed enforcement period intervals.")
	d.cfsThrottledPeriods = desc("container_cpu_cfs_throttled_periods_total", "Number of throttled period intervals.")
	d.cfsThrottledSecs = desc("container_cpu_cfs_throttled_seconds_total", "Total time duration the container has been throttled.")
	d.cfsBurstPeriods = desc("container_cpu_cfs_burst_periods_total", "Number of periods when burst occurs.")
	d.cfsBurstSecs = desc("container_cpu_cfs_burst_seconds_total", "Total time duration the container has been bursted.")

	d.memCache = desc("container_memory_cache", "Number of bytes of page cache memory.")
	d.memRSS = desc("container_memory_rss", "Size of RSS in bytes.")
	d.memKernel = desc("container_memory_kernel_usage", "Size of kernel memory allocated in bytes.")
	d.memMapped = desc("container_memory_mapped_file", "Size of memory mapped files in bytes.")
	d.memSwap = desc("container_memory_swap", "Container swap usage in bytes.")
	d.memFailcnt = desc("container_memory_failcnt", "Number of memory usage hits limits")
	d.memUsage = desc("container_memory_usage_bytes", "Current memory usage in bytes, including all memory regardless of when it was accessed")
	d.memMaxUsage = desc("container_memory_max_usage_bytes", "Maximum memory usage recorded in bytes")
	d.memWorkingSet = desc("container_memory_working_set_bytes", "Current working set in bytes.")
	d.memActiveFile = desc("container_memory_total_active_file_bytes", "Current total active file in bytes.")
	d.memInactiveFile = desc("container_memory_total_inactive_file_bytes", "Current total inactive file in bytes.")
	d.memFailures = desc("container_memory_failures_total", "Cumulative count of memory allocation failures.", "failure_type", "scope")
	d.memEventsHigh = desc("container_memory_events_high_total", "Cumulative count of memory.high throttle events for the container")
	d.memEventsMax = desc("container_memory_events_max_total", "Cumulative count of memory.max limit hit events for the container")
	d.memDirty = desc("container_memory_file_dirty_bytes", "Number of bytes of file cache that has been modified but not yet written back to disk.")
	d.memWriteback = desc("container_memory_file_writeback_bytes", "Number of bytes of file cache that is currently being written back to disk.")
	d.memPgscan = desc("container_memory_pgscan_total", "Cumulative number of pages scanned by the page reclaim algorithm.")
	d.memPgsteal = desc("container_memory_pgsteal_total", "Cumulative number of pages reclaimed by the page reclaim algorithm.")
	d.memRefaultFile = desc("container_memory_workingset_refault_file_total", "Cumulative number of refaults of previously evicted file pages.")
	d.memRefaultAnon = desc("container_memory_workingset_refault_anon_total", "Cumulative number of refaults of previously evicted anonymous pages.")
	d.oomEvents = desc("container_oom_events_total", "Count of out of memory events observed for the container")

	d.fsUsage = desc("container_fs_usage_bytes", "Number of bytes that are consumed by the container on this filesystem.", "device")
	d.fsReadsBytes = desc("container_fs_reads_bytes_total", "Cumulative count of bytes read", "device")
	d.fsReads = desc("container_fs_reads_total", "Cumulative count of reads completed", "device")
	d.fsWritesBytes = desc("container_fs_writes_bytes_total", "Cumulative count of bytes written", "device")
	d.fsWrites = desc("container_fs_writes_total", "Cumulative count of writes completed", "device")
	d.blkio = desc("container_blkio_device_usage_total", "Blkio Device bytes usage", "device", "major", "minor", "operation")

	d.netRxBytes = desc("container_network_receive_bytes_total", "Cumulative count of bytes received", "interface")
	d.netRxPackets = desc("container_network_receive_packets_total", "Cumulative count of packets received", "interface")
	d.netRxDropped = desc("container_network_receive_packets_dropped_total", "Cumulative count of packets dropped while receiving", "interface")
	d.netRxErrors = desc("container_network_receive_errors_total", "Cumulative count of errors encountered while receiving", "interface")
	d.netTxBytes = desc("container_network_transmit_bytes_total", "Cumulative count of bytes transmitted", "interface")
	d.netTxPackets = desc("container_network_transmit_packets_total", "Cumulative count of packets transmitted", "interface")
	d.netTxDropped = desc("container_network_transmit_packets_dropped_total", "Cumulative count of packets dropped while transmitting", "interface")
	d.netTxErrors = desc("container_network_transmit_errors_total", "Cumulative count of errors encountered while transmitting", "interface")

	d.processes = desc("container_processes", "Number of processes running inside the container.")
	d.fds = desc("container_file_descriptors", "Number of open file descriptors for the container.")
	d.sockets = desc("container_sockets", "Number of open sockets for the container.")
	d.threadsMax = desc("container_threads_max", "Maximum number of threads allowed inside the container, infinity if value is zero")
	d.threads = desc("container_threads", "Number of threads running inside the container")
	d.ulimits = desc("container_ulimits_soft", "Soft ulimit values for the container root process. Unlimited if -1, except priority and nice", "ulimit")

	d.specCPUPeriod = desc("container_spec_cpu_period", "CPU period of the container.")
	d.specCPUQuota = desc("container_spec_cpu_quota", "CPU quota of the container.")
	d.specCPUShares = desc("container_spec_cpu_shares", "CPU share of the container.")
	d.specMemLimit = desc("container_spec_memory_limit_bytes", "Memory limit for the container.")
	d.specMemSwapLimit = desc("container_spec_memory_swap_limit_bytes", "Memory swap limit for the container.")
	d.specMemReservation = desc("container_spec_memory_reservation_limit_bytes", "Memory reservation limit for the container.")
	return d
}

// Describe implements prometheus.Collector.
func (m *ContainerMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range m.d.all {
		ch <- d
	}
}

// target is one container (or sandbox) to report.
type target struct {
	id                        string
	container, pod, ns, image string
	created                   time.Time
	network                   bool // the sandbox owns a network namespace of its own
	writable                  *runtimeapi.FilesystemUsage
}

// Collect implements prometheus.Collector: three CRI list calls, one walk
// of the pod cgroups, then the cgroup and /proc files of each container.
// A container whose cgroup is gone by the time it is read is left out.
func (m *ContainerMetrics) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), collectTimeout)
	defer cancel()
	targets, err := m.targets(ctx)
	failed := 0.0
	if err != nil {
		m.log.Warn("/metrics/cadvisor: listing the containers failed", "err", err)
		failed = 1
	}
	ch <- prometheus.MustNewConstMetric(m.d.scrapeError, prometheus.GaugeValue, failed)
	if len(targets) == 0 {
		return
	}
	want := make(map[string]bool, len(targets))
	for _, t := range targets {
		want[t.id] = true
	}
	v2 := m.machine.cgroupVersion() == CgroupV2
	root := m.machine.CgroupDir
	walkRoot := root
	if !v2 {
		walkRoot = m.v1Dir("memory", "cpuacct", "pids")
	}
	tops := m.machine.PodCgroups
	if len(tops) == 0 {
		tops = []string{"kubepods", "kubepods.slice"}
	}
	cgroups := findCgroups(walkRoot, tops, want)
	sc := &scrape{m: m, now: m.clk.Now(), devices: map[[2]uint64]string{}, fsDevices: map[string]fsDevice{}}
	for _, t := range targets {
		rel, ok := cgroups[t.id]
		if !ok {
			continue
		}
		var s cgroupStats
		var procsDir string
		if v2 {
			s = readCgroupV2(root, rel)
			procsDir = filepath.Join(root, rel)
		} else {
			s = readCgroupV1(root, rel)
			procsDir = filepath.Join(m.v1Dir("pids", "cpu", "memory"), rel)
		}
		if !s.hasCPU && !s.hasMemory {
			continue // gone meanwhile
		}
		pids, err := readPids(procsDir)
		if err != nil {
			continue
		}
		sc.emit(ch, t, rel, &s, pids)
	}
}

// v1Dir is the first of the v1 controllers' directories that exists.
func (m *ContainerMetrics) v1Dir(controllers ...string) string {
	for _, c := range controllers {
		dir := filepath.Join(m.machine.CgroupDir, c)
		if _, err := os.Stat(dir); err == nil {
			return dir
		}
	}
	return filepath.Join(m.machine.CgroupDir, controllers[0])
}

// targets lists nodelet's ready sandboxes and their running containers,
// with the containers' writable layer usage.
func (m *ContainerMetrics) targets(ctx context.Context) ([]target, error) {
	var (
		wg                   sync.WaitGroup
		sandboxes            []*runtimeapi.PodSandbox
		containers           []*runtimeapi.Container
		ctrStats             []*runtimeapi.ContainerStats
		sbErr, ctrErr, stErr error
	)
	wg.Go(func() {
		sandboxes, sbErr = m.rt.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{
			State:         &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY},
			LabelSelector: podspec.ManagedSelector(),
		})
	})
	wg.Go(func() {
		containers, ctrErr = m.rt.ListContainers(ctx, &runtimeapi.ContainerFilter{
			State:         &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
			LabelSelector: podspec.ManagedSelector(),
		})
	})
	wg.Go(func() {
		ctrStats, stErr = m.rt.ListContainerStats(ctx, &runtimeapi.ContainerStatsFilter{LabelSelector: podspec.ManagedSelector()})
	})
	wg.Wait()
	if sbErr != nil {
		return nil, fmt.Errorf("list sandboxes: %w", sbErr)
	}
	if ctrErr != nil {
		return nil, fmt.Errorf("list containers: %w", ctrErr)
	}
	writable := make(map[string]*runtimeapi.FilesystemUsage, len(ctrStats))
	for _, s := range ctrStats {
		if w := s.GetWritableLayer(); w != nil {
			writable[s.GetAttributes().GetId()] = w
		}
	}
	ready := make(map[string]bool, len(sandboxes))
	out := make([]target, 0, len(sandboxes)+len(containers))
	for _, sb := range sandboxes {
		if sb.GetState() != runtimeapi.PodSandboxState_SANDBOX_READY || !podspec.IsManaged(sb.GetLabels()) {
			continue
		}
		ready[sb.GetId()] = true
		l := sb.GetLabels()
		out = append(out, target{
			id: sb.GetId(), container: "POD", pod: l[podspec.LabelPodName], ns: l[podspec.LabelPodNamespace],
			created: time.Unix(0, sb.GetCreatedAt()),
			network: sb.GetAnnotations()[podspec.AnnotationHostNetwork] != "true",
		})
	}
	for _, c := range containers {
		if c.GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING || !ready[c.GetPodSandboxId()] || !podspec.IsManaged(c.GetLabels()) {
			continue
		}
		l := c.GetLabels()
		image := c.GetImage().GetUserSpecifiedImage()
		if image == "" {
			image = c.GetImage().GetImage()
		}
		out = append(out, target{
			id: c.GetId(), container: l[podspec.LabelContainerName], pod: l[podspec.LabelPodName], ns: l[podspec.LabelPodNamespace],
			image: image, created: time.Unix(0, c.GetCreatedAt()), writable: writable[c.GetId()],
		})
	}
	if stErr != nil {
		// The containers are reported without their writable layer.
		return out, fmt.Errorf("list container stats: %w", stErr)
	}
	return out, nil
}

// scrape holds what one Collect memoises: device names by number and the
// device of each writable layer's filesystem.
type scrape struct {
	m         *ContainerMetrics
	now       time.Time
	devices   map[[2]uint64]string
	fsDevices map[string]fsDevice
}

type fsDevice struct {
	name         string
	major, minor uint64
	block        bool
}

// deviceName is "/dev/<DEVNAME>" of a block device number, from sysfs
// ("" when sysfs does not know it).
func (sc *scrape) deviceName(major, minor uint64) string {
	key := [2]uint64{major, minor}
	if n, ok := sc.devices[key]; ok {
		return n
	}
	name := ""
	if sys := sc.m.machine.SysDir; sys != "" {
		data, err := readBounded(filepath.Join(sys, "dev", "block", fmt.Sprintf("%d:%d", major, minor), "uevent"))
		if err == nil {
			for line := range strings.Lines(string(data)) {
				if v, ok := strings.CutPrefix(strings.TrimSpace(line), "DEVNAME="); ok {
					name = "/dev/" + v
				}
			}
		}
	}
	sc.devices[key] = name
	return name
}

// fsDevice is the device of the filesystem at mountpoint: its block
// device where it has one, else the mountpoint itself.
func (sc *scrape) fsDevice(mountpoint string) fsDevice {
	if d, ok := sc.fsDevices[mountpoint]; ok {
		return d
	}
	d := fsDevice{name: mountpoint}
	if major, minor, ok := sc.m.statDevice(mountpoint); ok && major != 0 {
		if name := sc.deviceName(major, minor); name != "" {
			d = fsDevice{name: name, major: major, minor: minor, block: true}
		}
	}
	sc.fsDevices[mountpoint] = d
	return d
}

// specMemory is cAdvisor's specMemoryValue: beyond 2^62 is unlimited, 0.
func specMemory(v uint64) float64 {
	if v > 1<<62 {
		return 0
	}
	return float64(v)
}

// emit sends one container's metrics: the spec ones without a timestamp,
// the sampled ones stamped with the scrape's time, as cAdvisor does.
func (sc *scrape) emit(ch chan<- prometheus.Metric, t target, rel string, s *cgroupStats, pids []int) {
	d := sc.m.d
	base := []string{t.container, rel, t.image, t.id, t.ns, t.pod}
	now := sc.now
	spec := func(desc *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v, base...)
	}
	put := func(desc *prometheus.Desc, typ prometheus.ValueType, v float64, extra ...string) {
		labels := base
		if len(extra) > 0 {
			labels = append(append(make([]string, 0, len(base)+len(extra)), base...), extra...)
		}
		ch <- prometheus.NewMetricWithTimestamp(now, prometheus.MustNewConstMetric(desc, typ, v, labels...))
	}
	gauge := func(desc *prometheus.Desc, v uint64, extra ...string) {
		put(desc, prometheus.GaugeValue, float64(v), extra...)
	}
	counter := func(desc *prometheus.Desc, v uint64, extra ...string) {
		put(desc, prometheus.CounterValue, float64(v), extra...)
	}
	secs := func(desc *prometheus.Desc, ns uint64, extra ...string) {
		put(desc, prometheus.CounterValue, float64(ns)/1e9, extra...)
	}

	spec(d.creation, float64(t.created.Unix()))
	spec(d.start, float64(t.created.Unix()))
	if s.hasCPU {
		spec(d.specCPUPeriod, float64(s.cpuPeriod))
		if s.cpuQuota != 0 {
			spec(d.specCPUQuota, float64(s.cpuQuota))
		}
		spec(d.specCPUShares, float64(s.cpuShares))
	}
	if s.hasMemory {
		spec(d.specMemLimit, specMemory(s.memLimit))
		spec(d.specMemSwapLimit, specMemory(s.memSwapLimit))
		spec(d.specMemReservation, specMemory(s.memReservation))
	}

	put(d.lastSeen, prometheus.GaugeValue, float64(now.Unix()))
	if s.hasCPU {
		secs(d.cpuUser, s.cpuUser)
		secs(d.cpuSystem, s.cpuSystem)
		secs(d.cpuUsage, s.cpuTotal, "total")
		if s.cpuQuota != 0 {
			counter(d.cfsPeriods, s.cfsPeriods)
			counter(d.cfsThrottledPeriods, s.cfsThrottled)
			secs(d.cfsThrottledSecs, s.cfsThrottledNs)
			counter(d.cfsBurstPeriods, s.cfsBursts)
			secs(d.cfsBurstSecs, s.cfsBurstNs)
		}
	}
	if s.hasMemory {
		gauge(d.memCache, s.memCache)
		gauge(d.memRSS, s.memRSS)
		gauge(d.memKernel, s.memKernel)
		gauge(d.memMapped, s.memMappedFile)
		gauge(d.memSwap, s.memSwap)
		counter(d.memFailcnt, s.memFailcnt)
		gauge(d.memUsage, s.memUsage)
		gauge(d.memMaxUsage, s.memMaxUsage)
		gauge(d.memWorkingSet, s.memWorkingSet)
		gauge(d.memActiveFile, s.memActiveFile)
		gauge(d.memInactiveFile, s.memInactiveFile)
		counter(d.memFailures, s.memPgfault, "pgfault", "container")
		counter(d.memFailures, s.memPgmajfault, "pgmajfault", "container")
		counter(d.memFailures, s.memPgfault, "pgfault", "hierarchy")
		counter(d.memFailures, s.memPgmajfault, "pgmajfault", "hierarchy")
		counter(d.memEventsHigh, s.memEventsHigh)
		counter(d.memEventsMax, s.memEventsMax)
		gauge(d.memDirty, s.memDirty)
		gauge(d.memWriteback, s.memWriteback)
		counter(d.memPgscan, s.memPgscan)
		counter(d.memPgsteal, s.memPgsteal)
		counter(d.memRefaultFile, s.memRefaultFile)
		counter(d.memRefaultAnon, s.memRefaultAnon)
		counter(d.oomEvents, s.oomKills)
	}

	sc.emitDisk(t, s, gauge, counter)

	if t.network && len(pids) > 0 {
		sc.emitNetwork(pids, counter)
	}

	p := readProcs(sc.m.machine.ProcDir, pids, !s.hasPids)
	gauge(d.processes, p.processes)
	gauge(d.fds, p.fds)
	gauge(d.sockets, p.sockets)
	threads, threadsMax := s.threads, s.threadsMax
	if !s.hasPids {
		threads = p.threads
	}
	if threadsMax == ^uint64(0) {
		threadsMax = 0 // cAdvisor: zero is infinity
	}
	gauge(d.threadsMax, threadsMax)
	gauge(d.threads, threads)
	if p.hasNofile {
		put(d.ulimits, prometheus.GaugeValue, float64(p.nofile), "max_open_files")
	}
}

// emitDisk sends the writable layer's usage and the block I/O: one
// series per device the cgroup did I/O on, and the writable layer's
// device with zeros (blkio: Read and Write) when it did none there, so a
// container that only wrote to the page cache still has its disk series.
func (sc *scrape) emitDisk(t target, s *cgroupStats, gauge, counter func(*prometheus.Desc, uint64, ...string)) {
	d := sc.m.d
	var layer fsDevice
	if w := t.writable; w != nil && w.GetFsId().GetMountpoint() != "" {
		layer = sc.fsDevice(w.GetFsId().GetMountpoint())
		gauge(d.fsUsage, w.GetUsedBytes().GetValue(), layer.name)
	}
	layerSeen := false
	for _, io := range s.io {
		name := sc.deviceName(io.major, io.minor)
		if layer.block && io.major == layer.major && io.minor == layer.minor {
			layerSeen = true
		}
		counter(d.fsReadsBytes, io.readBytes, name)
		counter(d.fsReads, io.readOps, name)
		counter(d.fsWritesBytes, io.writeBytes, name)
		counter(d.fsWrites, io.writeOps, name)
		maj, mnr := strconv.FormatUint(io.major, 10), strconv.FormatUint(io.minor, 10)
		for op, v := range io.ops {
			counter(d.blkio, v, name, maj, mnr, op)
		}
	}
	if layer.block && !layerSeen && !sameDeviceName(s.io, sc, layer.name) {
		counter(d.fsReadsBytes, 0, layer.name)
		counter(d.fsReads, 0, layer.name)
		counter(d.fsWritesBytes, 0, layer.name)
		counter(d.fsWrites, 0, layer.name)
		maj, mnr := strconv.FormatUint(layer.major, 10), strconv.FormatUint(layer.minor, 10)
		counter(d.blkio, 0, layer.name, maj, mnr, "Read")
		counter(d.blkio, 0, layer.name, maj, mnr, "Write")
	}
}

// sameDeviceName reports whether a device of io has the name (two device
// numbers sysfs names alike would make duplicate series).
func sameDeviceName(io []deviceIO, sc *scrape, name string) bool {
	for _, d := range io {
		if sc.deviceName(d.major, d.minor) == name {
			return true
		}
	}
	return false
}

// emitNetwork sends the counters of the sandbox's network namespace, read
// through its first process, unless that is nodelet's own namespace (a
// host-network pod the annotation did not tell).
func (sc *scrape) emitNetwork(pids []int, counter func(*prometheus.Desc, uint64, ...string)) {
	m := sc.m
	pid := strconv.Itoa(pids[0])
	m.netnsOnce.Do(func() {
		m.selfNetns, _ = os.Readlink(filepath.Join(m.machine.ProcDir, "self", "ns", "net"))
	})
	if ns, err := os.Readlink(filepath.Join(m.machine.ProcDir, pid, "ns", "net")); err == nil && ns == m.selfNetns {
		return
	}
	devs, err := readNetDev(filepath.Join(m.machine.ProcDir, pid, "net", "dev"))
	if err != nil {
		return
	}
	d := m.d
	for _, n := range devs {
		counter(d.netRxBytes, n.rxBytes, n.name)
		counter(d.netRxPackets, n.rxPackets, n.name)
		counter(d.netRxDropped, n.rxDropped, n.name)
		counter(d.netRxErrors, n.rxErrors, n.name)
		counter(d.netTxBytes, n.txBytes, n.name)
		counter(d.netTxPackets, n.txPackets, n.name)
		counter(d.netTxDropped, n.txDropped, n.name)
		counter(d.netTxErrors, n.txErrors, n.name)
	}
}
