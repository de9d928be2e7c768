package podworker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/internal/pure/podsetup"
	"github.com/nodelet/nodelet/internal/pure/podupdate"
)

// hookLog records every hook call of every pod, in order.
type hookLog struct {
	mu    sync.Mutex
	calls []string
	// failPrepare and failCleanup make the named hook's next calls fail
	// while set.
	failPrepare, failCleanup map[string]error
}

func (l *hookLog) add(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, s)
}

func (l *hookLog) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.calls)
}

func (l *hookLog) setFail(m *map[string]error, hook string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if *m == nil {
		*m = map[string]error{}
	}
	(*m)[hook] = err
}

type recordingHook struct {
	name string
	log  *hookLog
}

func (h recordingHook) Name() string { return h.name }

// Prepare hands back a setup naming the hook and the pod version it was
// prepared for: a contributor, and the pod directory.
func (h recordingHook) Prepare(_ context.Context, pod *v1.Pod) (podsetup.Setup, error) {
	h.log.add(fmt.Sprintf("%s.Prepare %s", h.name, pod.UID))
	h.log.mu.Lock()
	defer h.log.mu.Unlock()
	if err := h.log.failPrepare[h.name]; err != nil {
		return podsetup.Setup{}, err
	}
	made := h.name + "@" + pod.ResourceVersion
	return podsetup.Setup{PodDir: made, Containers: []podsetup.Contributor{namedContributor(made)}}, nil
}

// namedContributor contributes nothing; its name tells who handed it.
type namedContributor string

func (namedContributor) ContributeContainer(podsetup.Container) (podsetup.Additions, error) {
	return podsetup.Additions{}, nil
}

// contributors names the contributors of a setup, in order.
func contributors(s podsetup.Setup) []string {
	var out []string
	for _, c := range s.Containers {
		out = append(out, string(c.(namedContributor)))
	}
	return out
}

func (h recordingHook) Cleanup(_ context.Context, pod *v1.Pod) error {
	h.log.add(fmt.Sprintf("%s.Cleanup %s", h.name, pod.UID))
	h.log.mu.Lock()
	defer h.log.mu.Unlock()
	return h.log.failCleanup[h.name]
}

func hooks(l *hookLog, names ...string) []Hook {
	var out []Hook
	for _, n := range names {
		out = append(out, recordingHook{name: n, log: l})
	}
	return out
}

// Every SyncPod is preceded by every hook's Prepare in order, and once the
// pod has terminated every hook's Cleanup runs, in reverse order, before
// the worker finishes.
func TestHooksOrder(t *testing.T) {
	l := &hookLog{}
	h := newHarness(t, Options{}, hooks(l, "cgroup", "volumes", "probes")...).run()
	pod := testPod("a", "1", secs(3))
	h.w.UpdatePod(update(podupdate.Add, pod))
	h.expect(kindSync, "a").ok()
	h.w.UpdatePod(update(podupdate.Update, testPod("a", "2", secs(3))))
	h.expect(kindSync, "a").ok()
	h.w.UpdatePod(kill(pod, nil))
	h.expect(kindTerminating, "a").ok()
	h.expect(kindTerminated, "a").ok()
	h.waitExit("a")
	want := []string{
		"cgroup.Prepare a", "volumes.Prepare a", "probes.Prepare a",
		"cgroup.Prepare a", "volumes.Prepare a", "probes.Prepare a",
		"probes.Cleanup a", "volumes.Cleanup a", "cgroup.Cleanup a",
	}
	if got := l.get(); !slices.Equal(got, want) {
		t.Errorf("hook calls\n got %q\nwant %q", got, want)
	}
}

// A Prepare that fails stops the round: the later hooks are not prepared,
// SyncPod still runs (to stop what must stop and report status) but knows
// why, and the sync is retried.
func TestHookPrepareFailure(t *testing.T) {
	l := &hookLog{}
	h := newHarness(t, Options{BackOffPeriod: 10 * time.Second}, hooks(l, "cgroup", "volumes", "probes")...).run()
	boom := errors.New("no such ConfigMap")
	l.setFail(&l.failPrepare, "volumes", boom)
	h.w.UpdatePod(update(podupdate.Add, testPod("a", "1", nil)))
	c := h.expect(kindSync, "a")
	if !errors.Is(c.unprepared, boom) {
		t.Fatalf("SyncPod's Unprepared = %v, want it to wrap %v", c.unprepared, boom)
	}
	mark := h.idles.mark()
	c.fail(c.unprepared)
	h.waitIdle(mark, "a", t0.Add(10*time.Second))
	if got, want := l.get(), []string{"cgroup.Prepare a", "volumes.Prepare a"}; !slices.Equal(got, want) {
		t.Errorf("hook calls %q, want %q", got, want)
	}

	l.setFail(&l.failPrepare, "volumes", nil)
	h.clk.Step(10 * time.Second)
	c = h.expect(kindSync, "a")
	if c.unprepared != nil {
		t.Errorf("retry's Unprepared = %v, want nil", c.unprepared)
	}
	c.ok()
}

