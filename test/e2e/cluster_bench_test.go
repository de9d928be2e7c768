//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
)

// BenchmarkCluster measures the two node agents as nodes of one real
// control plane (startCluster: hack/cluster.sh, kubeadm-like) on the shared
// containerd, in one run: the upstream kubelet of the release nodelet's
// k8s.io modules are, then nodelet. Each joins through the bootstrap
// kubeconfig as its own node (bench-kubelet, bench-nodelet), alone: the
// agent before it has torn its pods down and stopped, its Node is deleted
// and the runtime emptied.
// For each it measures, with a Deployment of busybox pods that sleep, held
// on its node by a nodeSelector:
//
//  1. the time from scaling the Deployment from 0 to 30 replicas until the
//     30 pods are Ready in the API (seen through a watch);
//  2. the API requests of the node's user (system:node:<name>) during (1),
//     per pod, as the API server's audit log has them (AUDIT_LOG of
//     hack/cluster.sh: the requests of nodes only);
//  3. its API requests per minute at idle with 50 pods Ready, over the two
//     minutes that begin two minutes after they are all Ready, by verb and
//     resource (what comes before is the pods' start settling: the kubelet
//     patches each pod's status once more at its first periodic resync,
//     60 to 90 s after it started; printed apart);
//  4. the resident memory (VmRSS) of the agent's own process once 100 pods
//     are Ready. containerd is the harness's, shared, and not counted.
//
// It prints each figure for both agents with the ratio nodelet/kubelet and
// issue 11's targets (time at most 1.0×, requests and memory at most 0.5×
// the kubelet's); it asserts none of them. An agent that cannot run the
// benchmark fails it after the other's figures are printed.
func BenchmarkCluster(b *testing.B) {
	began := time.Now()
	sizes := clusterBenchSizes()
	cp := startCluster(b)
	cp.logsOnFailure(b)
	// Benchmarks run after the tests, and this is the only one of cluster
	// mode: the control plane stops here rather than at the end, so that
	// it takes no CPU from the benchmarks after this one.
	b.Cleanup(stopCluster)
	admin := benchAdmin(b, cp)
	pullBusybox(b)
	cleanRuntime(b)
	agents := []*clusterAgent{newClusterKubelet(b, cp), newClusterNodelet(b, cp)}
	results := make([]*clusterResult, len(agents))
	failures := eachAgent(b, "cluster bench", agents, func(i int, a *clusterAgent) error {
		res, err := runClusterAgent(cp, admin, a, sizes)
		results[i] = res
		return err
	}, func(a *clusterAgent) error { return a.cleanUp(admin) })

	fmt.Println()
	names := []string{agents[0].label, agents[1].label}
	printClusterTable(os.Stdout, sizes, names, results)
	fmt.Printf("cluster bench took %v (control plane, both agents, clean-ups)\n", time.Since(began).Round(time.Second))
	reportClusterMetrics(b, sizes, results)
	keepAuditLog(b, cp)
	for _, f := range failures {
		b.Error(f)
	}
}

// eachAgent runs measure for each agent in turn, and cleanUp after it
// whatever happened, so that the next agent finds no trace of it (the
// shared runtime emptied too). It returns the failures, one line each.
func eachAgent(b *testing.B, bench string, agents []*clusterAgent, measure func(int, *clusterAgent) error, cleanUp func(*clusterAgent) error) []string {
	var failures []string
	for i, a := range agents {
		fmt.Printf("%s: %s as node %s (log %s)\n", bench, a.label, a.node, a.logPath)
		start := time.Now()
		err := measure(i, a)
		if cerr := cleanUp(a); cerr != nil {
			err = errors.Join(err, fmt.Errorf("cleaning up: %w", cerr))
		}
		cleanRuntime(b)
		if err != nil {
			failures = append(failures, fmt.Sprintf("%s: %v", a.label, err))
			fmt.Printf("%s: %s failed after %v: %v\n", bench, a.label, time.Since(start).Round(time.Second), firstLine(err.Error()))
			continue
		}
		fmt.Printf("%s: %s done in %v\n", bench, a.label, time.Since(start).Round(time.Second))
	}
	return failures
}

// clusterSizes are the pod counts and windows of BenchmarkCluster.
type clusterSizes struct {
	start  int           // pods of (1) and (2)
	idle   int           // pods of (3)
	memory int           // pods of (4)
	settle time.Duration // after the idle pods are Ready, before the idle window
	window time.Duration // the idle window
}

