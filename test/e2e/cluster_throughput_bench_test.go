//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"
)

// BenchmarkClusterThroughput is ClusterLoader2's node-throughput load on one
// real node, for each agent in turn on one control plane and the shared
// containerd (as BenchmarkCluster runs them): 100 namespaces, made and
// given their service account and root CA ConfigMap before the
// measurement; then in each a ReplicationController of one pause pod held
// on the node, the controllers created at 5 per second (CL2's UniformQPS
// tuning set); measured until every pod runs. The image is on the node
// before (pulls are excluded from the SLO), and one pod ran and was
// deleted first, not measured.
//
// For each agent it prints:
//   - pod start-up, as CL2's PodStartupLatency and the SLO define it: from
//     the pod's creation (when the benchmark's watch first sees it: the
//     object's creationTimestamp has whole seconds only) until the watch
//     sees it Running with every container started; p50, p90, p99 and
//     the largest, against the SLO's 5 s at p99;
//   - the same from the ReplicationController's creation (adding the
//     controller manager's and the scheduler's share);
//   - the node's API requests (the audit log of hack/cluster.sh, user
//     system:node:<name>) from the first creation until the last pod
//     runs, per pod and by kind, and its watches among them.
//
// NODELET_BENCH_THROUGHPUT="pods,qps" changes the load (default "100,5");
// NODELET_BENCH_QUICK makes it 20 pods. It asserts nothing.
func BenchmarkClusterThroughput(b *testing.B) {
	load := throughputLoad(b)
	cp := startCluster(b)
	cp.logsOnFailure(b)
	b.Cleanup(stopCluster)
	admin := benchAdmin(b, cp)
	pullBusybox(b)
	if _, err := shared.rt.PullImage(context.Background(), &runtimeapi.ImageSpec{Image: throughputImage}, nil, nil); err != nil {
		b.Fatal(err)
	}
	cleanRuntime(b)
	agents := []*clusterAgent{newClusterKubelet(b, cp), newClusterNodelet(b, cp)}
	results := make([]*throughputResult, len(agents))
	fmt.Printf("throughput bench: %d pods at %g per second\n", load.pods, load.qps)
	failures := eachAgent(b, "throughput bench", agents, func(i int, a *clusterAgent) error {
		res, err := runThroughput(cp, admin, a, load)
		if err == nil {
			results[i] = res
		}
		return err
	}, func(a *clusterAgent) error { return throughputCleanUp(admin, a, load) })
	fmt.Println()
	printThroughput(os.Stdout, load, []string{agents[0].label, agents[1].label}, results)
	for _, f := range failures {
		b.Error(f)
	}
}

// throughputImage is the image of CL2's node-throughput pods: pause, from
// the loopback registry.
const throughputImage = "registry.k8s.io/pause:3.10"

type throughputSizes struct {
	pods int
	qps  float64
}

func throughputLoad(b *testing.B) throughputSizes {
	load := throughputSizes{pods: 100, qps: 5}
	if os.Getenv("NODELET_BENCH_QUICK") != "" {
		load.pods = 20
	}
	if s := os.Getenv("NODELET_BENCH_THROUGHPUT"); s != "" {
		p, q, ok := strings.Cut(s, ",")
		n, err1 := strconv.Atoi(strings.TrimSpace(p))
		r, err2 := strconv.ParseFloat(strings.TrimSpace(q), 64)
		if !ok || err1 != nil || err2 != nil || n < 1 || r <= 0 {
			b.Fatalf("NODELET_BENCH_THROUGHPUT=%q: want pods,qps (such as 100,5)", s)
		}
		load = throughputSizes{pods: n, qps: r}
	}
	return load
}

// throughputResult is what one agent's run measured.
type throughputResult struct {
	startup []time.Duration // pod first seen → seen running, per pod
	fromRC  []time.Duration // controller created → pod seen running
	all     time.Duration   // first controller created → last pod running
	machine float64         // cores the whole machine was busy over the load
	reqs    requestCount
}

// throughputNamespace is the i-th namespace of the agent's load (0: the
// warm-up's).
func throughputNamespace(a *clusterAgent, i int) string {
	return fmt.Sprintf("tp-%s-%d", a.label, i)
}

