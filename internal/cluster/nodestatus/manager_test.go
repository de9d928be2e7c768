package nodestatus

import (
	"context"
	"errors"
	coordinationv1 "k8s.io/api/coordination/v1"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	testclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/internal/base/testutil"
)

func readyCondition(t *testing.T, n *v1.Node) v1.NodeCondition {
	t.Helper()
	c := condition(n, v1.NodeReady)
	if c == nil {
		t.Fatalf("Node has no Ready condition: %+v", n.Status.Conditions)
	}
	return *c
}

// Registration creates the Node with its status, and the lease owned by
// it; the creation is the first report.
func TestRegisterCreatesNodeAndLease(t *testing.T) {
	h := newHarness(t, nil)
	h.start()

	reqs := h.since(0)
	if count(reqs, "create", "nodes", "") != 1 || count(reqs, "patch", "nodes", "status") != 0 {
		t.Errorf("requests at start: %v", reqs)
	}
	n := h.node()
	if n.UID == "" || n.Labels[v1.LabelHostname] != "node-1" || len(n.Spec.Taints) != 1 {
		t.Errorf("Node %+v", n.ObjectMeta)
	}
	if r := readyCondition(t, n); r.Status != v1.ConditionTrue || !r.LastHeartbeatTime.Time.Equal(t0) {
		t.Errorf("Ready = %+v", r)
	}
	if got := n.Status.NodeInfo.ContainerRuntimeVersion; got != "containerd://1.6.20" {
		t.Errorf("runtime version %q", got)
	}
	if got := h.m.Node(); got == nil || got.UID != n.UID {
		t.Errorf("Node() = %v", got)
	}

	l := h.lease()
	if *l.Spec.HolderIdentity != "node-1" || *l.Spec.LeaseDurationSeconds != 40 || !l.Spec.RenewTime.Time.Equal(t0) {
		t.Errorf("lease spec %+v", l.Spec)
	}
	want := []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: "node-1", UID: n.UID}}
	if len(l.OwnerReferences) != 1 || l.OwnerReferences[0] != want[0] {
		t.Errorf("lease owners %+v, want %+v", l.OwnerReferences, want)
	}
	if got := strings.Join(h.events.all(), " "); got != "NodeHasSufficientMemory NodeHasNoDiskPressure NodeHasSufficientPID" {
		t.Errorf("events %s", got)
	}
}

// An idle minute costs six lease updates and nothing else: no Node GET,
// no status patch, no lease GET.
func TestIdleMinuteRequests(t *testing.T) {
	h := newHarness(t, nil)
	h.start()
	h.advance(30 * time.Second) // past the first syncs
	n := h.mark()
	h.advance(time.Minute)
	reqs := h.since(n)
	if count(reqs, "update", "leases", "") != 6 || len(reqs) != 6 {
		t.Errorf("an idle minute made %d requests, want 6 lease updates: %v", len(reqs), reqs)
	}
}

// After the API server was away (a lease renewal failed), the status
// syncs read the Node from the API server for a minute, not the
// informer's copy, which may not show yet that the node lifecycle
// controller marked it Unknown after the first read; then they go back to
// the informer (an idle minute makes no Node GET).
func TestNodeReadFromTheAPIAfterAnOutage(t *testing.T) {
	h := newHarness(t, nil)
	h.start()
	h.advance(30 * time.Second) // past the first syncs
	h.fail("update", "leases", 1)
	n := h.mark()
	h.advance(70 * time.Second)
	gets := 0
	for _, r := range h.since(n) {
		if r.action.GetVerb() == "get" && r.action.GetResource().Resource == "nodes" {
			gets++
		}
	}
	// The sync after the failed renewal reads the Node, and so does
	// every sync (every 10 s) of the minute after that read.
	if gets < 6 {
		t.Errorf("%d Node GETs in the 70 s after a failed lease renewal, want one a sync for a minute: %v", gets, h.since(n))
	}
	n = h.mark()
	h.advance(time.Minute)
	if got := count(h.since(n), "get", "nodes", ""); got != 0 {
		t.Errorf("%d Node GETs a minute after the outage, want none (the informer's copy)", got)
	}
}

