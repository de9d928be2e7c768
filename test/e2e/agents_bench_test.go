//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	remote "k8s.io/cri-client/pkg"

	"github.com/nodelet/nodelet/internal/pipeline/cri"
)

// The agents BenchmarkPodStartup compares: the floor (direct CRI calls), and
// two node agents given the same manifests on the same containerd, nodelet
// and the upstream kubelet of the release nodelet's k8s.io modules are.
// Only one of them ever runs at a time: each kills the pods it does not know.

// benchAgent starts pods one way.
type benchAgent interface {
	name() string
	// start brings the agent up; it returns once the agent is healthy
	// (warmUp then brings it to running pods).
	start(b *testing.B)
	// startPods starts count pods named prefix<NN> and returns the time
	// until all their containers run.
	startPods(b *testing.B, ctx context.Context, prefix string, count int) time.Duration
	// removePods removes them, returns once no sandbox of theirs is ready,
	// and gives the time until their containers had stopped.
	removePods(b *testing.B, ctx context.Context, prefix string, count int) time.Duration
	// stop ends the agent (the pods are removed before).
	stop(b *testing.B)
	// metrics is the agent's /metrics text, "" for none.
	metrics(b *testing.B) string
	// recorder is what records the agent's CRI calls, nil for none.
	recorder() *criRecorder
	// pid is the agent's process while it runs, 0 for none.
	pid() int
}

// rawCRI is the floor: the pods made by direct CRI calls.
type rawCRI struct {
	floor *floorRequests
	rt    *cri.Client  // shared.rt, or a client of rec
	rec   *criRecorder // nil unless NODELET_BENCH_TRACE is set
}

func newRawCRI(b *testing.B, floor *floorRequests) *rawCRI {
	r := &rawCRI{floor: floor, rt: shared.rt, rec: traceCRI(b, "raw")}
	if r.rec != nil {
		rt, err := cri.Dial(context.Background(), r.rec.endpoint(), cri.DefaultTimeouts(), slog.New(slog.DiscardHandler))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { rt.Close() })
		r.rt = rt
	}
	return r
}

func (r *rawCRI) name() string { return "raw CRI" }
func (r *rawCRI) describe() string {
	return "raw CRI: RunPodSandbox, CreateContainer, StartContainer per pod from the benchmark's own client, the pods of a batch concurrently; " +
		r.floor.describe()
}
func (r *rawCRI) start(*testing.B)          {}
func (r *rawCRI) stop(*testing.B)           {}
func (r *rawCRI) metrics(*testing.B) string { return "" }
func (r *rawCRI) recorder() *criRecorder    { return r.rec }
func (r *rawCRI) pid() int                  { return 0 }

// removePods stops and removes the sandboxes one after the other: no floor
// for an agent's tear down, so it reports none.
func (r *rawCRI) removePods(b *testing.B, _ context.Context, _ string, _ int) time.Duration {
	removeFloorPods(b, r.floor)
	return 0
}
func (r *rawCRI) startPods(b *testing.B, ctx context.Context, prefix string, count int) time.Duration {
	return floorPods(b, ctx, r.rt, r.floor, prefix, count)
}

// manifestAgent is a node agent run as a child process that reads static
// pod manifests from dir.
type manifestAgent struct {
	label   string
	dir     string // --pod-manifest-path
	logPath string // the agent's output, appended to at every start
	command func() *exec.Cmd
	healthz string // URL answering "ok" once the agent is up
	metricz string // URL of its Prometheus metrics
	starts  int
	rec     *criRecorder // nil unless NODELET_BENCH_TRACE is set
	note    string       // which of its flags are what, for describe
	binary  string       // nodelet's: the program command runs

	cmd  *exec.Cmd
	done chan struct{}
}

func (a *manifestAgent) name() string { return a.label }

