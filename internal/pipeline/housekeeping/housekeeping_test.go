package housekeeping

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	testclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/pipeline/podworker"
	"github.com/nodelet/nodelet/internal/pure/observed"
	"github.com/nodelet/nodelet/internal/pure/podsetup"
	"github.com/nodelet/nodelet/internal/pure/podupdate"
)

type fakeWorkers struct {
	known   map[types.UID]bool // held by a worker
	running map[types.UID]bool // could have running containers
	synced  map[types.UID]bool
	// restart is what SyncKnownPods returns; updates, what UpdatePod got.
	restart []types.UID
	updates []podworker.UpdatePodOptions
}

func (w *fakeWorkers) SyncKnownPods(d map[types.UID]bool) []types.UID {
	w.synced = d
	return w.restart
}
func (w *fakeWorkers) UpdatePod(o podworker.UpdatePodOptions)        { w.updates = append(w.updates, o) }
func (w *fakeWorkers) CouldHaveRunningContainers(uid types.UID) bool { return w.running[uid] }
func (w *fakeWorkers) Info(uid types.UID) (podworker.Info, bool) {
	return podworker.Info{}, w.known[uid]
}

type fakeRuntime struct {
	pods   map[types.UID]*observed.PodStatus
	lists  int // calls of RunningPods
	mu     sync.Mutex
	killed []types.UID
}

func (r *fakeRuntime) RunningPods(context.Context) (map[types.UID]*observed.PodStatus, error) {
	r.lists++
	return r.pods, nil
}

func (r *fakeRuntime) KillPod(_ context.Context, uid types.UID, _, _ string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.killed = append(r.killed, uid)
	return nil
}

type fakeStatuses struct{ kept map[types.UID]bool }

func (s *fakeStatuses) RemoveOrphans(keep func(types.UID) bool) {
	for uid := range s.kept {
		s.kept[uid] = keep(uid)
	}
}

// fakeAllocations keeps the allocations keep says yes to.
type fakeAllocations struct{ kept map[types.UID]bool }

func (a *fakeAllocations) Forget(keep func(types.UID) bool) error {
	for uid := range a.kept {
		a.kept[uid] = keep(uid)
	}
	return nil
}

type fakeResource struct {
	held    []types.UID
	cleaned []types.UID
	listed  int   // calls of Holding
	err     error // Holding's
}

func (r *fakeResource) Name() string { return "fake" }
func (r *fakeResource) Holding() ([]types.UID, error) {
	r.listed++
	return slices.Clone(r.held), r.err
}

// Cleanup cleans up: the resource holds the pod no more.
func (r *fakeResource) Cleanup(_ context.Context, pod *v1.Pod) error {
	r.cleaned = append(r.cleaned, pod.UID)
	r.held = slices.DeleteFunc(r.held, func(uid types.UID) bool { return uid == pod.UID })
	return nil
}

// fakeObserved is the PLEG's view.
type fakeObserved struct {
	pods    map[types.UID]*observed.PodStatus
	current bool
}

func (o *fakeObserved) Current() (map[types.UID]*observed.PodStatus, bool) { return o.pods, o.current }

func runningPod(name string) *observed.PodStatus {
	return &observed.PodStatus{Name: name, Namespace: "default",
		Sandboxes: []observed.Sandbox{{ID: "sb-" + name, State: observed.SandboxReady}}}
}