// clusterBenchSizes are issue 11's, or small ones for a trial of the
// harness itself (NODELET_BENCH_QUICK).
func clusterBenchSizes() clusterSizes {
	if os.Getenv("NODELET_BENCH_QUICK") != "" {
		return clusterSizes{start: 5, idle: 8, memory: 12, settle: 5 * time.Second, window: 20 * time.Second}
	}
	return clusterSizes{start: 30, idle: 50, memory: 100, settle: 2 * time.Minute, window: 2 * time.Minute}
}

// clusterResult is what BenchmarkCluster measured of one agent.
type clusterResult struct {
	join        time.Duration // from the agent's start to its Node Ready and schedulable
	start       time.Duration // (1)
	startReqs   requestCount  // (2), all of them
	settleReqs  requestCount  // from all idle pods Ready to the idle window
	idleReqs    requestCount  // (3), all of them over idleWindow
	idleWindow  time.Duration
	memoryStart time.Duration // from idle to memory pods Ready
	rssKiB      int64         // (4) VmRSS
	hwmKiB      int64         // VmHWM: the peak RSS until then
	anonKiB     int64         // RssAnon: the part of VmRSS that is the process's own (the rest is its binary's pages, in the page cache)
	pid         int
	binary      string
}

// benchNamespace holds the benchmark's Deployments (cluster.sh waits for
// its service account and root CA).
const benchNamespace = "default"

// runClusterAgent starts the agent and measures it; it leaves the cleaning
// up to the caller.
func runClusterAgent(cp *controlPlane, admin kubernetes.Interface, a *clusterAgent, sizes clusterSizes) (*clusterResult, error) {
	// A bound for all of it, far beyond what it takes.
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute+sizes.settle+sizes.window)
	defer cancel()
	began := time.Now()
	if err := a.startAndJoin(ctx, cancel, admin); err != nil {
		return nil, err
	}
	res := &clusterResult{pid: a.cmd.Process.Pid, binary: a.cmd.Path}
	res.join = time.Since(began)

	name := "bench-" + a.label
	if _, err := admin.AppsV1().Deployments(benchNamespace).Create(ctx, benchDeployment(name, a.node), metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("create Deployment %s: %w", name, err)
	}
	pods, err := watchPods(ctx, admin, benchNamespace, "app="+name)
	if err != nil {
		return nil, a.why(err)
	}
	defer pods.stop()
	scaleTo := func(n int) (time.Time, error) {
		return pods.scale(ctx, admin, name, n)
	}

	// One pod first, not measured, so that the measured ones find the agent
	// as it is on a node that has run pods (informers and caches filled),
	// as BenchmarkPodStartup does.
	if _, err := scaleTo(1); err != nil {
		return nil, a.why(err)
	}
	if _, err := scaleTo(0); err != nil {
		return nil, a.why(err)
	}

	// (1) and (2)
	t0 := time.Now()
	t1, err := scaleTo(sizes.start)
	if err != nil {
		return nil, a.why(err)
	}
	res.start = t1.Sub(t0)
	startWindow := window{t0, t1}

	// (3)
	allReady, err := scaleTo(sizes.idle)
	if err != nil {
		return nil, a.why(err)
	}
	if err := sleepCtx(ctx, sizes.settle-time.Since(allReady)); err != nil {
		return nil, a.why(err)
	}
	i0 := time.Now()
	if err := sleepCtx(ctx, sizes.window); err != nil {
		return nil, a.why(err)
	}
	i1 := time.Now()
	res.idleWindow = i1.Sub(i0)
	if ready, all := pods.counts(); ready != sizes.idle || all != sizes.idle {
		return nil, fmt.Errorf("idle: %d pods, %d Ready at the end of the window, want %d Ready", all, ready, sizes.idle)
	}

	// (4)
	t2 := time.Now()
	t3, err := scaleTo(sizes.memory)
	if err != nil {
		return nil, a.why(err)
	}
	res.memoryStart = t3.Sub(t2)
	if res.rssKiB, res.hwmKiB, res.anonKiB, err = procMemory(res.pid); err != nil {
		return nil, a.why(err)
	}

	// Every request received in the windows has been answered by now, and
	// so is in the log (blocking audit).
	counts, err := countNodeRequests(cp.AuditLog, "system:node:"+a.node, []window{startWindow, {allReady, i0}, {i0, i1}})
	if err != nil {
		return nil, err
	}
	res.startReqs, res.settleReqs, res.idleReqs = counts[0], counts[1], counts[2]
	if res.startReqs.total == 0 {
		return nil, fmt.Errorf("no request of system:node:%s in the audit log %s during the pod start", a.node, cp.AuditLog)
	}
	return res, nil
}

