package podworker

import (
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/internal/pure/podspec"
	"github.com/nodelet/nodelet/internal/pure/podupdate"
)

// staticPod is a static pod named name (in namespace ns); its UID stands
// for one version of its manifest.
func staticPod(uid types.UID, name string) *v1.Pod {
	p := testPod(uid, "1", secs(20))
	p.Name = name
	p.Annotations = map[string]string{podspec.AnnotationConfigSource: "file"}
	return p
}

// waitExits waits until the workers of every uid in want returned, in
// any order.
func (h *harness) waitExits(want ...types.UID) {
	h.t.Helper()
	left := slices.Clone(want)
	deadline := time.After(failsafe)
	for len(left) > 0 {
		select {
		case got := <-h.exits:
			i := slices.Index(left, got)
			if i < 0 {
				h.t.Fatalf("worker %s exited, want %v", got, left)
			}
			left = slices.Delete(left, i, i+1)
		case <-deadline:
			h.t.Fatalf("timed out waiting for workers %v to exit", left)
		}
	}
}

// Static pods of one full name start one at a time: a newer one (a changed
// manifest) waits until the older one finished terminating; of those that
// came meanwhile only the newest not removed starts, the others finish
// without any call. "a" runs at the start; each step is "add X" or
// "remove X" for static pod X of the same full name.
func TestStaticPodStartsAfterItsPredecessor(t *testing.T) {
	cases := []struct {
		name  string
		steps []string
		// starts is the pod that starts once "a" finished ("" none);
		// unstarted, those that finish without a call.
		starts    types.UID
		unstarted []types.UID
	}{
		{name: "manifest changed", steps: []string{"add b", "remove a"}, starts: "b"},
		{name: "removal seen before the new version", steps: []string{"remove a", "add b"}, starts: "b"},
		{name: "changed many times while a terminates",
			steps:  []string{"add b", "remove a", "add c", "remove b", "add d", "remove c", "add e", "remove d"},
			starts: "e", unstarted: []types.UID{"b", "c", "d"}},
		{name: "changed then deleted", steps: []string{"add b", "remove a", "remove b"}, unstarted: []types.UID{"b"}},
		{name: "deleted then restored", steps: []string{"remove a", "add b", "remove b", "add c"},
			starts: "c", unstarted: []types.UID{"b"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, Options{ResyncInterval: resync})
			finished := make(chan types.UID, 10)
			h.w.onFinished = func(uid types.UID) { finished <- uid }
			h.run()
			pods := map[types.UID]*v1.Pod{}
			pod := func(uid types.UID) *v1.Pod {
				if pods[uid] == nil {
					pods[uid] = staticPod(uid, "web")
				}
				return pods[uid]
			}
			h.w.UpdatePod(update(podupdate.Add, pod("a")))
			h.expect(kindSync, "a").ok()
			if h.w.IsStaticPodTerminating("ns/web") {
				t.Fatal("a running static pod reported terminating")
			}

			var terminating call
			var waiting []types.UID
			for _, step := range tc.steps {
				op, uid, _ := strings.Cut(step, " ")
				id := types.UID(uid)
				switch op {
				case "add":
					h.w.UpdatePod(update(podupdate.Add, pod(id)))
					waiting = append(waiting, id)
				case "remove":
					h.w.UpdatePod(update(podupdate.Remove, pod(id)))
					if id == "a" {
						terminating = h.expect(kindTerminating, "a")
						if terminating.grace != 20*time.Second {
							t.Errorf("a terminates with grace %v, want its own 20s", terminating.grace)
						}
					}
					waiting = slices.DeleteFunc(waiting, func(u types.UID) bool { return u == id })
				}
			}
			// Everything settles while a's containers stop: the
			// removed ones finish, the others wait without a timer.
			h.waitExits(tc.unstarted...)
			for _, uid := range waiting {
				h.waitIdle(0, uid, time.Time{})
			}
			h.noCall()
			if !h.w.IsStaticPodTerminating("ns/web") {
				t.Error("a terminating: IsStaticPodTerminating is false")
			}
			for _, uid := range tc.unstarted {
				if got := h.info(uid).State; got != Finished || !h.w.IsPodKnownTerminated(uid) {
					t.Errorf("%s removed before it started: state %s, want finished", uid, got)
				}
			}
			for _, uid := range waiting {
				if got := h.info(uid).State; got != Syncing {
					t.Errorf("%s waiting: state %s, want syncing", uid, got)
				}
			}

			terminating.ok()
			terminated := h.expect(kindTerminated, "a")
			if h.w.IsStaticPodTerminating("ns/web") {
				t.Error("a's containers stopped: IsStaticPodTerminating still true")
			}
			// Nothing starts before a finished.
			h.noCall()
			terminated.ok()
			h.waitExit("a")

			if tc.starts != "" {
				c := h.expect(kindSync, tc.starts)
				if c.reason != podupdate.Add {
					t.Errorf("first sync of %s: %s, want %s", tc.starts, c.reason, podupdate.Add)
				}
				mark := h.idles.mark()
				c.ok()
				h.waitIdle(mark, tc.starts, t0.Add(resync))
			}
			h.noCall()

			var gotFinished []types.UID
			for len(finished) > 0 {
				gotFinished = append(gotFinished, <-finished)
			}
			wantFinished := append(slices.Clone(tc.unstarted), "a")
			slices.Sort(gotFinished)
			slices.Sort(wantFinished)
			if !slices.Equal(gotFinished, wantFinished) {
				t.Errorf("OnFinished told %v, want %v", gotFinished, wantFinished)
			}

			// Housekeeping forgets the finished ones; the gate keeps
			// nothing of them.
			desired := map[types.UID]bool{}
			if tc.starts != "" {
				desired[tc.starts] = true
			}
			h.w.SyncKnownPods(desired)
			h.w.mu.Lock()
			defer h.w.mu.Unlock()
			if n := len(h.w.pods); n != len(desired) {
				t.Errorf("%d pods known after SyncKnownPods, want %d", n, len(desired))
			}
			if n := len(h.w.waitingStatic); n != 0 {
				t.Errorf("static pods still waiting: %v", h.w.waitingStatic)
			}
			if tc.starts != "" && h.w.startedStatic["ns/web"] != tc.starts {
				t.Errorf("started static pod of ns/web = %q, want %q", h.w.startedStatic["ns/web"], tc.starts)
			}
		})
	}
}