// One round: the workers learn the desired pods, statuses of pods neither
// wanted nor possibly running go, running orphans are stopped, and what
// the resources hold for pods nobody holds and nothing runs of is cleaned
// up; nothing of a wanted, worked-on or running pod is.
func TestHousekeep(t *testing.T) {
	w := &fakeWorkers{known: map[types.UID]bool{"terminating": true}, running: map[types.UID]bool{"terminating": true}}
	rt := &fakeRuntime{pods: map[types.UID]*observed.PodStatus{
		"wanted":      runningPod("wanted"),
		"terminating": runningPod("terminating"),
		"orphan":      runningPod("orphan"),
		"exited":      {Name: "exited", Namespace: "default", Sandboxes: []observed.Sandbox{{ID: "sb", State: observed.SandboxNotReady}}},
	}}
	st := &fakeStatuses{kept: map[types.UID]bool{"wanted": true, "terminating": true, "gone": true}}
	res := &fakeResource{held: []types.UID{"wanted", "terminating", "orphan", "exited", "prepared-before-restart"}}
	alloc := &fakeAllocations{kept: map[types.UID]bool{"wanted": true, "terminating": true, "gone": true}}
	h := New(Deps{Sources: nil, Workers: w, Runtime: rt, Statuses: st, Resources: []Resource{res}, Allocations: alloc, Log: slog.New(slog.DiscardHandler)})
	h.Housekeep(t.Context(), map[types.UID]*v1.Pod{"wanted": {}})
	h.Wait()

	if !alloc.kept["wanted"] || !alloc.kept["terminating"] || alloc.kept["gone"] {
		t.Errorf("allocations kept %v; want wanted and terminating, not gone", alloc.kept)
	}
	if !w.synced["wanted"] || len(w.synced) != 1 {
		t.Errorf("SyncKnownPods(%v), want only the wanted pod", w.synced)
	}
	if !st.kept["wanted"] || !st.kept["terminating"] || st.kept["gone"] {
		t.Errorf("statuses kept %v; want wanted and terminating, not gone", st.kept)
	}
	if !slices.Equal(rt.killed, []types.UID{"orphan"}) {
		t.Errorf("killed %v, want only the running orphan", rt.killed)
	}
	slices.Sort(res.cleaned)
	if !slices.Equal(res.cleaned, []types.UID{"exited", "prepared-before-restart"}) {
		t.Errorf("cleaned up %v; want only what no one holds and nothing runs of", res.cleaned)
	}
}

// A wanted pod the workers forgot to restart it is sent to them again as
// an Add with its newest spec; one not wanted any more is not.
func TestHousekeepRestartsPodsCreatedAgain(t *testing.T) {
	w := &fakeWorkers{restart: []types.UID{"again", "gone"}}
	h := New(Deps{Workers: w, Runtime: &fakeRuntime{}, Statuses: &fakeStatuses{}, Log: slog.New(slog.DiscardHandler)})
	pod := &v1.Pod{}
	pod.UID, pod.Name = "again", "static-node1"
	h.Housekeep(t.Context(), map[types.UID]*v1.Pod{"again": pod})
	h.Wait()
	if len(w.updates) != 1 || w.updates[0].Reason != podupdate.Add || w.updates[0].Pod != pod {
		t.Fatalf("updates %+v; want one Add of the wanted pod", w.updates)
	}
}

type fakeSources struct {
	ready bool
	pods  []*v1.Pod
}

func (s fakeSources) SourcesReady() bool { return s.ready }
func (s fakeSources) Pods() []*v1.Pod    { return s.pods }

func TestPodActive(t *testing.T) {
	w := &fakeWorkers{running: map[types.UID]bool{"terminating": true}}
	src := fakeSources{pods: []*v1.Pod{{}}}
	src.pods[0].UID = "wanted"
	h := New(Deps{Sources: src, Workers: w})
	if !h.PodActive("anything") {
		t.Error("before the sources are ready every pod must count as active")
	}
	src.ready = true
	h = New(Deps{Sources: src, Workers: w})
	for uid, want := range map[types.UID]bool{"wanted": true, "terminating": true, "gone": false} {
		if h.PodActive(uid) != want {
			t.Errorf("PodActive(%s) = %v", uid, !want)
		}
	}
}

// countingSources counts the calls of Pods.
type countingSources struct {
	fakeSources
	calls *int
}

func (s countingSources) Pods() []*v1.Pod { *s.calls++; return s.pods }

