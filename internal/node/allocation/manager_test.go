package allocation_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	promtestutil "github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/node/allocation"
	"github.com/nodelet/nodelet/internal/pipeline/syncloop"
	"github.com/nodelet/nodelet/internal/pure/admission"
	"github.com/nodelet/nodelet/internal/pure/resize"
)

type recorded struct{ kind, reason, message string }

type fakeRecorder struct{ events []recorded }

func (f *fakeRecorder) Event(_ *v1.Pod, kind, reason, message string) {
	f.events = append(f.events, recorded{kind, reason, message})
}

func (f *fakeRecorder) take() string {
	var out []string
	for _, e := range f.events {
		out = append(out, e.kind+" "+e.reason)
	}
	f.events = nil
	return strings.Join(out, ",")
}

func podWithCPU(uid types.UID, cpu string, generation int64) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: string(uid), Namespace: "ns", UID: uid, Generation: generation},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c1", Resources: v1.ResourceRequirements{
			Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpu)},
		}}}},
	}
}

func cpuRequest(p *v1.Pod) string {
	q := p.Spec.Containers[0].Resources.Requests[v1.ResourceCPU]
	return q.String()
}

func TestManagerResize(t *testing.T) {
	path := filepath.Join(t.TempDir(), allocation.FileName)
	store, err := allocation.Open(path, logger(t))
	if err != nil {
		t.Fatal(err)
	}
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	rec := &fakeRecorder{}
	m := allocation.NewManager(store, clk, rec, nil)
	node := resize.Node{Admission: admission.Node{MaxPods: 110, Allocatable: v1.ResourceList{v1.ResourceCPU: resource.MustParse("1")}}}

	pod := podWithCPU("a", "200m", 1)
	other := podWithCPU("b", "600m", 1)
	for _, p := range []*v1.Pod{pod, other} {
		m.Admitted(p)
	}

	// 500m does not fit beside b's 600m: Deferred, allocation unchanged.
	want := podWithCPU("a", "500m", 2)
	got, err := m.Resize(want, []*v1.Pod{other, want}, node, syncloop.RetryPodUpdated)
	if err != nil {
		t.Fatal(err)
	}
	if cpuRequest(got) != "200m" {
		t.Errorf("deferred resize: allocated cpu %s, want 200m", cpuRequest(got))
	}
	if ev := rec.take(); ev != "Warning ResizeDeferred" {
		t.Errorf("events %q, want one ResizeDeferred", ev)
	}
	res, conds := m.Status("a")
	if len(conds) != 1 || conds[0].Type != v1.PodResizePending || conds[0].Reason != v1.PodReasonDeferred ||
		conds[0].ObservedGeneration != 2 || !strings.Contains(conds[0].Message, "Node didn't have enough resource: cpu") {
		t.Errorf("conditions %+v, want PodResizePending Deferred at generation 2", conds)
	}
	if q := res.Allocation.Containers["c1"].Requests[v1.ResourceCPU]; q.String() != "200m" {
		t.Errorf("status allocation cpu %s, want 200m", q.String())
	}
	// Tried again unchanged: no second event.
	if _, err := m.Resize(want, []*v1.Pod{other}, node, syncloop.RetryPodUpdated); err != nil {
		t.Fatal(err)
	}
	if ev := rec.take(); ev != "" {
		t.Errorf("retry with nothing new recorded %q", ev)
	}

	// b shrinks (its own resize accepted): a's now fits.
	smaller := podWithCPU("b", "100m", 2)
	if _, err := m.Resize(smaller, []*v1.Pod{pod}, node, syncloop.RetryPodUpdated); err != nil {
		t.Fatal(err)
	}
	rec.take()
	got, err = m.Resize(want, []*v1.Pod{other}, node, syncloop.RetryPodUpdated) // the source still has b's old spec: its allocation counts
	if err != nil {
		t.Fatal(err)
	}
	if cpuRequest(got) != "500m" || cpuRequest(m.Allocated(want)) != "500m" {
		t.Errorf("accepted resize: allocated cpu %s, want 500m", cpuRequest(got))
	}
	if ev := rec.take(); ev != "Normal ResizeStarted" {
		t.Errorf("events %q, want ResizeStarted", ev)
	}
	_, conds = m.Status("a")
	if len(conds) != 1 || conds[0].Type != v1.PodResizeInProgress || conds[0].ObservedGeneration != 2 {
		t.Errorf("conditions %+v, want only PodResizeInProgress at generation 2", conds)
	}

	m.Failed(want, errors.New("cannot decrease memory limits: ..."))
	_, conds = m.Status("a")
	if len(conds) != 1 || conds[0].Reason != v1.PodReasonError {
		t.Errorf("after Failed: %+v, want InProgress with reason Error", conds)
	}
	if err := m.Actuated("a", "c1", resize.Resources{CPURequest: 500}); err != nil {
		t.Fatal(err)
	}
	m.Done(want)
	if ev := rec.take(); ev != "Warning ResizeError,Normal ResizeCompleted" {
		t.Errorf("events %q, want ResizeError then ResizeCompleted", ev)
	}
	if _, conds = m.Status("a"); len(conds) != 0 {
		t.Errorf("after Done: %+v, want none", conds)
	}
	m.Done(want)
	if ev := rec.take(); ev != "" {
		t.Errorf("Done with nothing in progress recorded %q", ev)
	}

	// nodelet restarts: the allocation is still the accepted one, and
	// Admitted does not replace it with a spec that asks for more.
	again, err := allocation.Open(path, logger(t))
	if err != nil {
		t.Fatal(err)
	}
	m2 := allocation.NewManager(again, clk, rec, nil)
	asking := podWithCPU("a", "900m", 3)
	m2.Admitted(asking)
	if got := cpuRequest(m2.Allocated(asking)); got != "500m" {
		t.Errorf("after a restart: allocated cpu %s, want 500m", got)
	}
	res, _ = m2.Status("a")
	if res == nil || res.Actuated["c1"].CPURequest != 500 {
		t.Errorf("after a restart: actuated %+v, want c1 at 500m", res)
	}

	if err := m2.Forget(func(uid types.UID) bool { return uid != "a" }); err != nil {
		t.Fatal(err)
	}
	if res, _ := m2.Status("a"); res != nil {
		t.Errorf("after Forget: %+v, want no allocation", res)
	}
	if got := cpuRequest(m2.Allocated(asking)); got != "900m" {
		t.Errorf("a pod without an allocation is as given: %s", got)
	}
}

