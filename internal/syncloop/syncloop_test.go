package syncloop

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/admission"
)

// recorder is a Dispatcher and Rejector that records what it is asked.
type recorder struct {
	calls []string
}

func (r *recorder) Sync(pod *v1.Pod, kind SyncKind) {
	r.calls = append(r.calls, fmt.Sprintf("sync %s %d", pod.Name, kind))
}
func (r *recorder) Kill(pod *v1.Pod)      { r.calls = append(r.calls, "kill "+pod.Name) }
func (r *recorder) Active(types.UID) bool { return true }
func (r *recorder) Reject(pod *v1.Pod, reason, _ string) {
	r.calls = append(r.calls, "reject "+pod.Name+" "+reason)
}

func pod(name string) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name)},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c", Image: "i"}}}}
}

type harness struct {
	loop     *Loop
	rec      *recorder
	config   chan ConfigUpdate
	pleg     chan types.UID
	probes   chan types.UID
	resync   chan time.Time
	hk       chan time.Time
	ready    bool
	desiredN []int
}

func newHarness(maxPods int) *harness {
	h := &harness{rec: &recorder{}, config: make(chan ConfigUpdate, 1), pleg: make(chan types.UID, 1),
		probes: make(chan types.UID, 1), resync: make(chan time.Time, 1), hk: make(chan time.Time, 1)}
	h.loop = New(Options{Node: admission.Node{MaxPods: maxPods}}, clocktesting.NewFakeClock(time.Unix(0, 0)),
		slog.New(slog.DiscardHandler), h.rec, h.rec,
		func(_ context.Context, desired map[types.UID]*v1.Pod) { h.desiredN = append(h.desiredN, len(desired)) },
		func() bool { return h.ready })
	return h
}

// step runs one iteration after queueing one input.
func (h *harness) step(t *testing.T, send func()) {
	t.Helper()
	send()
	if !h.loop.iterate(context.Background(), h.config, h.pleg, h.probes, h.resync, h.hk) {
		t.Fatal("loop ended")
	}
}

func TestLoopDispatches(t *testing.T) {
	h := newHarness(2)
	h.step(t, func() { h.config <- ConfigUpdate{Op: Add, Pods: []*v1.Pod{pod("a"), pod("b"), pod("c")}} })
	h.step(t, func() { h.pleg <- "uid-a" })
	h.step(t, func() { h.pleg <- "uid-c" }) // rejected pods are never synced
	h.step(t, func() { h.probes <- "uid-b" })
	h.step(t, func() { h.config <- ConfigUpdate{Op: Update, Pods: []*v1.Pod{pod("a")}} })
	h.step(t, func() { h.config <- ConfigUpdate{Op: Remove, Pods: []*v1.Pod{pod("b")}} })
	h.step(t, func() { h.resync <- time.Time{} })
	want := []string{
		"sync a 0", "sync b 0", "reject c OutOfpods",
		"sync a 3", "sync b 3", "sync a 1", "kill b", "sync a 2",
	}
	if got := strings.Join(h.rec.calls, "\n"); got != strings.Join(want, "\n") {
		t.Errorf("calls:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}
}

func TestHousekeepingWaitsForSources(t *testing.T) {
	h := newHarness(10)
	h.step(t, func() { h.config <- ConfigUpdate{Op: Add, Pods: []*v1.Pod{pod("a")}} })
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
	if h.loop.iterate(ctx, h.config, h.pleg, h.probes, h.resync, h.hk) {
		t.Error("iterate continued after ctx ended")
	}
}
