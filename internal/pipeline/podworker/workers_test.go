package podworker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nodelet/nodelet/internal/pure/podupdate"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
)

const resync = time.Minute

// Three updates while a sync is blocked make exactly one more sync, with
// the newest pod.
func TestLatestUpdateWins(t *testing.T) {
	h := newHarness(t, Options{ResyncInterval: resync}).run()
	h.w.UpdatePod(update(podupdate.Add, testPod("a", "1", nil)))
	c := h.expect(kindSync, "a")
	if c.reason != podupdate.Add || c.version() != "1" {
		t.Fatalf("first sync: %s of version %s, want create of 1", c.reason, c.version())
	}

	h.w.UpdatePod(update(podupdate.Update, testPod("a", "2", nil)))
	h.w.UpdatePod(update(podupdate.Resync, testPod("a", "3", nil)))
	h.w.UpdatePod(update(podupdate.Update, testPod("a", "4", nil)))
	if c.cancelled() {
		t.Fatal("a plain update cancelled the in-flight sync")
	}
	c.ok()

	c = h.expect(kindSync, "a")
	if c.reason != podupdate.Update || c.version() != "4" {
		t.Fatalf("second sync: %s of version %s, want update of 4", c.reason, c.version())
	}
	mark := h.idles.mark()
	c.ok()
	h.waitIdle(mark, "a", t0.Add(resync))
	h.noCall()
}

// A create not yet delivered stays a create when an update overtakes it;
// updates received before Run start their worker when Run starts.
func TestPendingCreateStaysCreate(t *testing.T) {
	h := newHarness(t, Options{})
	h.w.UpdatePod(update(podupdate.Add, testPod("a", "1", nil)))
	h.w.UpdatePod(update(podupdate.Update, testPod("a", "2", nil)))
	h.run()
	c := h.expect(kindSync, "a")
	if c.reason != podupdate.Add || c.version() != "2" {
		t.Fatalf("sync: %s of version %s, want create of 2", c.reason, c.version())
	}
	c.ok()
}

func TestKillDuringSyncCancelsAndTerminates(t *testing.T) {
	h := newHarness(t, Options{})
	finished := make(chan types.UID, 2)
	h.w.onFinished = func(uid types.UID) { finished <- uid }
	h.run()
	pod := testPod("a", "1", secs(30))
	h.w.UpdatePod(update(podupdate.Add, pod))
	c := h.expect(kindSync, "a")

	h.w.UpdatePod(UpdatePodOptions{Reason: podupdate.Kill, Pod: pod, KillPodOptions: &KillPodOptions{
		PodTerminationGracePeriodSecondsOverride: secs(5), Evict: true, Reason: "node pressure"}})
	if !c.cancelled() {
		t.Fatal("the kill did not cancel the in-flight SyncPod")
	}
	if !h.w.IsPodTerminationRequested("a") || h.w.IsPodKnownTerminated("a") {
		t.Fatal("termination not requested, or terminated too early")
	}
	c.replyCtxErr()

	// No clock step: a cancelled sync is not a failure, there is no back-off.
	c = h.expect(kindTerminating, "a")
	if c.grace != 5*time.Second {
		t.Errorf("grace period = %v, want 5s", c.grace)
	}
	if !h.w.ShouldPodContainersBeTerminating("a") || !h.w.CouldHaveRunningContainers("a") {
		t.Error("terminating pod: containers not terminating, or known not running")
	}
	c.ok()

	c = h.expect(kindTerminated, "a")
	if !h.w.IsPodKnownTerminated("a") || h.w.CouldHaveRunningContainers("a") || !h.w.ShouldPodRuntimeBeRemoved("a") {
		t.Error("after SyncTerminatingPod the pod is not known terminated")
	}
	if h.w.IsPodFinished("a") {
		t.Error("pod finished before SyncTerminatedPod cleaned up")
	}
	c.ok()
	h.waitExit("a")
	if !h.w.IsPodFinished("a") {
		t.Error("pod not finished after SyncTerminatedPod")
	}
	select {
	case uid := <-finished:
		if uid != "a" || len(finished) != 0 {
			t.Errorf("OnFinished told %q (and %d more), want a once", uid, len(finished))
		}
	default:
		t.Error("OnFinished not called for the finished pod")
	}

	want := Info{State: Finished, GracePeriod: 5 * time.Second, Evicted: true, Reason: "node pressure"}
	if got := h.info("a"); got != want {
		t.Errorf("Info = %+v, want %+v", got, want)
	}
	if !h.w.ShouldPodContentBeRemoved("a") {
		t.Error("evicted pod's content not to be removed")
	}

	// A finished UID is not started again by an update (an Add, a
	// creation again, would: TestStaticPodCreatedAgainRestarts).
	h.w.UpdatePod(update(podupdate.Update, testPod("a", "2", nil)))
	h.noCall()
	if h.info("a").State != Finished {
		t.Error("update revived a finished pod")
	}

	// Forgotten once no longer desired; then the UID is new again.
	h.w.SyncKnownPods(map[types.UID]bool{"a": true})
	h.info("a")
	h.w.SyncKnownPods(nil)
	if _, ok := h.w.Info("a"); ok {
		t.Fatal("finished pod not forgotten by SyncKnownPods")
	}
	h.w.UpdatePod(update(podupdate.Add, testPod("a", "3", nil)))
	h.expect(kindSync, "a").ok()
}