// The lease is renewed every 10 s, its renew time the clock's.
func TestLeaseRenewalTiming(t *testing.T) {
	h := newHarness(t, nil)
	h.start()
	// Registration wakes the lease goroutine over a channel, not the
	// clock: until it has created the lease its old timer may still count
	// as a waiter, and a step of the clock would move the creation (and
	// every renewal after it) later.
	testutil.Eventually(t, "the lease created", func() bool {
		_, err := h.client.Tracker().Get(coordinationv1.SchemeGroupVersion.WithResource("leases"), v1.NamespaceNodeLease, "node-1")
		return err == nil
	})
	h.settle()
	n := h.mark()
	h.advance(35 * time.Second)
	var times []time.Duration
	for _, r := range h.since(n) {
		if r.action.GetResource().Resource == "leases" {
			times = append(times, r.at.Sub(t0))
		}
	}
	if want := []time.Duration{10 * time.Second, 20 * time.Second, 30 * time.Second}; !equalDurations(times, want) {
		t.Errorf("lease renewed at %v, want %v", times, want)
	}
	if l := h.lease(); !l.Spec.RenewTime.Time.Equal(t0.Add(30 * time.Second)) {
		t.Errorf("renew time %v", l.Spec.RenewTime)
	}

	// With the most jitter, every 10.4 s.
	h.setRand(0.999999)
	n = h.mark()
	h.advance(25 * time.Second)
	times = nil
	for _, r := range h.since(n) {
		if r.action.GetResource().Resource == "leases" {
			times = append(times, r.at.Sub(t0))
		}
	}
	// Renewed at 40 s (scheduled at 30 s without jitter), then 10.4 s
	// later, rounded up to the harness's 1 s steps.
	if want := []time.Duration{40 * time.Second, 51 * time.Second}; !equalDurations(times, want) {
		t.Errorf("lease renewed at %v, want %v", times, want)
	}
}

func equalDurations(a, b []time.Duration) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Nothing changes: the status is patched once a report period after the
// last report, with a new heartbeat and nothing else.
func TestReportEveryFiveMinutes(t *testing.T) {
	h := newHarness(t, nil)
	h.setRand(0.5) // no shift of the report period, 2% jitter
	h.start()
	n := h.mark()
	h.advance(11 * time.Minute)
	var at []time.Time
	for _, r := range h.since(n) {
		if r.action.GetVerb() == "patch" {
			at = append(at, r.at)
		}
	}
	if len(at) != 2 {
		t.Fatalf("%d patches in 11 minutes, want 2: %v", len(at), at)
	}
	// Reports come at the first sync at least 5 minutes after the last
	// one: syncs are 10.2 s apart.
	for i, prev := range []time.Time{t0, at[0]} {
		if gap := at[i].Sub(prev); gap < 5*time.Minute || gap > 5*time.Minute+11*time.Second {
			t.Errorf("report %d came %v after the previous", i, gap)
		}
	}
	if r := readyCondition(t, h.node()); !r.LastHeartbeatTime.Time.Equal(at[1].Truncate(time.Second)) || !r.LastTransitionTime.Time.Equal(t0) {
		t.Errorf("Ready after two reports: %+v (last report at %v)", r, at[1])
	}
}