// benchDeployment is a Deployment of 0 replicas, as examples/cluster's:
// busybox from the loopback registry, a shell that sleeps and exits at
// once on SIGTERM; on node only, with the DNS of the host (the cluster has
// none, and a ClusterFirst pod on a node without clusterDNS makes the
// kubelet warn about each one).
func benchDeployment(name, node string) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	replicas, grace := int32(0), int64(2)
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: v1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: v1.PodSpec{
					NodeSelector:                  map[string]string{v1.LabelHostname: node},
					DNSPolicy:                     v1.DNSDefault,
					TerminationGracePeriodSeconds: &grace,
					Containers: []v1.Container{{
						Name:    "main",
						Image:   "busybox:1.35",
						Command: []string{"sh", "-c", "trap 'exit 0' TERM; while true; do sleep 3600 & wait $!; done"},
					}},
				},
			},
		},
	}
}

// keepAuditLog copies the audit log to $NODELET_BENCH_LOGS, when set,
// beside the agents' logs: the requests behind the counts.
func keepAuditLog(b *testing.B, cp *controlPlane) {
	dir := os.Getenv("NODELET_BENCH_LOGS")
	if dir == "" {
		return
	}
	in, err := os.Open(cp.AuditLog)
	if err != nil {
		b.Log(err)
		return
	}
	defer in.Close()
	path := filepath.Join(dir, "bench-cluster-audit.log")
	out, err := os.Create(path)
	if err != nil {
		b.Log(err)
		return
	}
	_, err = io.Copy(out, io.LimitReader(in, maxAuditLog))
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		b.Log(err)
		return
	}
	fmt.Printf("the nodes' API requests (audit log): %s\n", path)
}

// benchAdmin is a cluster admin client whose own rate limit (client-go's
// 5 requests per second) does not slow the benchmark's set-up down.
func benchAdmin(b *testing.B, cp *controlPlane) kubernetes.Interface {
	cfg := rest.CopyConfig(cp.AdminConfig)
	cfg.QPS, cfg.Burst = 100, 200
	return clientFor(b, cfg)
}

// clusterAgent is a node agent run as a child process, joining the control
// plane through its bootstrap kubeconfig.
type clusterAgent struct {
	label   string // kubelet, nodelet
	node    string // its Node's name
	work    string // its directories (root dir, pod logs)
	logPath string // its output, appended to
	command func() *exec.Cmd

	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
}

// newClusterKubelet runs the upstream kubelet with the KubeletConfiguration
// hack/cluster.sh writes as kubeadm does (webhook authentication and
// authorization, client certificate rotation), plus what the kubelet needs
// on this machine beside nodelet (kubeletMachineConfig).
func newClusterKubelet(b *testing.B, cp *controlPlane) *clusterAgent {
	bin := upstreamKubelet(b)
	work := filepath.Join(shared.work, "cluster-kubelet")
	if err := os.MkdirAll(work, 0o700); err != nil {
		b.Fatal(err)
	}
	base, err := os.ReadFile(cp.NodeletConfig)
	if err != nil {
		b.Fatal(err)
	}
	healthzPort, roPort, apiPort := freePort(b), freePort(b), freePort(b)
	config := filepath.Join(work, "config.yaml")
	machine := kubeletMachineConfig(shared.endpoint, filepath.Join(work, "logs"), healthzPort, roPort, apiPort, shared.cgroupRoot)
	if err := os.WriteFile(config, append(base, machine...), 0o600); err != nil {
		b.Fatal(err)
	}
	a := &clusterAgent{label: "kubelet", node: "bench-kubelet", work: work, logPath: benchLogPath("cluster-kubelet")}
	root := filepath.Join(work, "root")
	a.command = func() *exec.Cmd {
		// --cert-dir: its default is /var/lib/kubelet/pki whatever the root
		// dir, where a certificate of another cluster may be.
		return exec.Command(bin, "--config", config, "--root-dir", root, "--cert-dir", filepath.Join(root, "pki"),
			"--bootstrap-kubeconfig", cp.BootstrapKubeconfig, "--kubeconfig", filepath.Join(root, "kubelet.kubeconfig"),
			"--hostname-override", a.node, "--node-ip", "127.0.0.1", "--v", kubeletVerbosity())
	}
	return a
}