func TestGracePeriodOnlyShortens(t *testing.T) {
	h := newHarness(t, Options{}).run()
	pod := testPod("a", "1", secs(30))
	h.w.UpdatePod(update(podupdate.Add, pod))
	h.expect(kindSync, "a").ok()

	h.w.UpdatePod(kill(pod, secs(20)))
	c := h.expect(kindTerminating, "a")
	if c.grace != 20*time.Second {
		t.Fatalf("grace period = %v, want 20s", c.grace)
	}

	deleted := testPod("a", "2", secs(30))
	deleted.DeletionTimestamp = &metav1.Time{Time: t0}
	deleted.DeletionGracePeriodSeconds = secs(25)
	for _, u := range []UpdatePodOptions{kill(pod, secs(40)), kill(pod, nil), update(podupdate.Update, deleted)} {
		h.w.UpdatePod(u)
		if c.cancelled() {
			t.Fatalf("update %s %+v cancelled the terminating call without shortening", u.Reason, u.KillPodOptions)
		}
		if g := h.info("a").GracePeriod; g != 20*time.Second {
			t.Fatalf("grace period grew to %v", g)
		}
	}

	h.w.UpdatePod(kill(deleted, secs(5)))
	if !c.cancelled() {
		t.Fatal("a shorter grace period did not cancel SyncTerminatingPod")
	}
	c.replyCtxErr()
	c = h.expect(kindTerminating, "a")
	if c.grace != 5*time.Second {
		t.Fatalf("grace period = %v, want 5s", c.grace)
	}

	// Zero is floored to 1s, which is still shorter.
	h.w.UpdatePod(kill(deleted, secs(0)))
	if !c.cancelled() {
		t.Fatal("grace period 0 (1s) did not cancel SyncTerminatingPod")
	}
	c.replyCtxErr()
	c = h.expect(kindTerminating, "a")
	if c.grace != time.Second || c.version() != "2" {
		t.Fatalf("grace period = %v of version %s, want 1s with the newest pod 2", c.grace, c.version())
	}
	c.ok()
	h.expect(kindTerminated, "a").ok()
	h.waitExit("a")
	if i := h.info("a"); !i.Deleted || !h.w.ShouldPodContentBeRemoved("a") {
		t.Errorf("deleted, terminated pod: Info %+v, content removable %v", i, h.w.ShouldPodContentBeRemoved("a"))
	}
}