// A change is patched at the next computation, and only once.
func TestPatchOnlyOnChange(t *testing.T) {
	h := newHarness(t, nil)
	h.start()
	h.advance(15 * time.Second)
	n := h.mark()
	h.rt.set(func(r *fakeRuntime) { r.network = false })
	h.advance(40 * time.Second)
	reqs := h.since(n)
	if got := count(reqs, "patch", "nodes", "status"); got != 1 {
		t.Fatalf("%d status patches for one change: %v", got, reqs)
	}
	r := readyCondition(t, h.node())
	want := "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized"
	if r.Status != v1.ConditionFalse || r.Reason != "KubeletNotReady" || r.Message != want {
		t.Errorf("Ready = %+v", r)
	}
	if !strings.Contains(strings.Join(h.events.all(), " "), "NodeNotReady") {
		t.Errorf("events %v", h.events.all())
	}

	// Told, it reports at once.
	n = h.mark()
	h.rt.set(func(r *fakeRuntime) { r.network = true })
	h.m.Trigger()
	testutil.Eventually(t, "the triggered patch", func() bool { return count(h.since(n), "patch", "nodes", "status") == 1 })
	h.settle()
	if r := readyCondition(t, h.node()); r.Status != v1.ConditionTrue {
		t.Errorf("Ready after the trigger = %+v", r)
	}

	// Told by another part (Deps.Changed: the graceful shutdown), too.
	n = h.mark()
	h.rt.set(func(r *fakeRuntime) { r.network = false })
	h.changed.Kick()
	testutil.Eventually(t, "the patch Changed asked for", func() bool { return count(h.since(n), "patch", "nodes", "status") == 1 })
	h.settle()
}

// The eviction manager's MemoryPressure is the Node's, with the
// kubelet's reasons.
func TestMemoryPressure(t *testing.T) {
	h := newHarness(t, nil)
	h.start()
	h.memoryPressure.Store(true)
	h.advance(10 * time.Second)
	if c := condition(h.node(), v1.NodeMemoryPressure); c.Status != v1.ConditionTrue || c.Reason != "KubeletHasInsufficientMemory" {
		t.Errorf("MemoryPressure = %+v", c)
	}
	h.memoryPressure.Store(false)
	h.advance(10 * time.Second)
	if c := condition(h.node(), v1.NodeMemoryPressure); c.Status != v1.ConditionFalse || c.Reason != "KubeletHasSufficientMemory" {
		t.Errorf("MemoryPressure relieved = %+v", c)
	}
}

// A Node that exists is reconciled (default labels, annotation, huge
// pages), its own labels and taints kept, and its status reported at the
// next sync; one not Ready is reported Ready at once by the fast update.
func TestAlreadyRegistered(t *testing.T) {
	existing := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "node-1", UID: "uid-old",
			Labels: map[string]string{v1.LabelHostname: "old", "example.com/pool": "green"}},
		Spec: v1.NodeSpec{Taints: []v1.Taint{{Key: "admin", Effect: v1.TaintEffectNoExecute}}},
		Status: v1.NodeStatus{
			NodeInfo: v1.NodeSystemInfo{BootID: "previous-boot"},
			Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionUnknown,
				Reason: "NodeStatusUnknown", LastTransitionTime: metav1.NewTime(t0.Add(-time.Hour))}},
		},
	}
	h := newHarness(t, nil, existing)
	h.start()
	// Create (exists), get, reconcile; then the fast update finds the
	// Node not Ready and the node ready: patched at once.
	reqs := h.since(0)
	if count(reqs, "create", "nodes", "") != 1 || count(reqs, "get", "nodes", "") != 1 || count(reqs, "patch", "nodes", "status") != 2 {
		t.Errorf("registration requests: %v", reqs)
	}
	n := h.node()
	if n.UID != "uid-old" || n.Labels[v1.LabelHostname] != "node-1" || n.Labels["example.com/pool"] != "green" ||
		n.Labels[labelOSBeta] != "linux" || n.Annotations[annotationAttachDetach] != "true" ||
		len(n.Spec.Taints) != 1 || n.Spec.Taints[0].Key != "admin" {
		t.Errorf("reconciled Node %+v %+v", n.ObjectMeta, n.Spec)
	}
	if r := readyCondition(t, n); r.Status != v1.ConditionTrue || !r.LastTransitionTime.Time.Equal(t0) {
		t.Errorf("Ready = %+v", r)
	}
	// Then nothing until the report period: the fast update is over.
	n0 := h.mark()
	h.advance(9 * time.Second)
	if got := count(h.since(n0), "patch", "nodes", "status"); got != 0 {
		t.Errorf("%d patches after the fast update", got)
	}
	if !strings.Contains(strings.Join(h.events.all(), " "), "NodeReady") || !strings.Contains(strings.Join(h.events.all(), " "), "Rebooted") {
		t.Errorf("events %v", h.events.all())
	}
	// The lease takes the existing Node as owner.
	if l := h.lease(); len(l.OwnerReferences) != 1 || l.OwnerReferences[0].UID != "uid-old" {
		t.Errorf("lease owners %+v", l.OwnerReferences)
	}
}

