//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// BenchmarkDensity measures what many idle pods cost a node agent: for
// nodelet and the upstream kubelet (standalone, on the same containerd, one
// agent at a time) and for each pod count (100 and 200;
// NODELET_BENCH_DENSITY="100,200" changes it):
//
//   - start: manifests of count idle pods written at once, to every
//     container running;
//   - after a settling pause (20 s) with all the pods running, over an
//     idle window (a minute; NODELET_BENCH_WINDOW): the agent's
//     user+system CPU as % of one core, containerd's own in the same window
//     and containerd's with its shims;
//   - at the window's end: the agent's VmRSS and RssAnon (/proc; each agent
//     starts with its binary out of the page cache: uncacheBinary), and its Go
//     heap in use (go_memstats_heap_inuse_bytes on its /metrics);
//   - the memory the agent used in the window: its pages referenced since the
//     window's start (clear_refs at the start, Referenced of smaps_rollup at
//     the end). Most of the RSS not in it is the binary's pages touched
//     once, at start-up, which the kernel takes back first when memory is
//     short; it is printed beside the RSS, never in its place;
//   - once, before the agents: the libraries' floor (libraryFloor), the RSS
//     of a program that runs the init functions of everything nodelet
//     imports and nothing else. nodelet's RSS above it is nodelet's own.
//
// NODELET_BENCH_DENSITY_AGENTS="nodelet" leaves the kubelet out;
// NODELET_BENCH_PPROF=dir writes nodelet's CPU profile of each window and its
// heap profile at the end there (the profile's own cost, and the binary's
// pages symbolizing reads, are then in the figures); NODELET_BENCH_SMAPS=dir
// writes each agent's /proc/<pid>/smaps at the window's end there. The machine is shared: the CPU figures are noisy, repeat them. It
// prints a table with the goals at 100 pods; it asserts nothing (make bench).
func BenchmarkDensity(b *testing.B) {
	counts := []int{100, 200}
	if s := os.Getenv("NODELET_BENCH_DENSITY"); s != "" {
		counts = counts[:0]
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				b.Fatalf("NODELET_BENCH_DENSITY=%q: want pod counts, comma separated", s)
			}
			counts = append(counts, n)
		}
	}
	window, settle := time.Minute, 20*time.Second
	if s := os.Getenv("NODELET_BENCH_WINDOW"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			b.Fatal(err)
		}
		window = d
	}
	// NODELET_BENCH_DENSITY_POD=example: examples/busybox.yaml's pods
	// instead; NODELET_BENCH_SETTLE_FROM=write: the settling pause counts
	// from the manifests written, not from all pods running.
	pod, podText := idlePod, "busybox:1.35, sh -c 'trap \"exit 0\" TERM; while true; do sleep 3600 & wait; done'"
	if os.Getenv("NODELET_BENCH_DENSITY_POD") == "example" {
		pod, podText = examplePod, "examples/busybox.yaml: busybox:1.35, sh -c 'echo ...; while true; do sleep 3600; done', default grace period"
	}
	settleFromWrite := os.Getenv("NODELET_BENCH_SETTLE_FROM") == "write"
	settleText := "after all ran"
	if settleFromWrite {
		settleText = "counted from the manifests written"
	}
	churns := []int{0}
	if s := os.Getenv("NODELET_BENCH_DENSITY_CHURN"); s != "" {
		churns = churns[:0]
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 0 {
				b.Fatalf("NODELET_BENCH_DENSITY_CHURN=%q: want pod counts, comma separated", s)
			}
			churns = append(churns, n)
		}
	}
	names := []string{"nodelet", "kubelet"}
	if s := os.Getenv("NODELET_BENCH_DENSITY_AGENTS"); s != "" {
		names = strings.Split(s, ",")
	}
	maxPods := 0
	for _, c := range counts {
		maxPods = max(maxPods, c+10)
	}
	floor := libraryFloor(b)
	pullBusybox(b)
	cleanRuntime(b)
	noWatch := followStarts(b)
	ctx := context.Background()
	var results []densityResult
	var described []string
	for _, name := range names {
		a := densityAgent(b, name, maxPods)
		described = append(described, a.describe())
		for _, count := range counts {
			for _, churn := range churns {
				cleanRuntime(b)
				a.start(b)
				warmUp(b, a, 2, a.starts)
				churnPods(b, a, churn)
				r := densityResult{agent: name, pods: count, churn: churn}
				prefix := fmt.Sprintf("dens%s%dc%dp", name[:1], count, churn)
				r.start = idlePods(b, ctx, a.dir, prefix, count, pod)
				if settleFromWrite {
					time.Sleep(max(0, settle-r.start))
				} else {
					time.Sleep(settle)
				}
				r.measure(b, a, window)
				results = append(results, r)
				removeManifests(b, ctx, a.dir, prefix, count)
				waitSandboxesStopped(b, ctx, prefix)
				a.stop(b)
			}
		}
	}
	cleanRuntime(b)
	fmt.Println()
	fmt.Printf("how the density figures were taken:\n")
	fmt.Printf("  runtime: %s, shared by the agents in turn (one agent at a time)\n", runtimeVersion())
	for _, d := range described {
		fmt.Printf("  %s\n", d)
	}
	fmt.Printf("  per agent, pod count and churn: the agent started on a clean runtime, 2 warm-up pods one at a time, then (churn > 0) that many other pods started and removed in batches of 30 by the same agent process,\n")
	fmt.Printf("  as a node that has run pods before (NODELET_BENCH_DENSITY_CHURN), then the idle pods' manifests written at once\n")
	fmt.Printf("  (%s), start = until all run: %s;\n", podText, describeStartWatch(noWatch))
	fmt.Printf("  then %v settling (%s), then a %v window: CPU = utime+stime (+ reaped children) of the agent's process from /proc/<pid>/stat, over the window's wall time;\n", settle, settleText, window)
	fmt.Printf("  RSS = VmRSS of /proc/<pid>/status at the window's end; containerd's CPU likewise, its shims' apart\n")
	fmt.Printf("  used = the agent's pages referenced in the window (1 written to /proc/<pid>/clear_refs at its start, Referenced of /proc/<pid>/smaps_rollup at its end, before the last scrape)\n")
	fmt.Printf("  the libraries alone: a program importing the %d packages nodelet's own packages import, and nothing of nodelet's, built as bin/nodelet is, its binary out of the page cache at start; VmRSS and RssAnon 5 s after its init functions ran\n", floor.imports)
	printDensityTable(os.Stdout, window, floor, results)
	for _, r := range results {
		if r.agent == "nodelet" {
			suffix := ""
			if r.churn > 0 {
				suffix = fmt.Sprintf("-churn%d", r.churn)
			}
			b.ReportMetric(r.rssMiB, fmt.Sprintf("MiB-nodelet-%dpods%s", r.pods, suffix))
			b.ReportMetric(r.cpu, fmt.Sprintf("%%cpu-nodelet-%dpods%s", r.pods, suffix))
		}
	}
}