func TestEffectiveGrace(t *testing.T) {
	deleting := func(grace *int64, deletion *int64) *v1.Pod {
		p := testPod("a", "1", grace)
		p.DeletionTimestamp = &metav1.Time{Time: t0}
		p.DeletionGracePeriodSeconds = deletion
		return p
	}
	cases := []struct {
		name     string
		set      bool
		current  int64
		pod      *v1.Pod
		override *int64
		want     int64
	}{
		{"spec", false, 0, testPod("a", "1", secs(12)), nil, 12},
		{"no spec: 30", false, 0, testPod("a", "1", nil), nil, 30},
		{"spec 0 floored", false, 0, testPod("a", "1", secs(0)), nil, 1},
		{"first override replaces spec, even longer", false, 0, testPod("a", "1", secs(12)), secs(60), 60},
		{"deletion grace", false, 0, deleting(secs(30), secs(10)), nil, 10},
		{"override shorter than deletion", false, 0, deleting(secs(30), secs(10)), secs(3), 3},
		{"current kept against longer override", true, 20, testPod("a", "1", secs(30)), secs(40), 20},
		{"current kept against spec", true, 20, testPod("a", "1", secs(5)), nil, 20},
		{"current shortened", true, 20, testPod("a", "1", secs(30)), secs(7), 7},
		{"override 0 floored", true, 20, testPod("a", "1", secs(30)), secs(0), 1},
		{"nil pod", false, 0, nil, nil, 30},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ps := &podState{graceSet: tc.set, grace: tc.current}
			var k *KillPodOptions
			if tc.override != nil {
				k = &KillPodOptions{PodTerminationGracePeriodSecondsOverride: tc.override}
			}
			if got := effectiveGrace(ps, tc.pod, k); got != tc.want {
				t.Errorf("effectiveGrace = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestTerminalSyncTerminates(t *testing.T) {
	h := newHarness(t, Options{}).run()
	h.w.UpdatePod(update(podupdate.Add, testPod("a", "1", secs(7))))
	h.expect(kindSync, "a").terminalResult()

	c := h.expect(kindTerminating, "a")
	if c.grace != 7*time.Second {
		t.Errorf("grace period = %v, want the spec's 7s", c.grace)
	}
	if i := h.info("a"); i.State != Terminating {
		t.Errorf("state = %s, want terminating", i.State)
	}
	c.ok()
	c = h.expect(kindTerminated, "a")
	if i := h.info("a"); i.State != Terminated {
		t.Errorf("state = %s, want terminated", i.State)
	}
	c.ok()
	h.waitExit("a")
	if i := h.info("a"); i.State != Finished || i.Deleted || i.Evicted {
		t.Errorf("Info = %+v, want finished, neither deleted nor evicted", i)
	}
	if h.w.ShouldPodContentBeRemoved("a") {
		t.Error("content of a completed, still desired pod to be removed")
	}
}

func TestTerminationTriggersInUpdates(t *testing.T) {
	t.Run("deletion timestamp", func(t *testing.T) {
		h := newHarness(t, Options{}).run()
		p := testPod("a", "1", secs(30))
		p.DeletionTimestamp = &metav1.Time{Time: t0}
		p.DeletionGracePeriodSeconds = secs(8)
		h.w.UpdatePod(update(podupdate.Add, p))
		c := h.expect(kindTerminating, "a") // never synced
		if c.grace != 8*time.Second || !h.info("a").Deleted {
			t.Errorf("grace %v, Info %+v; want 8s and deleted", c.grace, h.info("a"))
		}
		c.ok()
		h.expect(kindTerminated, "a").ok()
		h.waitExit("a")
	})
	t.Run("terminal phase", func(t *testing.T) {
		h := newHarness(t, Options{}).run()
		h.w.UpdatePod(update(podupdate.Add, testPod("a", "1", nil)))
		c := h.expect(kindSync, "a")
		p := testPod("a", "2", nil)
		p.Status.Phase = v1.PodSucceeded
		h.w.UpdatePod(update(podupdate.Update, p))
		if !c.cancelled() {
			t.Error("a terminal phase did not cancel the in-flight SyncPod")
		}
		c.replyCtxErr()
		if c = h.expect(kindTerminating, "a"); c.grace != 30*time.Second {
			t.Errorf("grace = %v, want the default 30s", c.grace)
		}
		c.ok()
		h.expect(kindTerminated, "a").ok()
	})
	t.Run("kill before the first sync", func(t *testing.T) {
		h := newHarness(t, Options{})
		p := testPod("a", "1", secs(3))
		h.w.UpdatePod(update(podupdate.Add, p))
		h.w.UpdatePod(kill(p, nil))
		h.run()
		if c := h.expect(kindTerminating, "a"); c.grace != 3*time.Second {
			t.Errorf("grace = %v, want 3s", c.grace)
		} else {
			c.ok()
		}
		h.expect(kindTerminated, "a").ok()
	})
}

func TestErrorsRetryAfterBackOff(t *testing.T) {
	const backOff = 10 * time.Second
	h := newHarness(t, Options{ResyncInterval: resync, BackOffPeriod: backOff}).run()
	boom := errors.New("boom")
	pod := testPod("a", "1", secs(30))

	h.w.UpdatePod(update(podupdate.Add, pod))
	mark := h.idles.mark()
	h.expect(kindSync, "a").fail(boom)
	h.waitIdle(mark, "a", t0.Add(backOff))
	h.clk.Step(backOff - time.Millisecond) // not yet
	h.clk.Step(time.Millisecond)
	c := h.expect(kindSync, "a")
	if !c.at.Equal(t0.Add(backOff)) || c.reason != podupdate.Resync {
		t.Fatalf("retry at %v as %s, want at %v as sync", c.at, c.reason, t0.Add(backOff))
	}
	mark = h.idles.mark()
	c.ok()
	h.waitIdle(mark, "a", t0.Add(backOff+resync))

	// An update during a back-off is handled at once.
	mark = h.idles.mark()
	h.w.Requeue("a")
	h.expect(kindSync, "a").fail(boom)
	h.waitIdle(mark, "a", t0.Add(2*backOff))
	h.w.UpdatePod(update(podupdate.Update, testPod("a", "2", secs(30))))
	if c := h.expect(kindSync, "a"); !c.at.Equal(t0.Add(backOff)) {
		t.Errorf("update during back-off synced at %v, want at once (%v)", c.at, t0.Add(backOff))
	} else {
		c.ok()
	}

	// Terminating and terminated calls are retried the same way.
	start := h.clk.Now()
	h.w.UpdatePod(kill(pod, nil))
	mark = h.idles.mark()
	h.expect(kindTerminating, "a").fail(boom)
	h.waitIdle(mark, "a", start.Add(backOff))
	h.clk.Step(backOff)
	if c := h.expect(kindTerminating, "a"); c.grace != 30*time.Second {
		t.Errorf("retried grace = %v, want 30s", c.grace)
	} else {
		c.ok()
	}
	mark = h.idles.mark()
	h.expect(kindTerminated, "a").fail(boom)
	h.waitIdle(mark, "a", start.Add(2*backOff))
	h.clk.Step(backOff)
	h.expect(kindTerminated, "a").ok()
	h.waitExit("a")
}

func TestRequeue(t *testing.T) {
	h := newHarness(t, Options{ResyncInterval: resync}).run()
	h.w.UpdatePod(update(podupdate.Add, testPod("a", "1", nil)))
	mark := h.idles.mark()
	h.expect(kindSync, "a").ok()
	h.waitIdle(mark, "a", t0.Add(resync))

	// The earliest request wins and re-arms the idle worker.
	mark = h.idles.mark()
	h.w.RequeueAfter("a", 30*time.Second)
	h.w.RequeueAfter("a", 5*time.Second)
	h.w.RequeueAfter("a", 20*time.Second)
	h.waitIdle(mark, "a", t0.Add(5*time.Second))
	h.clk.Step(5 * time.Second)
	c := h.expect(kindSync, "a")
	if !c.at.Equal(t0.Add(5*time.Second)) || c.reason != podupdate.Resync {
		t.Fatalf("requeued sync at %v as %s", c.at, c.reason)
	}
	// A request made during a sync survives it.
	h.w.RequeueAfter("a", 10*time.Second)
	mark = h.idles.mark()
	c.ok()
	h.waitIdle(mark, "a", t0.Add(15*time.Second))

	// A sync for another reason before a requested time does not cancel it.
	h.w.UpdatePod(update(podupdate.Resync, testPod("a", "1", nil)))
	mark = h.idles.mark()
	h.expect(kindSync, "a").ok()
	h.waitIdle(mark, "a", t0.Add(15*time.Second))
	h.clk.Step(10 * time.Second)
	h.expect(kindSync, "a").ok()

	h.w.Requeue("unknown") // ignored
	h.noCall()
}

func TestSyncKnownPods(t *testing.T) {
	h := newHarness(t, Options{ResyncInterval: resync}).run()
	if !h.w.CouldHaveRunningContainers("unknown") || h.w.ShouldPodRuntimeBeRemoved("unknown") ||
		h.w.ShouldPodContentBeRemoved("unknown") || h.w.ShouldPodContainersBeTerminating("unknown") || h.w.IsPodFinished("unknown") {
		t.Fatal("before the first SyncKnownPods unknown pods must be treated as possibly running")
	}
	for _, uid := range []types.UID{"a", "b"} {
		h.w.UpdatePod(update(podupdate.Add, testPod(uid, "1", secs(12))))
		mark := h.idles.mark()
		h.expect(kindSync, uid).ok()
		h.waitIdle(mark, uid, t0.Add(resync))
	}
	h.w.UpdatePod(update(podupdate.Add, testPod("c", "1", nil)))
	inflight := h.expect(kindSync, "c")

	h.w.SyncKnownPods(map[types.UID]bool{"a": true})
	if !inflight.cancelled() {
		t.Error("SyncKnownPods did not cancel the in-flight sync of an undesired pod")
	}
	if h.w.CouldHaveRunningContainers("unknown") || !h.w.ShouldPodRuntimeBeRemoved("unknown") || !h.w.IsPodFinished("unknown") {
		t.Error("after SyncKnownPods unknown pods must be treated as not running")
	}
	inflight.replyCtxErr()

	// b and c terminate, in either order.
	seen := map[types.UID]callKind{}
	for range 4 {
		var c call
		select {
		case c = <-h.s.calls:
		case <-time.After(failsafe):
			t.Fatalf("timed out; calls so far %v", seen)
		}
		switch {
		case c.uid() == "a":
			t.Fatalf("desired pod got %s", c)
		case c.kind == kindTerminating && seen[c.uid()] == "":
			if want := map[types.UID]time.Duration{"b": 12 * time.Second, "c": 30 * time.Second}[c.uid()]; c.grace != want {
				t.Errorf("%s: grace %v, want %v", c, c.grace, want)
			}
		case c.kind == kindTerminated && seen[c.uid()] == kindTerminating:
		default:
			t.Fatalf("unexpected %s after %q", c, seen[c.uid()])
		}
		seen[c.uid()] = c.kind
		c.ok()
	}
	for range 2 {
		select {
		case <-h.exits:
		case <-time.After(failsafe):
			t.Fatal("timed out waiting for workers to exit")
		}
	}
	for _, uid := range []types.UID{"b", "c"} {
		if i := h.info(uid); i.State != Finished || !i.Deleted || !h.w.ShouldPodContentBeRemoved(uid) {
			t.Errorf("%s: Info %+v, content removable %v; want finished, deleted, removable", uid, i, h.w.ShouldPodContentBeRemoved(uid))
		}
	}
	h.w.SyncKnownPods(map[types.UID]bool{"a": true})
	for _, uid := range []types.UID{"b", "c"} {
		if _, ok := h.w.Info(uid); ok {
			t.Errorf("%s not forgotten", uid)
		}
	}
	if i := h.info("a"); i.State != Syncing || i.Deleted {
		t.Errorf("desired pod: Info %+v", i)
	}
	h.noCall()
}

func TestRunStopCancelsCalls(t *testing.T) {
	h := newHarness(t, Options{})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); h.w.Run(ctx) }()
	h.w.UpdatePod(update(podupdate.Add, testPod("a", "1", nil)))
	c := h.expect(kindSync, "a")
	cancel()
	select {
	case <-c.ctx.Done():
	case <-time.After(failsafe):
		t.Fatal("ending Run's context did not cancel the call")
	}
	c.replyCtxErr()
	select {
	case <-done:
	case <-time.After(failsafe):
		t.Fatal("Run did not return")
	}
	h.waitExit("a")
	// After Run, updates start nothing.
	h.w.UpdatePod(update(podupdate.Add, testPod("b", "1", nil)))
	h.noCall()
}

// countingSyncer answers at once and records the call sequence per pod.
type countingSyncer struct {
	mu    sync.Mutex
	calls map[types.UID][]callKind
}

func (s *countingSyncer) record(uid types.UID, k callKind) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls[uid] = append(s.calls[uid], k)
}

