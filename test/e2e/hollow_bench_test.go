//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// BenchmarkHollow (make bench-hollow) runs N node agents against one real
// control plane on this machine, each on a fake CRI runtime, so that only
// the agents and the control plane cost CPU. It is a simulation: it says
// what N agents cost a control plane and how they hold up on this machine,
// not what a cluster of real nodes of that size does.
//
// Two arms, each on a fresh control plane (hack/cluster.sh, as
// startCluster's but its own, with the audit log of the nodes' requests),
// the arm that goes first alternating with N:
//
//   - nodelet: N nodelets (the binary the tests build, default flags but
//     what several on one machine need apart: root dir, --cgroup-root,
//     ports) joining through the bootstrap kubeconfig, each on its own
//     socket of one test/fakecri process. What nodelet does outside CRI it
//     does for real: pod cgroups under its --cgroup-root, pod directories
//     and volumes (tmpfs for the service account token) under its root
//     dir, the localnet iptables rule (shared, as every nodelet's);
//   - kubelet: N test/cluster/hollowkubelet (kubemark's hollow kubelet of
//     the same release, its fake runtime inside, events on) joining
//     through the same bootstrap kubeconfig. It creates no cgroups and
//     mounts nothing (kubemark's stub container manager, fake mounter).
//
// For each N of NODELET_BENCH_HOLLOW_NODES and each arm it: starts the N
// agents and waits for N Ready Nodes; creates PODS pods per node (pause,
// BestEffort, each held on its node by a nodeSelector, through the
// scheduler) at RATE pods per second in all; waits until all are Running
// as a watch sees them; lets them settle for SETTLE (the agents' first
// periodic resyncs); then measures an IDLE window. It prints per N and arm:
//
//   - join: agents started to all Nodes Ready;
//   - pod start-up p50/p90/p99: from just before the pod's create call to
//     the watch seeing it Running (the SLO: p99 ≤ 5 s);
//   - the nodes' API requests per pod start (audit log, from the first
//     create to all Running) and per node per minute idle;
//   - watches per node: the nodes' watches open at the end of idle (audit
//     log: started and not complete), ÷ N, by kind; and the API server's
//     apiserver_longrunning_requests (verb WATCH) at the end of idle, less
//     before the agents started and less the benchmark's own watch of the
//     pods, ÷ N (every client's: at small N the controllers' watches
//     started meanwhile weigh in);
//   - lease update latency p99 at idle (audit: received to response
//     complete; the goal ≤ 2 s);
//   - etcd writes (puts + deletes) per node per minute idle;
//   - API server CPU (% of a core) over idle and RSS at its end; with two N
//     or more, their slope over N (added per node);
//   - agent CPU (% of a core, per node) over idle and RSS per node; for the
//     nodelet arm, the fake runtime process's too, per node (the hollow
//     kubelet's fake runtime is inside its own process and figures);
//   - whether every Node stayed Ready through idle (checked every 5 s).
//
// Then churn: CHURN pods of each node deleted and as many new ones created
// on it, one delete and one create at a time at RATE, until the new pods
// are Running and the deleted ones gone from the API. It prints the new
// pods' start-up p50/p99 and the nodes' API requests per churned pod (its
// delete and its replacement's start, from the first delete until both
// are done).
//
// Then an API server restart (hack/cluster.sh stop-apiserver, then
// start-apiserver at once, which returns when /readyz answers): the time
// from /readyz answering until every Node is Ready and every node's Lease
// was renewed after the stop, the nodes' API requests per node from the
// stop until a minute after the return, and the pods restarted by it
// (gone, a new UID, not Running, or a container's restart count up; the
// goal is none).
//
// Last, the largest N at which an arm held: every Node Ready through idle,
// lease update p99 ≤ 2 s, pod start-up p99 ≤ 5 s (the first pods and the
// churned ones), and so at every smaller N run.
//
// Knobs: NODELET_BENCH_HOLLOW_NODES (comma-separated N; unset, the
// benchmark skips: make bench-hollow sets it), _PODS (per node, 30), _RATE
// (pods/s, 5), _SETTLE (1m), _IDLE (5m), _CHURN (pods per node, 10; 0 skips
// churn), _RESTART (1; 0 skips the API server restart), _ARMS
// (nodelet,kubelet). A table too long for one run is split: each run with
// NODELET_BENCH_HOLLOW_RESULTS=FILE appends its results to FILE (a JSON
// line per arm and N), and NODELET_BENCH_HOLLOW_REPORT=FILE[,FILE...] runs
// nothing and prints the table of what the files hold (the goals of issue
// 28's item 3 and the slopes over N among it). Each N's header says what
// its arms ran with and the load average when each ended.
func BenchmarkHollow(b *testing.B) {
	if report := os.Getenv("NODELET_BENCH_HOLLOW_REPORT"); report != "" {
		results, err := readHollowResults(strings.Split(report, ","))
		if err != nil {
			b.Fatal(err)
		}
		cfg := hollowConfig{}
		for _, r := range results {
			if !slices.Contains(cfg.nodes, r.Nodes) {
				cfg.nodes = append(cfg.nodes, r.Nodes)
			}
		}
		slices.Sort(cfg.nodes)
		printHollowTable(os.Stdout, cfg, results)
		return
	}
	cfg, ok := hollowBenchConfig(b)
	if !ok {
		b.Skip("NODELET_BENCH_HOLLOW_NODES is not set (make bench-hollow sets it)")
	}
	keep := os.Getenv("NODELET_BENCH_HOLLOW_RESULTS")
	began := time.Now()
	bins := hollowBinaries(b)
	var results []*hollowResult
	var failures []string
	for i, n := range cfg.nodes {
		arms := slices.Clone(cfg.arms)
		if i%2 == 1 {
			slices.Reverse(arms)
		}
		for _, arm := range arms {
			fmt.Printf("hollow bench: %s, N=%d\n", arm, n)
			start := time.Now()
			res, err := runHollowArm(b, bins, cfg, arm, n)
			if err != nil {
				failures = append(failures, fmt.Sprintf("%s N=%d: %v", arm, n, err))
				fmt.Printf("hollow bench: %s N=%d failed after %v: %v\n", arm, n, time.Since(start).Round(time.Second), firstLine(err.Error()))
			}
			if res != nil {
				res.Load, res.At = loadAverage(), time.Now().UTC()
				results = append(results, res)
				if keep != "" {
					if err := appendHollowResult(keep, res); err != nil {
						failures = append(failures, fmt.Sprintf("%s N=%d: keep the result: %v", arm, n, err))
					}
				}
				fmt.Printf("hollow bench: %s N=%d done in %v\n", arm, n, time.Since(start).Round(time.Second))
			}
		}
	}
	fmt.Println()
	printHollowTable(os.Stdout, cfg, results)
	fmt.Printf("hollow bench took %v; load average at the end %s\n", time.Since(began).Round(time.Second), loadAverage())
	for _, f := range failures {
		b.Error(f)
	}
}