// The gate is per full name and for static pods only: a static pod of
// another name, or an API pod of the same name, starts at once.
func TestStaticPodGateScope(t *testing.T) {
	h := newHarness(t, Options{}).run()
	h.w.UpdatePod(update(podupdate.Add, staticPod("a", "web")))
	h.expect(kindSync, "a").ok()
	h.w.UpdatePod(update(podupdate.Remove, staticPod("a", "web")))
	c := h.expect(kindTerminating, "a")

	h.w.UpdatePod(update(podupdate.Add, staticPod("other", "db")))
	h.expect(kindSync, "other").ok()
	api := testPod("api", "1", nil)
	api.Name = "web"
	h.w.UpdatePod(update(podupdate.Add, api))
	h.expect(kindSync, "api").ok()

	if !h.w.IsStaticPodTerminating("ns/web") || h.w.IsStaticPodTerminating("ns/db") || h.w.IsStaticPodTerminating("ns/none") {
		t.Error("IsStaticPodTerminating: want true for ns/web only")
	}
	c.ok()
	h.expect(kindTerminated, "a").ok()
	h.waitExit("a")
}

// A static pod removed before its first sync, with no other of its name,
// is finished without any call, as the kubelet's; a pod from the API still
// gets its terminating calls (its containers may be from before a
// restart).
func TestStaticPodRemovedBeforeStart(t *testing.T) {
	h := newHarness(t, Options{})
	h.w.UpdatePod(update(podupdate.Add, staticPod("s", "web")))
	h.w.UpdatePod(update(podupdate.Remove, staticPod("s", "web")))
	h.w.UpdatePod(update(podupdate.Add, testPod("api", "1", nil)))
	h.w.UpdatePod(update(podupdate.Remove, testPod("api", "1", nil)))
	h.run()
	h.expect(kindTerminating, "api").ok()
	h.expect(kindTerminated, "api").ok()
	h.waitExits("s", "api")
	h.noCall()
	if !h.w.IsPodFinished("s") || h.w.CouldHaveRunningContainers("s") || !h.w.ShouldPodContainersBeTerminating("s") {
		t.Error("static pod removed before it started: not finished, or its containers may run")
	}
	if h.w.IsStaticPodTerminating("ns/web") {
		t.Error("a static pod that never started reported terminating")
	}
}