// A restarted nodelet over a Ready Node reports nothing before its first
// sync a period later, so that PLEG not having relisted yet is never
// reported as NotReady.
func TestRestartDoesNotFlapNotReady(t *testing.T) {
	h0 := newHarness(t, nil)
	h0.start()
	h0.stop()
	ready := h0.node()

	h := newHarness(t, nil, ready)
	h.setPLEG(errors.New("pleg has yet to be successful"))
	h.start()
	n := h.mark()
	h.advance(5 * time.Second)
	h.setPLEG(nil)
	h.advance(10 * time.Second)
	for _, r := range h.since(n) {
		if r.action.GetVerb() == "patch" {
			if p := string(r.action.(interface{ GetPatch() []byte }).GetPatch()); strings.Contains(p, "KubeletNotReady") {
				t.Errorf("reported NotReady after a restart: %s", p)
			}
		}
	}
	if got := count(h.since(n), "patch", "nodes", "status"); got != 1 {
		t.Errorf("%d patches after the restart, want the first sync's", got)
	}
}

// A deleted Node is registered again at once, and its lease follows.
func TestReRegisterAfterDelete(t *testing.T) {
	h := newHarness(t, nil)
	h.start()
	old := h.node().UID
	n := h.mark()
	if err := h.client.CoreV1().Nodes().Delete(context.Background(), "node-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the Node registered again", func() bool {
		return count(h.since(n), "create", "nodes", "") == 1
	})
	h.settle()
	again := h.node()
	if again.UID == old || again.UID == "" {
		t.Fatalf("UID %q, before %q", again.UID, old)
	}
	if got := h.m.Node(); got.UID != again.UID {
		t.Errorf("Node() UID %q", got.UID)
	}
	h.advance(10 * time.Second)
	if l := h.lease(); l.OwnerReferences[0].UID != again.UID {
		t.Errorf("lease owner %q, Node %q", l.OwnerReferences[0].UID, again.UID)
	}

	// A patch that finds no Node registers it again too (a deletion the
	// watch has not told yet): the create finds it exists after all.
	h.failWith("patch", "nodes", 1, apierrors.NewNotFound(v1.Resource("nodes"), "node-1"))
	n = h.mark()
	h.rt.set(func(r *fakeRuntime) { r.version = "v1.6.21" }) // a change: patch at the next sync
	h.advance(10 * time.Second)
	reqs := h.since(n)
	if count(reqs, "patch", "nodes", "status") != 1 || count(reqs, "create", "nodes", "") != 1 || count(reqs, "get", "nodes", "") != 1 {
		t.Errorf("after a NotFound patch: %v", reqs)
	}
	h.advance(10 * time.Second)
	if got := h.node().Status.NodeInfo.ContainerRuntimeVersion; got != "containerd://1.6.21" {
		t.Errorf("runtime version %q", got)
	}
}