// hollowConfig is BenchmarkHollow's knobs.
type hollowConfig struct {
	nodes        []int
	podsPerNode  int
	rate         float64 // pods created per second, all nodes together
	settle, idle time.Duration
	churn        int  // pods per node deleted and replaced
	restart      bool // restart the API server
	arms         []string
}

func hollowBenchConfig(b *testing.B) (hollowConfig, bool) {
	env := func(name string) string { return os.Getenv("NODELET_BENCH_HOLLOW_" + name) }
	nodes := env("NODES")
	if nodes == "" {
		return hollowConfig{}, false
	}
	cfg := hollowConfig{podsPerNode: 30, rate: 5, settle: time.Minute, idle: 5 * time.Minute, churn: 10, restart: true, arms: []string{"nodelet", "kubelet"}}
	for f := range strings.SplitSeq(nodes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			b.Fatalf("NODELET_BENCH_HOLLOW_NODES=%q: %q is not a node count", nodes, f)
		}
		cfg.nodes = append(cfg.nodes, n)
	}
	if v := env("PODS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("NODELET_BENCH_HOLLOW_PODS=%q: not a pod count", v)
		}
		cfg.podsPerNode = n
	}
	if v := env("CHURN"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > cfg.podsPerNode {
			b.Fatalf("NODELET_BENCH_HOLLOW_CHURN=%q: not a pod count from 0 to the pods per node (%d)", v, cfg.podsPerNode)
		}
		cfg.churn = n
	}
	if v := env("RESTART"); v != "" {
		if v != "0" && v != "1" {
			b.Fatalf("NODELET_BENCH_HOLLOW_RESTART=%q: neither 0 nor 1", v)
		}
		cfg.restart = v == "1"
	}
	if v := env("RATE"); v != "" {
		r, err := strconv.ParseFloat(v, 64)
		if err != nil || r <= 0 {
			b.Fatalf("NODELET_BENCH_HOLLOW_RATE=%q: not a rate", v)
		}
		cfg.rate = r
	}
	for name, d := range map[string]*time.Duration{"SETTLE": &cfg.settle, "IDLE": &cfg.idle} {
		if v := env(name); v != "" {
			var err error
			if *d, err = time.ParseDuration(v); err != nil || *d <= 0 {
				b.Fatalf("NODELET_BENCH_HOLLOW_%s=%q: not a duration", name, v)
			}
		}
	}
	if v := env("ARMS"); v != "" {
		cfg.arms = nil
		for a := range strings.SplitSeq(v, ",") {
			if a != "nodelet" && a != "kubelet" {
				b.Fatalf("NODELET_BENCH_HOLLOW_ARMS=%q: %q is neither nodelet nor kubelet", v, a)
			}
			cfg.arms = append(cfg.arms, a)
		}
	}
	return cfg, true
}

// hollowBins are the programs of the two arms.
type hollowBins struct{ nodelet, fakecri, hollowKubelet string }

func hollowBinaries(b *testing.B) hollowBins {
	bins := hollowBins{nodelet: shared.nodelet, fakecri: filepath.Join(shared.work, "bin", "fakecri")}
	if err := goBuild(shared.repoRoot, bins.fakecri, "./test/fakecri", false); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(shared.repoRoot, "hack", "build-upstream.sh"), "hollowkubelet")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		b.Fatalf("build the hollow kubelet: %v", err)
	}
	bins.hollowKubelet = strings.TrimSpace(string(out))
	return bins
}

// hollowAgent is one node agent process.
type hollowAgent struct {
	node string
	cmd  *exec.Cmd
	done chan struct{}
	log  string
}

func (a *hollowAgent) start(cmd *exec.Cmd) error {
	log, err := os.OpenFile(a.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer log.Close()
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", a.node, err)
	}
	a.cmd, a.done = cmd, make(chan struct{})
	go func() { cmd.Wait(); close(a.done) }()
	return nil
}

func (a *hollowAgent) exited() bool {
	select {
	case <-a.done:
		return true
	default:
		return false
	}
}

// stop sends SIGINT and kills the agent 30 s later if it still runs.
func (a *hollowAgent) stop() {
	if a.cmd == nil || a.exited() {
		return
	}
	a.cmd.Process.Signal(os.Interrupt)
	select {
	case <-a.done:
	case <-time.After(30 * time.Second):
		a.cmd.Process.Kill()
		<-a.done
	}
}

const hollowNamespace = "hollow"