func (a *manifestAgent) start(b *testing.B) {
	b.Helper()
	if err := os.MkdirAll(a.dir, 0o755); err != nil {
		b.Fatal(err)
	}
	log, err := os.OpenFile(a.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		b.Fatal(err)
	}
	defer log.Close() // the child has its own descriptor
	fmt.Fprintf(log, "\n===== start %d at %s\n", a.starts, time.Now().Format(time.RFC3339Nano))
	a.cmd = a.command()
	a.cmd.Stdout, a.cmd.Stderr = log, log
	if err := a.cmd.Start(); err != nil {
		b.Fatal(err)
	}
	a.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { cmd.Wait(); close(done) }(a.cmd, a.done)
	b.Cleanup(func() { a.stop(b) })

	deadline := time.Now().Add(2 * time.Minute)
	for {
		err := healthz(a.healthz)
		if err == nil {
			break
		}
		select {
		case <-a.done:
			b.Fatalf("%s exited at start: %v\n%s", a.label, a.cmd.ProcessState, tail(a.logPath, 40))
		default:
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s not healthy within 2 minutes: %v\n%s", a.label, err, tail(a.logPath, 40))
		}
		time.Sleep(20 * time.Millisecond)
	}
	a.starts++
}

// describe is the agent's command line, with what of it is the bench's and
// what the user's.
func (a *manifestAgent) describe() string {
	cmd := a.command()
	out := a.label + ": " + strings.Join(cmd.Args, " ")
	if a.note != "" {
		out += "\n    (" + a.note + ")"
	}
	return out
}

func (a *manifestAgent) startPods(b *testing.B, ctx context.Context, prefix string, count int) time.Duration {
	return manifestPods(b, ctx, a.dir, prefix, count)
}

func (a *manifestAgent) removePods(b *testing.B, ctx context.Context, prefix string, count int) time.Duration {
	stops := parseRuntimeOps(a.metrics(b))["stop_podsandbox"].calls
	took := removeManifests(b, ctx, a.dir, prefix, count)
	waitSandboxesStopped(b, ctx, prefix)
	a.waitStopsReturned(b, stops+float64(count))
	return took
}