// The API server down: registration, status and lease are retried with
// back-off; repeated heartbeat failures drop the client's connections.
func TestAPIErrorsRetried(t *testing.T) {
	h := newHarness(t, nil)
	h.fail("create", "nodes", 3)
	h.fail("get", "leases", 2)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); h.m.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	h.cancel = nil

	// Creates at 0, 100 ms, 300 ms, 700 ms (100, 200, 400 ms back-off).
	for _, d := range []time.Duration{100, 200, 400} {
		testutil.Eventually(t, "the status goroutine to wait", func() bool { return h.clk.Waiters() == 2 })
		h.clk.Step(d * time.Millisecond)
	}
	testutil.Eventually(t, "the Node registered", func() bool { return count(h.since(0), "create", "nodes", "") == 4 })
	testutil.Eventually(t, "the informer to sync", h.m.informer.HasSynced)
	h.settle()
	var creates []time.Duration
	for _, r := range h.since(0) {
		if r.action.GetVerb() == "create" && r.action.GetResource().Resource == "nodes" {
			creates = append(creates, r.at.Sub(t0))
		}
	}
	if want := []time.Duration{0, 100 * time.Millisecond, 300 * time.Millisecond, 700 * time.Millisecond}; !equalDurations(creates, want) {
		t.Errorf("creates at %v, want %v", creates, want)
	}
	// The lease: two failed GETs (100 and 200 ms back-off), then created.
	h.advanceBy(300*time.Millisecond, 100*time.Millisecond)
	var leaseReqs []string
	for _, r := range h.since(0) {
		if r.action.GetResource().Resource == "leases" {
			leaseReqs = append(leaseReqs, r.action.GetVerb()+"@"+r.at.Sub(t0).String())
		}
	}
	if got := strings.Join(leaseReqs, " "); got != "get@700ms get@800ms get@1s create@1s" {
		t.Errorf("lease requests %s", got)
	}
	if got := h.failures.Load(); got != 1 {
		t.Errorf("connections dropped %d times after two failed lease requests, want 1", got)
	}
	if got := h.leaseFailures.Load(); got != 2 {
		t.Errorf("OnLeaseFailure called %d times for two failed lease requests, want 2", got)
	}

	// Status patches fail twice: retried after 100 and 200 ms, the retry
	// from a fresh GET. The first computation reads the Node from the
	// API too: lease renewals failed above (the API server was away, the
	// informer's copy may be stale).
	h.rt.set(func(r *fakeRuntime) { r.network = false })
	h.fail("patch", "nodes", 2)
	n := h.mark()
	h.advance(10 * time.Second)
	h.clk.Step(100 * time.Millisecond)
	h.settle()
	h.clk.Step(200 * time.Millisecond)
	h.settle()
	reqs := h.since(n)
	if count(reqs, "patch", "nodes", "status") != 3 || count(reqs, "get", "nodes", "") != 3 {
		t.Errorf("status retries: %v", reqs)
	}
	if r := readyCondition(t, h.node()); r.Status != v1.ConditionFalse {
		t.Errorf("Ready = %+v", r)
	}
}

// registerNode false: nodelet waits for someone to create the Node, then
// reports its status.
func TestRegisterNodeFalse(t *testing.T) {
	h := newHarness(t, func(o *Options) { o.RegisterNode = ptr.To(false) })
	h.start()
	if count(h.since(0), "create", "nodes", "") != 0 {
		t.Fatal("created the Node with registerNode false")
	}
	if _, err := h.client.CoreV1().Nodes().Create(context.Background(), &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.advance(20 * time.Second)
	n := h.node()
	if r := readyCondition(t, n); r.Status != v1.ConditionTrue {
		t.Errorf("Ready = %+v", r)
	}
	if n.Labels[v1.LabelHostname] != "" {
		t.Errorf("labels set with registerNode false: %v", n.Labels)
	}
}

// Node() follows what others change on the Node: admission sees new
// labels and taints without a request.
func TestNodeFollowsTheAPI(t *testing.T) {
	h := newHarness(t, nil)
	if h.m.Node() != nil {
		t.Error("a Node before the first computation")
	}
	h.start()
	n := h.node()
	n.Labels["example.com/zone"] = "z1"
	n.Spec.Taints = append(n.Spec.Taints, v1.Taint{Key: "maintenance", Effect: v1.TaintEffectNoExecute})
	if _, err := h.client.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "Node() to show the new label", func() bool {
		return h.m.Node().Labels["example.com/zone"] == "z1" && len(h.m.Node().Spec.Taints) == 2
	})
}