// runHollowArm runs one arm at n nodes on a control plane of its own, and
// leaves nothing behind: its agents and fake runtime stopped, its mounts
// and cgroups removed, the control plane down.
func runHollowArm(b *testing.B, bins hollowBins, cfg hollowConfig, arm string, n int) (res *hollowResult, err error) {
	dir, err := os.MkdirTemp(shared.work, "hollow-")
	if err != nil {
		return nil, err
	}
	cp, err := clusterUp(filepath.Join(dir, "cluster"))
	if err != nil {
		return nil, err
	}
	logs := os.Getenv("NODELET_BENCH_LOGS")
	if logs == "" {
		logs = filepath.Join(dir, "logs")
	}
	if err := os.MkdirAll(logs, 0o700); err != nil {
		return nil, err
	}
	var agents []*hollowAgent
	var runtime *hollowAgent
	var cgroupRoots []string
	// kubemark's own temporary directories, which test/cluster/hollowkubelet
	// moves under its root dir: any new one is state left on the host.
	tmpBefore, _ := filepath.Glob("/tmp/hollow-kubelet.*")
	defer func() {
		// The pods go first, torn down by their agents as on a drained
		// node; then the agents, the runtime, what is left on the host,
		// and the control plane.
		if cerr := deleteHollowPods(cp.Admin); cerr != nil {
			err = errors.Join(err, cerr)
		}
		for _, a := range agents {
			a.stop()
		}
		if runtime != nil {
			runtime.stop()
		}
		tmpAfter, _ := filepath.Glob("/tmp/hollow-kubelet.*")
		if left := slices.DeleteFunc(tmpAfter, func(p string) bool { return slices.Contains(tmpBefore, p) }); len(left) > 0 {
			err = errors.Join(err, fmt.Errorf("the hollow kubelets left %s behind", strings.Join(left, ", ")))
		}
		if cerr := unmountBelow(dir); cerr != nil {
			err = errors.Join(err, cerr)
		}
		for _, root := range cgroupRoots {
			if cerr := removeCgroupRoot(root); cerr != nil {
				err = errors.Join(err, cerr)
			}
		}
		if out, cerr := cp.script("down"); cerr != nil {
			err = errors.Join(err, fmt.Errorf("hack/cluster.sh down: %v\n%s", cerr, out))
		}
		if keep := os.Getenv("NODELET_BENCH_LOGS"); keep != "" {
			// The control plane's logs and the audit log, for reading
			// afterwards.
			os.Rename(filepath.Join(cp.Dir, "logs"), filepath.Join(keep, fmt.Sprintf("cluster-%s-%d", arm, n)))
		}
		if logs != filepath.Join(dir, "logs") || err == nil {
			os.RemoveAll(dir)
		} else {
			fmt.Printf("hollow bench: kept %s (logs)\n", dir)
		}
	}()
	admin := benchAdmin(b, cp)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	apiserverPID, err := componentPID(cp, "kube-apiserver")
	if err != nil {
		return nil, err
	}
	watches0, err := apiserverWatches(ctx, admin)
	if err != nil {
		return nil, err
	}
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: hollowNamespace}}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}

	// Step 1: the agents.
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("hollow-%s-%d", arm, i)
	}
	started := time.Now()
	switch arm {
	case "nodelet":
		sockets := filepath.Join(dir, "cri")
		if err := os.Mkdir(sockets, 0o700); err != nil {
			return nil, err
		}
		args := []string{}
		for _, name := range names {
			args = append(args, "-socket", filepath.Join(sockets, name+".sock"))
		}
		runtime = &hollowAgent{node: "fakecri", log: filepath.Join(logs, "fakecri-"+strconv.Itoa(n)+".log")}
		if err := runtime.start(exec.Command(bins.fakecri, args...)); err != nil {
			return nil, err
		}
		for _, name := range names {
			if err := waitSocket(filepath.Join(sockets, name+".sock"), runtime); err != nil {
				return nil, err
			}
		}
		for _, name := range names {
			root := "/" + filepath.Base(shared.work) + "-" + name
			if err := makeCgroupRootB(root); err != nil {
				return nil, err
			}
			cgroupRoots = append(cgroupRoots, root)
			work := filepath.Join(dir, name)
			ports, err := freePorts(2)
			if err != nil {
				return nil, err
			}
			a := &hollowAgent{node: name, log: filepath.Join(logs, name+".log")}
			agents = append(agents, a)
			if err := a.start(exec.Command(bins.nodelet, "--config", cp.NodeletConfig, "--root-dir", filepath.Join(work, "root"),
				"--bootstrap-kubeconfig", cp.BootstrapKubeconfig, "--kubeconfig", filepath.Join(work, "root", "kubelet.kubeconfig"),
				"--hostname-override", name, "--node-ip", "127.0.0.1",
				"--container-runtime-endpoint", "unix://"+filepath.Join(sockets, name+".sock"),
				"--cgroup-root", root, "--pod-logs-dir", filepath.Join(work, "logs"),
				"--address", "127.0.0.1", "--port", ports[0], "--healthz-port", ports[1], "--read-only-port", "0")); err != nil {
				return nil, err
			}
		}
	case "kubelet":
		for _, name := range names {
			root := filepath.Join(dir, name)
			if err := os.Mkdir(root, 0o700); err != nil {
				return nil, err
			}
			ports, err := freePorts(1)
			if err != nil {
				return nil, err
			}
			a := &hollowAgent{node: name, log: filepath.Join(logs, name+".log")}
			agents = append(agents, a)
			if err := a.start(exec.Command(bins.hollowKubelet, "-name", name, "-root-dir", root,
				"-bootstrap-kubeconfig", cp.BootstrapKubeconfig, "-kubeconfig", filepath.Join(root, "kubelet.kubeconfig"),
				"-port", ports[0], "-v", kubeletVerbosity())); err != nil {
				return nil, err
			}
		}
	}
	if err := waitNodesReady(ctx, admin, names, agents); err != nil {
		return nil, err
	}
	res = &hollowResult{Arm: arm, Nodes: n, Pods: n * cfg.podsPerNode, Join: time.Since(started),
		PodsPerNode: cfg.podsPerNode, ChurnPerNode: cfg.churn, Rate: cfg.rate, Settle: cfg.settle}
	fmt.Printf("hollow bench: %d %s nodes Ready in %v\n", n, arm, res.Join.Round(100*time.Millisecond))

	// Step 2: the pods, at cfg.rate, and their start-up.
	if err := waitServiceAccount(ctx, admin); err != nil {
		return nil, err
	}
	pw, err := watchHollowPods(ctx, admin)
	if err != nil {
		return nil, err
	}
	defer pw.stop()
	firstCreate := time.Now()
	tick := time.NewTicker(time.Duration(float64(time.Second) / cfg.rate))
	for i := range res.Pods {
		<-tick.C
		name := fmt.Sprintf("pod-%d", i)
		pw.created(name, time.Now())
		if _, err := admin.CoreV1().Pods(hollowNamespace).Create(ctx, hollowPod(name, names[i%n]), metav1.CreateOptions{}); err != nil {
			tick.Stop()
			return nil, fmt.Errorf("create %s: %w", name, err)
		}
	}
	tick.Stop()
	allRunning, err := pw.waitRunning(ctx, res.Pods, 5*time.Minute)
	if err != nil {
		return nil, err
	}
	res.Startup = pw.startups("pod-")

	// Step 3: settle, then the idle window.
	if err := sleepCtx(ctx, cfg.settle); err != nil {
		return nil, err
	}
	pids := make([]int, len(agents))
	for i, a := range agents {
		if a.exited() {
			return nil, fmt.Errorf("%s exited; the end of its log:\n%s", a.node, tail(a.log, 30))
		}
		pids[i] = a.cmd.Process.Pid
	}
	etcd0, err := etcdWrites(cp)
	if err != nil {
		return nil, err
	}
	idleFrom := time.Now()
	apiCPU0, agentCPU0, rtCPU0 := cpuSeconds(apiserverPID), sumCPU(pids), 0.0
	if runtime != nil {
		rtCPU0 = cpuSeconds(runtime.cmd.Process.Pid)
	}
	notReady := map[string]bool{}
	for end := idleFrom.Add(cfg.idle); time.Now().Before(end); {
		if err := sleepCtx(ctx, min(5*time.Second, time.Until(end))); err != nil {
			return nil, err
		}
		for _, name := range nodesNotReady(ctx, admin, names) {
			notReady[name] = true
		}
	}
	idleTo := time.Now()
	res.Idle = idleTo.Sub(idleFrom)
	res.APIServerCPU, res.AgentCPU = cpuSeconds(apiserverPID)-apiCPU0, sumCPU(pids)-agentCPU0
	if runtime != nil {
		res.RuntimeCPU = cpuSeconds(runtime.cmd.Process.Pid) - rtCPU0
		rss, _, _, _ := procMemory(runtime.cmd.Process.Pid)
		res.RuntimeRSS = float64(rss)
	}
	etcd1, err := etcdWrites(cp)
	if err != nil {
		return nil, err
	}
	res.EtcdWrites = etcd1 - etcd0
	if res.APIServerRSS, _, _, err = procMemory(apiserverPID); err != nil {
		return nil, err
	}
	for _, pid := range pids {
		rss, _, _, err := procMemory(pid)
		if err != nil {
			return nil, err
		}
		res.AgentRSS += rss
	}
	watches1, err := apiserverWatches(ctx, admin)
	if err != nil {
		return nil, err
	}
	// Less the benchmark's own: its watch of the pods (pw).
	res.Watches = watches1 - watches0 - 1
	res.NotReady = slices.Sorted(func(yield func(string) bool) {
		for k := range notReady {
			if !yield(k) {
				return
			}
		}
	})

	// Step 4: churn.
	windows := []window{{firstCreate, allRunning}, {idleFrom, idleTo}}
	if cfg.churn > 0 {
		churn, err := churnHollowPods(ctx, admin, pw, names, cfg, res)
		if err != nil {
			return nil, fmt.Errorf("churn: %w", err)
		}
		windows = append(windows, churn)
	}

	// Step 5: an API server restart.
	if cfg.restart {
		recovery, err := restartHollowAPIServer(ctx, cp, admin, names, res)
		if err != nil {
			return nil, fmt.Errorf("API server restart: %w", err)
		}
		windows = append(windows, recovery)
	}

	// Step 6: the nodes' requests, from the audit log.
	users := map[string]bool{}
	for _, name := range names {
		users["system:node:"+name] = true
	}
	counts, leases, open, err := countHollowRequests(cp.AuditLog, users, windows, window{idleFrom, idleTo}, idleTo)
	if err != nil {
		return nil, err
	}
	res.OpenWatches = open
	res.StartReqs, res.IdleReqs, res.IdleByKind = counts[0].total, counts[1].total, counts[1].byKind
	res.StartEvents = eventWrites(counts[0].byKind)
	if cfg.churn > 0 {
		res.ChurnReqs = counts[2].total
	}
	if cfg.restart {
		res.RecoveryReqs = counts[len(counts)-1].total
	}
	res.LeaseUpdates = len(leases)
	res.LeaseP99 = percentile(leases, 0.99)
	return res, nil
}

