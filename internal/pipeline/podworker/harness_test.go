package podworker

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/pure/podsetup"
	"github.com/nodelet/nodelet/internal/pure/podupdate"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// failsafe bounds every wait on the code under test so that a bug fails
// the test instead of hanging it. It never orders events: hooks and
// channels do.
const failsafe = 10 * time.Second

var errStopped = errors.New("test harness stopped")

type callKind string

const (
	kindSync        callKind = "SyncPod"
	kindTerminating callKind = "SyncTerminatingPod"
	kindTerminated  callKind = "SyncTerminatedPod"
)

// call is one Syncer call, handed to the test, which answers on reply.
type call struct {
	kind       callKind
	ctx        context.Context
	reason     podupdate.Reason
	unprepared error
	setup      podsetup.Setup
	pod        *v1.Pod
	grace      time.Duration
	at         time.Time // fake clock time of the call
	// reply has capacity 1 so that answering never blocks the test.
	reply chan result
}

type result struct {
	terminal     bool
	requeueAfter time.Duration
	observedAt   time.Time
	err          error
}

func (c call) ok()             { c.reply <- result{} }
func (c call) fail(err error)  { c.reply <- result{err: err} }
func (c call) terminalResult() { c.reply <- result{terminal: true} }
func (c call) cancelled() bool { return c.ctx.Err() != nil }
func (c call) version() string { return c.pod.ResourceVersion }
func (c call) uid() types.UID  { return c.pod.UID }
func (c call) replyCtxErr()    { c.reply <- result{err: c.ctx.Err()} }
func (c call) String() string  { return string(c.kind) + " " + string(c.pod.UID) }

// fakeSyncer hands every call to the test and blocks until answered.
type fakeSyncer struct {
	clk *clocktesting.FakeClock
	// calls is unbuffered: a receive means the worker is inside the call.
	calls chan call
	stop  chan struct{}
}

func (f *fakeSyncer) do(ctx context.Context, c call) (SyncResult, error) {
	c.ctx = ctx
	c.at = f.clk.Now()
	c.reply = make(chan result, 1)
	select {
	case f.calls <- c:
	case <-f.stop:
		return SyncResult{}, errStopped
	}
	select {
	case r := <-c.reply:
		return SyncResult{Terminal: r.terminal, RequeueAfter: r.requeueAfter, ObservedAt: r.observedAt}, r.err
	case <-f.stop:
		return SyncResult{}, errStopped
	}
}

func (f *fakeSyncer) SyncPod(ctx context.Context, req SyncRequest) (SyncResult, error) {
	return f.do(ctx, call{kind: kindSync, reason: req.Reason, pod: req.Pod, unprepared: req.Unprepared, setup: req.Setup})
}

func (f *fakeSyncer) SyncTerminatingPod(ctx context.Context, req TerminatingRequest) error {
	_, err := f.do(ctx, call{kind: kindTerminating, pod: req.Pod, grace: req.GracePeriod, setup: req.Setup})
	return err
}

func (f *fakeSyncer) SyncTerminatedPod(ctx context.Context, req TerminatedRequest) error {
	_, err := f.do(ctx, call{kind: kindTerminated, pod: req.Pod, setup: req.Setup})
	return err
}

// idleLog records the idle hook's reports; waiters find them by index so
// that a report from before an action never satisfies a wait after it.
type idleLog struct {
	mu      sync.Mutex
	events  []idleEvent
	changed chan struct{} // closed and replaced on every report
}

type idleEvent struct {
	uid  types.UID
	next time.Time
}

func (l *idleLog) add(uid types.UID, next time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, idleEvent{uid, next})
	close(l.changed)
	l.changed = make(chan struct{})
}

func (l *idleLog) mark() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.events)
}

