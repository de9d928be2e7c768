package syncloop

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/pipeline/pleg"
	"github.com/nodelet/nodelet/internal/pipeline/podconfig"
	"github.com/nodelet/nodelet/internal/pipeline/podworker"
	"github.com/nodelet/nodelet/internal/pure/admission"
	"github.com/nodelet/nodelet/internal/pure/podupdate"
)

// recorder is the Workers, Rejector and Recorder; it records what it is
// asked.
type recorder struct {
	calls, events []string
}

func (r *recorder) UpdatePod(u podworker.UpdatePodOptions) {
	r.calls = append(r.calls, fmt.Sprintf("%s %s", u.Reason, u.Pod.Name))
}
func (r *recorder) IsPodActive(types.UID) bool { return true }
func (r *recorder) Reject(pod *v1.Pod, reason, _ string) {
	r.calls = append(r.calls, "reject "+pod.Name+" "+reason)
}
func (r *recorder) Event(pod *v1.Pod, eventType, reason, _ string) {
	r.events = append(r.events, eventType+" "+pod.Name+" "+reason)
}

func pod(name string) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name)},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c", Image: "i"}}}}
}

type harness struct {
	loop     *Loop
	rec      *recorder
	config   chan podconfig.PodUpdate
	pleg     chan pleg.Event
	probes   chan types.UID
	all      chan struct{}
	resync   chan time.Time
	hk       chan time.Time
	ready    bool
	desiredN []int
}

func newHarness(maxPods int) *harness {
	h := &harness{rec: &recorder{}, config: make(chan podconfig.PodUpdate, 1), pleg: make(chan pleg.Event, 1),
		probes: make(chan types.UID, 1), all: make(chan struct{}, 1), resync: make(chan time.Time, 1), hk: make(chan time.Time, 1)}
	h.loop = New(Options{Node: admission.Node{MaxPods: maxPods}}, Deps{
		Workers: h.rec, Rejector: h.rec, Recorder: h.rec, Housekeeper: h, SourcesReady: func() bool { return h.ready },
		Clock: clocktesting.NewFakeClock(time.Unix(0, 0)), Log: slog.New(slog.DiscardHandler),
	})
	return h
}

func (h *harness) Housekeep(_ context.Context, desired map[types.UID]*v1.Pod) {
	h.desiredN = append(h.desiredN, len(desired))
}

func (h *harness) inputs() Inputs {
	return Inputs{Config: h.config, PLEG: h.pleg, Pods: h.probes, ResyncAll: h.all}
}

// step runs one iteration after queueing one input.
func (h *harness) step(t *testing.T, send func()) {
	t.Helper()
	send()
	if !h.loop.iterate(context.Background(), h.inputs(), h.resync, h.hk) {
		t.Fatal("loop ended")
	}
}