// churnHollowPods deletes cfg.churn of each node's first pods and creates
// as many new ones on it, a delete and a create at a time at cfg.rate, and
// waits until the new pods are Running and the old ones gone. It returns
// the window from the first delete until then.
func churnHollowPods(ctx context.Context, c kubernetes.Interface, pw *hollowPodWatch, names []string, cfg hollowConfig, res *hollowResult) (window, error) {
	n := len(names) * cfg.churn
	var deleted []string
	from := time.Now()
	tick := time.NewTicker(time.Duration(float64(time.Second) / cfg.rate))
	defer tick.Stop()
	for i := range n {
		<-tick.C
		// pod-i is on names[i%len(names)]: the first cfg.churn rounds of
		// the nodes.
		old, name := fmt.Sprintf("pod-%d", i), fmt.Sprintf("churn-%d", i)
		if err := c.CoreV1().Pods(hollowNamespace).Delete(ctx, old, metav1.DeleteOptions{}); err != nil {
			return window{}, fmt.Errorf("delete %s: %w", old, err)
		}
		deleted = append(deleted, old)
		pw.created(name, time.Now())
		if _, err := c.CoreV1().Pods(hollowNamespace).Create(ctx, hollowPod(name, names[i%len(names)]), metav1.CreateOptions{}); err != nil {
			return window{}, fmt.Errorf("create %s: %w", name, err)
		}
	}
	running, err := pw.waitRunning(ctx, res.Pods+n, 5*time.Minute)
	if err != nil {
		return window{}, err
	}
	gone, err := pw.waitGone(ctx, deleted, 5*time.Minute)
	if err != nil {
		return window{}, err
	}
	done := running
	if gone.After(done) {
		done = gone
	}
	res.Churned = n
	res.ChurnStartup = pw.startups("churn-")
	fmt.Printf("hollow bench: %d pods churned in %v\n", n, done.Sub(from).Round(100*time.Millisecond))
	return window{from, done}, nil
}

// restartHollowAPIServer stops the API server and starts it again at once,
// waits until every Node is Ready and every node's Lease renewed after the
// stop, and a minute after the return checks that no pod restarted. It
// returns the window from the stop to a minute after the return.
func restartHollowAPIServer(ctx context.Context, cp *controlPlane, c kubernetes.Interface, names []string, res *hollowResult) (window, error) {
	before, err := c.CoreV1().Pods(hollowNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return window{}, err
	}
	stopped := time.Now()
	if out, err := cp.script("stop-apiserver"); err != nil {
		return window{}, fmt.Errorf("hack/cluster.sh stop-apiserver: %v\n%s", err, out)
	}
	down := time.Now()
	if out, err := cp.script("start-apiserver"); err != nil {
		return window{}, fmt.Errorf("hack/cluster.sh start-apiserver: %v\n%s", err, out)
	}
	back := time.Now()
	res.Restarted, res.Outage, res.StopTook = true, back.Sub(stopped), down.Sub(stopped)
	deadline := back.Add(3 * time.Minute)
	for {
		pending := nodesNotReady(ctx, c, names)
		if len(pending) == 0 {
			pending = leasesNotRenewed(ctx, c, names, stopped)
		}
		if len(pending) == 0 {
			break
		}
		if time.Now().After(deadline) {
			return window{}, fmt.Errorf("3 minutes after the API server returned, not Ready or no lease renewed: %s", strings.Join(pending, ", "))
		}
		if err := sleepCtx(ctx, 200*time.Millisecond); err != nil {
			return window{}, err
		}
	}
	res.Recovery = time.Since(back)
	fmt.Printf("hollow bench: API server away %v (its stop took %v), every node Ready with its lease renewed %v after\n",
		res.Outage.Round(100*time.Millisecond), res.StopTook.Round(100*time.Millisecond), res.Recovery.Round(100*time.Millisecond))
	if err := sleepCtx(ctx, time.Until(back.Add(time.Minute))); err != nil {
		return window{}, err
	}
	after, err := c.CoreV1().Pods(hollowNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return window{}, err
	}
	res.PodsRestarted = podsRestarted(before.Items, after.Items)
	return window{stopped, time.Now()}, nil
}

// leasesNotRenewed are the nodes of names whose Lease was not renewed
// after since.
func leasesNotRenewed(ctx context.Context, c kubernetes.Interface, names []string, since time.Time) []string {
	list, err := c.CoordinationV1().Leases(v1.NamespaceNodeLease).List(ctx, metav1.ListOptions{})
	if err != nil {
		return names
	}
	renewed := map[string]bool{}
	for _, l := range list.Items {
		if l.Spec.RenewTime != nil && l.Spec.RenewTime.After(since) {
			renewed[l.Name] = true
		}
	}
	var out []string
	for _, name := range names {
		if !renewed[name] {
			out = append(out, name)
		}
	}
	return out
}

