//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/pure/podspec"
)

// BenchmarkPodStartup measures, in one run against the same containerd,
// the time from a manifest written to its container running under nodelet
// and under the upstream kubelet (standalone, of the release nodelet's k8s.io
// modules are), and the floor: the same pods made by direct CRI calls
// (sandbox, create, start; concurrently for the batch).
//
// It measures what a user gets who runs nodelet on a containerd of their
// own (--container-runtime-endpoint, default flags otherwise: see
// newNodeletAgent), the procedure of the independent measurement of issue
// 28 (item 5): each round runs the agents one after the other, never two
// at once, in an order that rotates from round to round; each agent starts
// on a clean runtime, starts two warm-up pods one at a time (not
// measured), then single pods one at a time, then a batch at once, and is
// stopped after its pods are gone. "Running" is what the CRI shows: the
// runtime's CONTAINER_STARTED_EVENT for every container of the pods,
// confirmed by ListContainers (waitStarted; a runtime without the event
// stream is polled). It prints how it was taken, the medians with their
// ratios to the kubelet and to the floor, the CPU of a single start, and
// the CRI calls per pod of both agents; it asserts nothing (make bench).
//
// Knobs: NODELET_BENCH_NODELET_BASE=path (another nodelet binary measured
// beside this one, as "nodelet-base"), NODELET_BENCH_ROUNDS (3), NODELET_BENCH_SINGLE (single pods per
// agent and round, 3), NODELET_BENCH_BATCH (30), NODELET_BENCH_WARMUPS
// (2), NODELET_BENCH_RESTART=each (the agent restarted, with its warm-ups,
// before every measured start: how this benchmark measured before issue
// 28, with NODELET_BENCH_WARMUPS=1), NODELET_BENCH_PAUSE=duration (a wait
// before each measured start), NODELET_BENCH_QUICK (a trial of the
// harness itself: 1 round, 2 single pods, a batch of 10).
func BenchmarkPodStartup(b *testing.B) {
	ctx := context.Background()
	pullBusybox(b)
	pr := startupProcedureFromEnv(b)
	cleanRuntime(b)
	noWatch := followStarts(b)
	floor := captureFloorRequests(b)
	agents := []benchAgent{newRawCRI(b, floor), newKubeletAgent(b), newNodeletAgent(b)}
	if base := os.Getenv("NODELET_BENCH_NODELET_BASE"); base != "" {
		// Another nodelet binary beside this one, in the same rounds: a
		// change's before and after under the same load.
		agents = append(agents, newNodeletAgentOf(b, "nodelet-base", base))
	}
	names := make([]string, len(agents))
	for i, a := range agents {
		names[i] = a.name()
	}
	one := make([][]time.Duration, len(agents))
	many := make([][]time.Duration, len(agents))
	oneByRound := make([][][]time.Duration, len(agents))
	opsOne := make([]runtimeOps, len(agents))
	opsMany := make([]runtimeOps, len(agents))
	for i := range agents {
		opsOne[i], opsMany[i] = runtimeOps{}, runtimeOps{}
	}
	teardowns := make([][]time.Duration, len(agents))
	requests := make([]map[string]string, len(agents))
	traceOne := make([][]traceSummary, len(agents))
	traceMany := make([][]traceSummary, len(agents))
	starts := 0
	stagesOne := make([]runtimeOps, len(agents)) // nodelet's own account of its single pods' starts
	cpuOne := make([][]startCPU, len(agents))    // the CPU each single pod's start took
	for i := range agents {
		stagesOne[i] = runtimeOps{}
	}

	// measure starts count pods under agent i, which runs.
	measure := func(i, r, n, count int, times [][]time.Duration, ops []runtimeOps, traces [][]traceSummary) {
		a := agents[i]
		text := a.metrics(b)
		before, stages0 := parseRuntimeOps(text), parseStartStages(text)
		if count == pr.batch && count == 1 {
			b.Fatal("NODELET_BENCH_BATCH=1 names the batch's pod as the first single pod's")
		}
		prefix := fmt.Sprintf("%s-%d-r%02dn%02dp", agentPrefix(a), count, r, n)
		time.Sleep(pr.pause)
		cpu0 := takeStartCPU(a.pid())
		t0 := time.Now()
		took := a.startPods(b, ctx, prefix, count)
		times[i] = append(times[i], took)
		if count == 1 {
			cpuOne[i] = append(cpuOne[i], takeStartCPU(a.pid()).minus(cpu0))
			oneByRound[i][r] = append(oneByRound[i][r], took)
		}
		ops[i].add(before, parseRuntimeOps(a.metrics(b)))
		if requests[i] == nil {
			requests[i] = podRequest(b, ctx, prefix, agentPrefix(a))
		}
		if d := a.removePods(b, ctx, prefix, count); count == pr.batch {
			teardowns[i] = append(teardowns[i], d)
		}
		if count == 1 {
			// After the removal: the status stage is observed once the
			// status is published, which may be after the container was
			// seen running; a removal observes no start stage.
			stagesOne[i].add(stages0, parseStartStages(a.metrics(b)))
		}
		if rec := a.recorder(); rec != nil {
			// After the removal, so that the calls in flight when the
			// containers were seen running have returned.
			var calls []criCall
			for _, c := range rec.since(t0) {
				if !c.start.After(t0.Add(took)) {
					calls = append(calls, c)
				}
			}
			traces[i] = append(traces[i], summarizeTrace(calls, t0, prefix, took))
		}
	}
	// session runs f with agent i started on a clean runtime and warmed up.
	session := func(i int, f func()) {
		a := agents[i]
		a.start(b)
		warmUp(b, a, pr.warmups, starts)
		starts++
		f()
		a.stop(b)
		cleanRuntime(b)
	}
	for i := range agents {
		oneByRound[i] = make([][]time.Duration, pr.rounds)
	}
	load0, began := loadAverage(), time.Now()
	machine0, _ := machineCPU()
	for r := 0; r < pr.rounds; r++ {
		for k := range agents {
			i := (k + r) % len(agents)
			if pr.restartEach {
				for n := 0; n < pr.single; n++ {
					session(i, func() { measure(i, r, n, 1, one, opsOne, traceOne) })
				}
				session(i, func() { measure(i, r, 0, pr.batch, many, opsMany, traceMany) })
				continue
			}
			session(i, func() {
				for n := 0; n < pr.single; n++ {
					measure(i, r, n, 1, one, opsOne, traceOne)
				}
				measure(i, r, 0, pr.batch, many, opsMany, traceMany)
			})
		}
	}

	took := time.Since(began)
	busy := machineLoad(machine0, took)
	fmt.Println()
	printStartupHow(os.Stdout, pr, agents, noWatch)
	fmt.Printf("  the machine over the %v the measurements took: %.0f%% of one core busy in all (the agents, the runtime, the benchmark and everything else); load average %s at the start, %s at the end\n",
		took.Round(time.Second), 100*busy, load0, loadAverage())
	fmt.Println()
	printStartupTable(os.Stdout, names, pr, one, many, oneByRound, teardowns)
	fmt.Println()
	seccomp := func(r map[string]string) string {
		if a, ok := r["sandbox.runtimeSpec.linux.seccomp.defaultAction"]; ok {
			return "filter, default " + a
		}
		return "none"
	}
	fmt.Printf("sandbox seccomp (OCI spec): raw CRI %s; kubelet %s; nodelet %s\n",
		seccomp(requests[0]), seccomp(requests[1]), seccomp(requests[2]))
	printRequestDiff(os.Stdout, names[1], names[2], requests[1], requests[2])
	if len(traceOne[1]) > 0 { // what the floor leaves out, which its calls may not cost
		printRequestDiff(os.Stdout, names[0], names[2], requests[0], requests[2])
	}
	fmt.Println()
	printOpsTable(os.Stdout, "start of 1 pod", len(one[1]), names[1:], opsOne[1:])
	printOpsTable(os.Stdout, fmt.Sprintf("start of %d pods", pr.batch), pr.batch*len(many[1]), names[1:], opsMany[1:])
	for i, st := range stagesOne {
		if len(st) == 0 {
			continue
		}
		fmt.Printf("%s's own account of its single pods' starts (nodelet_pod_start_stage_duration_seconds, mean):", names[i])
		for _, stage := range []string{"dispatch", "observe", "plan", "sandbox", "containers", "status"} {
			if s := st[stage]; s.calls > 0 {
				fmt.Printf(" %s %.1fms", stage, 1000*s.seconds/s.calls)
			}
		}
		fmt.Println()
	}
	printStartCPU(os.Stdout, names, cpuOne)
	if len(traceOne[1]) > 0 {
		fmt.Println()
		printTrace(os.Stdout, "start of 1 pod", names, traceOne)
		printTrace(os.Stdout, fmt.Sprintf("start of %d pods", pr.batch), names, traceMany)
	}
	raw, kubelet, nodelet := 0, 1, 2
	b.ReportMetric(float64(median(one[nodelet])-median(one[raw]))/1e6, "ms-nodelet-over-raw-1pod")
	b.ReportMetric(float64(median(one[kubelet])-median(one[raw]))/1e6, "ms-kubelet-over-raw-1pod")
	b.ReportMetric(float64(median(many[nodelet]))/float64(median(many[kubelet])), fmt.Sprintf("nodelet/kubelet-%dpods", pr.batch))
	b.ReportMetric(float64(median(many[nodelet]))/float64(median(many[raw])), fmt.Sprintf("nodelet/raw-%dpods", pr.batch))
}

