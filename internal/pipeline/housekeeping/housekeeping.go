// Package housekeeping is beside the sync loop (stage 3): the kubelet's
// HandlePodCleanups. Every round (2 s, once every source has reported) it
// makes the node hold nothing that no source wants:
//
//  1. the pod workers terminate the pods no source wants, and forget the
//     finished ones (SyncKnownPods); a wanted pod they forgot because it
//     was created again while it stopped (a static pod whose manifest was
//     removed and written back: the same UID) is sent again as an Add, and
//     starts anew, as the kubelet's "restartable pods";
//  2. the statuses of pods that are neither wanted nor possibly running
//     are dropped;
//  3. pods found running in the runtime that nothing knows (left by an
//     earlier nodelet) are stopped in the background, each container with
//     the grace period recorded on it;
//  4. what the per-pod resources (the pod hooks) hold for a pod that is
//     not wanted, not held by a pod worker and has nothing running in the
//     runtime is cleaned up: what an earlier nodelet prepared is never
//     leaked.
//
// Two things make a round at idle cheap, where the kubelet lists the
// runtime, every pod cgroup and every pod directory each round: the pods
// in the runtime come from the PLEG's last relist when that is current
// (Deps.Observed), and the resources are listed again only when something
// can have changed what they should hold: the wanted pods changed, the
// last listing left something to clean up or retry, or a minute
// (ResourceRescanPeriod) has passed, the safety net for what nodelet did
// not do itself.
package housekeeping

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/pipeline/podworker"
	"github.com/nodelet/nodelet/internal/pure/observed"
	"github.com/nodelet/nodelet/internal/pure/podupdate"
)

// Workers is what housekeeping needs of the pod workers.
type Workers interface {
	// SyncKnownPods returns the wanted pods to start again.
	SyncKnownPods(desired map[types.UID]bool) []types.UID
	UpdatePod(opts podworker.UpdatePodOptions)
	CouldHaveRunningContainers(uid types.UID) bool
	Info(uid types.UID) (podworker.Info, bool)
}

// Runtime lists and stops pods in the runtime.
type Runtime interface {
	// RunningPods is every pod with a sandbox or container in the
	// runtime, running or not.
	RunningPods(ctx context.Context) (map[types.UID]*observed.PodStatus, error)
	// KillPod stops a pod nodelet has no spec for.
	KillPod(ctx context.Context, uid types.UID, name, namespace string) error
}

// Observed is the PLEG's view of the runtime.
type Observed interface {
	// Current returns the pods of the last successful relist, when they
	// are what the runtime holds now (false: list the runtime instead).
	// The map is shared: read it, never change it.
	Current() (map[types.UID]*observed.PodStatus, bool)
}

// ResourceRescanPeriod is how long the resources go unlisted at most when
// nothing nodelet knows of changed what they should hold.
const ResourceRescanPeriod = time.Minute

// Statuses is the status cache.
type Statuses interface {
	RemoveOrphans(keep func(types.UID) bool)
}

// Resource is a per-pod resource that lists what it holds on the machine
// (a pod hook).
type Resource interface {
	Name() string
	Holding() ([]types.UID, error)
	Cleanup(ctx context.Context, pod *v1.Pod) error
}

// Holders are the hooks (given in the pod workers' order) that list what
// they hold on the machine, in cleanup order: the reverse, so that what a
// gone pod held is cleaned up as its pod worker would have (the pod
// directory, prepared first, last).
func Holders(hooks []podworker.Hook) []Resource {
	var out []Resource
	for _, h := range slices.Backward(hooks) {
		if r, ok := h.(Resource); ok {
			out = append(out, r)
		}
	}
	return out
}

// Sources are the merged pod sources.
type Sources interface {
	SourcesReady() bool
	Pods() []*v1.Pod
}

// Allocations are what the node allocated to each pod
// (allocation.Manager).
type Allocations interface {
	// Forget drops the allocation of every pod keep says no to.
	Forget(keep func(types.UID) bool) error
}