// densityAgent is the named agent, allowed maxPods pods.
func densityAgent(b *testing.B, name string, maxPods int) *manifestAgent {
	var a *manifestAgent
	switch name {
	case "nodelet":
		a = newNodeletAgent(b)
	case "kubelet":
		a = newKubeletAgent(b)
	default:
		b.Fatalf("NODELET_BENCH_DENSITY_AGENTS: unknown agent %q (nodelet, kubelet)", name)
	}
	command := a.command
	a.command = func() *exec.Cmd {
		cmd := command()
		uncacheBinary(b, cmd.Path)
		// Both read --max-pods (the kubelet's flag is deprecated, not gone).
		cmd.Args = append(cmd.Args, "--max-pods", strconv.Itoa(maxPods))
		return cmd
	}
	return a
}

// churnPods starts and removes n pods under a in batches of 30, as a node
// that has run pods before the idle ones: what a pod leaves in the agent
// when it is gone is in the idle window then.
func churnPods(b *testing.B, a *manifestAgent, n int) {
	ctx := context.Background()
	for done := 0; done < n; done += 30 {
		k := min(30, n-done)
		prefix := fmt.Sprintf("churn%s%ds%dp", a.label[:1], a.starts, done)
		manifestPods(b, ctx, a.dir, prefix, k)
		removeManifests(b, ctx, a.dir, prefix, k)
		waitSandboxesStopped(b, ctx, prefix)
	}
}

// examplePod is examples/busybox.yaml, as a user copies it: the kubelet's
// default grace period, a shell that ignores SIGTERM.
const examplePod = `apiVersion: v1
kind: Pod
metadata:
  name: %s
spec:
  containers:
  - name: shell
    image: busybox:1.35
    command: ["sh", "-c", "echo hello from nodelet on $(hostname); while true; do sleep 3600; done"]
`