// startCPU is CPU time in seconds, as read at one moment, or taken over a
// pod's start: the agent's process (with the children it waited for) and
// the whole machine's (everything busy: the agent, the runtime, its shims,
// runc, the CNI plugins, the benchmark, the kernel's work).
type startCPU struct{ agent, machine float64 }

func takeStartCPU(agentPID int) startCPU {
	var c startCPU
	if agentPID != 0 {
		c.agent = cpuSeconds(agentPID)
	}
	c.machine, _ = machineCPU()
	return c
}

func (c startCPU) minus(o startCPU) startCPU {
	return startCPU{c.agent - o.agent, c.machine - o.machine}
}

// printStartCPU gives the mean CPU of the single pods' starts. The clock
// ticks are 10 ms, so one start's figure is coarse and only the mean of
// many says something. The runtime's part is not split out: its shims
// exit at times of their own after a pod's removal, and a process gone
// takes its time with it.
func printStartCPU(w io.Writer, names []string, cpu [][]startCPU) {
	fmt.Fprintf(w, "CPU of a single pod's start, mean ms from the manifest written to its container seen running (/proc/<pid>/stat and /proc/stat, 10 ms ticks)\n")
	fmt.Fprintf(w, "  %-30s", "")
	for _, n := range names {
		fmt.Fprintf(w, " %12s", n)
	}
	fmt.Fprintln(w)
	for _, row := range []struct {
		label string
		f     func(startCPU) float64
	}{
		{"agent", func(c startCPU) float64 { return c.agent }},
		{"the rest of the machine", func(c startCPU) float64 { return c.machine - c.agent }},
		{"the whole machine", func(c startCPU) float64 { return c.machine }},
	} {
		fmt.Fprintf(w, "  %-30s", row.label)
		for i := range names {
			sum := 0.0
			for _, c := range cpu[i] {
				sum += row.f(c)
			}
			cell := "-"
			if len(cpu[i]) > 0 {
				cell = fmt.Sprintf("%.1f", 1000*sum/float64(len(cpu[i])))
			}
			fmt.Fprintf(w, " %12s", cell)
		}
		fmt.Fprintln(w)
	}
}