// hollowPod is a pause pod held on node by a nodeSelector.
func hollowPod(name, node string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: hollowNamespace, Labels: map[string]string{"app": "hollow"}},
		Spec: v1.PodSpec{
			NodeSelector: map[string]string{"kubernetes.io/hostname": node},
			Containers: []v1.Container{{
				Name: "pause", Image: "registry.k8s.io/pause:3.10", ImagePullPolicy: v1.PullIfNotPresent,
				Resources: v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("1m"), v1.ResourceMemory: resource.MustParse("1Mi")}},
			}},
		},
	}
}

// hollowPodWatch records when each pod was created and first seen Running.
type hollowPodWatch struct {
	mu      sync.Mutex
	create  map[string]time.Time
	running map[string]time.Time
	gone    map[string]time.Time // deleted from the API
	changed chan struct{}
	cancel  context.CancelFunc
	done    chan struct{}
}

func watchHollowPods(ctx context.Context, c kubernetes.Interface) (*hollowPodWatch, error) {
	w := &hollowPodWatch{create: map[string]time.Time{}, running: map[string]time.Time{}, gone: map[string]time.Time{}, changed: make(chan struct{}), done: make(chan struct{})}
	seen := func(obj any) {
		pod, ok := obj.(*v1.Pod)
		if !ok || pod.Status.Phase != v1.PodRunning {
			return
		}
		now := time.Now()
		w.mu.Lock()
		defer w.mu.Unlock()
		if _, ok := w.running[pod.Name]; !ok {
			w.running[pod.Name] = now
			close(w.changed)
			w.changed = make(chan struct{})
		}
	}
	deleted := func(obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		pod, ok := obj.(*v1.Pod)
		if !ok {
			return
		}
		now := time.Now()
		w.mu.Lock()
		defer w.mu.Unlock()
		w.gone[pod.Name] = now
		close(w.changed)
		w.changed = make(chan struct{})
	}
	lw := cache.NewListWatchFromClient(c.CoreV1().RESTClient(), "pods", hollowNamespace, fields.Everything())
	_, informer := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: lw,
		ObjectType:    &v1.Pod{},
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    seen,
			UpdateFunc: func(_, obj any) { seen(obj) },
			DeleteFunc: deleted,
		},
	})
	ctx, w.cancel = context.WithCancel(ctx)
	go func() { informer.RunWithContext(ctx); close(w.done) }()
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		w.stop()
		return nil, fmt.Errorf("pods of %s: the watch did not sync: %w", hollowNamespace, ctx.Err())
	}
	return w, nil
}

func (w *hollowPodWatch) stop() { w.cancel(); <-w.done }

func (w *hollowPodWatch) created(name string, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.create[name] = at
}

// waitRunning waits until n pods were seen Running and returns when the
// last was.
func (w *hollowPodWatch) waitRunning(ctx context.Context, n int, limit time.Duration) (time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	for {
		w.mu.Lock()
		running, changed := len(w.running), w.changed
		var last time.Time
		for _, t := range w.running {
			if t.After(last) {
				last = t
			}
		}
		w.mu.Unlock()
		if running >= n {
			return last, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("%d of %d pods Running: %w", running, n, ctx.Err())
		}
	}
}

// waitGone waits until every pod of names was deleted from the API and
// returns when the last was.
func (w *hollowPodWatch) waitGone(ctx context.Context, names []string, limit time.Duration) (time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	for {
		w.mu.Lock()
		var last time.Time
		left := 0
		for _, name := range names {
			at, ok := w.gone[name]
			if !ok {
				left++
			} else if at.After(last) {
				last = at
			}
		}
		changed := w.changed
		w.mu.Unlock()
		if left == 0 {
			return last, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("%d of %d deleted pods still in the API: %w", left, len(names), ctx.Err())
		}
	}
}

// startups are the start-up times of the pods named prefix..., sorted.
func (w *hollowPodWatch) startups(prefix string) []time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	var d []time.Duration
	for name, at := range w.running {
		if c, ok := w.create[name]; ok && strings.HasPrefix(name, prefix) {
			d = append(d, at.Sub(c))
		}
	}
	slices.Sort(d)
	return d
}

// waitNodesReady waits until every node of names is Ready, failing early
// when an agent exits.
func waitNodesReady(ctx context.Context, c kubernetes.Interface, names []string, agents []*hollowAgent) error {
	deadline := time.Now().Add(3*time.Minute + time.Duration(len(names))*5*time.Second)
	for {
		for _, a := range agents {
			if a.exited() {
				return fmt.Errorf("%s exited (%v); the end of its log:\n%s", a.node, a.cmd.ProcessState, tail(a.log, 30))
			}
		}
		notReady := nodesNotReady(ctx, c, names)
		if len(notReady) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("nodes not Ready: %s", strings.Join(notReady, ", "))
		}
		if err := sleepCtx(ctx, 500*time.Millisecond); err != nil {
			return err
		}
	}
}

// nodesNotReady are the nodes of names that are missing or not Ready.
func nodesNotReady(ctx context.Context, c kubernetes.Interface, names []string) []string {
	list, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return names
	}
	ready := map[string]bool{}
	for _, n := range list.Items {
		for _, cond := range n.Status.Conditions {
			if cond.Type == v1.NodeReady && cond.Status == v1.ConditionTrue {
				ready[n.Name] = true
			}
		}
	}
	var out []string
	for _, name := range names {
		if !ready[name] {
			out = append(out, name)
		}
	}
	return out
}

// waitServiceAccount waits for the namespace's default ServiceAccount,
// which pods need to be admitted.
func waitServiceAccount(ctx context.Context, c kubernetes.Interface) error {
	for {
		_, err := c.CoreV1().ServiceAccounts(hollowNamespace).Get(ctx, "default", metav1.GetOptions{})
		if err == nil {
			return nil
		}
		if !apierrors.IsNotFound(err) {
			return err
		}
		if err := sleepCtx(ctx, 200*time.Millisecond); err != nil {
			return fmt.Errorf("the default ServiceAccount of %s: %w", hollowNamespace, err)
		}
	}
}

// deleteHollowPods deletes the pods and waits (at most 3 minutes) until
// their agents have torn them down and they are gone from the API.
func deleteHollowPods(c kubernetes.Interface) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// One call for all: at N=40 (1200 pods) the API server ended it
	// (INTERNAL_ERROR) before it was done, so it is tried again, and what
	// it did stays done.
	for {
		err := c.CoreV1().Pods(hollowNamespace).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
		if err == nil || apierrors.IsNotFound(err) {
			break
		}
		if serr := sleepCtx(ctx, time.Second); serr != nil {
			return fmt.Errorf("delete the pods: %w (%w)", err, serr)
		}
	}
	for {
		list, err := c.CoreV1().Pods(hollowNamespace).List(ctx, metav1.ListOptions{})
		if err == nil && len(list.Items) == 0 {
			return nil
		}
		if err := sleepCtx(ctx, time.Second); err != nil {
			n := -1
			if list != nil {
				n = len(list.Items)
			}
			return fmt.Errorf("%d pods still there: %w", n, err)
		}
	}
}