type harness struct {
	t     *testing.T
	clk   *clocktesting.FakeClock
	s     *fakeSyncer
	w     *Workers
	idles *idleLog
	// exits is buffered generously (tests here never have more pods) so
	// that the exit hook never blocks a returning goroutine.
	exits  chan types.UID
	cancel context.CancelFunc
	done   chan struct{}
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// newHarness builds workers over a fakeSyncer; run starts them.
func newHarness(t *testing.T, opts Options, hooks ...Hook) *harness {
	clk := clocktesting.NewFakeClock(t0)
	h := &harness{
		t:     t,
		clk:   clk,
		s:     &fakeSyncer{clk: clk, calls: make(chan call), stop: make(chan struct{})},
		idles: &idleLog{changed: make(chan struct{})},
		exits: make(chan types.UID, 1000),
		done:  make(chan struct{}),
	}
	h.w = New(Deps{Syncer: h.s, Hooks: hooks, Clock: clk, Log: testLogger(t)}, opts)
	h.w.idleHook = h.idles.add
	h.w.exitHook = func(uid types.UID) { h.exits <- uid }
	return h
}

func (h *harness) run() *harness {
	ctx, cancel := context.WithCancel(h.t.Context())
	h.cancel = cancel
	go func() { defer close(h.done); h.w.Run(ctx) }()
	h.t.Cleanup(func() {
		close(h.s.stop)
		cancel()
		select {
		case <-h.done:
		case <-time.After(failsafe):
			h.t.Error("Run did not return after its context ended")
		}
	})
	return h
}

// expect receives the next Syncer call and checks its kind and pod.
func (h *harness) expect(kind callKind, uid types.UID) call {
	h.t.Helper()
	select {
	case c := <-h.s.calls:
		if c.kind != kind || c.pod.UID != uid {
			h.t.Fatalf("got call %s, want %s %s", c, kind, uid)
		}
		return c
	case <-time.After(failsafe):
		h.t.Fatalf("timed out waiting for %s %s", kind, uid)
		panic("unreachable")
	}
}

// noCall checks that no Syncer call is waiting to be received. Call it
// when every worker is known to be idle, so that a call, if any, would be.
func (h *harness) noCall() {
	h.t.Helper()
	select {
	case c := <-h.s.calls:
		h.t.Fatalf("unexpected call %s", c)
	default:
	}
}

// waitIdle waits for the worker of uid to report, at or after index from,
// that it waits with its timer set to next (zero: no timer).
func (h *harness) waitIdle(from int, uid types.UID, next time.Time) {
	h.t.Helper()
	deadline := time.After(failsafe)
	for {
		h.idles.mu.Lock()
		for _, e := range h.idles.events[from:] {
			if e.uid == uid && e.next.Equal(next) {
				h.idles.mu.Unlock()
				return
			}
		}
		from = len(h.idles.events)
		changed := h.idles.changed
		h.idles.mu.Unlock()
		select {
		case <-changed:
		case <-deadline:
			h.t.Fatalf("timed out waiting for pod %s to idle until %v", uid, next)
		}
	}
}

func (h *harness) waitExit(uid types.UID) {
	h.t.Helper()
	select {
	case got := <-h.exits:
		if got != uid {
			h.t.Fatalf("worker %s exited, want %s", got, uid)
		}
	case <-time.After(failsafe):
		h.t.Fatalf("timed out waiting for worker %s to exit", uid)
	}
}

func (h *harness) info(uid types.UID) Info {
	h.t.Helper()
	i, ok := h.w.Info(uid)
	if !ok {
		h.t.Fatalf("pod %s unknown", uid)
	}
	return i
}

// testPod returns a pod whose ResourceVersion tells versions apart.
func testPod(uid types.UID, version string, grace *int64) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p-" + string(uid), Namespace: "ns", UID: uid, ResourceVersion: version},
		Spec:       v1.PodSpec{TerminationGracePeriodSeconds: grace},
	}
}

func secs(n int64) *int64 { return &n }

func update(r podupdate.Reason, pod *v1.Pod) UpdatePodOptions {
	return UpdatePodOptions{Reason: r, Pod: pod}
}

func kill(pod *v1.Pod, override *int64) UpdatePodOptions {
	return UpdatePodOptions{Reason: podupdate.Kill, Pod: pod,
		KillPodOptions: &KillPodOptions{PodTerminationGracePeriodSecondsOverride: override}}
}