// Deps are the housekeeper's collaborators; all but Allocations, Observed
// and Clock (nil: the machine's) are required.
type Deps struct {
	Sources  Sources
	Workers  Workers
	Runtime  Runtime
	Statuses Statuses
	// Observed, when set, replaces the runtime listing of a round while
	// its view is current.
	Observed  Observed
	Resources []Resource
	// Allocations, when set, lose the pods no source wants and no worker
	// may still run, as the kubelet's RemoveOrphanedPods (a pod that
	// comes back is admitted again).
	Allocations Allocations
	// Observe, when set, is told the duration of every round.
	Observe func(d time.Duration)
	Clock   clock.PassiveClock
	Log     *slog.Logger
}

// Housekeeper runs housekeeping rounds. Construct with New.
type Housekeeper struct {
	deps Deps

	// orphans are the pods being stopped in the background; background
	// waits for those goroutines.
	mu         sync.Mutex
	orphans    map[types.UID]bool
	background sync.WaitGroup
	// wanted are the pods the sources wanted at the last round, for
	// PodActive (guarded by mu).
	wanted map[types.UID]bool

	// The last listing of the resources (used by Housekeep only): when,
	// the pods wanted then, and whether it left something to clean up or
	// retry.
	scannedAt   time.Time
	scannedWant map[types.UID]bool
	unsettled   bool
}

// New returns a Housekeeper. It starts nothing.
func New(deps Deps) *Housekeeper {
	return &Housekeeper{deps: deps, orphans: map[types.UID]bool{}}
}

// runtimePods is what the runtime holds: the PLEG's view when it is
// current (viewed), else a listing.
func (h *Housekeeper) runtimePods(ctx context.Context) (pods map[types.UID]*observed.PodStatus, viewed bool, err error) {
	if h.deps.Observed != nil {
		if pods, ok := h.deps.Observed.Current(); ok {
			return pods, true, nil
		}
	}
	pods, err = h.deps.Runtime.RunningPods(ctx)
	return pods, false, err
}

// rescan tells whether the resources are listed this round.
func (h *Housekeeper) rescan(now time.Time, want map[types.UID]bool) bool {
	return h.scannedAt.IsZero() || h.unsettled || !maps.Equal(want, h.scannedWant) ||
		now.Sub(h.scannedAt) >= ResourceRescanPeriod
}

// Housekeep runs one round with the pods the sources want (a
// syncloop.Housekeeper).
func (h *Housekeeper) Housekeep(ctx context.Context, desired map[types.UID]*v1.Pod) {
	if h.deps.Observe != nil {
		start := h.now()
		defer func() { h.deps.Observe(h.now().Sub(start)) }()
	}
	want := make(map[types.UID]bool, len(desired))
	for uid := range desired {
		want[uid] = true
	}
	h.mu.Lock()
	h.wanted = want
	h.mu.Unlock()
	w := h.deps.Workers
	for _, uid := range w.SyncKnownPods(want) {
		pod := desired[uid]
		if pod == nil {
			continue
		}
		h.deps.Log.Info("starting pod again: it was created again while it stopped", "pod", pod.Namespace+"/"+pod.Name, "podUID", uid)
		w.UpdatePod(podworker.UpdatePodOptions{Reason: podupdate.Add, Pod: pod})
	}
	keep := func(uid types.UID) bool { return want[uid] || w.CouldHaveRunningContainers(uid) }
	h.deps.Statuses.RemoveOrphans(keep)
	if h.deps.Allocations != nil {
		if err := h.deps.Allocations.Forget(keep); err != nil {
			h.deps.Log.Error("housekeeping: forget the allocations of gone pods", "err", err)
		}
	}
	inRuntime, viewed, err := h.runtimePods(ctx)
	if err != nil {
		h.deps.Log.Error("housekeeping: list pods in the runtime", "err", err)
		return
	}
	orphans := func() []types.UID {
		var out []types.UID
		for uid, st := range inRuntime {
			if !want[uid] && !w.CouldHaveRunningContainers(uid) && hasRunning(st) {
				out = append(out, uid)
			}
		}
		return out
	}
	found := orphans()
	if len(found) > 0 && viewed {
		// The PLEG's view may be a relist behind a pod its worker just
		// stopped: nothing is stopped on its word alone.
		if inRuntime, err = h.deps.Runtime.RunningPods(ctx); err != nil {
			h.deps.Log.Error("housekeeping: list pods in the runtime", "err", err)
			return
		}
		found = orphans()
	}
	for _, uid := range found {
		h.killOrphan(ctx, uid, inRuntime[uid])
	}
	now := h.now()
	if !h.rescan(now, want) {
		return
	}
	unsettled := false
	defer func() {
		h.scannedAt, h.scannedWant, h.unsettled = now, want, unsettled
	}()
	for _, r := range h.deps.Resources {
		held, err := r.Holding()
		if err != nil {
			unsettled = true
			h.deps.Log.Warn("housekeeping: list what a pod resource holds", "resource", r.Name(), "err", err)
			continue
		}
		for _, uid := range held {
			if want[uid] {
				continue
			}
			// Held for a pod no source wants: cleaned up now, or once its
			// worker and the runtime let go of it.
			unsettled = true
			if _, known := w.Info(uid); known || inRuntime[uid] != nil && hasRunning(inRuntime[uid]) {
				continue
			}
			if ctx.Err() != nil {
				return
			}
			orphan := &v1.Pod{}
			orphan.UID = uid
			if err := r.Cleanup(ctx, orphan); err != nil && ctx.Err() == nil {
				h.deps.Log.Warn("housekeeping: clean up what a gone pod held (retried)", "resource", r.Name(), "podUID", uid, "err", err)
			}
		}
	}
}