// startupProcedure is how BenchmarkPodStartup measures (its knobs).
type startupProcedure struct {
	rounds, single, batch, warmups int
	// restartEach: every measured start in an agent started for it.
	restartEach bool
	// pause is the wait before each measured start.
	pause time.Duration
}

func startupProcedureFromEnv(b *testing.B) startupProcedure {
	pr := startupProcedure{rounds: 3, single: 3, batch: 30, warmups: 2}
	if os.Getenv("NODELET_BENCH_QUICK") != "" {
		pr.rounds, pr.single, pr.batch = 1, 2, 10
	}
	for _, k := range []struct {
		env string
		v   *int
		min int
	}{{"NODELET_BENCH_ROUNDS", &pr.rounds, 1}, {"NODELET_BENCH_SINGLE", &pr.single, 1},
		{"NODELET_BENCH_BATCH", &pr.batch, 1}, {"NODELET_BENCH_WARMUPS", &pr.warmups, 0}} {
		if s := os.Getenv(k.env); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < k.min {
				b.Fatalf("%s=%q: want a whole number ≥ %d", k.env, s, k.min)
			}
			*k.v = n
		}
	}
	if s := os.Getenv("NODELET_BENCH_PAUSE"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			b.Fatalf("NODELET_BENCH_PAUSE=%q: want a duration ≥ 0", s)
		}
		pr.pause = d
	}
	switch s := os.Getenv("NODELET_BENCH_RESTART"); s {
	case "", "round":
	case "each":
		pr.restartEach = true
	default:
		b.Fatalf("NODELET_BENCH_RESTART=%q: want round or each", s)
	}
	return pr
}