func TestLoopDispatches(t *testing.T) {
	h := newHarness(2)
	h.step(t, func() {
		h.config <- podconfig.PodUpdate{Op: podupdate.Add, Pods: []*v1.Pod{pod("a"), pod("b"), pod("c")}}
	})
	h.step(t, func() { h.pleg <- pleg.Event{PodUID: "uid-a", Type: pleg.ContainerDied} })
	h.step(t, func() { h.pleg <- pleg.Event{PodUID: "uid-a", Type: pleg.ContainerRemoved} }) // nothing to do
	h.step(t, func() { h.pleg <- pleg.Event{PodUID: "uid-c", Type: pleg.ContainerStarted} }) // rejected pods are never synced
	h.step(t, func() { h.probes <- "uid-b" })
	h.step(t, func() { h.config <- podconfig.PodUpdate{Op: podupdate.Update, Pods: []*v1.Pod{pod("a")}} })
	h.step(t, func() { h.config <- podconfig.PodUpdate{Op: podupdate.Remove, Pods: []*v1.Pod{pod("b")}} })
	h.step(t, func() { h.resync <- time.Time{} })
	h.step(t, func() { h.all <- struct{}{} })
	want := []string{
		"ADD a", "ADD b", "reject c OutOfpods",
		"EVENT a", "EVENT b", "UPDATE a", "REMOVE b", "RESYNC a", "EVENT a",
	}
	if got := strings.Join(h.rec.calls, "\n"); got != strings.Join(want, "\n") {
		t.Errorf("calls:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}
	// The rejection's Warning event, as the kubelet's rejectPod records.
	if got := strings.Join(h.rec.events, "\n"); got != "Warning c OutOfpods" {
		t.Errorf("events:\n%s\nwant the rejection's", got)
	}
}

func TestHousekeepingWaitsForSources(t *testing.T) {
	h := newHarness(10)
	h.step(t, func() { h.config <- podconfig.PodUpdate{Op: podupdate.Add, Pods: []*v1.Pod{pod("a")}} })
	h.step(t, func() { h.hk <- time.Time{} })
	if len(h.desiredN) != 0 {
		t.Fatal("housekeeping ran before the sources were ready")
	}
	h.ready = true
	h.step(t, func() { h.hk <- time.Time{} })
	if len(h.desiredN) != 1 || h.desiredN[0] != 1 {
		t.Fatalf("housekeeping saw %v desired pods", h.desiredN)
	}
}

func TestLoopEndsWithContext(t *testing.T) {
	h := newHarness(10)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if h.loop.iterate(ctx, h.inputs(), h.resync, h.hk) {
		t.Error("iterate continued after ctx ended")
	}
}

type seen map[string]bool

func (s seen) Saw(_ types.UID, id string) (running, ok bool) { running, ok = s[id]; return running, ok }

// A lifecycle event the pod's last status already reflects (a start of a
// container seen running, a death of one seen exited) syncs nothing; one
// it does not, or about an object never seen, syncs the pod.
func TestLoopDropsEventsAlreadySeen(t *testing.T) {
	h := newHarness(10)
	h.loop.deps.Seen = seen{"running": true, "exited": false}
	h.step(t, func() { h.config <- podconfig.PodUpdate{Op: podupdate.Add, Pods: []*v1.Pod{pod("a")}} })
	for _, e := range []pleg.Event{
		{PodUID: "uid-a", Type: pleg.ContainerStarted, ContainerID: "running"},
		{PodUID: "uid-a", Type: pleg.ContainerDied, ContainerID: "exited"},
		{PodUID: "uid-a", Type: pleg.ContainerDied, ContainerID: "running"},
		{PodUID: "uid-a", Type: pleg.ContainerStarted, ContainerID: "exited"},
		{PodUID: "uid-a", Type: pleg.ContainerStarted, ContainerID: "new"},
	} {
		h.step(t, func() { h.pleg <- e })
	}
	want := []string{"ADD a", "EVENT a", "EVENT a", "EVENT a"}
	if got := strings.Join(h.rec.calls, "\n"); got != strings.Join(want, "\n") {
		t.Errorf("calls:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}
}

// A status-only change (RECONCILE) syncs a pod again only when its Ready
// condition depends on the API status: when it has readiness gates.
func TestReconcileSyncsPodsWithReadinessGates(t *testing.T) {
	h := newHarness(10)
	gated := pod("gated")
	gated.Spec.ReadinessGates = []v1.PodReadinessGate{{ConditionType: "example.com/ready"}}
	h.step(t, func() { h.config <- podconfig.PodUpdate{Op: podupdate.Add, Pods: []*v1.Pod{pod("plain"), gated}} })
	h.step(t, func() {
		h.config <- podconfig.PodUpdate{Op: podupdate.Reconcile, Pods: []*v1.Pod{pod("plain"), gated}}
	})
	want := []string{"ADD plain", "ADD gated", "UPDATE gated"}
	if got := strings.Join(h.rec.calls, "\n"); got != strings.Join(want, "\n") {
		t.Errorf("calls:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}
}

// While the node shuts down, a new pod is refused (NodeShutdown); pods
// already admitted are still synced.
func TestAdmissionWhileShuttingDown(t *testing.T) {
	h := newHarness(10)
	down := false
	h.loop.deps.ShuttingDown = func() bool { return down }
	h.step(t, func() { h.config <- podconfig.PodUpdate{Op: podupdate.Add, Pods: []*v1.Pod{pod("a")}} })
	down = true
	h.step(t, func() { h.config <- podconfig.PodUpdate{Op: podupdate.Add, Pods: []*v1.Pod{pod("b")}} })
	h.step(t, func() { h.resync <- time.Time{} })
	want := "ADD a\nreject b NodeShutdown\nRESYNC a"
	if got := strings.Join(h.rec.calls, "\n"); got != want {
		t.Errorf("calls:\n%s\nwant:\n%s", got, want)
	}
}

// allocator refuses the pod named refuse; calls, when set, is told every
// call, after name.
type allocator struct {
	name, refuse   string
	asked, removed []string
	calls          *[]string
}

func (a *allocator) RemovePod(uid types.UID) error {
	a.removed = append(a.removed, string(uid))
	if a.calls != nil {
		*a.calls = append(*a.calls, a.name+" remove "+string(uid))
	}
	return nil
}

func (a *allocator) Admit(_ context.Context, p *v1.Pod) (bool, string, string) {
	a.asked = append(a.asked, p.Name)
	if a.calls != nil {
		*a.calls = append(*a.calls, a.name+" admit "+p.Name)
	}
	if p.Name == a.refuse {
		return false, "UnexpectedAdmissionError", "Allocate failed due to not enough cpus available to satisfy request: requested=2, available=1, which is unexpected"
	}
	return true, "", ""
}

// The CPU manager allocates between admission's checks, as the kubelet's
// admit handlers go: a pod it refuses is rejected with its reason and
// never synced; one the node is shutting down for is never allocated; one
// refused after allocation (too many pods) gives its allocation back.
func TestAllocatorRefuses(t *testing.T) {
	h := newHarness(10)
	h.loop.opts.Node.MaxPods = 2
	alloc := &allocator{refuse: "big"}
	h.loop.deps.Allocators = []Allocator{alloc}
	down := false
	h.loop.deps.ShuttingDown = func() bool { return down }
	many := pod("many")
	many.UID = "uid-many"
	h.step(t, func() {
		h.config <- podconfig.PodUpdate{Op: podupdate.Add, Pods: []*v1.Pod{pod("a"), pod("big"), pod("b"), many}}
	})
	down = true
	h.step(t, func() { h.config <- podconfig.PodUpdate{Op: podupdate.Add, Pods: []*v1.Pod{pod("late")}} })
	want := "ADD a\nreject big UnexpectedAdmissionError\nADD b\nreject many OutOfpods\nreject late NodeShutdown"
	if got := strings.Join(h.rec.calls, "\n"); got != want {
		t.Errorf("calls:\n%s\nwant:\n%s", got, want)
	}
	if got := strings.Join(alloc.asked, ","); got != "a,big,b,many" {
		t.Errorf("allocator asked for %s, want a,big,b,many (not a pod refused before)", got)
	}
	if got := strings.Join(alloc.removed, ","); got != "uid-big,uid-many" {
		t.Errorf("given back %s, want uid-big (what it gave part-way), uid-many", got)
	}
}

// The allocators go in their order (the kubelet's: devices, then CPUs);
// one that refuses stops the rest, and it and those before it give back
// what they gave. After them the pod's extended resources are counted
// against what ExtendedAllocatable says (the healthy devices, never fewer
// than pods hold), with the kubelet's OutOf<resource>; a pod so refused
// gives back everything.
func TestAllocatorsInOrder(t *testing.T) {
	gpus := func(p *v1.Pod, n string) *v1.Pod {
		p.Spec.Containers[0].Resources.Requests = v1.ResourceList{"example.com/gpu": resource.MustParse(n)}
		return p
	}
	h := newHarness(10)
	var calls []string
	devices := &allocator{name: "devices", refuse: "nodevice", calls: &calls}
	cpus := &allocator{name: "cpus", refuse: "nocpu", calls: &calls}
	h.loop.deps.Allocators = []Allocator{devices, cpus}
	h.loop.deps.ExtendedAllocatable = func() v1.ResourceList {
		return v1.ResourceList{"example.com/gpu": resource.MustParse("2")}
	}
	h.step(t, func() {
		h.config <- podconfig.PodUpdate{Op: podupdate.Add, Pods: []*v1.Pod{gpus(pod("a"), "1"), pod("nodevice"), pod("nocpu"), gpus(pod("big"), "2")}}
	})
	want := "ADD a\nreject nodevice UnexpectedAdmissionError\nreject nocpu UnexpectedAdmissionError\nreject big OutOfexample.com/gpu"
	if got := strings.Join(h.rec.calls, "\n"); got != want {
		t.Errorf("calls:\n%s\nwant:\n%s", got, want)
	}
	wantCalls := []string{
		"devices admit a", "cpus admit a",
		"devices admit nodevice", "devices remove uid-nodevice",
		"devices admit nocpu", "cpus admit nocpu", "devices remove uid-nocpu", "cpus remove uid-nocpu",
		"devices admit big", "cpus admit big", "devices remove uid-big", "cpus remove uid-big",
	}
	if !slices.Equal(calls, wantCalls) {
		t.Errorf("allocator calls:\n%s\nwant:\n%s", strings.Join(calls, "\n"), strings.Join(wantCalls, "\n"))
	}
}