// uncacheBinary drops the pages of the agent's binary at path from the
// page cache (that file's only; pages a running process maps stay), so that
// each agent starts as after a boot or an install, its pages read from
// disk. A binary the Go linker has just written (nodelet: the harness
// builds it) is in the page cache as the linker wrote it, and far more of
// it ends up mapped: nodelet's file-backed RSS at start was 41 to 47 MiB
// that way, 35 to 37 MiB for the same binaries read from disk, and the
// kubelet's binary, built long before, never had that.
func uncacheBinary(b *testing.B, path string) {
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		b.Fatalf("drop %s from the page cache: %v", path, err)
	}
}

// idlePods writes count idle pods' manifests (a shell waiting on a sleep
// of an hour: nothing wakes in the pod) and returns the time until all
// their containers run (waitStarted: the runtime's events, not a poll
// whose own cost would slow the start it times).
func idlePods(b *testing.B, ctx context.Context, dir, prefix string, count int, pod string) time.Duration {
	b.Helper()
	start := time.Now()
	for i := range count {
		name := fmt.Sprintf("%s%02d", prefix, i) // as removeManifests names them
		writeManifestB(b, dir, name, fmt.Sprintf(pod, name))
	}
	return waitStarted(b, ctx, prefix, count).Sub(start)
}

// densityFloor is libraryFloor's measurement: the program's VmRSS and
// RssAnon, and how many packages it imports.
type densityFloor struct {
	rssMiB, anonMiB float64
	imports         int
}

type densityResult struct {
	agent string
	pods  int
	churn int // pods the agent process started and removed before
	start time.Duration
	// over the idle window, % of one core
	cpu, containerdCPU, shimsCPU float64
	// at its end
	rssMiB, anonMiB, heapMiB float64    // heapMiB < 0: unknown
	usedMiB                  float64    // referenced in the window; < 0: unknown
	ops                      runtimeOps // the agent's CRI calls in the window
	// the agent's allocations and collections in the window, per minute
	allocMiB, gcs float64
	// the whole machine in the window: busy CPU (% of one core, every
	// process) and the load averages at its start and end
	machine      float64
	load0, load1 string
}

// measure fills in the idle window's figures of the running agent a.
//
// Both agents' heap, allocations and collections come from their /metrics
// (go_memstats_*, go_gc_duration_seconds), as a user's scrape reads them.
// nodelet's /debug/pprof is asked only with NODELET_BENCH_PPROF: a heap
// profile as text symbolizes every sampled stack, and the binary's pages
// that reads stay in nodelet's RSS.
func (r *densityResult) measure(b *testing.B, a *manifestAgent, window time.Duration) {
	pid, containerd := a.cmd.Process.Pid, shared.containerd.PID()
	var api *nodeAPI
	dir := os.Getenv("NODELET_BENCH_PPROF")
	if r.agent == "nodelet" && dir != "" {
		api = nodeletAPI(b, a.cmd.Args)
	}
	profile := make(chan []byte, 1)
	metrics0 := a.metrics(b)
	ops0 := parseRuntimeOps(metrics0)
	agent0, containerd0, runtime0 := cpuSeconds(pid), cpuSeconds(containerd), runtimeCPUSeconds(containerd)
	machine0, _ := machineCPU()
	r.load0 = loadAverage()
	// Pages the agent touches from here on are referenced again; the
	// scrape above is before, the one after the window is after.
	r.usedMiB = -1
	cleared := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("1"), 0) == nil
	start := time.Now()
	if api != nil {
		// Allocations in the window: go tool pprof -base allocs-start allocs-end.
		if allocs, err := api.get("/debug/pprof/allocs"); err == nil {
			os.WriteFile(filepath.Join(dir, fmt.Sprintf("density-allocs-start-%d-c%d.pprof", r.pods, r.churn)), allocs, 0o644)
		}
		go func() {
			prof, err := api.get(fmt.Sprintf("/debug/pprof/profile?seconds=%d", int(window.Seconds())))
			if err != nil {
				b.Error(err)
			}
			profile <- prof
		}()
	}
	time.Sleep(window)
	if cleared {
		r.usedMiB = smapsRollupMiB(pid, "Referenced")
	}
	elapsed := time.Since(start).Seconds()
	r.machine = 100 * machineLoad(machine0, time.Since(start))
	r.load1 = loadAverage()
	r.cpu = 100 * (cpuSeconds(pid) - agent0) / elapsed
	r.containerdCPU = 100 * (cpuSeconds(containerd) - containerd0) / elapsed
	r.shimsCPU = 100*(runtimeCPUSeconds(containerd)-runtime0)/elapsed - r.containerdCPU
	metrics1 := a.metrics(b)
	r.ops = runtimeOps{}
	r.ops.add(ops0, parseRuntimeOps(metrics1))
	r.rssMiB, r.anonMiB = procStatusMiB(pid, "VmRSS"), procStatusMiB(pid, "RssAnon")
	if dir := os.Getenv("NODELET_BENCH_SMAPS"); dir != "" {
		// Where the RSS is: every mapping's resident pages, file-backed and anonymous.
		if smaps, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", pid)); err == nil {
			os.WriteFile(filepath.Join(dir, fmt.Sprintf("density-smaps-%s-%d-c%d.txt", r.agent, r.pods, r.churn)), smaps, 0o644)
		}
	}
	r.heapMiB = -1
	if v, ok := metricValue(metrics1, "go_memstats_heap_inuse_bytes"); ok {
		r.heapMiB = v / (1 << 20)
	}
	perMinute := float64(time.Minute) / float64(window)
	r.allocMiB = metricDelta(metrics0, metrics1, "go_memstats_alloc_bytes_total") / (1 << 20) * perMinute
	r.gcs = metricDelta(metrics0, metrics1, "go_gc_duration_seconds_count") * perMinute
	if api != nil {
		if prof := <-profile; len(prof) > 0 {
			os.WriteFile(filepath.Join(dir, fmt.Sprintf("density-cpu-%d-c%d.pprof", r.pods, r.churn)), prof, 0o644)
		}
		if allocs, err := api.get("/debug/pprof/allocs"); err == nil {
			os.WriteFile(filepath.Join(dir, fmt.Sprintf("density-allocs-end-%d-c%d.pprof", r.pods, r.churn)), allocs, 0o644)
		}
		if heap, err := api.get("/debug/pprof/heap"); err == nil {
			os.WriteFile(filepath.Join(dir, fmt.Sprintf("density-heap-%d-c%d.pprof", r.pods, r.churn)), heap, 0o644)
		}
	}
}