// agentPrefix is the agent's name as pod names start with it.
func agentPrefix(a benchAgent) string { return strings.ToLower(strings.Fields(a.name())[0]) }

// warmUp starts and removes n pods one at a time under the agent a just
// started (the n-th session of the benchmark): healthy is not yet running
// pods (the file source's first read, the first relist), and the warm-ups
// bring the agent to where the measured pods find it, as they would on a
// node that has run for a while. An agent with metrics is then waited for
// until its last StopPodSandbox has returned (the sandbox is no longer
// ready while the call still tears its network down), so that the call
// is not counted with the measured pods' calls.
func warmUp(b *testing.B, a benchAgent, n, session int) {
	b.Helper()
	ctx := context.Background()
	stops := parseRuntimeOps(a.metrics(b))["stop_podsandbox"].calls
	for k := range n {
		prefix := fmt.Sprintf("warm%s%ds%dp", agentPrefix(a)[:1], session, k)
		a.startPods(b, ctx, prefix, 1)
		a.removePods(b, ctx, prefix, 1)
	}
	if a.metrics(b) == "" {
		return
	}
	deadline := time.Now().Add(time.Minute)
	for parseRuntimeOps(a.metrics(b))["stop_podsandbox"].calls < stops+float64(n) {
		if time.Now().After(deadline) {
			b.Fatalf("%s: not %d StopPodSandbox calls for the warm-up pods within a minute", a.name(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// printStartupHow says how BenchmarkPodStartup took its figures, so that an
// independent harness can take them again.
func printStartupHow(w io.Writer, pr startupProcedure, agents []benchAgent, noWatch string) {
	fmt.Fprintf(w, "how the pod start figures were taken:\n")
	fmt.Fprintf(w, "  runtime: %s, shared by the agents in turn (one agent at a time); %s\n", runtimeVersion(), shared.endpoint)
	for _, a := range agents {
		if d, ok := a.(interface{ describe() string }); ok {
			fmt.Fprintf(w, "  %s\n", d.describe())
		}
	}
	fmt.Fprintf(w, "  pod: busybox:1.35, one container, sh -c 'trap \"exit 0\" TERM; while true; do sleep 1; done' (manifest in the agent's --pod-manifest-path; raw CRI: the sandbox and container config nodelet sends, by direct calls, printed below)\n")
	how := fmt.Sprintf("each agent started once per round, %d warm-up pods one at a time (not measured), then %d single pods one at a time, then %d pods at once, then stopped",
		pr.warmups, pr.single, pr.batch)
	if pr.restartEach {
		how = fmt.Sprintf("each agent started afresh for every measured start (NODELET_BENCH_RESTART=each), %d warm-up pods one at a time after each start; %d single pods and one batch of %d per round",
			pr.warmups, pr.single, pr.batch)
	}
	if pr.pause > 0 {
		how += fmt.Sprintf("; a pause of %v before each measured start (NODELET_BENCH_PAUSE)", pr.pause)
	}
	fmt.Fprintf(w, "  procedure: %d rounds, agents in an order rotating from round to round; %s; a clean runtime around every agent start; each start after the last pods' removal finished (raw CRI: StopPodSandbox and RemovePodSandbox returned; an agent: its manifests removed, its StopPodSandbox calls for them returned, as its kubelet_runtime_operations_total counts them)\n", pr.rounds, how)
	fmt.Fprintf(w, "  measured: from the first manifest written (raw CRI: the first call) to %s; medians over every start\n", describeStartWatch(noWatch))
}

// runtimeVersion is what the shared containerd says of itself.
func runtimeVersion() string {
	out, err := exec.Command(shared.containerdBin, "--version").Output()
	if err != nil {
		return shared.containerdBin
	}
	return strings.TrimSpace(string(out)) + " (" + shared.containerdBin + ")"
}

// printStartupTable prints each agent's median pod start, 1 pod and a
// batch, with its ratio to the kubelet and to raw CRI, and the goals.
// names[0] is raw CRI, names[1] the kubelet, names[2] nodelet.
func printStartupTable(w io.Writer, names []string, pr startupProcedure, one, many [][]time.Duration, oneByRound [][][]time.Duration, teardowns [][]time.Duration) {
	batch := pr.batch
	ms := func(d time.Duration) string { return fmt.Sprintf("%.0fms", float64(d)/1e6) }
	row := func(label string, cells []string, goal string) {
		fmt.Fprintf(w, "  %-30s", label)
		for _, c := range cells {
			fmt.Fprintf(w, " %12s", c)
		}
		fmt.Fprintf(w, "   %s\n", goal)
	}
	cells := func(f func(i int) string) []string {
		out := make([]string, len(names))
		for i := range names {
			out[i] = f(i)
		}
		return out
	}
	fmt.Fprintf(w, "pod start, manifest written to every container running as the CRI shows it (one containerd, agents one at a time)\n")
	row("", names, "goal")
	m1 := cells(func(i int) string { return ms(median(one[i])) })
	row(fmt.Sprintf("1 pod, median of %d", len(one[0])), m1, "")
	row("  minus raw CRI", cells(func(i int) string { return "+" + ms(median(one[i])-median(one[0])) }),
		fmt.Sprintf("nodelet within +10ms (now %s)", verdict(median(one[2])-median(one[0]) <= 10*time.Millisecond)))
	row("  ÷ kubelet", cells(func(i int) string { return fmt.Sprintf("%.2fx", float64(median(one[i]))/float64(median(one[1]))) }), "")
	row(fmt.Sprintf("%d pods, median of %d", batch, len(many[0])), cells(func(i int) string { return ms(median(many[i])) }), "")
	row("  ÷ kubelet", cells(func(i int) string { return fmt.Sprintf("%.2fx", float64(median(many[i]))/float64(median(many[1]))) }),
		fmt.Sprintf("nodelet ≤ 0.95x (now %s)", verdict(float64(median(many[2])) <= 0.95*float64(median(many[1])))))
	row("  ÷ raw CRI", cells(func(i int) string { return fmt.Sprintf("%.2fx", float64(median(many[i]))/float64(median(many[0]))) }), "")
	row(fmt.Sprintf("tear down %d pods, median", batch), cells(func(i int) string {
		if median(teardowns[i]) == 0 {
			return "-"
		}
		return ms(median(teardowns[i]))
	}), "(to all containers stopped)")
	for i, n := range names {
		var perRound []string
		for _, r := range oneByRound[i] {
			perRound = append(perRound, fmt.Sprint(roundAll(r)))
		}
		fmt.Fprintf(w, "  %s by round: 1 pod %s; %d pods %v\n", n, strings.Join(perRound, " "), batch, roundAll(many[i]))
	}
}

func verdict(met bool) string {
	if met {
		return "met"
	}
	return "NOT met"
}

func pullBusybox(b *testing.B) string {
	ref, err := shared.rt.PullImage(context.Background(), &runtimeapi.ImageSpec{Image: "docker.io/library/busybox:1.35"}, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	return ref
}

// manifestPods writes count manifests and returns the time until all their
// containers run (waitStarted).
func manifestPods(b *testing.B, ctx context.Context, dir, prefix string, count int) time.Duration {
	b.Helper()
	start := time.Now()
	for i := 0; i < count; i++ {
		name := fmt.Sprintf("%s%02d", prefix, i)
		if err := os.WriteFile(filepath.Join(dir, name+".yaml"), []byte(fmt.Sprintf(sleeperPod, name)), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	return waitStarted(b, ctx, prefix, count).Sub(start)
}

func removeManifests(b *testing.B, ctx context.Context, dir, prefix string, count int) time.Duration {
	start := time.Now()
	for i := 0; i < count; i++ {
		os.Remove(filepath.Join(dir, fmt.Sprintf("%s%02d.yaml", prefix, i)))
	}
	waitRunning(b, ctx, prefix, 0)
	return time.Since(start)
}

// waitRunning polls every 2 ms until exactly want containers of pods named
// prefix* run.
func waitRunning(b *testing.B, ctx context.Context, prefix string, want int) {
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		got := 0
		for _, c := range runningContainers(b, ctx) {
			if len(c.Labels[podspec.LabelPodName]) > len(prefix) && c.Labels[podspec.LabelPodName][:len(prefix)] == prefix {
				got++
			}
		}
		if got == want {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
	b.Fatalf("%s: not %d running containers within 3 minutes", prefix, want)
}

// runningContainers is every container the shared runtime lists RUNNING.
func runningContainers(b *testing.B, ctx context.Context) []*runtimeapi.Container {
	cs, err := shared.rt.ListContainers(ctx, &runtimeapi.ContainerFilter{
		State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING}})
	if err != nil {
		b.Fatal(err)
	}
	return cs
}

func median(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond)
	}
	return out
}

// waitSandboxesStopped polls until no sandbox of pods named prefix* is
// ready any more.
func waitSandboxesStopped(b *testing.B, ctx context.Context, prefix string) {
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		sbs, err := shared.rt.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{
			State: &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY}})
		if err != nil {
			b.Fatal(err)
		}
		left := 0
		for _, sb := range sbs {
			if strings.HasPrefix(sb.GetMetadata().GetName(), prefix) {
				left++
			}
		}
		if left == 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	b.Fatalf("%s: sandboxes still ready after 3 minutes", prefix)
}

// removeFloorPods removes the pods floorPods made, and only those, and
// their pod cgroups.
func removeFloorPods(b *testing.B, f *floorRequests) {
	ctx := context.Background()
	sbs, err := shared.rt.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{floorLabel: "floor"}})
	if err != nil {
		b.Fatal(err)
	}
	var parents []string
	for _, sb := range sbs {
		shared.rt.StopPodSandbox(ctx, sb.Id)
		shared.rt.RemovePodSandbox(ctx, sb.Id)
		parents = append(parents, f.replacer("", sb.GetMetadata().GetUid()).Replace(f.sandbox.GetLinux().GetCgroupParent()))
	}
	removeFloorCgroups(parents)
	f.removeLogDirs()
}