// waitSocket waits until the fake runtime has made the socket at path.
func waitSocket(path string, rt *hollowAgent) error {
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		if rt.exited() {
			return fmt.Errorf("fakecri exited; its log:\n%s", tail(rt.log, 20))
		}
	}
	return fmt.Errorf("fakecri: no socket %s after 30 s", path)
}

// componentPID is the pid of a process of hack/cluster.sh, from its pid file.
func componentPID(cp *controlPlane, name string) (int, error) {
	data, err := os.ReadFile(filepath.Join(cp.Dir, "run", name+".pid"))
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(data))
	if len(f) == 0 {
		return 0, fmt.Errorf("%s.pid: empty", name)
	}
	return strconv.Atoi(f[0])
}

func sumCPU(pids []int) float64 {
	var s float64
	for _, p := range pids {
		s += cpuSeconds(p)
	}
	return s
}

// apiserverWatches is the API server's watches open now
// (apiserver_longrunning_requests, verb WATCH, summed).
func apiserverWatches(ctx context.Context, c kubernetes.Interface) (float64, error) {
	data, err := c.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return 0, fmt.Errorf("API server metrics: %w", err)
	}
	return sumMetric(data, "apiserver_longrunning_requests", `verb="WATCH"`), nil
}

// etcdWrites is etcd's puts and deletes so far (its /metrics, with the API
// server's etcd client certificate).
func etcdWrites(cp *controlPlane) (float64, error) {
	port := ""
	for _, kv := range cp.env {
		if v, ok := strings.CutPrefix(kv, "CLUSTER_ETCD_PORT="); ok {
			port = v
		}
	}
	pki := filepath.Join(cp.Dir, "pki")
	cert, err := tls.LoadX509KeyPair(filepath.Join(pki, "apiserver-etcd-client.crt"), filepath.Join(pki, "apiserver-etcd-client.key"))
	if err != nil {
		return 0, err
	}
	ca, err := os.ReadFile(filepath.Join(pki, "etcd", "ca.crt"))
	if err != nil {
		return 0, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool}}}
	defer client.CloseIdleConnections()
	resp, err := client.Get("https://127.0.0.1:" + port + "/metrics")
	if err != nil {
		return 0, fmt.Errorf("etcd metrics: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return 0, fmt.Errorf("etcd metrics: %w", err)
	}
	if !bytes.Contains(data, []byte("\netcd_mvcc_put_total ")) {
		return 0, errors.New("etcd metrics: no etcd_mvcc_put_total")
	}
	return sumMetric(data, "etcd_mvcc_put_total", "") + sumMetric(data, "etcd_mvcc_delete_total", ""), nil
}

// hollowAuditEvent is what countHollowRequests reads of an audit event.
type hollowAuditEvent struct {
	auditEvent
	Stage          string    `json:"stage"`
	StageTimestamp time.Time `json:"stageTimestamp"`
}

// countHollowRequests counts, per window, the requests of users (each
// once), and returns the latencies of their lease updates received in
// leaseWindow, sorted, and the watches they had open at openAt, by kind
// (started, in the audit log's ResponseStarted stage, and not complete).
func countHollowRequests(path string, users map[string]bool, windows []window, leaseWindow window, openAt time.Time) ([]requestCount, []time.Duration, map[string]int, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("audit log: %w", err)
	}
	defer f.Close()
	counts := make([]requestCount, len(windows))
	for i := range counts {
		counts[i].byKind = map[string]int{}
	}
	var leases []time.Duration
	limited := &io.LimitedReader{R: f, N: maxAuditLog + 1}
	sc := bufio.NewScanner(limited)
	sc.Buffer(make([]byte, 64<<10), maxAuditLine)
	seen := map[string]bool{}
	watching := map[string]string{} // audit ID: kind, of watches started by openAt
	ended := map[string]bool{}      // ... and of requests complete by then
	for sc.Scan() {
		var e hollowAuditEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return nil, nil, nil, fmt.Errorf("audit log %s: %w", path, err)
		}
		if !users[e.User.Username] {
			continue
		}
		if e.Verb == "watch" && e.Stage == "ResponseStarted" && !e.StageTimestamp.After(openAt) {
			watching[e.AuditID] = e.kind()
		}
		if e.Stage == "ResponseComplete" && !e.StageTimestamp.After(openAt) {
			ended[e.AuditID] = true
		}
		if e.Stage == "ResponseComplete" && e.Verb == "update" && e.ObjectRef != nil && e.ObjectRef.Resource == "leases" &&
			!e.RequestReceivedTimestamp.Before(leaseWindow.from) && !e.RequestReceivedTimestamp.After(leaseWindow.to) {
			leases = append(leases, e.StageTimestamp.Sub(e.RequestReceivedTimestamp))
		}
		if seen[e.AuditID] {
			continue
		}
		seen[e.AuditID] = true
		for i, w := range windows {
			if !e.RequestReceivedTimestamp.Before(w.from) && !e.RequestReceivedTimestamp.After(w.to) {
				counts[i].total++
				counts[i].byKind[e.kind()]++
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, nil, nil, fmt.Errorf("audit log %s: %w", path, err)
	}
	if limited.N <= 0 {
		return nil, nil, nil, fmt.Errorf("audit log %s: larger than %d MiB", path, maxAuditLog>>20)
	}
	slices.Sort(leases)
	open := map[string]int{}
	for id, kind := range watching {
		if !ended[id] {
			open[kind]++
		}
	}
	return counts, leases, open, nil
}