// A Node recreated by someone else (another UID) becomes nodelet's.
func TestNodeRecreatedBySomeoneElse(t *testing.T) {
	h := newHarness(t, nil)
	h.start()
	n := h.node()
	n.UID = types.UID("uid-admin")
	n.ResourceVersion = ""
	if err := h.client.Tracker().Update(v1.SchemeGroupVersion.WithResource("nodes"), n, ""); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "Node() to follow the new UID", func() bool { return h.m.nodeUID() == "uid-admin" })
	h.settle()
	h.advance(10 * time.Second)
	if l := h.lease(); l.OwnerReferences[0].UID != "uid-admin" {
		t.Errorf("lease owner %q", l.OwnerReferences[0].UID)
	}
}

// A runtime that stops answering is reported down after 30 s.
func TestRuntimeDown(t *testing.T) {
	h := newHarness(t, nil)
	h.start()
	h.rt.set(func(r *fakeRuntime) { r.statusErr = errors.New("connection refused") })
	h.advance(20 * time.Second)
	if r := readyCondition(t, h.node()); r.Status != v1.ConditionTrue {
		t.Errorf("down before 30 s: %+v", r)
	}
	h.advance(20 * time.Second)
	if r := readyCondition(t, h.node()); r.Status != v1.ConditionFalse || r.Message != "container runtime is down" {
		t.Errorf("Ready = %+v", r)
	}
}

// countingClient counts which API groups a client is asked for.
type countingClient struct {
	kubernetes.Interface
	core, coordination atomic.Int64
}

func (c *countingClient) CoreV1() corev1client.CoreV1Interface {
	c.core.Add(1)
	return c.Interface.CoreV1()
}

func (c *countingClient) CoordinationV1() coordinationv1client.CoordinationV1Interface {
	c.coordination.Add(1)
	return c.Interface.CoordinationV1()
}

// Status patches and lease renewals go through the heartbeat client,
// registration through the main one.
func TestHeartbeatClient(t *testing.T) {
	h := newHarness(t, nil)
	main, hb := &countingClient{Interface: h.client}, &countingClient{Interface: h.client}
	h.m.client, h.m.heartbeat = main, hb
	h.start()
	h.rt.set(func(r *fakeRuntime) { r.network = false })
	h.advance(10 * time.Second)
	if main.core.Load() == 0 || main.coordination.Load() != 0 {
		t.Errorf("main client: core %d, coordination %d", main.core.Load(), main.coordination.Load())
	}
	if hb.core.Load() == 0 || hb.coordination.Load() == 0 {
		t.Errorf("heartbeat client: core %d, coordination %d", hb.core.Load(), hb.coordination.Load())
	}
}

func TestNodeNameMetric(t *testing.T) {
	reg := prometheus.NewRegistry()
	_, err := New(fake.NewClientset(), Options{NodeName: "node-1", RootDir: "/r"},
		Deps{Runtime: newFakeRuntime(), Machine: newFakeMachine(), Clock: testclock.NewFakeClock(t0), Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(mfs) != 1 || mfs[0].GetName() != "kubelet_node_name" || len(mfs[0].GetMetric()) != 1 {
		t.Fatalf("metrics %v", mfs)
	}
	m := mfs[0].GetMetric()[0]
	if len(m.GetLabel()) != 1 || m.GetLabel()[0].GetName() != "node" || m.GetLabel()[0].GetValue() != "node-1" || m.GetGauge().GetValue() != 1 {
		t.Errorf("kubelet_node_name = %v", m)
	}
}

// The fast update computes every second and patches only when the node
// turned ready: a Node found not Ready is reported Ready within a second
// of PLEG's first relist, and never NotReady by the fast update.
func TestFastUpdateWaitsForReady(t *testing.T) {
	existing := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "node-1", UID: "uid-old"},
		Status: v1.NodeStatus{Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionUnknown,
			Reason: "NodeStatusUnknown", LastTransitionTime: metav1.NewTime(t0.Add(-time.Hour))}}},
	}
	h := newHarness(t, nil, existing)
	h.setPLEG(errors.New("pleg has yet to be successful"))
	h.start()
	n := h.mark()
	h.advance(3 * time.Second)
	if got := count(h.since(n), "patch", "nodes", "status"); got != 0 {
		t.Errorf("%d patches while not ready", got)
	}
	h.setPLEG(nil)
	h.advance(time.Second)
	reqs := h.since(n)
	if count(reqs, "patch", "nodes", "status") != 1 || reqs[len(reqs)-1].at != t0.Add(4*time.Second) {
		t.Fatalf("requests %v", reqs)
	}
	if r := readyCondition(t, h.node()); r.Status != v1.ConditionTrue {
		t.Errorf("Ready = %+v", r)
	}
	// The fast update is over, and the report counts: nothing at the
	// first regular sync.
	n = h.mark()
	h.advance(10 * time.Second)
	if got := count(h.since(n), "patch", "nodes", "status"); got != 0 {
		t.Errorf("%d patches after the fast update", got)
	}
}

