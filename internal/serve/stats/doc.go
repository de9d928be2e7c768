// Package stats is beside the pipeline: it builds the kubelet's stats
// summary (the /stats/summary document, k8s.io/kubelet stats v1alpha1) and
// its /metrics/resource metrics from the container runtime (CRI) and the
// host, the way the kubelet's CRI stats provider does without cAdvisor,
// and /metrics/cadvisor from the containers' cgroups and processes, as
// cAdvisor gives it to the kubelet.
//
// # What is reported
//
// Node: name, start time (boot time), CPU (cumulative usage and a derived
// rate), memory (usage, working set = usage minus the inactive file pages,
// RSS, page faults; available = MemTotal minus working set), the
// filesystem holding the root directory and the runtime's image
// filesystem (ImageFsInfo; the container filesystem is the image one unless
// the runtime reports a separate one). Node CPU and memory are the root
// cgroup's, as cAdvisor reports them to the kubelet; which hierarchy is
// told from statfs(2) of /sys/fs/cgroup (cgroup2 magic: v2; the tmpfs of
// a v1 or hybrid host: v1):
//
//   - cgroup v1: CPU is cpuacct.usage of the cpuacct controller's root;
//     memory is memory.usage_in_bytes of the memory controller's root and
//     total_inactive_file, total_rss, total_pgfault, total_pgmajfault of
//     its memory.stat.
//   - cgroup v2: CPU is usage_usec of the root's cpu.stat. The root has
//     no memory.current, so, as runc does for cAdvisor, usage is anon +
//     file of the root's memory.stat (memory.current where a cgroup
//     namespace's root has one), and inactive_file, anon, pgfault,
//     pgmajfault are the rest.
//   - Without those files (no cpu or memory controller there): CPU is the
//     busy time of /proc/stat's "cpu" line; memory usage is MemTotal minus
//     MemFree, the inactive file pages Inactive(file), RSS AnonPages (of
//     /proc/meminfo), page faults those of /proc/vmstat.
//
// The v2 reading was run for real only against the cgroup2 mount of a
// hybrid host (/sys/fs/cgroup/unified: cpu.stat but no memory
// controller, so memory came from /proc); the full v2 root (cpu.stat and
// memory.stat) only against a directory laid out as the kernel does.
//
// Pods: only nodelet's (label nodelet.io/managed-by=nodelet), only READY
// sandboxes and only RUNNING containers, as the kubelet's CRI provider
// (which drops terminated sandboxes and containers). Every READY sandbox is
// a pod, even one whose containers have all exited. A pod's reference comes
// from the sandbox labels (io.kubernetes.pod.*), its start time is the
// sandbox creation time and a container's the container creation time.
// Containers carry CPU, memory, their writable layer (rootfs) and their log
// directory (<podLogsDir>/<ns>_<name>_<uid>/<container>). Pod CPU and memory
// come from ListPodSandboxStats when the runtime implements it; containerd
// 1.6 answers Unimplemented, and then they are the sum over the containers
// (the kubelet's fallback). The Unimplemented answer is remembered and the
// call retried only every 10 minutes. Pod volume stats cover emptyDir
// volumes, <rootDir>/pods/<uid>/volumes/kubernetes.io~empty-dir/<name>: a
// tmpfs one (medium: Memory) is measured with statfs, a disk one with a
// du-like walk (see below); ephemeral storage is rootfs + logs + disk-backed
// emptyDirs. Swap, PSI, process counts, rlimits and system containers are
// not reported.
//
// # /metrics/cadvisor
//
// ContainerMetrics serves the kubelet's /metrics/cadvisor as cAdvisor
// gives it to the kubelet by default (PodAndContainerStatsFromCRI off):
// the container_* metrics of cAdvisor v0.60 with the kubelet's metric set
// (CPU, memory, disk I/O, disk usage, network, processes, OOM events),
// their names, types, help texts and labels; every series carries the
// kubelet's labels container, id (the cgroup path), image, name (the
// runtime's container ID), namespace and pod. Only nodelet's ready sandboxes
// (container "POD", image empty: the runtime does not list the pause
// image) and their running containers are reported; not the pod, QoS or
// node cgroups, nor cAdvisor's machine metrics.
//
// A scrape makes three CRI list calls in parallel (ListPodSandbox,
// ListContainers, ListContainerStats for the writable layers), walks the
// pod cgroups once (the memory controller's kubepods/ on v1, the root's
// kubepods/ or kubepods.slice/ on v2, each under the cgroupRoot
// (HostMachine.PodCgroups), at most four levels, matching a
// directory to a container by the 64-hex ID in its name: cgroupfs's <id>,
// systemd's cri-containerd-<id>.scope), then reads each container's
// cgroup files and processes:
//
//   - cgroup v1: cpuacct.usage and cpuacct.stat; cpu.stat (CFS
//     periods, throttling, bursts, only when a quota is set, as cAdvisor),
//     cpu.cfs_period_us, cpu.cfs_quota_us, cpu.shares; memory.usage,
//     max_usage, failcnt, kmem.usage, limit, soft_limit (reservation),
//     memsw.limit (swap limit), memory.stat's total_* (the hierarchy is
//     always on) and memory.oom_control's oom_kill; blkio's BFQ, CFQ or,
//     where they are empty (blk-mq), the throttling layer's
//     io_service_bytes_recursive and io_serviced_recursive; pids.current
//     and pids.max.
//   - cgroup v2: cpu.stat, cpu.max, cpu.weight (turned back into shares
//     as cAdvisor does); memory.current, peak, max, min (reservation),
//     swap.current, swap.max, memory.stat, memory.events (high, max,
//     oom_kill; no failcnt, as runc gives cAdvisor none); io.stat;
//     pids.current and pids.max.
//   - The processes of cgroup.procs (at most 4096): their descriptors in
//     /proc/<pid>/fd (at most 16384 per container; sockets are the links
//     to socket:[…]), threads from pids.current (the sum of Threads: in
//     /proc/<pid>/status without a pids controller), and the soft "Max
//     open files" of the lowest PID's /proc/<pid>/limits.
//   - A sandbox's network counters from /proc/<pid>/net/dev of its
//     pause process, without lo, veth*, docker* and nerdctl* (cAdvisor's
//     list), and none for a host-network sandbox (the annotation, or the
//     same network namespace as nodelet's).
//   - The writable layer's usage from ListContainerStats, labelled with
//     the device of its filesystem (/dev/<DEVNAME> of sysfs); that device
//     also gets the disk I/O series (container_fs_* and blkio's Read and
//     Write), zero where the cgroup did no I/O on it: what cAdvisor
//     leaves out there, the conformance test requires. cAdvisor's inode, limit and per-disk time series are not served
//     (containerd's cAdvisor has none either; the conformance test
//     rejects values other than its own there).
//
// A container whose cgroup is gone, or has neither CPU nor memory files,
// by the time it is read is left out; a file missing reads as zero. Every
// file read is capped at 64 KiB. The start time is the runtime's creation
// time. A failing list call sets container_scrape_error to 1 and, for the
// sandbox and container lists, reports nothing else.
//
// Cost: BenchmarkContainerMetrics30 (15 pods, 30 cgroups on a v1
// layout in a temporary directory, a fake runtime) takes about 5.6 ms of
// CPU per scrape, a third reading files, most of the rest building the
// 1,400 samples; against real containerd 2.2 and cgroupfs
// (TestCadvisorMetrics, 30 containers and sandboxes), about 15 ms of
// nodelet's CPU per scrape on the shared 2-core machine, plus the three
// list calls in containerd. Nothing is cached between scrapes.
//
// CRIMetrics, the runtime's own metrics (ListPodSandboxMetrics,
// described by ListMetricDescriptors, asked once) as the kubelet serves
// them with PodAndContainerStatsFromCRI, is kept but not served:
// containerd 2.2's descriptors do not match its metrics (all are
// dropped) and containerd 1.x answers Unimplemented (ErrNoCRIMetrics).
//
// The runtime's own numbers are preferred throughout: usage_nano_cores
// and the working set are taken as reported when present and derived
// only when missing (below), and ListPodSandboxStats is asked for
// nodelet's sandboxes only, by label.
//
// # CPU rate
//
// Runtimes such as containerd 1.6 report cumulative CPU time but no
// usage_nano_cores. The provider keeps the previous sample of every object
// (node, container, pod) and derives UsageNanoCores from the delta of
// usage over the delta of the samples' timestamps. A sample replaces the
// previous one only when it is at least a second newer, so callers arriving
// close together do not produce spiky rates over tiny windows: they get the
// last computed rate. The first sample of an object has no rate; a counter
// going backwards starts over. Samples of objects not seen for 10 minutes
// are dropped.
//
// # Cost and caching
//
// A refresh makes three list calls, whatever the number of pods, in
// parallel: ListPodSandbox (READY, managed), ListContainers (RUNNING,
// managed) and ListContainerStats, or ListPodSandboxStats instead of the
// latter when the runtime implements it (its answer holds the container
// stats). A full summary adds one ImageFsInfo call. There are never
// per-container calls. Host facts are a few small /proc and cgroup files
// and statfs calls, memoised per refresh by path.
//
// Measured with BenchmarkSummary100Pods (100 pods, 300 containers, a fake
// runtime): a full refresh costs about 2 ms of CPU, most of it listing the
// pods' emptyDir directories; a CPU-and-memory one about 0.5 ms; a cached
// answer about 20 ns. With 20 concurrent callers and a runtime taking 2 ms
// per call, p99 stays well under 20 ms (TestSummaryLatency100Pods).
//
// The result is cached for one second (WithCacheTTL), or, after a refresh
// that took longer than that, for as long as the refresh took, counted
// from its end: callers that never stop keep the runtime busy with stats
// at most half of the time (containerd 1.6 takes over a second to list
// 100 pods' stats, so a one-second period made the refreshes back to back
// under load). It is cached in three slots: the
// full summary, the CPU-and-memory one (onlyCPUAndMemory, as the
// resource metrics use) and the node's alone (NodeSummary, what the
// eviction manager reads every 10 s while no pod has local storage
// limits: one ImageFsInfo call and the host's files, no list call). A full
// refresh fills the first two and serves the third. Concurrent callers
// that miss the cache share one refresh (a single flight per slot; a
// CPU-and-memory or node caller also joins a full refresh in flight). The refresh
// runs detached from the callers' cancellation with its own timeout, so a
// caller giving up does not fail the others; a caller whose context ends
// returns at once. Errors are not cached.
//
// Disk usage (emptyDir volumes, container logs) is measured by walking the
// directory (st_blocks, hard links counted once, not crossing
// filesystems), cached per path for a minute (WithDiskUsageTTL). The first
// measurement of a path is made inline; later ones are made in the
// background while the stale value is served, so an expiring cache never
// lands on a caller.
//
// The returned *Summary is shared by every caller of the same cache period:
// callers must not modify it. So is its JSON encoding (SummaryJSON, what
// /stats/summary serves), made once per cached summary by the first caller
// who asks, with a strong entity tag (a digest of the bytes), and the
// Prometheus families of /metrics/resource (ResourceGatherer), built once
// per cached CPU-and-memory summary. Serving a cached summary is then
// writing bytes: encoding 300 containers' stats on every request cost
// about 1 ms of CPU and was most of what /stats/summary cost under 20
// concurrent clients (BenchmarkServeSummary100Pods: the real handler over
// TLS with client certificates).
package stats
