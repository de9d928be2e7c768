// Package syncloop is the third stage of the pipeline: the kubelet's
// syncLoopIteration. One select over config updates, runtime (PLEG) events,
// probe results, a resync ticker and a housekeeping ticker; it dispatches
// work to the pod workers and does none itself.
package syncloop

import (
	"context"
	"log/slog"
	"maps"
	"time"

	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/pipeline/pleg"
	"github.com/nodelet/nodelet/internal/pipeline/podconfig"
	"github.com/nodelet/nodelet/internal/pipeline/podworker"
	"github.com/nodelet/nodelet/internal/pure/admission"
	"github.com/nodelet/nodelet/internal/pure/podupdate"
	"github.com/nodelet/nodelet/internal/pure/resize"
)

// Workers are what the loop hands pods to: the pod workers.
type Workers interface {
	// UpdatePod asks for the pod to be synced or, when the reason
	// terminates, stopped (latest spec wins).
	UpdatePod(podworker.UpdatePodOptions)
	// IsPodActive reports whether the workers still hold the pod (not yet
	// terminated), so that admission counts it.
	IsPodActive(uid types.UID) bool
}

// Housekeeper removes what no source wants any more (orphans) and
// collects garbage, given the pods the sources want.
type Housekeeper interface {
	Housekeep(ctx context.Context, desired map[types.UID]*v1.Pod)
}

// Rejector records a pod refused by admission: Failed, nothing started.
type Rejector interface {
	Reject(pod *v1.Pod, reason, message string)
}

// Recorder records pod events.
type Recorder interface {
	Event(pod *v1.Pod, eventType, reason, message string)
}

// Allocator allocates what a new pod holds of one kind of the node's
// resources, as a provider under the kubelet's resource-allocating admit
// handler (the topology manager over the device, CPU and memory
// managers): ok false refuses the pod with the kubelet's reason
// (TopologyAffinityError, UnexpectedAdmissionError). RemovePod gives back
// what a refused pod holds, also what a refusing allocator gave part-way.
type Allocator interface {
	Admit(ctx context.Context, pod *v1.Pod) (ok bool, reason, message string)
	RemovePod(uid types.UID) error
}

// Options are the loop's periods and node facts.
type Options struct {
	// SyncFrequency resyncs every pod (--sync-frequency, 1m).
	SyncFrequency time.Duration
	// HousekeepingPeriod runs housekeeping (2s).
	HousekeepingPeriod time.Duration
	// Node is what admission checks against.
	Node admission.Node
	// Resize is what an in-place resize is checked against beside Node
	// (cgroup version, CPU and memory manager policies, swap); its
	// Admission is filled in as for a new pod.
	Resize resize.Node
}

// Allocations keep what each admitted pod is allocated and decide in-place
// resizes (allocation.Manager).
type Allocations interface {
	// Admitted records the allocation of a pod admission let in (kept
	// when it has one already).
	Admitted(pod *v1.Pod)
	// Allocated is pod with its allocated resources.
	Allocated(pod *v1.Pod) *v1.Pod
	// Resize decides the resize pod asks for against the other active
	// pods and returns pod as allocated after it; trigger says what made
	// it decide now (a Retry* constant for a deferred resize decided
	// again, RetryPodUpdated for the pod's own update).
	Resize(pod *v1.Pod, others []*v1.Pod, node resize.Node, trigger string) (*v1.Pod, error)
	// Deferred are the pods whose resize is pending as Deferred: decided
	// again when resources may have freed up.
	Deferred() []types.UID
}

// What makes the loop decide a resize again, as the kubelet's
// kubelet_pod_deferred_accepted_resizes_total{retry_trigger} names it.
const (
	// RetryPodUpdated: the pod itself changed (the first decision too).
	RetryPodUpdated = "pod_updated"
	// RetryPodsRemoved: pods were removed since the last retry.
	RetryPodsRemoved = "pods_removed"
	// RetryPeriodic: the housekeeping round's retry.
	RetryPeriodic = "periodic_retry"
)

// Seen tells what the last status of a pod was computed from: whether
// the runtime object id (a sandbox or container) was in it, and running.
type Seen interface {
	Saw(uid types.UID, id string) (running, ok bool)
}