// nodeletAPI is the HTTPS API of the nodelet run with args, as its admin.
func nodeletAPI(b *testing.B, args []string) *nodeAPI {
	port, addr, root := lastFlag(args, "--port"), lastFlag(args, "--address"), lastFlag(args, "--root-dir")
	return &nodeAPI{base: "https://" + net.JoinHostPort(addr, port), client: adminClientTB(b, root)}
}

// metricDelta is how much the unlabelled series name grew from one
// Prometheus text to a later one.
func metricDelta(before, after, name string) float64 {
	b, _ := metricValue(before, name)
	a, _ := metricValue(after, name)
	return a - b
}

// metricValue is the value of the unlabelled series name in a Prometheus text.
func metricValue(text, name string) (float64, bool) {
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f, err == nil
		}
	}
	return 0, false
}

// procStatusMiB is one kB field of /proc/<pid>/status in MiB.
func procStatusMiB(pid int, field string) float64 {
	v, _ := procFileMiB(fmt.Sprintf("/proc/%d/status", pid), field)
	return v
}

// smapsRollupMiB is a field of /proc/<pid>/smaps_rollup in MiB; -1 when
// it cannot be read.
func smapsRollupMiB(pid int, field string) float64 {
	if v, ok := procFileMiB(fmt.Sprintf("/proc/%d/smaps_rollup", pid), field); ok {
		return v
	}
	return -1
}

// procFileMiB is the "field: N kB" line of a /proc file in MiB.
func procFileMiB(path, field string) (float64, bool) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseFloat(strings.Fields(v + " 0")[0], 64)
			return kb / 1024, err == nil
		}
	}
	return 0, false
}

