//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/pure/podspec"
)

// relistMetric counts the PLEG's relists.
const relistMetric = "kubelet_pleg_relist_duration_seconds_count"

const crashOncePod = `apiVersion: v1
kind: Pod
metadata: {name: %s}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: busybox:1.35
    command: ["sh", "-c", "sleep %.2f; exit 1"]
`

const idlePod = `apiVersion: v1
kind: Pod
metadata: {name: %s}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: busybox:1.35
    command: ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 3600 & wait; done"]
`

// BenchmarkPLEG measures the evented PLEG against the relisting one
// (the EventedPLEG feature gate on and off), each under its own nodelet on
// the shared runtime:
//
//   - exit to restart decision: pods whose container exits once (the first
//     crash is restarted at once); from the container's finished_at (CRI
//     ContainerStatus) to nodelet's first CRI call for the pod after it
//     (its sync looking at the runtime) and to the CreateContainer of the
//     restart, as a recording CRI proxy sees them; p50 and p99;
//   - idle CPU: nodelet's user+system CPU (/proc) over a window with 100
//     running pods, as % of one core, beside the runtime's (containerd and
//     its shims) in the same window.
//
// Evented numbers need a runtime with the CRI event stream (containerd
// 1.7 and later); without it, the evented nodelet relists too, as the
// table says. The window is a minute (NODELET_BENCH_WINDOW changes it), the
// exits 40 (NODELET_BENCH_EXITS); NODELET_BENCH_PPROF=dir writes nodelet's
// CPU profile of each idle window there. It asserts nothing (make bench).
func BenchmarkPLEG(b *testing.B) {
	window, exits, idle := 60*time.Second, 40, 100
	if s := os.Getenv("NODELET_BENCH_WINDOW"); s != "" {
		window, _ = time.ParseDuration(s)
	}
	if s := os.Getenv("NODELET_BENCH_EXITS"); s != "" {
		exits, _ = strconv.Atoi(s)
	}
	streams := runtimeStreams()
	type result struct {
		mode            string
		sync, restart   []time.Duration
		event           []time.Duration // exit to the runtime's stop event
		cpu, runtimeCPU float64
		relists         float64
		// means over the exits phase: the event's delay from the
		// runtime to nodelet, and one relist's duration
		eventDelay, relist time.Duration
	}
	var results []result
	modes := []bool{true, false}
	if os.Getenv("NODELET_BENCH_EVENTED_ONLY") != "" {
		modes = modes[:1]
	}
	for _, evented := range modes {
		mode := map[bool]string{true: "evented", false: "relist"}[evented]
		removeAllPods(shared.rt)
		rec := startCRIRecorder(b, "pleg-"+mode)
		dir := filepath.Join(shared.work, "pleg-bench-"+mode)
		os.MkdirAll(dir, 0o755)
		port := freePort(b)
		n := startNodelet(b, "--container-runtime-endpoint", rec.endpoint(), "--root-dir", filepath.Join(shared.work, "pleg-bench-root-"+mode),
			"--pod-manifest-path", dir, "--hostname-override", "e2e", "--pod-logs-dir", filepath.Join(shared.work, "pleg-bench-logs-"+mode),
			"--max-pods", "250", "--healthz-port", "0", "--read-only-port", port, "--address", "127.0.0.1", "--port", freePort(b),
			"--file-check-frequency", "1s", "--feature-gates", "EventedPLEG="+strconv.FormatBool(evented))
		ctx := context.Background()
		r := result{mode: mode}

		// Exit to restart decision: exits spread over ~8 s, so that one
		// relist seldom sees two.
		for i := range exits {
			name := fmt.Sprintf("crash%03d", i)
			writeManifestB(b, dir, name, fmt.Sprintf(crashOncePod, name, 10+0.2*float64(i)))
		}
		r.sync, r.restart, r.event = exitToRestart(b, ctx, rec, "crash", exits)
		text := httpGetB(b, "http://127.0.0.1:"+port+"/metrics")
		r.eventDelay = meanSeconds(text, "kubelet_evented_pleg_connection_latency_seconds")
		r.relist = meanSeconds(text, "kubelet_pleg_relist_duration_seconds")
		removeBenchPods(b, ctx, dir, "crash")

		// Idle CPU with 100 running pods.
		for i := range idle {
			name := fmt.Sprintf("idle%03d", i)
			writeManifestB(b, dir, name, fmt.Sprintf(idlePod, name))
		}
		waitRunning(b, ctx, "idle", idle)
		time.Sleep(20 * time.Second) // start-up work ends
		metrics := "http://127.0.0.1:" + port + "/metrics"
		relists0, _ := sumSeries(httpGetB(b, metrics), relistMetric, nil)
		pid := n.cmd.Process.Pid
		nodelet0, runtime0 := cpuSeconds(pid), runtimeCPUSeconds(shared.containerd.PID())
		start := time.Now()
		if dir := os.Getenv("NODELET_BENCH_PPROF"); dir != "" {
			// The window's CPU profile, for `go tool pprof`.
			prof, err := n.api(b).get(fmt.Sprintf("/debug/pprof/profile?seconds=%d", int(window.Seconds())))
			if err != nil {
				b.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "pleg-idle-"+mode+".pprof"), prof, 0o644); err != nil {
				b.Fatal(err)
			}
		}
		time.Sleep(window - time.Since(start))
		elapsed := time.Since(start).Seconds()
		r.cpu = 100 * (cpuSeconds(pid) - nodelet0) / elapsed
		r.runtimeCPU = 100 * (runtimeCPUSeconds(shared.containerd.PID()) - runtime0) / elapsed
		relists1, _ := sumSeries(httpGetB(b, metrics), relistMetric, nil)
		r.relists = (relists1 - relists0) / elapsed * 60
		removeBenchPods(b, ctx, dir, "idle")
		n.stop(b)
		results = append(results, r)
	}

	fmt.Printf("\nPLEG: evented (CRI container events) against relist (every 1s); runtime streams events: %v\n", streams)
	fmt.Printf("%-8s | %-27s | %-27s | %-34s | %s\n", "mode", "exit→sync p50 / p99", "exit→restart p50 / p99",
		fmt.Sprintf("idle CPU, %d pods (%% of a core)", idle), "relists/min idle | mean event delay, relist")
	for _, r := range results {
		fmt.Printf("%-8s | %-27s | %-27s | nodelet %5.2f%%, runtime %5.2f%%  | %16.0f | %v, %v\n", r.mode,
			fmt.Sprintf("%v / %v (n=%d)", pct(r.sync, 50), pct(r.sync, 99), len(r.sync)),
			fmt.Sprintf("%v / %v", pct(r.restart, 50), pct(r.restart, 99)), r.cpu, r.runtimeCPU, r.relists, r.eventDelay, r.relist)
	}
	for _, r := range results {
		if len(r.event) > 0 {
			fmt.Printf("%s: the runtime's own share, exit to its stop event created: p50 %v p99 %v\n", r.mode, pct(r.event, 50), pct(r.event, 99))
		}
	}
	if len(results) == 2 {
		fmt.Printf("goals: evented exit→restart p50 ≤ 50ms: %s; idle CPU ≤ 0.3%% at %d pods: evented %s, relist %s\n",
			verdict(pct(results[0].restart, 50) <= 50*time.Millisecond), idle,
			verdict(results[0].cpu <= 0.3), verdict(results[1].cpu <= 0.3))
	}
}