// printHollowGoals prints issue 28's goals (item 3) at the largest N both
// arms ran, as met or missed: idle requests per node and watches per node
// at most half the hollow kubelet's, the API server's memory added per node
// (RSS slope over N) at most half, start-up p99 within 5 s, event writes
// per pod start no more than the kubelet's.
func printHollowGoals(w io.Writer, nodes []int, byKey map[string]*hollowResult) {
	n := 0
	for _, x := range nodes {
		if byKey["kubelet/"+strconv.Itoa(x)] != nil && byKey["nodelet/"+strconv.Itoa(x)] != nil && x > n {
			n = x
		}
	}
	if n == 0 {
		return
	}
	k, nl := byKey["kubelet/"+strconv.Itoa(n)], byKey["nodelet/"+strconv.Itoa(n)]
	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "MISSED"
	}
	perNode := func(r *hollowResult) float64 { return float64(r.IdleReqs) / float64(r.Nodes) / r.Idle.Minutes() }
	fmt.Fprintf(w, "\ngoals (issue 28, item 3) at N=%d, the largest N both arms ran\n", n)
	ratio := func(a, b float64) float64 {
		if b == 0 {
			return math.Inf(1)
		}
		return a / b
	}
	q := ratio(perNode(nl), perNode(k))
	fmt.Fprintf(w, "  idle requests per node ≤ 0.5× the kubelet's: %.2f vs %.2f per minute, %.2f× — %s\n", perNode(nl), perNode(k), q, verdict(q <= 0.5))
	nw, kw := float64(sumValues(nl.OpenWatches))/float64(nl.Nodes), float64(sumValues(k.OpenWatches))/float64(k.Nodes)
	if nl.OpenWatches == nil || k.OpenWatches == nil {
		fmt.Fprintf(w, "  watches per node ≤ 0.5× the kubelet's (audit): not counted in these results\n")
	} else {
		q = ratio(nw, kw)
		fmt.Fprintf(w, "  watches per node ≤ 0.5× the kubelet's (audit): %.2f vs %.2f, %.2f× — %s\n", nw, kw, q, verdict(q <= 0.5))
	}
	var xs, kr, nr []float64
	for _, x := range nodes {
		kx, nx := byKey["kubelet/"+strconv.Itoa(x)], byKey["nodelet/"+strconv.Itoa(x)]
		if kx != nil && nx != nil {
			xs = append(xs, float64(x))
			kr = append(kr, float64(kx.APIServerRSS)/1024)
			nr = append(nr, float64(nx.APIServerRSS)/1024)
		}
	}
	if len(xs) >= 2 {
		ks, ns := slope(xs, kr), slope(xs, nr)
		q = ratio(ns, ks)
		ok := ns <= 0.5*ks
		fmt.Fprintf(w, "  API server memory per node ≤ 0.5× (RSS slope over N = %v, both arms): %.2f vs %.2f MiB per node, %.2f× — %s\n", xs, ns, ks, q, verdict(ok))
	} else {
		fmt.Fprintf(w, "  API server memory per node: needs two N or more run by both arms\n")
	}
	p99 := max(percentile(nl.Startup, 0.99), percentile(nl.ChurnStartup, 0.99))
	fmt.Fprintf(w, "  nodelet's start-up p99 ≤ 5 s (first and churned pods): %.2fs — %s\n", p99.Seconds(), verdict(p99 <= 5*time.Second))
	ne, ke := float64(nl.StartEvents)/float64(nl.Pods), float64(k.StartEvents)/float64(k.Pods)
	fmt.Fprintf(w, "  event writes per pod start ≤ the kubelet's: %.2f vs %.2f — %s\n", ne, ke, verdict(ne <= ke))
}