// printDensityTable prints one row per agent and pod count, the nodelet
// rows' ratios to the kubelet's, and the goals at 100 pods.
func printDensityTable(w io.Writer, window time.Duration, floor densityFloor, results []densityResult) {
	fmt.Fprintf(w, "density: idle pods (sh waiting on sleep 3600), one containerd, agents one at a time, each binary out of the page cache at start; CPU over %v idle, %% of one core (shared machine: noisy)\n", window)
	fmt.Fprintf(w, "  %-8s %5s %5s %9s %9s %9s %9s %9s %10s %10s %11s\n", "agent", "pods", "churn", "start", "RSS MiB", "anon MiB", "used MiB", "heap MiB", "agent CPU", "containerd", "shims CPU")
	byKey := map[string]densityResult{}
	for _, r := range results {
		if _, ok := byKey[fmt.Sprintf("%s/%d", r.agent, r.pods)]; !ok { // the first churn: 0 by default
			byKey[fmt.Sprintf("%s/%d", r.agent, r.pods)] = r
		}
		byKey[fmt.Sprintf("%s/%d/%d", r.agent, r.pods, r.churn)] = r
		heap := "-"
		if r.heapMiB >= 0 {
			heap = fmt.Sprintf("%.1f", r.heapMiB)
		}
		used := "-"
		if r.usedMiB >= 0 {
			used = fmt.Sprintf("%.1f", r.usedMiB)
		}
		fmt.Fprintf(w, "  %-8s %5d %5d %8.1fs %9.1f %9.1f %9s %9s %9.2f%% %9.2f%% %10.2f%%\n", r.agent, r.pods, r.churn, r.start.Seconds(),
			r.rssMiB, r.anonMiB, used, heap, r.cpu, r.containerdCPU, r.shimsCPU)
	}
	fmt.Fprintf(w, "  %-8s %5s %5s %9s %9.1f %9.1f   (the libraries nodelet imports, their init functions run, nothing else)\n", "libs", "-", "-", "-", floor.rssMiB, floor.anonMiB)
	for _, r := range results {
		k, ok := byKey[fmt.Sprintf("kubelet/%d/%d", r.pods, r.churn)]
		if r.agent != "nodelet" || !ok {
			continue
		}
		used := "-"
		if r.usedMiB >= 0 && k.usedMiB > 0 {
			used = fmt.Sprintf("%.2fx", r.usedMiB/k.usedMiB)
		}
		fmt.Fprintf(w, "  nodelet ÷ kubelet at %d pods, churn %d: start %.2fx, RSS %.2fx, used %s, CPU %.2fx\n", r.pods, r.churn,
			r.start.Seconds()/k.start.Seconds(), r.rssMiB/k.rssMiB, used, r.cpu/max(k.cpu, 0.001))
	}
	for _, r := range results {
		fmt.Fprintf(w, "  %s, %d pods, churn %d: the machine in the window: %.0f%% of one core busy in all (the agent, the runtime and everything else on the machine); load average %s at its start, %s at its end\n",
			r.agent, r.pods, r.churn, r.machine, r.load0, r.load1)
		fmt.Fprintf(w, "  %s, %d pods, churn %d: per minute idle %.1f MiB allocated, %.0f GCs\n", r.agent, r.pods, r.churn, r.allocMiB, r.gcs)
		fmt.Fprintf(w, "  %s, %d pods, churn %d: CRI calls per minute idle:", r.agent, r.pods, r.churn)
		for _, op := range slices.Sorted(maps.Keys(r.ops)) {
			if n := r.ops[op].calls; n > 0 {
				fmt.Fprintf(w, " %s %.0f", op, n*float64(time.Minute)/float64(window))
			}
		}
		fmt.Fprintln(w)
	}
	if n, ok := byKey["nodelet/100"]; ok {
		fmt.Fprintf(w, "  goals at 100 idle pods: nodelet RSS ≤ 40 MiB (now %.1f, %s; used in the window: %.1f; the libraries alone: %.1f), CPU ≤ 0.3%% (now %.2f%%, %s)\n",
			n.rssMiB, verdict(n.rssMiB <= 40), n.usedMiB, floor.rssMiB, n.cpu, verdict(n.cpu <= 0.3))
	}
}

// machineCPU is the CPU time the whole machine has spent busy (every
// state but idle and iowait) and in all, in seconds of one core, from the
// first line of /proc/stat.
func machineCPU() (busy, total float64) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(data), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, 0
	}
	for i, v := range f[1:9] { // user nice system idle iowait irq softirq steal
		t, _ := strconv.ParseFloat(v, 64)
		total += t
		if i != 3 && i != 4 {
			busy += t
		}
	}
	return busy / 100, total / 100 // USER_HZ
}

// machineLoad is how busy the machine was between two machineCPU
// readings, in cores.
func machineLoad(busy0 float64, elapsed time.Duration) float64 {
	busy, _ := machineCPU()
	return (busy - busy0) / elapsed.Seconds()
}