func runThroughput(cp *controlPlane, admin kubernetes.Interface, a *clusterAgent, load throughputSizes) (*throughputResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute+time.Duration(float64(load.pods)/load.qps*float64(time.Second)))
	defer cancel()
	if err := a.startAndJoin(ctx, cancel, admin); err != nil {
		return nil, err
	}
	// The namespaces first, each with what its pod needs from the API
	// (the service account admission plugin refuses a pod without it).
	for i := 0; i <= load.pods; i++ {
		ns := throughputNamespace(a, i)
		if _, err := admin.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			return nil, fmt.Errorf("namespace %s: %w", ns, err)
		}
	}
	for i := 0; i <= load.pods; i++ {
		ns := throughputNamespace(a, i)
		for {
			_, err1 := admin.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
			_, err2 := admin.CoreV1().ConfigMaps(ns).Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
			if err1 == nil && err2 == nil {
				break
			}
			if err := sleepCtx(ctx, 200*time.Millisecond); err != nil {
				return nil, fmt.Errorf("namespace %s: no service account or root CA: %v %v", ns, err1, err2)
			}
		}
	}
	w, err := watchThroughput(ctx, admin, "group=throughput,agent="+a.label)
	if err != nil {
		return nil, a.why(err)
	}
	defer w.stop()

	// The warm-up pod, not measured.
	if err := createThroughputRC(ctx, admin, a, 0); err != nil {
		return nil, err
	}
	if err := w.waitRunning(ctx, 1); err != nil {
		return nil, a.why(fmt.Errorf("warm-up: %w", err))
	}

	res := &throughputResult{}
	created := map[string]time.Time{} // namespace → controller created
	interval := time.Duration(float64(time.Second) / load.qps)
	t0 := time.Now()
	busy0, _ := machineCPU()
	for i := 1; i <= load.pods; i++ {
		// UniformQPS: the i-th at t0 + (i-1)/qps, whatever the calls took.
		if err := sleepCtx(ctx, time.Until(t0.Add(time.Duration(i-1)*interval))); err != nil {
			return nil, a.why(err)
		}
		created[throughputNamespace(a, i)] = time.Now()
		if err := createThroughputRC(ctx, admin, a, i); err != nil {
			return nil, a.why(err)
		}
	}
	if err := w.waitRunning(ctx, load.pods+1); err != nil {
		return nil, a.why(err)
	}
	w.mu.Lock()
	last := t0
	for ns, p := range w.pods {
		rc, ok := created[ns]
		if !ok {
			continue // the warm-up's
		}
		res.startup = append(res.startup, p.running.Sub(p.seen))
		res.fromRC = append(res.fromRC, p.running.Sub(rc))
		if p.running.After(last) {
			last = p.running
		}
	}
	w.mu.Unlock()
	res.all = last.Sub(t0)
	res.machine = machineLoad(busy0, time.Since(t0))
	counts, err := countNodeRequests(cp.AuditLog, "system:node:"+a.node, []window{{t0, last}})
	if err != nil {
		return nil, err
	}
	res.reqs = counts[0]
	return res, nil
}

// createThroughputRC creates the i-th namespace's ReplicationController:
// one pause pod on the agent's node.
func createThroughputRC(ctx context.Context, admin kubernetes.Interface, a *clusterAgent, i int) error {
	ns := throughputNamespace(a, i)
	labels := map[string]string{"group": "throughput", "agent": a.label}
	rc := &v1.ReplicationController{
		ObjectMeta: metav1.ObjectMeta{Name: "throughput", Namespace: ns, Labels: labels},
		Spec: v1.ReplicationControllerSpec{
			Replicas: ptr.To[int32](1),
			Selector: labels,
			Template: &v1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: v1.PodSpec{
					NodeSelector:                  map[string]string{v1.LabelHostname: a.node},
					DNSPolicy:                     v1.DNSDefault,
					TerminationGracePeriodSeconds: ptr.To[int64](1),
					Containers:                    []v1.Container{{Name: "pause", Image: throughputImage, ImagePullPolicy: v1.PullIfNotPresent}},
				},
			},
		},
	}
	if _, err := admin.CoreV1().ReplicationControllers(ns).Create(ctx, rc, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("ReplicationController %s/throughput: %w", ns, err)
	}
	return nil
}

// throughputWatch records, per namespace (one pod each), when the watch
// first saw the pod and when it first saw it running.
type throughputWatch struct {
	mu      sync.Mutex
	pods    map[string]*seenPod
	changed chan struct{}
	stop    func() // ends the watch
}

type seenPod struct {
	uid           types.UID
	seen, running time.Time
}

