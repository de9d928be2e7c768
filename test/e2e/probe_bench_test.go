//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

const execProbePod = `apiVersion: v1
kind: Pod
metadata: {name: %s}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: busybox:1.35
    command: ["sh", "-c", "touch /tmp/healthy; trap 'exit 0' TERM; while true; do sleep 1; done"]
    livenessProbe:
      exec: {command: ["cat", "/tmp/healthy"]}
      periodSeconds: 1
`

const httpProbePod = `apiVersion: v1
kind: Pod
metadata: {name: %s}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: web
    image: busybox:1.35
    command: ["sh", "-c", "mkdir -p /www && echo ok > /www/index.html && exec httpd -f -p 8080 -h /www"]
    readinessProbe:
      httpGet: {path: /, port: 8080}
      periodSeconds: 1
`

// BenchmarkProbes runs 100 pods with an HTTP readiness probe, then adds 100
// with an exec liveness probe, each probe every second, and measures a
// window of each phase: nodelet's own CPU and RSS, the probe latencies
// (from /metrics/probes), and what the runtime (containerd and its shims,
// with the processes exec probes start) spends in the same window. The
// window is a minute (NODELET_BENCH_WINDOW changes it).
func BenchmarkProbes(b *testing.B) {
	const perKind = 100
	window := 60 * time.Second
	if s := os.Getenv("NODELET_BENCH_WINDOW"); s != "" {
		window, _ = time.ParseDuration(s)
	}
	removeAllPods(shared.rt)
	dir := filepath.Join(shared.work, "probe-bench")
	os.MkdirAll(dir, 0o755)
	port := freePort(b)
	n := startNodelet(b, "--container-runtime-endpoint", shared.endpoint, "--root-dir", filepath.Join(shared.work, "probe-bench-root"),
		"--pod-manifest-path", dir, "--hostname-override", "e2e", "--pod-logs-dir", filepath.Join(shared.work, "probe-bench-logs"),
		"--max-pods", "250", "--healthz-port", "0", "--read-only-port", port, "--address", "127.0.0.1")
	ctx := context.Background()
	metrics := "http://127.0.0.1:" + port + "/metrics/probes"

	for i := 0; i < perKind; i++ {
		writeManifestB(b, dir, fmt.Sprintf("http%03d", i), fmt.Sprintf(httpProbePod, fmt.Sprintf("http%03d", i)))
	}
	waitRunning(b, ctx, "http", perKind)
	time.Sleep(15 * time.Second) // start-up work ends; probes settle into their periods
	fmt.Printf("\nphase 1: %d pods with an HTTP readiness probe every 1s\n", perKind)
	measureProbes(b, n.cmd.Process.Pid, metrics, window, "Readiness")

	for i := 0; i < perKind; i++ {
		writeManifestB(b, dir, fmt.Sprintf("exec%03d", i), fmt.Sprintf(execProbePod, fmt.Sprintf("exec%03d", i)))
	}
	waitRunning(b, ctx, "exec", perKind)
	time.Sleep(15 * time.Second)
	fmt.Printf("phase 2: the same plus %d pods with an exec liveness probe every 1s\n", perKind)
	measureProbes(b, n.cmd.Process.Pid, metrics, window, "Readiness", "Liveness")

	for _, f := range mustGlob(b, filepath.Join(dir, "*.yaml")) {
		os.Remove(f)
	}
	waitRunning(b, ctx, "exec", 0)
	waitRunning(b, ctx, "http", 0)
	removeAllPods(shared.rt)
}

// measureProbes prints, for one window, nodelet's and the runtime's CPU,
// nodelet's RSS and the latency of each probe type.
func measureProbes(b *testing.B, pid int, metricsURL string, window time.Duration, probeTypes ...string) {
	before := httpGetB(b, metricsURL)
	nodelet0, runtime0 := cpuSeconds(pid), runtimeCPUSeconds(shared.containerd.PID())
	start := time.Now()
	time.Sleep(window)
	elapsed := time.Since(start).Seconds()
	nodelet := cpuSeconds(pid) - nodelet0
	runtime := runtimeCPUSeconds(shared.containerd.PID()) - runtime0
	after := httpGetB(b, metricsURL)
	fmt.Printf("  nodelet: CPU %.1f%% of one core, RSS %.0f MiB; runtime (containerd + shims + exec'd processes): CPU %.1f%% of one core, %.1fx nodelet's\n",
		100*nodelet/elapsed, rssMiB(pid), 100*runtime/elapsed, runtime/math.Max(nodelet, 0.001))
	for _, kind := range probeTypes {
		h := histogramDelta(before, after, kind)
		fmt.Printf("  %s probes: %d in %.0fs (%.1f/s), latency p50 %s p99 %s\n", kind, int(h.count), elapsed, h.count/elapsed,
			fmtSeconds(h.quantile(0.5)), fmtSeconds(h.quantile(0.99)))
	}
}