// runtimeStreams says whether the shared runtime has the CRI container
// event stream.
func runtimeStreams() bool {
	return probeEventStream() == nil
}

// exitToRestart waits until each of the count pods named prefix* had its
// container exit once and restarted, then returns per pod the time from
// the exit (finished_at) to nodelet's first CRI call for the pod after it
// and to the CreateContainer of the restart.
func exitToRestart(b *testing.B, ctx context.Context, rec *criRecorder, prefix string, count int) (toSync, restart, event []time.Duration) {
	t0 := time.Now()
	// The runtime's own share: when it created each stop event.
	streamCtx, stop := context.WithCancel(ctx)
	events := make(chan *runtimeapi.ContainerEventResponse, 1000)
	go shared.rt.ContainerEvents(streamCtx, events, nil)
	var stopped sync.Map // container ID → time.Time the runtime created its stop event
	go func() {
		for {
			select {
			case <-streamCtx.Done():
				return
			case ev := <-events:
				if ev.ContainerEventType == runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT {
					stopped.LoadOrStore(ev.ContainerId, time.Unix(0, ev.CreatedAt))
				}
			}
		}
	}()
	defer stop()
	finished, ids := map[string]time.Time{}, map[string]string{}
	deadline := time.Now().Add(4 * time.Minute)
	for len(finished) < count && time.Now().Before(deadline) {
		cs, err := shared.rt.ListContainers(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		for _, c := range cs {
			pod := c.Labels[podspec.LabelPodName]
			if len(pod) < len(prefix) || pod[:len(prefix)] != prefix || c.GetMetadata().GetAttempt() != 0 || c.State != runtimeapi.ContainerState_CONTAINER_EXITED {
				continue
			}
			if _, ok := finished[pod]; ok {
				continue
			}
			st, err := shared.rt.ContainerStatus(ctx, c.Id)
			if err == nil && st.GetStatus().GetFinishedAt() > 0 {
				finished[pod] = time.Unix(0, st.GetStatus().GetFinishedAt())
				ids[pod] = c.Id
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(finished) < count {
		b.Fatalf("%s: %d of %d containers exited within 4 minutes", prefix, len(finished), count)
	}
	time.Sleep(3 * time.Second) // the last restarts are made
	firstCall, create := map[string]time.Time{}, map[string]time.Time{}
	for _, c := range rec.since(t0) {
		end, ok := finished[c.pod]
		if !ok || c.start.Before(end) {
			continue
		}
		if _, seen := firstCall[c.pod]; !seen {
			firstCall[c.pod] = c.start
		}
		if _, seen := create[c.pod]; !seen && c.method == "CreateContainer" {
			create[c.pod] = c.start
		}
	}
	for pod, end := range finished {
		if t, ok := firstCall[pod]; ok {
			toSync = append(toSync, t.Sub(end))
		}
		if t, ok := create[pod]; ok {
			restart = append(restart, t.Sub(end))
		}
		if t, ok := stopped.Load(ids[pod]); ok {
			event = append(event, t.(time.Time).Sub(end))
		}
	}
	return toSync, restart, event
}

// removeBenchPods removes the manifests of the pods named prefix* and
// waits until their containers are gone from the running ones.
func removeBenchPods(b *testing.B, ctx context.Context, dir, prefix string) {
	for _, f := range mustGlob(b, filepath.Join(dir, prefix+"*.yaml")) {
		os.Remove(f)
	}
	waitRunning(b, ctx, prefix, 0)
	waitSandboxesStopped(b, ctx, prefix)
}

// meanSeconds is the mean of the histogram name in Prometheus text, 0
// when it has no samples.
func meanSeconds(text, name string) time.Duration {
	sum, err1 := sumSeries(text, name+"_sum", nil)
	count, err2 := sumSeries(text, name+"_count", nil)
	if err1 != nil || err2 != nil || count == 0 {
		return 0
	}
	return time.Duration(sum / count * float64(time.Second)).Round(100 * time.Microsecond)
}

// pct is the p-th percentile of ds (nearest rank), rounded to 0.1 ms; 0
// when ds is empty.
func pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (p*len(s)+99)/100 - 1
	return s[max(i, 0)].Round(100 * time.Microsecond)
}