func (h *Housekeeper) now() time.Time {
	if h.deps.Clock == nil {
		return time.Now()
	}
	return h.deps.Clock.Now()
}

// PodActive tells garbage collection whether a pod may still run: before
// every source has reported, all of them; then those a source wants or a
// pod worker may still run. A pod wanted at the last round counts as
// wanted without asking the sources, which copy every pod: garbage
// collection asks once per sandbox and container, and 100 pods made that
// 10,000 pod copies a minute at idle.
func (h *Housekeeper) PodActive(uid types.UID) bool {
	if !h.deps.Sources.SourcesReady() {
		return true
	}
	h.mu.Lock()
	wanted := h.wanted[uid]
	h.mu.Unlock()
	if wanted || h.deps.Workers.CouldHaveRunningContainers(uid) {
		return true
	}
	for _, pod := range h.deps.Sources.Pods() {
		if pod.UID == uid {
			return true
		}
	}
	return false
}

// Wait waits for the background orphan kills to return (they end with the
// context Housekeep was given).
func (h *Housekeeper) Wait() { h.background.Wait() }

// killOrphan stops, in the background, a pod found in the runtime that no
// source defines, giving its containers their recorded grace periods; the
// sync loop does not wait for it. One kill per pod at a time.
func (h *Housekeeper) killOrphan(ctx context.Context, uid types.UID, st *observed.PodStatus) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.orphans[uid] {
		return
	}
	h.orphans[uid] = true
	name := st.Namespace + "/" + st.Name
	h.deps.Log.Info("stopping pod no source defines", "pod", name, "podUID", uid)
	h.background.Add(1)
	go func() {
		defer h.background.Done()
		if err := h.deps.Runtime.KillPod(ctx, uid, st.Name, st.Namespace); err != nil && ctx.Err() == nil {
			h.deps.Log.Error("stop orphaned pod", "pod", name, "err", err)
		}
		h.mu.Lock()
		delete(h.orphans, uid)
		h.mu.Unlock()
	}()
}

// hasRunning reports whether anything of the pod runs.
func hasRunning(st *observed.PodStatus) bool {
	for _, s := range st.Sandboxes {
		if s.State == observed.SandboxReady {
			return true
		}
	}
	return len(st.Running()) > 0
}

// ActivePods are the pods the sources want whose workers run them and
// were not asked to stop (the kubelet's GetActivePods): the pods eviction
// may choose from.
func (h *Housekeeper) ActivePods() []*v1.Pod {
	var out []*v1.Pod
	for _, pod := range h.deps.Sources.Pods() {
		if info, ok := h.deps.Workers.Info(pod.UID); ok && info.State == podworker.Syncing {
			out = append(out, pod)
		}
	}
	return out
}