// newClusterNodelet runs nodelet as hack/cluster.sh does, with the same
// KubeletConfiguration, on the shared containerd.
func newClusterNodelet(b *testing.B, cp *controlPlane) *clusterAgent {
	work := filepath.Join(shared.work, "cluster-nodelet")
	healthzPort, roPort, apiPort := freePort(b), freePort(b), freePort(b)
	a := &clusterAgent{label: "nodelet", node: "bench-nodelet", work: work, logPath: benchLogPath("cluster-nodelet")}
	root := filepath.Join(work, "root")
	a.command = func() *exec.Cmd {
		return exec.Command(shared.nodelet, "--config", cp.NodeletConfig, "--root-dir", root,
			"--bootstrap-kubeconfig", cp.BootstrapKubeconfig, "--kubeconfig", filepath.Join(root, "kubelet.kubeconfig"),
			"--hostname-override", a.node, "--node-ip", "127.0.0.1", "--container-runtime-endpoint", shared.endpoint,
			"--pod-logs-dir", filepath.Join(work, "logs"), "--address", "127.0.0.1", "--port", apiPort,
			"--healthz-port", healthzPort, "--read-only-port", roPort, "--cgroup-root", shared.cgroupRoot)
	}
	return a
}

func (a *clusterAgent) start() error {
	log, err := os.OpenFile(a.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer log.Close() // the child has its own descriptor
	fmt.Fprintf(log, "\n===== start at %s\n", time.Now().Format(time.RFC3339Nano))
	a.cmd = a.command()
	a.cmd.Stdout, a.cmd.Stderr = log, log
	if err := a.cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", a.label, err)
	}
	a.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { cmd.Wait(); close(done) }(a.cmd, a.done)
	return nil
}

// startAndJoin starts the agent, makes its exit cancel ctx (every wait
// of the caller then ends, and a.why says why), and waits up to 3 minutes
// for its Node to be Ready and schedulable.
func (a *clusterAgent) startAndJoin(ctx context.Context, cancel context.CancelFunc, admin kubernetes.Interface) error {
	if err := a.start(); err != nil {
		return err
	}
	go func() {
		select {
		case <-a.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	joinCtx, joined := context.WithTimeout(ctx, 3*time.Minute)
	defer joined()
	if err := waitNodeSchedulable(joinCtx, admin, a.node); err != nil {
		return a.why(fmt.Errorf("node %s Ready and schedulable within 3 minutes: %w", a.node, err))
	}
	return nil
}

// running tells whether the agent was started and has not exited.
func (a *clusterAgent) running() bool {
	if a.cmd == nil {
		return false
	}
	select {
	case <-a.done:
		return false
	default:
		return true
	}
}

// why is err, or the agent's exit with the end of its log if it exited.
func (a *clusterAgent) why(err error) error {
	select {
	case <-a.done:
		return fmt.Errorf("%s exited (%v); the end of its log:\n%s", a.label, a.cmd.ProcessState, tail(a.logPath, 40))
	default:
		return err
	}
}

// stop ends the agent: SIGINT, SIGKILL a minute later. The pods it ran
// keep running (as the kubelet leaves them).
func (a *clusterAgent) stop() error {
	if a.cmd == nil {
		return nil
	}
	defer func() { a.cmd = nil }()
	select {
	case <-a.done:
		return nil
	default:
	}
	a.cmd.Process.Signal(os.Interrupt)
	select {
	case <-a.done:
		return nil
	case <-time.After(time.Minute):
		a.cmd.Process.Kill()
		<-a.done
		return fmt.Errorf("%s did not exit within a minute of SIGINT", a.label)
	}
}

// cleanUp removes what the agent left: its pods, which the agent itself
// tears down while it runs (their containers stopped, their volumes
// unmounted, as on a node that is drained); the agent; what the API holds
// of it (pods it could not finish, deleted forcibly, and its Node); and
// the mounts it left under its work directory (the kubelet's root dir
// bind-mounted onto itself, or volumes of pods it did not tear down), so
// that the harness can delete that directory. The runtime is the caller's
// to clean.
func (a *clusterAgent) cleanUp(admin kubernetes.Interface) error {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var errs []error
	name := "bench-" + a.label
	notFound := func(err error) error {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	}
	selector := metav1.ListOptions{LabelSelector: "app=" + name}
	// none waits until the Deployment has no pod left, for at most limit.
	none := func(limit time.Duration) error {
		ctx, cancel := context.WithTimeout(ctx, limit)
		defer cancel()
		for {
			left, err := admin.CoreV1().Pods(benchNamespace).List(ctx, selector)
			if err == nil && len(left.Items) == 0 {
				return nil
			}
			if err := sleepCtx(ctx, 500*time.Millisecond); err != nil {
				return fmt.Errorf("the pods of %s not gone: %w", name, err)
			}
		}
	}
	// Replicas 0: the ReplicaSet deletes the pods with their grace period
	// and makes no new ones.
	patch := []byte(`{"spec":{"replicas":0}}`)
	_, err := admin.AppsV1().Deployments(benchNamespace).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	errs = append(errs, notFound(err))
	if a.running() {
		begin := time.Now()
		if err := none(2 * time.Minute); err != nil {
			errs = append(errs, fmt.Errorf("%s did not tear its pods down: %w", a.label, err))
		} else {
			fmt.Printf("cluster bench: %s tore its pods down in %v\n", a.label, time.Since(begin).Round(100*time.Millisecond))
		}
	}
	errs = append(errs, a.stop())
	background := metav1.DeletePropagationBackground
	errs = append(errs, notFound(admin.AppsV1().Deployments(benchNamespace).Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &background})))
	now := int64(0)
	if err := admin.CoreV1().Pods(benchNamespace).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &now}, selector); err != nil {
		errs = append(errs, fmt.Errorf("delete the pods of %s: %w", name, err))
	}
	errs = append(errs, none(time.Minute))
	errs = append(errs, notFound(admin.CoreV1().Nodes().Delete(ctx, a.node, metav1.DeleteOptions{})))
	errs = append(errs, unmountBelow(a.work))
	return errors.Join(errs...)
}