func writeManifestB(b *testing.B, dir, name, content string) {
	if err := os.WriteFile(filepath.Join(dir, name+".yaml"), []byte(content), 0o644); err != nil {
		b.Fatal(err)
	}
}

func mustGlob(b *testing.B, pattern string) []string {
	m, err := filepath.Glob(pattern)
	if err != nil {
		b.Fatal(err)
	}
	return m
}

func httpGetB(b *testing.B, url string) string { return httpGet(b, url) }

// cpuSeconds is a process's user+system CPU time, its waited-for children
// included.
func cpuSeconds(pid int) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	fields := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+2:]))
	var ticks float64
	for _, i := range []int{11, 12, 13, 14} { // utime stime cutime cstime
		v, _ := strconv.ParseFloat(fields[i], 64)
		ticks += v
	}
	return ticks / 100 // USER_HZ
}

// runtimeCPUSeconds adds containerd and every containerd shim.
func runtimeCPUSeconds(containerdPID int) float64 {
	total := cpuSeconds(containerdPID)
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); strings.HasPrefix(string(comm), "containerd-shim") {
			total += cpuSeconds(pid)
		}
	}
	return total
}

func rssMiB(pid int) float64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) >= 2 && fields[0] == "VmRSS:" {
			kb, _ := strconv.ParseFloat(fields[1], 64)
			return kb / 1024
		}
	}
	return 0
}

type histogram struct {
	bounds []float64
	counts []float64 // cumulative
	count  float64
}

var bucketLine = regexp.MustCompile(`^prober_probe_duration_seconds_bucket\{(.*)\} (\S+)$`)

// histogramBuckets sums the probe duration buckets of one probe type.
func histogramBuckets(text, probeType string) map[float64]float64 {
	out := map[float64]float64{}
	for _, line := range strings.Split(text, "\n") {
		m := bucketLine.FindStringSubmatch(line)
		if m == nil || !strings.Contains(m[1], `probe_type="`+probeType+`"`) {
			continue
		}
		le := regexp.MustCompile(`le="([^"]+)"`).FindStringSubmatch(m[1])
		bound, _ := strconv.ParseFloat(le[1], 64)
		v, _ := strconv.ParseFloat(m[2], 64)
		out[bound] += v
	}
	return out
}

func histogramDelta(before, after, probeType string) histogram {
	b, a := histogramBuckets(before, probeType), histogramBuckets(after, probeType)
	var h histogram
	for bound := range a {
		h.bounds = append(h.bounds, bound)
	}
	sort.Float64s(h.bounds)
	for _, bound := range h.bounds {
		h.counts = append(h.counts, a[bound]-b[bound])
	}
	if len(h.counts) > 0 {
		h.count = h.counts[len(h.counts)-1]
	}
	return h
}

// quantile interpolates linearly inside the bucket, as Prometheus'
// histogram_quantile does.
func (h histogram) quantile(q float64) float64 {
	if h.count == 0 {
		return math.NaN()
	}
	rank := q * h.count
	lower, prev := 0.0, 0.0
	for i, bound := range h.bounds {
		if h.counts[i] >= rank {
			if math.IsInf(bound, 1) {
				return lower
			}
			return lower + (bound-lower)*(rank-prev)/math.Max(h.counts[i]-prev, 1)
		}
		lower, prev = bound, h.counts[i]
	}
	return lower
}

func fmtSeconds(s float64) string {
	if math.IsNaN(s) {
		return "n/a"
	}
	return time.Duration(s * float64(time.Second)).Round(100 * time.Microsecond).String()
}