func TestManagerInfeasible(t *testing.T) {
	store, err := allocation.Open(filepath.Join(t.TempDir(), allocation.FileName), logger(t))
	if err != nil {
		t.Fatal(err)
	}
	rec := &fakeRecorder{}
	m := allocation.NewManager(store, clocktesting.NewFakePassiveClock(time.Now()), rec, nil)
	pod := podWithCPU("a", "200m", 1)
	m.Admitted(pod)
	node := resize.Node{
		Admission: admission.Node{MaxPods: 110, Allocatable: v1.ResourceList{v1.ResourceCPU: resource.MustParse("1")}},
		Swaps:     func(*v1.Pod, *v1.Container) bool { return true },
	}
	want := podWithCPU("a", "200m", 2)
	want.Spec.Containers[0].Resources.Requests[v1.ResourceMemory] = resource.MustParse("64Mi")
	if _, err := m.Resize(want, nil, node, syncloop.RetryPodUpdated); err != nil {
		t.Fatal(err)
	}
	if ev := rec.take(); ev != "Warning ResizeInfeasible" {
		t.Errorf("events %q, want ResizeInfeasible", ev)
	}
	_, conds := m.Status("a")
	if len(conds) != 1 || conds[0].Reason != v1.PodReasonInfeasible {
		t.Errorf("conditions %+v, want PodResizePending Infeasible", conds)
	}
	// Reverted to the allocation: the pending condition goes.
	if _, err := m.Resize(pod, nil, node, syncloop.RetryPodUpdated); err != nil {
		t.Fatal(err)
	}
	if _, conds := m.Status("a"); len(conds) != 0 {
		t.Errorf("after a revert: %+v, want none", conds)
	}
}