// unmountBelow detaches every mount below dir, the deepest first.
func unmountBelow(dir string) error {
	below, err := mountsUnder(dir)
	if err != nil {
		return err
	}
	return detachMounts(below)
}

// waitNodeSchedulable waits, through a watch, until the Node is Ready and
// carries no taint that keeps the benchmark's pods off it (the not-ready
// taint of a new node).
func waitNodeSchedulable(ctx context.Context, c kubernetes.Interface, node string) error {
	lw := cache.NewFilteredListWatchFromClient(c.CoreV1().RESTClient(), "nodes", "", func(o *metav1.ListOptions) {
		o.FieldSelector = "metadata.name=" + node
	})
	_, err := watchtools.UntilWithSync(ctx, lw, &v1.Node{}, nil, func(ev watch.Event) (bool, error) {
		n, ok := ev.Object.(*v1.Node)
		if !ok || ev.Type == watch.Deleted {
			return false, nil
		}
		for _, t := range n.Spec.Taints {
			if t.Effect == v1.TaintEffectNoSchedule || t.Effect == v1.TaintEffectNoExecute {
				return false, nil
			}
		}
		for _, c := range n.Status.Conditions {
			if c.Type == v1.NodeReady {
				return c.Status == v1.ConditionTrue, nil
			}
		}
		return false, nil
	})
	return err
}

// podWatch follows the pods of a label selector through an informer.
type podWatch struct {
	mu      sync.Mutex
	pods    map[string]*v1.Pod // by name
	at      time.Time          // when the last change arrived
	changed chan struct{}      // closed and replaced at every change

	stop func() // ends the watch
}

func watchPods(ctx context.Context, c kubernetes.Interface, namespace, selector string) (*podWatch, error) {
	w := &podWatch{pods: map[string]*v1.Pod{}, changed: make(chan struct{})}
	set := func(obj any) {
		if pod, ok := obj.(*v1.Pod); ok {
			w.update(func() { w.pods[pod.Name] = pod })
		}
	}
	del := func(obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		if pod, ok := obj.(*v1.Pod); ok {
			w.update(func() { delete(w.pods, pod.Name) })
		}
	}
	var err error
	w.stop, err = podInformer(ctx, c, namespace, selector, cache.ResourceEventHandlerFuncs{
		AddFunc:    set,
		UpdateFunc: func(_, obj any) { set(obj) },
		DeleteFunc: del,
	})
	if err != nil {
		return nil, err
	}
	return w, nil
}