// What the hooks set up reaches the Syncer merged in hook order: every
// sync request carries each hook's latest successful setup (a hook failing
// this round still hands its previous one), and the terminating and
// terminated requests carry the pod's last one; a pod never prepared gets
// the zero value.
func TestHooksHandTheirSetups(t *testing.T) {
	l := &hookLog{}
	h := newHarness(t, Options{BackOffPeriod: 10 * time.Second}, hooks(l, "cgroup", "volumes", "probes")...).run()
	h.w.UpdatePod(update(podupdate.Add, testPod("a", "1", secs(3))))
	c := h.expect(kindSync, "a")
	if got, want := contributors(c.setup), []string{"cgroup@1", "volumes@1", "probes@1"}; !slices.Equal(got, want) {
		t.Errorf("first sync's contributors %q, want %q", got, want)
	}
	if c.setup.PodDir != "probes@1" {
		t.Errorf("PodDir %q: the last hook's value should win", c.setup.PodDir)
	}
	c.ok()

	l.setFail(&l.failPrepare, "volumes", errors.New("no such ConfigMap"))
	pod := testPod("a", "2", secs(3))
	h.w.UpdatePod(update(podupdate.Update, pod))
	c = h.expect(kindSync, "a")
	if got, want := contributors(c.setup), []string{"cgroup@2", "volumes@1", "probes@1"}; !slices.Equal(got, want) {
		t.Errorf("unprepared sync's contributors %q, want %q", got, want)
	}
	c.fail(c.unprepared)

	h.w.UpdatePod(kill(pod, nil))
	c = h.expect(kindTerminating, "a")
	if got, want := contributors(c.setup), []string{"cgroup@2", "volumes@1", "probes@1"}; !slices.Equal(got, want) {
		t.Errorf("SyncTerminatingPod's contributors %q, want %q", got, want)
	}
	c.ok()
	c = h.expect(kindTerminated, "a")
	if got, want := contributors(c.setup), []string{"cgroup@2", "volumes@1", "probes@1"}; !slices.Equal(got, want) {
		t.Errorf("SyncTerminatedPod's contributors %q, want %q", got, want)
	}
	c.ok()
	h.waitExit("a")

	// Killed before its first sync: never prepared.
	h.w.UpdatePod(kill(testPod("b", "1", secs(3)), nil))
	c = h.expect(kindTerminating, "b")
	if c.setup.PodDir != "" || c.setup.Containers != nil {
		t.Errorf("a pod never prepared got setup %+v, want the zero value", c.setup)
	}
	c.ok()
	h.expect(kindTerminated, "b").ok()
	h.waitExit("b")
}

// Cleanup runs for a pod killed before its first sync (its containers may
// be left by an earlier nodelet), and a failing Cleanup keeps the worker
// from finishing: every hook is cleaned up again after the back-off until
// all succeed.
func TestHookCleanupRetriedUntilDone(t *testing.T) {
	l := &hookLog{}
	h := newHarness(t, Options{BackOffPeriod: 10 * time.Second}, hooks(l, "cgroup", "volumes")...).run()
	busy := errors.New("still mounted")
	l.setFail(&l.failCleanup, "volumes", busy)
	pod := testPod("a", "1", nil)
	h.w.UpdatePod(kill(pod, nil))
	h.expect(kindTerminating, "a").ok()
	mark := h.idles.mark()
	h.expect(kindTerminated, "a").ok()
	h.waitIdle(mark, "a", t0.Add(10*time.Second))
	if i := h.info("a"); i.State != Terminated {
		t.Fatalf("state after a failed Cleanup = %s, want terminated", i.State)
	}
	l.setFail(&l.failCleanup, "volumes", nil)
	h.clk.Step(10 * time.Second)
	h.expect(kindTerminated, "a").ok()
	h.waitExit("a")
	want := []string{"volumes.Cleanup a", "cgroup.Cleanup a", "volumes.Cleanup a", "cgroup.Cleanup a"}
	if got := l.get(); !slices.Equal(got, want) {
		t.Errorf("hook calls\n got %q\nwant %q", got, want)
	}
	if i := h.info("a"); i.State != Finished {
		t.Errorf("state = %s, want finished", i.State)
	}
}