func TestPodActiveAfterARoundAsksNoSources(t *testing.T) {
	calls := 0
	src := countingSources{fakeSources{ready: true, pods: []*v1.Pod{{}}}, &calls}
	src.pods[0].UID = "wanted"
	w := &fakeWorkers{running: map[types.UID]bool{}}
	h := New(Deps{Sources: src, Workers: w, Runtime: &fakeRuntime{}, Statuses: &fakeStatuses{}, Log: slog.New(slog.DiscardHandler)})
	h.Housekeep(t.Context(), map[types.UID]*v1.Pod{"wanted": src.pods[0]})
	if !h.PodActive("wanted") || calls != 0 {
		t.Errorf("PodActive(wanted) after a round: %v with %d copies of the sources' pods; want true with none", h.PodActive("wanted"), calls)
	}
	// A pod the sources added since the round is still found there.
	src.pods = append(src.pods, &v1.Pod{})
	src.pods[1].UID = "new"
	h.deps.Sources = src
	if !h.PodActive("new") {
		t.Error("PodActive(new) = false for a pod the sources added after the round")
	}
	if h.PodActive("gone") {
		t.Error("PodActive(gone) = true")
	}
}

// holdingHook is a hook that lists what it holds.
type holdingHook struct{ name string }

func (h holdingHook) Name() string { return h.name }
func (holdingHook) Prepare(context.Context, *v1.Pod) (podsetup.Setup, error) {
	return podsetup.Setup{}, nil
}
func (holdingHook) Cleanup(context.Context, *v1.Pod) error { return nil }
func (holdingHook) Holding() ([]types.UID, error)          { return nil, nil }

// memoryHook holds nothing on the machine.
type memoryHook struct{ holdingHook }

func (memoryHook) Holding() {}

// The hooks that hold something on the machine, in cleanup order.
func TestHolders(t *testing.T) {
	hooks := []podworker.Hook{holdingHook{"dir"}, memoryHook{holdingHook{"probes"}}, holdingHook{"cgroup"}, holdingHook{"volumes"}}
	var got []string
	for _, r := range Holders(hooks) {
		got = append(got, r.Name())
	}
	if want := []string{"volumes", "cgroup", "dir"}; !slices.Equal(got, want) {
		t.Errorf("Holders = %q, want %q", got, want)
	}
}

// A round takes the pods in the runtime from the PLEG's view while it is
// current and lists the runtime only when it is not; a running orphan in
// the view is stopped only when a listing confirms it.
func TestHousekeepRuntimeFromPLEG(t *testing.T) {
	quiet := slog.New(slog.DiscardHandler)
	wanted := map[types.UID]*v1.Pod{"wanted": {}}
	for _, tc := range []struct {
		name      string
		view      map[types.UID]*observed.PodStatus
		current   bool
		listed    map[types.UID]*observed.PodStatus
		wantLists int
		wantKill  []types.UID
	}{
		{name: "current view, no orphan", current: true,
			view:      map[types.UID]*observed.PodStatus{"wanted": runningPod("wanted")},
			wantLists: 0},
		{name: "stale view", current: false,
			listed:    map[types.UID]*observed.PodStatus{"wanted": runningPod("wanted"), "orphan": runningPod("orphan")},
			wantLists: 1, wantKill: []types.UID{"orphan"}},
		{name: "orphan in the view, confirmed", current: true,
			view:      map[types.UID]*observed.PodStatus{"orphan": runningPod("orphan")},
			listed:    map[types.UID]*observed.PodStatus{"orphan": runningPod("orphan")},
			wantLists: 1, wantKill: []types.UID{"orphan"}},
		{name: "orphan in the view, gone since", current: true,
			view:      map[types.UID]*observed.PodStatus{"orphan": runningPod("orphan")},
			listed:    map[types.UID]*observed.PodStatus{},
			wantLists: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt := &fakeRuntime{pods: tc.listed}
			h := New(Deps{Workers: &fakeWorkers{}, Runtime: rt, Observed: &fakeObserved{pods: tc.view, current: tc.current},
				Statuses: &fakeStatuses{}, Log: quiet})
			h.Housekeep(t.Context(), wanted)
			h.Wait()
			if rt.lists != tc.wantLists {
				t.Errorf("runtime listed %d times, want %d", rt.lists, tc.wantLists)
			}
			if !slices.Equal(rt.killed, tc.wantKill) {
				t.Errorf("killed %v, want %v", rt.killed, tc.wantKill)
			}
		})
	}
}