// podInformer runs an informer of the pods selector picks in namespace
// (metav1.NamespaceAll: in all), with handler, until stop is called. It
// returns once the informer has synced.
func podInformer(ctx context.Context, c kubernetes.Interface, namespace, selector string, handler cache.ResourceEventHandler) (stop func(), err error) {
	lw := cache.NewFilteredListWatchFromClient(c.CoreV1().RESTClient(), "pods", namespace, func(o *metav1.ListOptions) {
		o.LabelSelector = selector
	})
	_, informer := cache.NewInformerWithOptions(cache.InformerOptions{ListerWatcher: lw, ObjectType: &v1.Pod{}, Handler: handler})
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { informer.RunWithContext(ctx); close(done) }()
	stop = func() { cancel(); <-done }
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		stop()
		return nil, fmt.Errorf("pods %s: the watch did not sync: %w", selector, ctx.Err())
	}
	return stop, nil
}

func (w *podWatch) update(change func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	change()
	w.at = time.Now()
	close(w.changed)
	w.changed = make(chan struct{})
}

// counts is how many of the pods are Ready and not being deleted, and how
// many there are.
func (w *podWatch) counts() (ready, all int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.countsLocked()
}

func (w *podWatch) countsLocked() (ready, all int) {
	for _, p := range w.pods {
		if p.DeletionTimestamp == nil && podReady(p) {
			ready++
		}
	}
	return ready, len(w.pods)
}

// scale sets the Deployment's replicas to n and waits until it has n pods,
// all of them Ready (n = 0: none left at all). It returns when the change
// that made it so arrived.
func (w *podWatch) scale(ctx context.Context, c kubernetes.Interface, name string, n int) (time.Time, error) {
	patch := []byte(fmt.Sprintf(`{"spec":{"replicas":%d}}`, n))
	if _, err := c.AppsV1().Deployments(benchNamespace).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return time.Time{}, fmt.Errorf("scale %s to %d: %w", name, n, err)
	}
	for {
		w.mu.Lock()
		ready, all := w.countsLocked()
		at, changed := w.at, w.changed
		w.mu.Unlock()
		if ready == n && all == n {
			return at, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			ready, all := w.counts()
			return time.Time{}, fmt.Errorf("%s: not %d pods all Ready: %d pods, %d Ready: %w", name, n, all, ready, ctx.Err())
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// procMemory is a process's VmRSS and VmHWM in KiB, from /proc/<pid>/status.
func procMemory(pid int) (rss, hwm, anon int64, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(io.LimitReader(f, 64<<10))
	for sc.Scan() {
		field, value, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		kib := func() int64 {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(value), " kB"), 10, 64)
			return n
		}
		switch field {
		case "VmRSS":
			rss = kib()
		case "VmHWM":
			hwm = kib()
		case "RssAnon":
			anon = kib()
		}
	}
	if err := sc.Err(); err != nil {
		return 0, 0, 0, err
	}
	if rss == 0 {
		return 0, 0, 0, fmt.Errorf("/proc/%d/status: no VmRSS", pid)
	}
	return rss, hwm, anon, nil
}

// window is a span of time, ends included.
type window struct{ from, to time.Time }

// requestCount is the requests of a window: all of them, and by kind (verb
// and resource, see auditEvent.kind).
type requestCount struct {
	total  int
	byKind map[string]int
}

// auditEvent is what the benchmark reads of an audit.k8s.io/v1 Event.
type auditEvent struct {
	AuditID string `json:"auditID"`
	Stage   string `json:"stage"`
	Verb    string `json:"verb"`
	User    struct {
		Username string `json:"username"`
	} `json:"user"`
	RequestURI string `json:"requestURI"`
	ObjectRef  *struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Namespace   string `json:"namespace"`
		APIGroup    string `json:"apiGroup"`
	} `json:"objectRef"`
	RequestReceivedTimestamp time.Time `json:"requestReceivedTimestamp"`
	ResponseStatus           *struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
}

// kind is "verb resource[.group][/subresource]", or "verb path" for a
// request of no resource (discovery), with the response's code when it is
// an error.
func (e *auditEvent) kind() string {
	var kind string
	if e.ObjectRef == nil || e.ObjectRef.Resource == "" {
		path, _, _ := strings.Cut(e.RequestURI, "?")
		kind = e.Verb + " " + path
	} else {
		kind = e.Verb + " " + e.ObjectRef.Resource
		if e.ObjectRef.APIGroup != "" {
			kind += "." + e.ObjectRef.APIGroup
		}
		if e.ObjectRef.Subresource != "" {
			kind += "/" + e.ObjectRef.Subresource
		}
	}
	if e.ResponseStatus != nil && e.ResponseStatus.Code >= 400 {
		kind += fmt.Sprintf(" (%d)", e.ResponseStatus.Code)
	}
	return kind
}