// Every pod that was prepared is cleaned up once it terminated, whichever
// way it ends: killed, terminal, removed by SyncKnownPods. A new set of
// workers (a restarted nodelet) that is told to kill a pod it never
// prepared cleans it up too.
func TestEveryPrepareHasItsCleanup(t *testing.T) {
	l := &hookLog{}
	h := newHarness(t, Options{}, hooks(l, "volumes")...).run()
	h.w.UpdatePod(update(podupdate.Add, testPod("killed", "1", nil)))
	h.expect(kindSync, "killed").ok()
	h.w.UpdatePod(update(podupdate.Add, testPod("terminal", "1", nil)))
	h.expect(kindSync, "terminal").terminalResult()
	h.expect(kindTerminating, "terminal").ok()
	h.expect(kindTerminated, "terminal").ok()
	h.waitExit("terminal")
	h.w.UpdatePod(update(podupdate.Add, testPod("removed", "1", nil)))
	h.expect(kindSync, "removed").ok()
	h.w.UpdatePod(update(podupdate.Remove, testPod("killed", "1", nil)))
	h.expect(kindTerminating, "killed").ok()
	h.expect(kindTerminated, "killed").ok()
	h.waitExit("killed")
	h.w.SyncKnownPods(map[types.UID]bool{"terminal": true})
	h.expect(kindTerminating, "removed").ok()
	h.expect(kindTerminated, "removed").ok()
	h.waitExit("removed")

	// The restarted nodelet: the pod it adopts from the runtime and
	// kills was prepared by its predecessor.
	l2 := &hookLog{}
	h2 := newHarness(t, Options{}, hooks(l2, "volumes")...).run()
	h2.w.UpdatePod(update(podupdate.Kill, testPod("orphan", "1", nil)))
	h2.expect(kindTerminating, "orphan").ok()
	h2.expect(kindTerminated, "orphan").ok()
	h2.waitExit("orphan")

	for _, tc := range []struct {
		l    *hookLog
		pods []string
	}{{l, []string{"killed", "terminal", "removed"}}, {l2, []string{"orphan"}}} {
		prepared, cleaned := map[string]int{}, map[string]int{}
		for _, c := range tc.l.get() {
			call, uid, _ := strings.Cut(c, " ")
			if strings.HasSuffix(call, ".Prepare") {
				prepared[uid]++
			} else {
				if prepared[uid] == 0 && uid != "orphan" {
					t.Errorf("%s cleaned up before it was prepared", uid)
				}
				cleaned[uid]++
			}
		}
		for _, uid := range tc.pods {
			if cleaned[uid] != 1 {
				t.Errorf("pod %s: prepared %d times, cleaned up %d times; want one Cleanup", uid, prepared[uid], cleaned[uid])
			}
		}
	}
}

// SyncResult.RequeueAfter brings the next sync forward from the resync
// interval.
func TestSyncResultRequeueAfter(t *testing.T) {
	h := newHarness(t, Options{ResyncInterval: time.Minute}).run()
	h.w.UpdatePod(update(podupdate.Add, testPod("a", "1", nil)))
	mark := h.idles.mark()
	h.expect(kindSync, "a").reply <- result{requeueAfter: 7 * time.Second}
	h.waitIdle(mark, "a", t0.Add(7*time.Second))
	h.clk.Step(7 * time.Second)
	h.expect(kindSync, "a").ok()
}

// An event that arrives during a sync, found by a look at the runtime that
// began before the sync's own last look, is old news: the sync saw it.
// One found later, or any other update, still syncs the pod.
func TestEventsSeenBySyncAreDropped(t *testing.T) {
	h := newHarness(t, Options{ResyncInterval: time.Minute}).run()
	pod := testPod("a", "1", nil)
	h.w.UpdatePod(update(podupdate.Add, pod))
	c := h.expect(kindSync, "a")
	h.w.UpdatePod(UpdatePodOptions{Reason: podupdate.Event, Pod: pod, ObservedAt: t0.Add(-time.Second)})
	mark := h.idles.mark()
	c.reply <- result{observedAt: t0}
	h.waitIdle(mark, "a", t0.Add(time.Minute))
	h.noCall()

	c = func() call {
		h.w.UpdatePod(update(podupdate.Resync, pod))
		return h.expect(kindSync, "a")
	}()
	h.w.UpdatePod(UpdatePodOptions{Reason: podupdate.Event, Pod: pod, ObservedAt: t0.Add(time.Second)})
	c.reply <- result{observedAt: t0}
	h.expect(kindSync, "a").ok()
}