// waitStopsReturned waits until the agent's StopPodSandbox calls that
// returned reach want (kubelet_runtime_operations_total counts a call when
// it returns). A sandbox shows NOTREADY once its pause process is gone,
// while the runtime still tears down its network: the raw CRI floor's
// removal returns after that, and a measured start that overlapped an
// agent's last stop would put the stop's cost in the agent's start.
func (a *manifestAgent) waitStopsReturned(b *testing.B, want float64) {
	deadline := time.Now().Add(time.Minute)
	for {
		got := parseRuntimeOps(a.metrics(b))["stop_podsandbox"].calls
		if got >= want {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s: %v StopPodSandbox calls returned a minute after its pods' sandboxes stopped, want %v", a.label, got, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (a *manifestAgent) stop(b *testing.B) {
	if a.cmd == nil {
		return
	}
	select {
	case <-a.done:
	default:
		a.cmd.Process.Signal(os.Interrupt)
		select {
		case <-a.done:
		case <-time.After(time.Minute):
			a.cmd.Process.Kill()
			<-a.done
			b.Errorf("%s did not exit within a minute of SIGINT", a.label)
		}
	}
	a.cmd = nil
}

func (a *manifestAgent) metrics(b *testing.B) string { return httpGetB(b, a.metricz) }
func (a *manifestAgent) recorder() *criRecorder      { return a.rec }
func (a *manifestAgent) pid() int {
	if a.cmd == nil || a.cmd.Process == nil {
		return 0
	}
	return a.cmd.Process.Pid
}

// runtimeEndpoint is the shared containerd, or the recorder in front of it.
func (a *manifestAgent) runtimeEndpoint() string {
	if a.rec != nil {
		return a.rec.endpoint()
	}
	return shared.endpoint
}

// traceCRI is a recorder in front of containerd for the agent when
// NODELET_BENCH_TRACE is set, else nil.
func traceCRI(b *testing.B, agent string) *criRecorder {
	if os.Getenv("NODELET_BENCH_TRACE") == "" {
		return nil
	}
	return startCRIRecorder(b, agent)
}

// newNodeletAgent runs bin/nodelet (as the e2e harness built it) on the
// shared containerd.
func newNodeletAgent(b *testing.B) *manifestAgent {
	return newNodeletAgentOf(b, "nodelet", shared.nodelet)
}

// newNodeletAgentOf runs the nodelet binary as the agent named label, in a
// directory of its own.
func newNodeletAgentOf(b *testing.B, label, binary string) *manifestAgent {
	work := filepath.Join(shared.work, "bench-"+label)
	healthzPort, roPort, apiPort := freePort(b), freePort(b), freePort(b)
	a := &manifestAgent{
		label:   label,
		binary:  binary,
		rec:     traceCRI(b, label),
		dir:     filepath.Join(work, "manifests"),
		logPath: benchLogPath(label),
		healthz: "http://127.0.0.1:" + healthzPort + "/healthz",
		metricz: "http://127.0.0.1:" + roPort + "/metrics",
	}
	root := filepath.Join(work, "root")
	logs := []string{"--pod-logs-dir", filepath.Join(work, "logs")}
	if makeRunLayout() {
		// As a user who started the runtime as make run does and then
		// pointed nodelet at it: the runtime's state (containerd/, the
		// image store) inside nodelet's --root-dir, and the pod logs in
		// the default /var/log/pods, as make run leaves them.
		root, logs = shared.rootDir, nil
	}
	a.command = func() *exec.Cmd {
		args := append([]string{"--container-runtime-endpoint", a.runtimeEndpoint(),
			"--root-dir", root, "--pod-manifest-path", a.dir, "--hostname-override", "e2e", "--cgroup-root", shared.cgroupRoot}, logs...)
		return exec.Command(a.binary, append(args, "--address", "127.0.0.1", "--port", apiPort,
			"--healthz-port", healthzPort, "--read-only-port", roPort)...)
	}
	a.note = "external-runtime mode, every setting at its default but where several agents on one machine must not meet " +
		"(--root-dir, --pod-logs-dir, --hostname-override, --cgroup-root, loopback ports) and the read-only port the benchmark reads /metrics on"
	return a
}

// makeRunLayout: NODELET_BENCH_LAYOUT=make-run lays the agents out as a
// user who ran make run and then pointed them at its runtime: nodelet's
// --root-dir is the runtime's, and both agents keep pod logs in the
// host's /var/log/pods, their default.
func makeRunLayout() bool { return os.Getenv("NODELET_BENCH_LAYOUT") == "make-run" }

// newKubeletAgent runs the upstream kubelet standalone (no API server: static
// pods only) on the shared containerd, configured as close to nodelet as a
// kubelet on this kind of machine allows (see kubeletConfig).
func newKubeletAgent(b *testing.B) *manifestAgent {
	bin := upstreamKubelet(b)
	work := filepath.Join(shared.work, "bench-kubelet")
	healthzPort, roPort, apiPort := freePort(b), freePort(b), freePort(b)
	a := &manifestAgent{
		label:   "kubelet",
		rec:     traceCRI(b, "kubelet"),
		dir:     filepath.Join(work, "manifests"),
		logPath: benchLogPath("kubelet"),
		healthz: "http://127.0.0.1:" + healthzPort + "/healthz",
		metricz: "http://127.0.0.1:" + roPort + "/metrics",
	}
	if err := os.MkdirAll(work, 0o755); err != nil {
		b.Fatal(err)
	}
	config := filepath.Join(work, "config.yaml")
	logs := filepath.Join(work, "logs")
	if makeRunLayout() {
		logs = "/var/log/pods" // the kubelet's default, as a user's
	}
	if err := os.WriteFile(config, []byte(kubeletConfig(a.runtimeEndpoint(), a.dir, logs, healthzPort, roPort, apiPort)), 0o644); err != nil {
		b.Fatal(err)
	}
	a.command = func() *exec.Cmd {
		return exec.Command(bin, "--config", config, "--root-dir", filepath.Join(work, "root"),
			"--hostname-override", "e2e", "--v", kubeletVerbosity())
	}
	a.note = "standalone, static pods; config: " + strings.Join(strings.Split(strings.TrimSpace(kubeletConfig(a.runtimeEndpoint(), a.dir,
		logs, healthzPort, roPort, apiPort)), "\n"), "; ")
	return a
}

// kubeletConfig is the standalone kubelet's configuration:
//   - the pods: the manifest directory (watched with inotify, re-read every
//     20 s, as nodelet does);
//   - the machine's (kubeletMachineConfig);
//   - anonymous, allow-all access, since nothing but the benchmark talks to
//     it (/metrics on the read-only port);
//   - the run's cgroup root (env.cgroupRoot), as nodelet's: on the default
//     one it would kill the host's own pods as orphans.
//
// Everything else is the kubelet's default: pod and QoS cgroups, RuntimeDefault
// seccomp for every sandbox and none for containers (no --seccomp-default),
// one image pull at a time.
func kubeletConfig(endpoint, manifests, logs, healthzPort, roPort, apiPort string) string {
	return `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
staticPodPath: ` + manifests + `
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
` + kubeletMachineConfig(endpoint, logs, healthzPort, roPort, apiPort, shared.cgroupRoot)
}

// kubeletMachineConfig is what the kubelet needs on this machine beside
// nodelet, as top-level KubeletConfiguration fields:
//   - the shared containerd, and pod logs where the benchmark keeps them;
//   - the cgroupfs driver (containerd runs runc with SystemdCgroup = false),
//     cgroup v1 allowed, swap not refused;
//   - loopback ports;
//   - nothing that acts on its own during the benchmark: no image garbage
//     collection (the images are nodelet's too), and eviction only at 1 MiB
//     of free memory, so that a nearly full disk does not evict the pods;
//   - cgroupRoot, the agent's cgroup root; "" leaves the kubelet's default
//     (/kubepods), which only the conformance runs use: an agent there
//     takes the host's own pods for orphans and kills them.
func kubeletMachineConfig(endpoint, logs, healthzPort, roPort, apiPort, cgroupRoot string) string {
	root := ""
	if cgroupRoot != "" {
		root = "cgroupRoot: " + cgroupRoot + "\n"
	}
	return root + `containerRuntimeEndpoint: ` + endpoint + `
podLogsDir: ` + logs + `
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
address: 127.0.0.1
port: ` + apiPort + `
readOnlyPort: ` + roPort + `
healthzBindAddress: 127.0.0.1
healthzPort: ` + healthzPort + `
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: 1Mi}
`
}

// upstreamKubelet is the kubelet binary: $NODELET_BENCH_KUBELET (make bench
// sets it), else what hack/build-upstream.sh builds (cached by version).
func upstreamKubelet(b testing.TB) string {
	if p := os.Getenv("NODELET_BENCH_KUBELET"); p != "" {
		return p
	}
	cmd := exec.Command(filepath.Join(shared.repoRoot, "hack", "build-upstream.sh"), "kubelet")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		b.Fatalf("build the upstream kubelet: %v", err)
	}
	return strings.TrimSpace(string(out))
}

func kubeletVerbosity() string {
	if v := os.Getenv("NODELET_BENCH_KUBELET_V"); v != "" {
		return v
	}
	return "0"
}

// benchLogPath is where an agent's output goes: $NODELET_BENCH_LOGS/<agent>.log
// when set (kept for reading afterwards), else the e2e scratch directory.
func benchLogPath(agent string) string {
	dir := os.Getenv("NODELET_BENCH_LOGS")
	if dir == "" {
		dir = shared.work
	}
	os.MkdirAll(dir, 0o755)
	return filepath.Join(dir, "bench-"+agent+".log")
}

// tail is the last n lines of the file at path.
func tail(path string, n int) string {
	data, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// cleanRuntime removes every sandbox and container left on the shared
// containerd, and fails if some will not go.
func cleanRuntime(b *testing.B) {
	b.Helper()
	removeAllPods(shared.rt)
	ctx := context.Background()
	sbs, err := shared.rt.ListPodSandbox(ctx, nil)
	if err != nil {
		b.Fatal(err)
	}
	cs, err := shared.rt.ListContainers(ctx, &runtimeapi.ContainerFilter{})
	if err != nil {
		b.Fatal(err)
	}
	if len(sbs)+len(cs) > 0 {
		b.Fatalf("runtime not clean: %d sandboxes, %d containers left", len(sbs), len(cs))
	}
}

// runtimeOps is, per CRI operation, the calls an agent made and the time
// they took, from kubelet_runtime_operations_{total,duration_seconds}.
type runtimeOps map[string]opStat

type opStat struct {
	calls   float64
	seconds float64
}

// parseRuntimeOps reads the operations out of a Prometheus text exposition.
func parseRuntimeOps(text string) runtimeOps {
	return parseCountsAndSums(text, "kubelet_runtime_operations_total", "kubelet_runtime_operations_duration_seconds_sum", "operation_type")
}

// parseStartStages reads nodelet's own account of its pod starts,
// nodelet_pod_start_stage_duration_seconds{stage}, as runtimeOps keyed by
// stage (calls: starts observed; seconds: their sum).
func parseStartStages(text string) runtimeOps {
	return parseCountsAndSums(text, "nodelet_pod_start_stage_duration_seconds_count", "nodelet_pod_start_stage_duration_seconds_sum", "stage")
}

// parseCountsAndSums reads the series count{label="x"} and sum{label="x"}
// of a Prometheus text exposition as runtimeOps keyed by x (calls: the
// count, seconds: the sum).
func parseCountsAndSums(text, count, sum, label string) runtimeOps {
	ops := runtimeOps{}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		var isCount bool
		switch {
		case strings.HasPrefix(line, count+"{"):
			isCount = true
		case strings.HasPrefix(line, sum+"{"):
		default:
			continue
		}
		_, rest, _ := strings.Cut(line, label+`="`)
		key, rest, ok := strings.Cut(rest, `"`)
		if !ok {
			continue
		}
		_, value, _ := strings.Cut(rest, "} ")
		v, err := strconv.ParseFloat(strings.Fields(value + " ")[0], 64)
		if err != nil {
			continue
		}
		o := ops[key]
		if isCount {
			o.calls += v
		} else {
			o.seconds += v
		}
		ops[key] = o
	}
	return ops
}

// add adds after-before to o.
func (o runtimeOps) add(before, after runtimeOps) {
	for op, a := range after {
		s := o[op]
		s.calls += a.calls - before[op].calls
		s.seconds += a.seconds - before[op].seconds
		o[op] = s
	}
}

// printOpsTable prints, per operation, each agent's calls per pod and mean
// latency over pods pods.
func printOpsTable(w io.Writer, title string, pods int, agents []string, ops []runtimeOps) {
	names := map[string]bool{}
	for _, o := range ops {
		for op, s := range o {
			if s.calls > 0 {
				names[op] = true
			}
		}
	}
	sorted := make([]string, 0, len(names))
	for op := range names {
		sorted = append(sorted, op)
	}
	sort.Strings(sorted)
	fmt.Fprintf(w, "%s (%d pods): CRI calls per pod, mean latency\n", title, pods)
	fmt.Fprintf(w, "  %-22s", "operation")
	for _, a := range agents {
		fmt.Fprintf(w, " %22s", a)
	}
	fmt.Fprintln(w)
	for _, op := range sorted {
		fmt.Fprintf(w, "  %-22s", op)
		for _, o := range ops {
			s := o[op]
			if s.calls == 0 {
				fmt.Fprintf(w, " %22s", "-")
				continue
			}
			fmt.Fprintf(w, " %10.2f %8.1fms", s.calls/float64(pods), 1000*s.seconds/s.calls)
		}
		fmt.Fprintln(w)
	}
}

// podRequest is what the runtime was asked for the one pod named prefix*
// that runs: its sandbox's and its container's CRI config and the OCI spec
// containerd made of each (containerd's verbose status), flattened to
// path → value, with what names this pod (name, UID, namespace, IDs, the
// agent's name in the pod's name) replaced by placeholders and what varies
// from pod to pod (PIDs, addresses, network namespace, times) left out.
func podRequest(b *testing.B, ctx context.Context, prefix, agent string) map[string]string {
	b.Helper()
	rs, err := remote.NewRemoteRuntimeServiceBuilder().WithEndpoint(shared.endpoint).
		WithConnectionTimeout(10 * time.Second).WithUseStreaming(false).Build(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer rs.Close(ctx)
	sbs, err := shared.rt.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{
		State: &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY}})
	if err != nil {
		b.Fatal(err)
	}
	var sb *runtimeapi.PodSandbox
	for _, s := range sbs {
		if strings.HasPrefix(s.GetMetadata().GetName(), prefix) {
			sb = s
		}
	}
	if sb == nil {
		b.Fatalf("no ready sandbox of %s*", prefix)
	}
	cs, err := shared.rt.ListContainers(ctx, &runtimeapi.ContainerFilter{PodSandboxId: sb.Id})
	if err != nil || len(cs) != 1 {
		b.Fatalf("containers of sandbox %s: %v, %v", sb.Id, cs, err)
	}
	sst, err := rs.PodSandboxStatus(ctx, sb.Id, true)
	if err != nil {
		b.Fatal(err)
	}
	cst, err := rs.ContainerStatus(ctx, cs[0].Id, true)
	if err != nil {
		b.Fatal(err)
	}
	replacer := strings.NewReplacer(sb.Id, "<sandbox-id>", cs[0].Id, "<container-id>",
		sb.Metadata.Uid, "<pod-uid>", sb.Metadata.Name, "<pod-name>", agent+"-", "<agent>-", "bench-"+agent, "bench-<agent>")
	flat := map[string]string{}
	for what, info := range map[string]string{"sandbox": sst.Info["info"], "container": cst.Info["info"]} {
		var v any
		if err := json.Unmarshal([]byte(replacer.Replace(info)), &v); err != nil {
			b.Fatalf("%s info of %s*: %v", what, prefix, err)
		}
		flatten(flat, what, v)
	}
	for k, v := range flat {
		if volatileKey(k) || strings.Contains(v, "/netns/cni-") || strings.HasPrefix(v, "/proc/") && strings.Contains(v, "/ns/") {
			delete(flat, k)
		}
	}
	return flat
}