// Bounds of reading the audit log: its size, and one event's line.
const (
	maxAuditLog  = 512 << 20
	maxAuditLine = 1 << 20
)

// countNodeRequests counts, per window, the requests of user that the API
// server received in it, from its JSON-lines audit log: each request once
// (a watch has an event when it starts and one when it ends).
func countNodeRequests(path, user string, windows []window) ([]requestCount, error) {
	counts := make([]requestCount, len(windows))
	for i := range counts {
		counts[i].byKind = map[string]int{}
	}
	seen := map[string]bool{}
	err := scanAudit(path, user, nil, func(e *auditEvent) {
		if seen[e.AuditID] {
			return
		}
		seen[e.AuditID] = true
		for i, w := range windows {
			if !e.RequestReceivedTimestamp.Before(w.from) && !e.RequestReceivedTimestamp.After(w.to) {
				counts[i].total++
				counts[i].byKind[e.kind()]++
			}
		}
	})
	if err != nil {
		return nil, err
	}
	return counts, nil
}

// scanAudit calls each with every event of user in the API server's
// JSON-lines audit log at path, in order, reading at most maxAuditLog. A
// line without also (when set) in it is skipped before it is decoded, as
// is every line of another user.
func scanAudit(path, user string, also []byte, each func(*auditEvent)) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("audit log: %w", err)
	}
	defer f.Close()
	limited := &io.LimitedReader{R: f, N: maxAuditLog + 1}
	sc := bufio.NewScanner(limited)
	sc.Buffer(make([]byte, 64<<10), maxAuditLine)
	quoted := []byte(strconv.Quote(user))
	for sc.Scan() {
		line := sc.Bytes()
		if !bytes.Contains(line, quoted) || also != nil && !bytes.Contains(line, also) { // most lines are another node's
			continue
		}
		var e auditEvent
		if err := json.Unmarshal(line, &e); err != nil {
			return fmt.Errorf("audit log %s: %w", path, err)
		}
		if e.User.Username == user {
			each(&e)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("audit log %s: %w", path, err)
	}
	if limited.N <= 0 {
		return fmt.Errorf("audit log %s: larger than %d MiB", path, maxAuditLog>>20)
	}
	return nil
}