// Deps are the loop's collaborators; all but Seen are required.
type Deps struct {
	// Seen, when set, lets the loop drop a lifecycle event its pod's
	// last sync already saw (the container it started itself, say).
	Seen     Seen
	Workers  Workers
	Rejector Rejector
	// Recorder, when set, gets the Warning event of an admission
	// rejection, as the kubelet records one with the status.
	Recorder Recorder
	// Housekeeper runs every HousekeepingPeriod once SourcesReady.
	Housekeeper Housekeeper
	// SourcesReady reports whether every source has delivered once;
	// before that nothing is removed as an orphan.
	SourcesReady func() bool
	// Node, when set (cluster mode), is the Node as the API server has it
	// now; admission checks new pods against its name, labels and taints.
	Node func() *v1.Node
	// Pressure, when set, are the node's pressure conditions now (the
	// eviction manager's): admission refuses pods under them.
	Pressure func() []v1.NodeConditionType
	Clock    clock.WithTicker
	Log      *slog.Logger
	// ShuttingDown, when set, says whether the node is shutting down:
	// admission then refuses every new pod (shutdown.Manager).
	ShuttingDown func() bool
	// Allocators allocate a pod that admission's first checks let in, in
	// the kubelet's order of providers (devicemanager.Manager, then
	// cpumanager.Manager); a pod one of them refuses is rejected with its
	// reason.
	Allocators []Allocator
	// ExtendedAllocatable, when set, is what the pods' extended resources
	// are counted against once the pod is allocated (the device manager's
	// AdmissionAllocatable, as the kubelet's predicate counts them against
	// the Node's allocatable its device manager sanitised).
	ExtendedAllocatable func() v1.ResourceList
	// Allocations, when set, makes the pods the workers get carry their
	// allocated resources, admits new pods against the others'
	// allocations, and decides the resize a changed pod asks for, as the
	// kubelet's allocation manager. Without it, pods go as their sources
	// have them.
	Allocations Allocations
}

// Inputs are the channels the loop selects over.
type Inputs struct {
	// Config carries the merged source updates.
	Config <-chan podconfig.PodUpdate
	// PLEG carries the runtime's pod lifecycle events.
	PLEG <-chan pleg.Event
	// Pods carries the UIDs of pods to sync now (probe results changed).
	Pods <-chan types.UID
	// ResyncAll asks for every pod to be synced (the ConfigMaps or
	// Secrets they refer to changed).
	ResyncAll <-chan struct{}
}

// Loop is the sync loop. Construct with New, start with Run.
type Loop struct {
	opts Options
	deps Deps
	log  *slog.Logger

	pods     map[types.UID]*v1.Pod // desired pods by UID (admitted or not)
	rejected map[types.UID]bool
	// removed: pods were removed since deferred resizes were last retried.
	removed bool
}

// New returns a loop. It starts nothing.
func New(opts Options, deps Deps) *Loop {
	if opts.SyncFrequency <= 0 {
		opts.SyncFrequency = time.Minute
	}
	if opts.HousekeepingPeriod <= 0 {
		opts.HousekeepingPeriod = 2 * time.Second
	}
	return &Loop{opts: opts, deps: deps, log: deps.Log,
		pods: map[types.UID]*v1.Pod{}, rejected: map[types.UID]bool{}}
}

// Run selects over in until ctx ends.
func (l *Loop) Run(ctx context.Context, in Inputs) {
	resync := l.deps.Clock.NewTicker(l.opts.SyncFrequency)
	defer resync.Stop()
	housekeeping := l.deps.Clock.NewTicker(l.opts.HousekeepingPeriod)
	defer housekeeping.Stop()
	for l.iterate(ctx, in, resync.C(), housekeeping.C()) {
	}
}

// iterate is one syncLoopIteration; it reports false when the loop ends.
func (l *Loop) iterate(ctx context.Context, in Inputs, resync, housekeeping <-chan time.Time) bool {
	select {
	case <-ctx.Done():
		return false
	case u, ok := <-in.Config:
		if !ok {
			l.log.Error("config update channel closed; sync loop exits")
			return false
		}
		l.handleConfig(ctx, u)
	case e := <-in.PLEG:
		if l.news(e) {
			l.syncUID(e.PodUID, e.ObservedAt)
		}
	case uid := <-in.Pods:
		l.syncUID(uid, time.Time{})
	case <-in.ResyncAll:
		l.syncAll(podupdate.Event)
	case <-resync:
		l.syncAll(podupdate.Resync)
	case <-housekeeping:
		if l.deps.SourcesReady == nil || l.deps.SourcesReady() {
			l.deps.Housekeeper.Housekeep(ctx, l.desired())
		}
		l.retryDeferred()
	}
	return true
}

// news reports whether a lifecycle event can change what the pod worker
// does: a removed container cannot, nor a start or a death the pod's last
// sync already saw.
func (l *Loop) news(e pleg.Event) bool {
	if e.Type == pleg.ContainerRemoved {
		return false
	}
	if l.deps.Seen == nil {
		return true
	}
	running, ok := l.deps.Seen.Saw(e.PodUID, e.ContainerID)
	switch {
	case !ok:
		return true
	case e.Type == pleg.ContainerStarted:
		return !running
	case e.Type == pleg.ContainerDied:
		return running
	}
	return true
}