// volatileKey tells the paths that differ from pod to pod whoever runs it.
func volatileKey(k string) bool {
	for _, s := range []string{".pid", ".cniResult", "kubernetes.io/config.seen", ".createdAt", ".startedAt",
		"nodelet.io/", "io.kubernetes.container.hash"} { // the agents' own bookkeeping
		if strings.Contains(k, s) {
			return true
		}
	}
	return false
}

// flatten adds v's leaves to out under path: a list of strings is one
// value, and a list of mounts is keyed by where each is mounted, so that the
// same entries in another order are not a difference.
func flatten(out map[string]string, path string, v any) {
	switch v := v.(type) {
	case map[string]any:
		if len(v) == 0 {
			out[path] = "{}"
		}
		for k, e := range v {
			flatten(out, path+"."+k, e)
		}
	case []any:
		var strs []string
		for i, e := range v {
			if s, ok := e.(string); ok {
				strs = append(strs, s)
				continue
			}
			key := strconv.Itoa(i)
			if m, ok := e.(map[string]any); ok {
				for _, k := range []string{"destination", "container_path"} {
					if d, ok := m[k].(string); ok {
						key = d
					}
				}
			}
			flatten(out, fmt.Sprintf("%s[%s]", path, key), e)
		}
		if len(strs) > 0 {
			out[path] = fmt.Sprint(strs)
		}
	default:
		out[path] = fmt.Sprint(v)
	}
}

// printRequestDiff prints the paths where two agents' requests for the same
// manifest differ.
func printRequestDiff(w io.Writer, nameA, nameB string, a, b map[string]string) {
	var keys []string
	for k := range a {
		if a[k] != b[k] {
			keys = append(keys, k)
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	fmt.Fprintf(w, "what the runtime was asked for the same manifest, %s vs %s: %d differences\n", nameA, nameB, len(keys))
	for _, k := range keys {
		va, oka := a[k]
		vb, okb := b[k]
		if !oka {
			va = "(unset)"
		}
		if !okb {
			vb = "(unset)"
		}
		fmt.Fprintf(w, "  %s: %s | %s\n", k, va, vb)
	}
}