// The resources are listed again only when the wanted pods changed, the
// last listing left something to clean up or retry, or a rescan period
// passed; what a removed pod held is cleaned up once its worker lets go.
func TestHousekeepListsResourcesWhenSomethingChanged(t *testing.T) {
	clk := testclock.NewFakePassiveClock(time.Unix(1000, 0))
	w := &fakeWorkers{known: map[types.UID]bool{"a": true, "b": true}}
	res := &fakeResource{held: []types.UID{"a", "b"}}
	h := New(Deps{Workers: w, Runtime: &fakeRuntime{}, Observed: &fakeObserved{current: true},
		Statuses: &fakeStatuses{}, Resources: []Resource{res}, Clock: clk, Log: slog.New(slog.DiscardHandler)})
	both := map[types.UID]*v1.Pod{"a": {}, "b": {}}
	round := func(desired map[types.UID]*v1.Pod, wantListed int, step string) {
		t.Helper()
		before := res.listed
		h.Housekeep(t.Context(), desired)
		if got := res.listed - before; got != wantListed {
			t.Fatalf("%s: resources listed %d times, want %d", step, got, wantListed)
		}
	}
	round(both, 1, "first round")
	round(both, 0, "nothing changed")
	clk.SetTime(clk.Now().Add(ResourceRescanPeriod - time.Second))
	round(both, 0, "before the rescan period")
	clk.SetTime(clk.Now().Add(time.Second))
	round(both, 1, "after the rescan period")

	// b is removed; its worker still stops it: listed every round until
	// it is cleaned up, and once more to see it gone.
	onlyA := map[types.UID]*v1.Pod{"a": {}}
	round(onlyA, 1, "b removed")
	round(onlyA, 1, "b still held by its worker")
	if len(res.cleaned) != 0 {
		t.Fatalf("cleaned up %v while b's worker holds it", res.cleaned)
	}
	delete(w.known, "b")
	round(onlyA, 1, "b's worker let go")
	if !slices.Equal(res.cleaned, []types.UID{"b"}) {
		t.Fatalf("cleaned up %v, want b", res.cleaned)
	}
	round(onlyA, 1, "b cleaned up: one more look")
	round(onlyA, 0, "settled")

	// A listing that failed is retried next round.
	res.err = errors.New("boom")
	clk.SetTime(clk.Now().Add(ResourceRescanPeriod))
	round(onlyA, 1, "failing listing")
	res.err = nil
	round(onlyA, 1, "retry after a failed listing")
	round(onlyA, 0, "settled again")
}

// Every round, the cheap ones too, is observed (the metric the e2e tests
// wait on to know that a round went by).
func TestHousekeepObservesEveryRound(t *testing.T) {
	var rounds int
	h := New(Deps{Workers: &fakeWorkers{}, Runtime: &fakeRuntime{}, Observed: &fakeObserved{current: true},
		Statuses: &fakeStatuses{}, Resources: []Resource{&fakeResource{}},
		Observe: func(time.Duration) { rounds++ },
		Clock:   testclock.NewFakePassiveClock(time.Unix(1000, 0)), Log: slog.New(slog.DiscardHandler)})
	for range 3 {
		h.Housekeep(t.Context(), nil)
	}
	if rounds != 3 {
		t.Errorf("observed %d rounds, want 3", rounds)
	}
}