// A static pod whose manifest is removed and written back is the same UID:
// the Add that comes while (or after) it terminates is remembered, and once
// it finished SyncKnownPods forgets it and returns it, so that the Add sent
// again starts it anew (a new worker, through the static pod gate). An
// update other than an Add, or a pod no longer desired, restarts nothing.
func TestStaticPodCreatedAgainRestarts(t *testing.T) {
	for _, tc := range []struct {
		name string
		// readdWhile: "terminating" or "finished"; reason of the update
		// that comes back; desired: whether the pod is desired again.
		readdWhile string
		reason     podupdate.Reason
		desired    bool
		restarts   bool
	}{
		{name: "restored while terminating", readdWhile: "terminating", reason: podupdate.Add, desired: true, restarts: true},
		{name: "restored after it finished", readdWhile: "finished", reason: podupdate.Add, desired: true, restarts: true},
		{name: "an update is no creation", readdWhile: "terminating", reason: podupdate.Update, desired: true},
		{name: "restored then removed again", readdWhile: "terminating", reason: podupdate.Add},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, Options{ResyncInterval: resync})
			h.run()
			a := staticPod("a", "web")
			h.w.UpdatePod(update(podupdate.Add, a))
			h.expect(kindSync, "a").ok()
			h.w.UpdatePod(update(podupdate.Remove, a))
			terminating := h.expect(kindTerminating, "a")
			readd := func() { h.w.UpdatePod(update(tc.reason, staticPod("a", "web"))) }
			if tc.readdWhile == "terminating" {
				readd()
				if got := h.w.SyncKnownPods(map[types.UID]bool{"a": tc.desired}); got != nil {
					t.Errorf("SyncKnownPods while a terminates = %v, want nothing to restart yet", got)
				}
			}
			terminating.ok()
			h.expect(kindTerminated, "a").ok()
			h.waitExit("a")
			if tc.readdWhile == "finished" {
				readd()
			}
			got := h.w.SyncKnownPods(map[types.UID]bool{"a": tc.desired})
			if !tc.restarts {
				if got != nil {
					t.Fatalf("SyncKnownPods = %v, want no restart", got)
				}
				if i, ok := h.w.Info("a"); ok != tc.desired || ok && i.State != Finished {
					t.Errorf("a: %+v (known %v); want it kept finished if desired, else forgotten", i, ok)
				}
				return
			}
			if !slices.Equal(got, []types.UID{"a"}) {
				t.Fatalf("SyncKnownPods = %v, want [a] to restart", got)
			}
			if _, ok := h.w.Info("a"); ok {
				t.Error("a restartable but still known to the workers")
			}
			if h.w.IsStaticPodTerminating("ns/web") {
				t.Error("the old run finished, yet IsStaticPodTerminating")
			}
			h.w.UpdatePod(update(podupdate.Add, a))
			if c := h.expect(kindSync, "a"); c.reason != podupdate.Add {
				t.Errorf("restarted a synced for %s, want add", c.reason)
			} else {
				c.ok()
			}
			if i := h.info("a"); i.State != Syncing || i.Deleted {
				t.Errorf("restarted a: %+v, want syncing, not deleted", i)
			}
			if got := h.w.SyncKnownPods(map[types.UID]bool{"a": true}); got != nil {
				t.Errorf("SyncKnownPods after the restart = %v, want nothing", got)
			}
		})
	}
}