// printClusterTable prints the figures of both agents, the ratio
// nodelet/kubelet with issue 11's targets, then the requests by kind.
// names[0] is the kubelet, names[1] nodelet; a result is nil for an agent
// that failed.
func printClusterTable(w io.Writer, s clusterSizes, names []string, res []*clusterResult) {
	k, n := res[0], res[1]
	fmt.Fprintf(w, "cluster mode: one control plane, one containerd, the agents one at a time (nodes bench-kubelet, bench-nodelet)\n")
	fmt.Fprintf(w, "  %-44s %12s %12s %16s   %s\n", "", names[0], names[1], names[1]+"/"+names[0], "target")
	row := func(label string, get func(*clusterResult) float64, format func(float64) string, target float64) {
		cell := func(r *clusterResult) string {
			if r == nil {
				return "-"
			}
			return format(get(r))
		}
		ratio, goal := "-", fmt.Sprintf("≤ %.1fx", target)
		if k != nil && n != nil && get(k) > 0 {
			q := get(n) / get(k)
			ratio = fmt.Sprintf("%.2fx", q)
			goal += " (" + verdict(q <= target) + ")"
		}
		fmt.Fprintf(w, "  %-44s %12s %12s %16s   %s\n", label, cell(k), cell(n), ratio, goal)
	}
	seconds := func(v float64) string { return fmt.Sprintf("%.1fs", v) }
	number := func(v float64) string { return fmt.Sprintf("%.1f", v) }
	mib := func(v float64) string { return fmt.Sprintf("%.1fMiB", v/1024) }
	row(fmt.Sprintf("%d pods: scale-up to all Ready in the API", s.start),
		func(r *clusterResult) float64 { return r.start.Seconds() }, seconds, 1.0)
	row("API requests per pod start",
		func(r *clusterResult) float64 { return float64(r.startReqs.total) / float64(s.start) }, number, 0.5)
	row(fmt.Sprintf("API requests per minute, idle, %d pods", s.idle),
		func(r *clusterResult) float64 { return float64(r.idleReqs.total) / r.idleWindow.Minutes() }, number, 0.5)
	row(fmt.Sprintf("RSS of the agent's process, %d pods Ready", s.memory),
		func(r *clusterResult) float64 { return float64(r.rssKiB) }, mib, 0.5)
	info := func(label string, f func(r *clusterResult) string) {
		cell := func(r *clusterResult) string {
			if r == nil {
				return "-"
			}
			return f(r)
		}
		fmt.Fprintf(w, "  %-44s %12s %12s\n", label, cell(k), cell(n))
	}
	info("  (start to Node Ready and schedulable)", func(r *clusterResult) string { return seconds(r.join.Seconds()) })
	info(fmt.Sprintf("  (API requests during the %d pod starts)", s.start), func(r *clusterResult) string { return strconv.Itoa(r.startReqs.total) })
	info(fmt.Sprintf("  (API requests in the %v after all %d Ready)", s.settle, s.idle), func(r *clusterResult) string { return strconv.Itoa(r.settleReqs.total) })
	info("  (idle window, from then)", func(r *clusterResult) string { return r.idleWindow.Round(time.Second).String() })
	info(fmt.Sprintf("  (%d to %d pods all Ready)", s.idle, s.memory), func(r *clusterResult) string { return seconds(r.memoryStart.Seconds()) })
	info("  (peak RSS until then, VmHWM)", func(r *clusterResult) string { return mib(float64(r.hwmKiB)) })
	info("  (of the RSS: anonymous, RssAnon)", func(r *clusterResult) string { return mib(float64(r.anonKiB)) })
	for i, r := range res {
		if r != nil {
			fmt.Fprintf(w, "  memory of %s: /proc/%d/status of %s, the agent's own process (containerd is the harness's, shared, not counted)\n",
				names[i], r.pid, r.binary)
		}
	}
	printRequestKinds(w, fmt.Sprintf("API requests per pod start (%d pods), by kind", s.start), names, res,
		func(r *clusterResult) requestCount { return r.startReqs }, float64(s.start))
	printRequestKinds(w, fmt.Sprintf("API requests in the %v after all %d pods were Ready, by kind", s.settle, s.idle), names, res,
		func(r *clusterResult) requestCount { return r.settleReqs }, 1)
	printRequestKinds(w, fmt.Sprintf("API requests per minute at idle (%d pods), by kind", s.idle), names, res,
		func(r *clusterResult) requestCount { return r.idleReqs }, 0)
}

// printRequestKinds prints a window's requests by kind, most first, divided
// by per (0: per minute of the idle window).
func printRequestKinds(w io.Writer, title string, names []string, res []*clusterResult, get func(*clusterResult) requestCount, per float64) {
	totals := map[string]int{}
	for _, r := range res {
		if r != nil {
			for kind, c := range get(r).byKind {
				totals[kind] += c
			}
		}
	}
	kinds := make([]string, 0, len(totals))
	for kind := range totals {
		kinds = append(kinds, kind)
	}
	sort.Slice(kinds, func(i, j int) bool {
		if totals[kinds[i]] != totals[kinds[j]] {
			return totals[kinds[i]] > totals[kinds[j]]
		}
		return kinds[i] < kinds[j]
	})
	fmt.Fprintf(w, "%s\n", title)
	fmt.Fprintf(w, "  %-52s %10s %10s\n", "verb resource", names[0], names[1])
	for _, kind := range kinds {
		fmt.Fprintf(w, "  %-52s", kind)
		for _, r := range res {
			if r == nil {
				fmt.Fprintf(w, " %10s", "-")
				continue
			}
			div := per
			if div == 0 {
				div = r.idleWindow.Minutes()
			}
			fmt.Fprintf(w, " %10.2f", float64(get(r).byKind[kind])/div)
		}
		fmt.Fprintln(w)
	}
}

// reportClusterMetrics gives the figures to the benchmark's line too.
func reportClusterMetrics(b *testing.B, s clusterSizes, res []*clusterResult) {
	for i, agent := range []string{"kubelet", "nodelet"} {
		r := res[i]
		if r == nil {
			continue
		}
		b.ReportMetric(r.start.Seconds(), fmt.Sprintf("s-%dpods-%s", s.start, agent))
		b.ReportMetric(float64(r.startReqs.total)/float64(s.start), "req/podstart-"+agent)
		b.ReportMetric(float64(r.idleReqs.total)/r.idleWindow.Minutes(), fmt.Sprintf("req/min-idle%d-%s", s.idle, agent))
		b.ReportMetric(float64(r.rssKiB)/1024, fmt.Sprintf("MiB-rss%d-%s", s.memory, agent))
	}
}