func watchThroughput(ctx context.Context, c kubernetes.Interface, selector string) (*throughputWatch, error) {
	w := &throughputWatch{pods: map[string]*seenPod{}, changed: make(chan struct{})}
	observe := func(obj any) {
		now := time.Now()
		pod, ok := obj.(*v1.Pod)
		if !ok {
			return
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		p := w.pods[pod.Namespace]
		if p == nil || p.uid != pod.UID {
			p = &seenPod{uid: pod.UID, seen: now}
			w.pods[pod.Namespace] = p
		}
		if p.running.IsZero() && allStarted(pod) {
			p.running = now
			close(w.changed)
			w.changed = make(chan struct{})
		}
	}
	var err error
	w.stop, err = podInformer(ctx, c, metav1.NamespaceAll, selector, cache.ResourceEventHandlerFuncs{
		AddFunc:    observe,
		UpdateFunc: func(_, obj any) { observe(obj) },
	})
	if err != nil {
		return nil, err
	}
	return w, nil
}

// allStarted: Running, with every container running and started, as CL2's
// PodStartupLatency counts a pod started.
func allStarted(p *v1.Pod) bool {
	if p.Status.Phase != v1.PodRunning || len(p.Status.ContainerStatuses) < len(p.Spec.Containers) {
		return false
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Running == nil {
			return false
		}
	}
	return true
}

func (w *throughputWatch) waitRunning(ctx context.Context, n int) error {
	for {
		w.mu.Lock()
		running := 0
		for _, p := range w.pods {
			if !p.running.IsZero() {
				running++
			}
		}
		changed := w.changed
		w.mu.Unlock()
		if running >= n {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("%d of %d pods running: %w", running, n, ctx.Err())
		}
	}
}

// throughputCleanUp deletes the agent's namespaces, lets the agent tear
// their pods down, then cleans up after the agent as BenchmarkCluster does.
func throughputCleanUp(admin kubernetes.Interface, a *clusterAgent, load throughputSizes) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var errs []error
	for i := 0; i <= load.pods; i++ {
		err := admin.CoreV1().Namespaces().Delete(ctx, throughputNamespace(a, i), metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	selector := metav1.ListOptions{LabelSelector: "group=throughput,agent=" + a.label}
	if a.running() {
		for {
			left, err := admin.CoreV1().Pods(metav1.NamespaceAll).List(ctx, selector)
			if err == nil && len(left.Items) == 0 {
				break
			}
			if err := sleepCtx(ctx, time.Second); err != nil {
				errs = append(errs, fmt.Errorf("%s did not tear its pods down", a.label))
				break
			}
		}
	}
	errs = append(errs, a.cleanUp(admin))
	return errors.Join(errs...)
}

func printThroughput(w io.Writer, load throughputSizes, names []string, res []*throughputResult) {
	fmt.Fprintf(w, "node throughput (ClusterLoader2's node-throughput): %d namespaces, a ReplicationController of one pause pod each, created at %g per second onto one node;\n", load.pods, load.qps)
	fmt.Fprintf(w, "one control plane, one containerd, the agents one at a time (nodes bench-kubelet, bench-nodelet), the image present, one pod before not measured\n")
	fmt.Fprintf(w, "  %-48s %12s %12s %16s\n", "", names[0], names[1], names[1]+"/"+names[0])
	k, n := res[0], res[1]
	row := func(label string, get func(*throughputResult) float64, format func(float64) string) {
		cell := func(r *throughputResult) string {
			if r == nil {
				return "-"
			}
			return format(get(r))
		}
		ratio := "-"
		if k != nil && n != nil && get(k) > 0 {
			ratio = fmt.Sprintf("%.2fx", get(n)/get(k))
		}
		fmt.Fprintf(w, "  %-48s %12s %12s %16s\n", label, cell(k), cell(n), ratio)
	}
	ms := func(v float64) string { return fmt.Sprintf("%.0fms", v) }
	for _, p := range []int{50, 90, 99, 100} {
		label := fmt.Sprintf("pod start-up p%d (SLO: p99 ≤ 5 s)", p)
		if p == 100 {
			label = "pod start-up, largest"
		}
		row(label, func(r *throughputResult) float64 { return float64(pct(r.startup, p)) / 1e6 }, ms)
	}
	row("from the controller's creation, p50", func(r *throughputResult) float64 { return float64(pct(r.fromRC, 50)) / 1e6 }, ms)
	row("from the controller's creation, p99", func(r *throughputResult) float64 { return float64(pct(r.fromRC, 99)) / 1e6 }, ms)
	row("first creation to the last pod running", func(r *throughputResult) float64 { return r.all.Seconds() },
		func(v float64) string { return fmt.Sprintf("%.1fs", v) })
	per := func(v float64) string { return fmt.Sprintf("%.2f", v) }
	row("the machine busy over the load, cores (all work)", func(r *throughputResult) float64 { return r.machine }, per)
	row("API requests per pod start", func(r *throughputResult) float64 { return float64(r.reqs.total) / float64(load.pods) }, per)
	row("  of which watches per pod", func(r *throughputResult) float64 {
		n := 0
		for kind, c := range r.reqs.byKind {
			if strings.HasPrefix(kind, "watch ") {
				n += c
			}
		}
		return float64(n) / float64(load.pods)
	}, per)
	for i, r := range res {
		if r != nil && pct(r.startup, 99) > 5*time.Second {
			fmt.Fprintf(w, "  %s misses the start-up SLO: p99 %v\n", names[i], pct(r.startup, 99))
		}
	}
	asCluster := make([]*clusterResult, len(res))
	for i, r := range res {
		if r != nil {
			asCluster[i] = &clusterResult{startReqs: r.reqs}
		}
	}
	printRequestKinds(w, fmt.Sprintf("API requests per pod start (%d pods), by kind", load.pods), names, asCluster,
		func(r *clusterResult) requestCount { return r.startReqs }, float64(load.pods))
}