func (l *Loop) sync(pod *v1.Pod, reason podupdate.Reason) {
	l.deps.Workers.UpdatePod(podworker.UpdatePodOptions{Reason: reason, Pod: l.allocated(pod)})
}

// allocated is pod with its allocated resources (pod without an
// Allocations).
func (l *Loop) allocated(pod *v1.Pod) *v1.Pod {
	if l.deps.Allocations == nil {
		return pod
	}
	return l.deps.Allocations.Allocated(pod)
}

// update dispatches a changed pod; with Allocations, the resize it may
// ask for is decided first (the kubelet's handlePodResourcesResize, which
// runs before every sync).
func (l *Loop) update(pod *v1.Pod) {
	if l.deps.Allocations == nil {
		l.sync(pod, podupdate.Update)
		return
	}
	l.resize(pod, RetryPodUpdated)
}

// retryDeferred decides every deferred resize again, as the kubelet's
// RetryPendingResizes: the pods whose resize is now accepted are synced
// with their new allocation. A housekeeping round runs it, so a resize
// deferred for want of resources goes through soon after a pod that held
// them is gone.
func (l *Loop) retryDeferred() {
	if l.deps.Allocations == nil {
		return
	}
	trigger := RetryPeriodic
	if l.removed {
		trigger = RetryPodsRemoved
	}
	l.removed = false
	for _, uid := range l.deps.Allocations.Deferred() {
		pod, ok := l.pods[uid]
		if !ok || l.rejected[uid] || !l.deps.Workers.IsPodActive(uid) {
			continue
		}
		before := resize.AllocationOf(l.deps.Allocations.Allocated(pod))
		node := l.opts.Resize
		node.Admission = l.node()
		allocated, err := l.deps.Allocations.Resize(pod, l.active(uid), node, trigger)
		if err != nil {
			l.log.Error("resize not recorded", "pod", pod.Namespace+"/"+pod.Name, "err", err)
		}
		// Still deferred: the worker has the pod as it is allocated.
		if !apiequality.Semantic.DeepEqual(before, resize.AllocationOf(allocated)) {
			l.deps.Workers.UpdatePod(podworker.UpdatePodOptions{Reason: podupdate.Update, Pod: allocated})
		}
	}
}

// resize decides pod's resize and hands the pod, as allocated after it,
// to its worker.
func (l *Loop) resize(pod *v1.Pod, trigger string) {
	node := l.opts.Resize
	node.Admission = l.node()
	allocated, err := l.deps.Allocations.Resize(pod, l.active(pod.UID), node, trigger)
	if err != nil {
		l.log.Error("resize not recorded", "pod", pod.Namespace+"/"+pod.Name, "err", err)
	}
	l.deps.Workers.UpdatePod(podworker.UpdatePodOptions{Reason: podupdate.Update, Pod: allocated})
}

// active are the admitted pods with a live worker but uid, as their
// sources have them.
func (l *Loop) active(uid types.UID) []*v1.Pod {
	var out []*v1.Pod
	for id, p := range l.pods {
		if id != uid && !l.rejected[id] && l.deps.Workers.IsPodActive(id) {
			out = append(out, p)
		}
	}
	return out
}

// node is what admission checks against now.
func (l *Loop) node() admission.Node {
	node := l.opts.Node
	if l.deps.Node != nil {
		node.Object = l.deps.Node()
	}
	if l.deps.Pressure != nil {
		node.Pressure = l.deps.Pressure()
	}
	node.ShuttingDown = l.deps.ShuttingDown != nil && l.deps.ShuttingDown()
	return node
}

func (l *Loop) syncAll(reason podupdate.Reason) {
	for _, pod := range l.pods {
		if !l.rejected[pod.UID] {
			l.sync(pod, reason)
		}
	}
}

func (l *Loop) handleConfig(ctx context.Context, u podconfig.PodUpdate) {
	switch u.Op {
	case podupdate.Add:
		for _, pod := range u.Pods {
			l.add(ctx, pod)
		}
	case podupdate.Update:
		for _, pod := range u.Pods {
			l.pods[pod.UID] = pod
			if !l.rejected[pod.UID] {
				l.update(pod)
			}
		}
	case podupdate.Remove, podupdate.Delete:
		l.removed = true
		for _, pod := range u.Pods {
			delete(l.pods, pod.UID)
			delete(l.rejected, pod.UID)
			l.deps.Workers.UpdatePod(podworker.UpdatePodOptions{Reason: u.Op, Pod: l.allocated(pod),
				KillPodOptions: &podworker.KillPodOptions{Reason: "removed from its source"}})
		}
	case podupdate.Reconcile:
		for _, pod := range u.Pods {
			l.pods[pod.UID] = pod
			// Only the status changed in the API. The pod's Ready condition
			// depends on it when the pod has readiness gates (conditions
			// others set): compute it again, as the kubelet's
			// HandlePodReconcile does.
			if len(pod.Spec.ReadinessGates) > 0 && !l.rejected[pod.UID] {
				l.sync(pod, podupdate.Update)
			}
		}
	}
}