func (s *countingSyncer) SyncPod(_ context.Context, req SyncRequest) (SyncResult, error) {
	s.record(req.Pod.UID, kindSync)
	return SyncResult{}, nil
}

func (s *countingSyncer) SyncTerminatingPod(_ context.Context, req TerminatingRequest) error {
	s.record(req.Pod.UID, kindTerminating)
	return nil
}

func (s *countingSyncer) SyncTerminatedPod(_ context.Context, req TerminatedRequest) error {
	s.record(req.Pod.UID, kindTerminated)
	return nil
}

// Many pods updated, queried and killed concurrently (run with -race).
func TestManyPodsInParallel(t *testing.T) {
	const n = 100
	s := &countingSyncer{calls: map[types.UID][]callKind{}}
	w := New(Deps{Syncer: s, Clock: clocktesting.NewFakeClock(t0), Log: testLogger(t)}, Options{})
	// Buffered for all pods so that the hook never blocks.
	exits := make(chan types.UID, n)
	w.exitHook = func(uid types.UID) { exits <- uid }
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	defer func() { cancel(); <-done }()

	var wg sync.WaitGroup
	for i := range n {
		uid := types.UID(fmt.Sprintf("pod-%03d", i))
		wg.Go(func() {
			w.UpdatePod(update(podupdate.Add, testPod(uid, "1", secs(int64(i%7)))))
			w.UpdatePod(update(podupdate.Update, testPod(uid, "2", secs(int64(i%7)))))
			w.RequeueAfter(uid, time.Second)
			_ = w.CouldHaveRunningContainers(uid)
			_, _ = w.Info(uid)
			w.UpdatePod(kill(testPod(uid, "3", nil), secs(int64(i%3))))
			_ = w.IsPodTerminationRequested(uid)
			_ = w.IsPodKnownTerminated(uid)
		})
	}
	wg.Wait()
	for range n {
		select {
		case <-exits:
		case <-time.After(failsafe):
			t.Fatal("timed out waiting for the workers to finish")
		}
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.calls) != n {
		t.Fatalf("%d pods called the syncer, want %d", len(s.calls), n)
	}
	for uid, seq := range s.calls {
		// Any number of SyncPod, then exactly one terminating and one
		// terminated call.
		k := 0
		for k < len(seq) && seq[k] == kindSync {
			k++
		}
		if len(seq)-k != 2 || seq[k] != kindTerminating || seq[k+1] != kindTerminated {
			t.Errorf("%s: calls %v", uid, seq)
		}
		if !w.IsPodKnownTerminated(uid) {
			t.Errorf("%s not terminated", uid)
		}
	}
}

func TestUpdateWithoutPodIgnored(t *testing.T) {
	h := newHarness(t, Options{}).run()
	h.w.UpdatePod(UpdatePodOptions{Reason: podupdate.Add})
	h.noCall()
}

func TestStrings(t *testing.T) {
	for v, want := range map[fmt.Stringer]string{
		Syncing: "syncing", Terminating: "terminating", Terminated: "terminated", Finished: "finished",
	} {
		if v.String() != want {
			t.Errorf("String() = %q, want %q", v.String(), want)
		}
	}
}