// A reading that keeps failing is logged once, and once when it works
// again.
func TestRepeatedFailureLoggedOnce(t *testing.T) {
	var buf testutil.SyncBuffer
	h := newHarness(t, nil)
	h.m.log = slog.New(slog.NewTextHandler(&buf, nil))
	h.start()
	h.rt.set(func(r *fakeRuntime) { r.statusErr = errors.New("connection refused") })
	h.advance(time.Minute)
	h.rt.set(func(r *fakeRuntime) { r.statusErr = nil })
	h.advance(20 * time.Second)
	out := buf.String()
	if n := strings.Count(out, "status check failed"); n != 1 {
		t.Errorf("logged %d times:\n%s", n, out)
	}
	if n := strings.Count(out, "reading works again"); n != 1 {
		t.Errorf("recovery logged %d times:\n%s", n, out)
	}
}

// Cordoning the node is a NodeNotSchedulable event, uncordoning a
// NodeSchedulable one.
func TestSchedulableEvents(t *testing.T) {
	h := newHarness(t, nil)
	h.start()
	n := h.node()
	n.Spec.Unschedulable = true
	if _, err := h.client.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.settle()
	n0 := h.mark()
	h.advance(10 * time.Second)
	if got := h.events.all(); got[len(got)-1] != "NodeNotSchedulable" {
		t.Errorf("events %v", got)
	}
	if got := count(h.since(n0), "patch", "nodes", "status"); got != 0 {
		t.Errorf("cordoning made %d status patches", got)
	}
}

// TestPodCIDRsFromTheNode: a Node without pod CIDRs stays NotReady while
// the runtime's network is not ready (NetworkPluginNotReady in the
// kubelet's words); once the controller manager allocates them they go to
// the runtime (PodCIDRs.Apply) and the fast update reports Ready.
func TestPodCIDRsFromTheNode(t *testing.T) {
	h := newHarness(t, nil)
	h.rt.set(func(r *fakeRuntime) { r.network = false })
	h.start()
	h.advance(3 * time.Second)
	if calls := h.podCIDRs.all(); len(calls) != 0 {
		t.Fatalf("pod CIDRs applied before the Node had any: %q", calls)
	}
	r := readyCondition(t, h.node())
	want := "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized"
	if r.Status != v1.ConditionFalse || r.Reason != "KubeletNotReady" || r.Message != want {
		t.Fatalf("Ready without a network = %+v", r)
	}

	// The controller manager allocates (dual-stack, IPv6 first).
	node := h.node()
	node.Spec.PodCIDR, node.Spec.PodCIDRs = "fd00:10:244:1::/64", []string{"fd00:10:244:1::/64", "10.244.1.0/24"}
	if _, err := h.client.CoreV1().Nodes().Update(context.Background(), node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.settle()
	h.advance(2 * time.Second)
	calls := h.podCIDRs.all()
	if len(calls) == 0 || !slices.Equal(calls[0], []string{"fd00:10:244:1::/64", "10.244.1.0/24"}) {
		t.Fatalf("applied %q, want the Node's podCIDRs in its order", calls)
	}
	if r := readyCondition(t, h.node()); r.Status != v1.ConditionTrue {
		t.Errorf("Ready once the network has its CIDRs = %+v", r)
	}
}