// sumValues is the sum of m's values.
func sumValues(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// hollowHeld says why r did not hold, or "" when it did: every Node Ready
// through idle, lease update p99 ≤ 2 s, start-up p99 ≤ 5 s (the first pods
// and the churned ones).
func hollowHeld(r *hollowResult) string {
	var why []string
	if r == nil {
		return "not run or failed"
	}
	if len(r.NotReady) > 0 {
		why = append(why, fmt.Sprintf("%d Nodes not Ready", len(r.NotReady)))
	}
	if p := percentile(r.Startup, 0.99); p > 5*time.Second {
		why = append(why, fmt.Sprintf("start-up p99 %.2fs", p.Seconds()))
	}
	if p := percentile(r.ChurnStartup, 0.99); p > 5*time.Second {
		why = append(why, fmt.Sprintf("churn start-up p99 %.2fs", p.Seconds()))
	}
	if r.LeaseP99 > 2*time.Second {
		why = append(why, fmt.Sprintf("lease update p99 %.2fs", r.LeaseP99.Seconds()))
	}
	return strings.Join(why, ", ")
}

// printHollowTable prints each N's figures for both arms and their ratio,
// then the slopes over N, then the idle requests by kind.
func printHollowTable(w io.Writer, cfg hollowConfig, res []*hollowResult) {
	fmt.Fprintf(w, "hollow nodes: N agents on fake CRI runtimes against one control plane each (fresh per arm and N); a simulation on one machine\n")
	byKey := map[string]*hollowResult{}
	for _, r := range res {
		byKey[fmt.Sprintf("%s/%d", r.Arm, r.Nodes)] = r
	}
	type row struct {
		label string
		get   func(r *hollowResult) float64
		unit  string
	}
	perNodeMin := func(r *hollowResult, v float64) float64 { return v / float64(r.Nodes) / r.Idle.Minutes() }
	core := func(r *hollowResult, sec float64) float64 { return 100 * sec / r.Idle.Seconds() }
	rows := []row{
		{"join (all Nodes Ready)", func(r *hollowResult) float64 { return r.Join.Seconds() }, "s"},
		{"pod start-up p50", func(r *hollowResult) float64 { return percentile(r.Startup, 0.5).Seconds() }, "s"},
		{"pod start-up p90", func(r *hollowResult) float64 { return percentile(r.Startup, 0.9).Seconds() }, "s"},
		{"pod start-up p99 (SLO ≤ 5 s)", func(r *hollowResult) float64 { return percentile(r.Startup, 0.99).Seconds() }, "s"},
		{"API requests per pod start", func(r *hollowResult) float64 { return float64(r.StartReqs) / float64(r.Pods) }, ""},
		{"event writes per pod start", func(r *hollowResult) float64 { return float64(r.StartEvents) / float64(r.Pods) }, ""},
		{"API requests per node per minute idle", func(r *hollowResult) float64 { return perNodeMin(r, float64(r.IdleReqs)) }, ""},
		{"watches per node (audit: open at the end of idle)", func(r *hollowResult) float64 {
			if r.OpenWatches == nil { // a result kept before they were counted
				return math.NaN()
			}
			return float64(sumValues(r.OpenWatches)) / float64(r.Nodes)
		}, ""},
		{"watches per node (API server metric, all clients)", func(r *hollowResult) float64 { return r.Watches / float64(r.Nodes) }, ""},
		{"lease update p99 idle (≤ 2 s)", func(r *hollowResult) float64 { return r.LeaseP99.Seconds() * 1000 }, "ms"},
		{"etcd writes per node per minute idle (all ÷ N)", func(r *hollowResult) float64 { return perNodeMin(r, r.EtcdWrites) }, ""},
		{"API server CPU idle (% of a core)", func(r *hollowResult) float64 { return core(r, r.APIServerCPU) }, "%"},
		{"API server RSS end of idle", func(r *hollowResult) float64 { return float64(r.APIServerRSS) / 1024 }, "MiB"},
		{"agent CPU per node idle (% of a core)", func(r *hollowResult) float64 { return core(r, r.AgentCPU) / float64(r.Nodes) }, "%"},
		{"agent RSS per node", func(r *hollowResult) float64 { return float64(r.AgentRSS) / 1024 / float64(r.Nodes) }, "MiB"},
		{"fake runtime CPU per node idle (%)", func(r *hollowResult) float64 { return core(r, r.RuntimeCPU) / float64(r.Nodes) }, "%"},
		{"fake runtime RSS per node", func(r *hollowResult) float64 { return r.RuntimeRSS / 1024 / float64(r.Nodes) }, "MiB"},
	}
	if slices.ContainsFunc(res, func(r *hollowResult) bool { return r.Churned > 0 }) {
		rows = append(rows,
			row{"churn: new pods' start-up p50", func(r *hollowResult) float64 { return percentile(r.ChurnStartup, 0.5).Seconds() }, "s"},
			row{"churn: new pods' start-up p99 (≤ 5 s)", func(r *hollowResult) float64 { return percentile(r.ChurnStartup, 0.99).Seconds() }, "s"},
			row{"churn: API requests per pod churned", func(r *hollowResult) float64 { return float64(r.ChurnReqs) / float64(max(r.Churned, 1)) }, ""})
	}
	if slices.ContainsFunc(res, func(r *hollowResult) bool { return r.Restarted }) {
		rows = append(rows,
			row{"restart: API server away", func(r *hollowResult) float64 { return r.Outage.Seconds() }, "s"},
			row{"restart: ... of which its stop (SIGTERM to exit)", func(r *hollowResult) float64 {
				if r.StopTook == 0 { // a result kept before it was taken
					return math.NaN()
				}
				return r.StopTook.Seconds()
			}, "s"},
			row{"restart: back to all Ready + leases renewed", func(r *hollowResult) float64 { return r.Recovery.Seconds() }, "s"},
			row{"restart: API requests per node (stop to +1 min)", func(r *hollowResult) float64 { return float64(r.RecoveryReqs) / float64(r.Nodes) }, ""},
			row{"restart: pods restarted", func(r *hollowResult) float64 { return float64(len(r.PodsRestarted)) }, ""})
	}
	for _, n := range cfg.nodes {
		k, nl := byKey["kubelet/"+strconv.Itoa(n)], byKey["nodelet/"+strconv.Itoa(n)]
		fmt.Fprintf(w, "\nN = %d\n", n)
		for _, r := range []*hollowResult{k, nl} {
			if r != nil {
				fmt.Fprintf(w, "  %s: %d pods per node at %.1f/s, settle %v, idle %v, churn %d per node, API server restart %v; ended %s, load average then %s\n",
					r.Arm, r.PodsPerNode, r.Rate, r.Settle, r.Idle.Round(time.Second), r.ChurnPerNode, r.Restarted, r.At.Format(time.DateTime), r.Load)
			}
		}
		fmt.Fprintf(w, "  %-50s %14s %12s %16s\n", "", "hollow kubelet", "nodelet", "nodelet÷kubelet")
		for _, rw := range rows {
			cell := func(r *hollowResult) string {
				if r == nil {
					return "-"
				}
				if r.Arm == "kubelet" && strings.HasPrefix(rw.label, "fake runtime") {
					return "in agent"
				}
				if math.IsNaN(rw.get(r)) {
					return "-"
				}
				return fmt.Sprintf("%.2f%s", rw.get(r), rw.unit)
			}
			ratio := "-"
			if k != nil && nl != nil && rw.get(k) > 0 && !math.IsNaN(rw.get(nl)) {
				ratio = fmt.Sprintf("%.2fx", rw.get(nl)/rw.get(k))
			}
			fmt.Fprintf(w, "  %-50s %14s %12s %16s\n", rw.label, cell(k), cell(nl), ratio)
		}
		for _, r := range []*hollowResult{k, nl} {
			if r == nil {
				continue
			}
			ready := "every Node Ready through idle"
			if len(r.NotReady) > 0 {
				ready = "NOT Ready during idle: " + strings.Join(r.NotReady, ", ")
			}
			fmt.Fprintf(w, "  %s: %s; %d lease updates idle; %d pods\n", r.Arm, ready, r.LeaseUpdates, r.Pods)
			if len(r.PodsRestarted) > 0 {
				fmt.Fprintf(w, "  %s: pods restarted across the API server restart: %s\n", r.Arm, strings.Join(r.PodsRestarted, ", "))
			}
		}
	}
	fmt.Fprintf(w, "\nlargest N held (every Node Ready through idle, lease update p99 ≤ 2 s, start-up p99 ≤ 5 s, at that N and every smaller N run)\n")
	for _, arm := range []string{"kubelet", "nodelet"} {
		held, why := hollowLargestN(cfg.nodes, func(n int) string { return hollowHeld(byKey[arm+"/"+strconv.Itoa(n)]) })
		fmt.Fprintf(w, "  %-8s %s\n", arm, heldString(held, why))
	}
	if len(cfg.nodes) >= 2 {
		fmt.Fprintf(w, "\nadded per node (least-squares slope over N = %v)\n", cfg.nodes)
		for _, arm := range []string{"kubelet", "nodelet"} {
			var xs, cpu, rss, etcd []float64
			for _, n := range cfg.nodes {
				if r := byKey[arm+"/"+strconv.Itoa(n)]; r != nil {
					xs = append(xs, float64(n))
					cpu = append(cpu, core(r, r.APIServerCPU))
					rss = append(rss, float64(r.APIServerRSS)/1024)
					etcd = append(etcd, r.EtcdWrites/r.Idle.Minutes())
				}
			}
			if len(xs) >= 2 {
				fmt.Fprintf(w, "  %-8s API server CPU %.3f %% of a core, RSS %.2f MiB, etcd writes %.2f per minute idle\n", arm, slope(xs, cpu), slope(xs, rss), slope(xs, etcd))
			}
		}
	}
	printHollowGoals(w, cfg.nodes, byKey)
	for _, r := range res {
		if len(r.OpenWatches) == 0 {
			continue
		}
		fmt.Fprintf(w, "\nwatches open at the end of idle by kind, %s N=%d (per node)\n", r.Arm, r.Nodes)
		kinds := slices.Sorted(maps.Keys(r.OpenWatches))
		for _, kind := range kinds {
			fmt.Fprintf(w, "  %8.2f  %s\n", float64(r.OpenWatches[kind])/float64(r.Nodes), kind)
		}
	}
	for _, r := range res {
		fmt.Fprintf(w, "\nidle requests by kind, %s N=%d (per node per minute)\n", r.Arm, r.Nodes)
		kinds := make([]string, 0, len(r.IdleByKind))
		for kind := range r.IdleByKind {
			kinds = append(kinds, kind)
		}
		sort.Slice(kinds, func(i, j int) bool { return r.IdleByKind[kinds[i]] > r.IdleByKind[kinds[j]] })
		for _, kind := range kinds {
			fmt.Fprintf(w, "  %8.2f  %s\n", perNodeMin(r, float64(r.IdleByKind[kind])), kind)
		}
	}
}