// add admits a new pod against the pods already admitted, as the kubelet's
// HandlePodAdditions does, and dispatches it. With Allocations, a pod
// and the others are admitted with their allocated resources (after a
// restart, what was allocated before is the truth), and the allocation of
// a pod let in is recorded.
func (l *Loop) add(ctx context.Context, pod *v1.Pod) {
	l.pods[pod.UID] = pod
	active := l.active(pod.UID)
	candidate := l.allocated(pod)
	if l.deps.Allocations != nil {
		for i, p := range active {
			active[i] = l.deps.Allocations.Allocated(p)
		}
	}
	r := l.admit(ctx, candidate, active, l.node())
	if !r.Admit {
		l.rejected[pod.UID] = true
		l.log.Warn("pod rejected by admission", "pod", pod.Namespace+"/"+pod.Name, "reason", r.Reason, "message", r.Message)
		if l.deps.Recorder != nil {
			l.deps.Recorder.Event(pod, v1.EventTypeWarning, r.Reason, r.Message)
		}
		l.deps.Rejector.Reject(pod, r.Reason, r.Message)
		return
	}
	if l.deps.Allocations == nil {
		l.sync(pod, podupdate.Add)
		return
	}
	l.deps.Allocations.Admitted(candidate)
	// A pod whose source asks for other resources than it was allocated
	// before a restart has a resize to decide; a new pod has none.
	node := l.opts.Resize
	node.Admission = l.node()
	allocated, err := l.deps.Allocations.Resize(pod, l.active(pod.UID), node, RetryPodUpdated)
	if err != nil {
		l.log.Error("resize not recorded", "pod", pod.Namespace+"/"+pod.Name, "err", err)
	}
	l.deps.Workers.UpdatePod(podworker.UpdatePodOptions{Reason: podupdate.Add, Pod: allocated})
}

// admit runs admission around the allocations, in the kubelet's order of
// admit handlers: the checks before, each allocator in turn, the
// predicates after. A pod refused on the way gives back at once what the
// allocators gave it (the kubelet's managers would keep it until their
// next clean-up of stale state).
func (l *Loop) admit(ctx context.Context, pod *v1.Pod, active []*v1.Pod, node admission.Node) admission.Result {
	if r := admission.BeforeAllocation(pod, node); !r.Admit {
		return r
	}
	for i, a := range l.deps.Allocators {
		if ok, reason, message := a.Admit(ctx, pod); !ok {
			l.giveBack(pod, l.deps.Allocators[:i+1])
			return admission.Result{Reason: reason, Message: message}
		}
	}
	if l.deps.ExtendedAllocatable != nil {
		node.Allocatable = withResources(node.Allocatable, l.deps.ExtendedAllocatable())
	}
	r := admission.AfterAllocation(pod, active, node)
	if !r.Admit {
		l.giveBack(pod, l.deps.Allocators)
	}
	return r
}

// giveBack has allocators free what they hold for a refused pod.
func (l *Loop) giveBack(pod *v1.Pod, allocators []Allocator) {
	for _, a := range allocators {
		if err := a.RemovePod(pod.UID); err != nil {
			l.log.Error("cannot give back a refused pod's resources", "pod", pod.Namespace+"/"+pod.Name, "err", err)
		}
	}
}

// withResources is base with extra's resources added (a copy).
func withResources(base, extra v1.ResourceList) v1.ResourceList {
	out := make(v1.ResourceList, len(base)+len(extra))
	maps.Copy(out, base)
	maps.Copy(out, extra)
	return out
}

// syncUID syncs a desired, admitted pod for an event found by a look at
// the runtime that began at observedAt (zero: unknown).
func (l *Loop) syncUID(uid types.UID, observedAt time.Time) {
	if pod, ok := l.pods[uid]; ok && !l.rejected[uid] {
		l.deps.Workers.UpdatePod(podworker.UpdatePodOptions{Reason: podupdate.Event, Pod: l.allocated(pod), ObservedAt: observedAt})
	}
}

func (l *Loop) desired() map[types.UID]*v1.Pod {
	out := make(map[types.UID]*v1.Pod, len(l.pods))
	for uid, p := range l.pods {
		out[uid] = p
	}
	return out
}