// The kubelet's resize metrics: requests counted per container change on
// the pod's own update only, pending and in-progress resizes as they
// stand, a deferred resize accepted under its retry trigger, the
// actuation's duration.
func TestManagerMetrics(t *testing.T) {
	store, err := allocation.Open(filepath.Join(t.TempDir(), allocation.FileName), logger(t))
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	m := allocation.NewManager(store, clocktesting.NewFakePassiveClock(time.Now()), &fakeRecorder{}, reg)
	node := resize.Node{Admission: admission.Node{MaxPods: 110, Allocatable: v1.ResourceList{v1.ResourceCPU: resource.MustParse("1")}}}
	a, b := podWithCPU("a", "200m", 1), podWithCPU("b", "600m", 1)
	for _, p := range []*v1.Pod{a, b} {
		m.Admitted(p)
	}
	want := podWithCPU("a", "500m", 2)
	if _, err := m.Resize(want, []*v1.Pod{b}, node, syncloop.RetryPodUpdated); err != nil {
		t.Fatal(err)
	}
	if got := m.Deferred(); len(got) != 1 || got[0] != "a" {
		t.Errorf("Deferred = %v, want [a]", got)
	}
	expect := func(text string, names ...string) {
		t.Helper()
		if err := promtestutil.GatherAndCompare(reg, strings.NewReader(text), names...); err != nil {
			t.Error(err)
		}
	}
	expect(`
# HELP kubelet_pod_pending_resizes Number of pending resizes for pods, broken down by reason (deferred or infeasible)
# TYPE kubelet_pod_pending_resizes gauge
kubelet_pod_pending_resizes{reason="deferred"} 1
# HELP kubelet_pod_in_progress_resizes Number of in-progress resizes for pods
# TYPE kubelet_pod_in_progress_resizes gauge
kubelet_pod_in_progress_resizes 0
`, "kubelet_pod_pending_resizes", "kubelet_pod_in_progress_resizes")

	// b shrinks; the retry accepts a's resize.
	if _, err := m.Resize(podWithCPU("b", "100m", 2), []*v1.Pod{a}, node, syncloop.RetryPodUpdated); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Resize(want, []*v1.Pod{b}, node, syncloop.RetryPeriodic); err != nil {
		t.Fatal(err)
	}
	if got := m.Deferred(); len(got) != 0 {
		t.Errorf("Deferred after the retry = %v", got)
	}
	m.Actuation(1500*time.Millisecond, nil)
	expect(`
# HELP kubelet_container_requested_resizes_total Number of requested resizes, counted at the container level. Different resources on the same container are counted separately. The 'requirement' label refers to 'memory' or 'limits'; the 'operation' label can be one of 'add', 'remove', 'increase' or 'decrease'.
# TYPE kubelet_container_requested_resizes_total counter
kubelet_container_requested_resizes_total{operation="decrease",requirement="requests",resource="cpu"} 1
kubelet_container_requested_resizes_total{operation="increase",requirement="requests",resource="cpu"} 1
# HELP kubelet_pod_deferred_accepted_resizes_total Cumulative number of resizes that were accepted after being deferred, broken down by the retry trigger
# TYPE kubelet_pod_deferred_accepted_resizes_total counter
kubelet_pod_deferred_accepted_resizes_total{retry_trigger="periodic_retry"} 1
# HELP kubelet_pod_in_progress_resizes Number of in-progress resizes for pods
# TYPE kubelet_pod_in_progress_resizes gauge
kubelet_pod_in_progress_resizes 2
`, "kubelet_container_requested_resizes_total", "kubelet_pod_deferred_accepted_resizes_total", "kubelet_pod_in_progress_resizes", "kubelet_pod_pending_resizes")
	if n := promtestutil.CollectAndCount(reg, "kubelet_pod_resize_duration_milliseconds"); n != 1 {
		t.Errorf("resize duration series: %d, want 1", n)
	}
}

// Nothing is written when nothing changes: a pod admitted again (a
// restart) or a container started again with what it had (every write is
// an fsynced rename, which would make a new file).
func TestManagerWritesOnlyChanges(t *testing.T) {
	path := filepath.Join(t.TempDir(), allocation.FileName)
	store, err := allocation.Open(path, logger(t))
	if err != nil {
		t.Fatal(err)
	}
	m := allocation.NewManager(store, clocktesting.NewFakePassiveClock(time.Now()), &fakeRecorder{}, nil)
	pod := podWithCPU("a", "200m", 1)
	m.Admitted(pod)
	// The admission is not written on the sync loop's path; the actuated
	// resources written before the first container's creation carry it.
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Admitted wrote the checkpoint (stat: %v)", err)
	}
	if err := m.Actuated("a", "c1", resize.Resources{CPURequest: 200}); err != nil {
		t.Fatal(err)
	}
	again, err := allocation.Open(path, logger(t))
	if err != nil {
		t.Fatal(err)
	}
	if got := cpuRequest(allocation.NewManager(again, clocktesting.NewFakePassiveClock(time.Now()), &fakeRecorder{}, nil).Allocated(podWithCPU("a", "900m", 1))); got != "200m" {
		t.Errorf("the file's allocation after Actuated: cpu %s, want the admitted 200m", got)
	}
	before, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	m.Admitted(podWithCPU("a", "500m", 2))
	if err := m.Actuated("a", "c1", resize.Resources{CPURequest: 200}); err != nil {
		t.Fatal(err)
	}
	after, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(before, after) {
		t.Error("the checkpoint was written again with nothing changed")
	}
	if err := m.Actuated("a", "c1", resize.Resources{CPURequest: 500}); err != nil {
		t.Fatal(err)
	}
	if now, _ := os.Stat(path); os.SameFile(before, now) {
		t.Error("a change was not written")
	}
}
