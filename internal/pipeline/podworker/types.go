// Package podworker is the fourth stage of the pipeline: one goroutine per
// pod UID drives that pod through its lifecycle (syncing, terminating,
// terminated) by calling a Syncer, coalescing updates so that the newest pod
// spec wins, never losing a termination request, retrying failures after a
// back-off and resyncing periodically. It is the kubelet's podWorkers,
// simplified. It knows nothing of the runtime: only the Syncer interface it
// declares.
package podworker

import (
	"context"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/internal/pure/podsetup"
	"github.com/nodelet/nodelet/internal/pure/podupdate"
)

// KillPodOptions qualify an update whose reason terminates the pod.
type KillPodOptions struct {
	// PodTerminationGracePeriodSecondsOverride, when set, replaces the
	// pod's grace period if it is the first value requested, and otherwise
	// only applies if it is shorter: a grace period never grows.
	PodTerminationGracePeriodSecondsOverride *int64
	// Evict marks the termination as an eviction by the node (so the pod's
	// content is to be removed once terminated).
	Evict bool
	// Reason is a short, human-readable cause, kept from the first kill
	// that gives one (see Info).
	Reason string
}

// UpdatePodOptions is one update for one pod. Pod is required; its UID
// names the worker. A Reason that Terminates() requests termination.
type UpdatePodOptions struct {
	Reason         podupdate.Reason
	Pod            *v1.Pod
	KillPodOptions *KillPodOptions
	// ObservedAt, for a podupdate.Event, is when the look at the runtime
	// that found the change began. A SyncPod whose own look began later
	// (SyncResult.ObservedAt) has seen the change, so the update is
	// dropped if that sync ends while the update is still pending.
	ObservedAt time.Time
}

// SyncRequest is one SyncPod call.
type SyncRequest struct {
	// Reason is why the pod is synced: Add for its first sync, Update for
	// a changed spec, Resync or Event otherwise.
	Reason podupdate.Reason
	Pod    *v1.Pod
	// Unprepared, when set, is why a Hook could not prepare the pod for
	// this sync (a volume that cannot be set up, say). SyncPod must then
	// still stop what must stop and report the pod's status, but start
	// nothing, and return an error wrapping it.
	Unprepared error
	// Setup is what the hooks set up for the pod, merged in hook order
	// (podsetup.Merge): each hook's latest successful Prepare, so a hook
	// that failed this round still hands what it set up before.
	Setup podsetup.Setup
}

// TerminatingRequest is one SyncTerminatingPod call.
type TerminatingRequest struct {
	Pod *v1.Pod
	// GracePeriod is what the pod's containers get to stop.
	GracePeriod time.Duration
	// Setup is the pod's last prepared setup (see SyncRequest); the zero
	// value for a pod never prepared.
	Setup podsetup.Setup
}

// TerminatedRequest is one SyncTerminatedPod call.
type TerminatedRequest struct {
	Pod *v1.Pod
	// Setup is the pod's last prepared setup, as in TerminatingRequest.
	Setup podsetup.Setup
}

// SyncResult is what SyncPod tells the worker to do next.
type SyncResult struct {
	// Terminal: the pod reached Succeeded or Failed and must now be
	// terminated.
	Terminal bool
	// RequeueAfter, when positive, asks for the pod to be synced again
	// that long from now (when its activeDeadlineSeconds runs out, say),
	// besides the periodic resync.
	RequeueAfter time.Duration
	// ObservedAt is when the sync's last look at the runtime began (zero:
	// unknown); pending events found earlier are then old news.
	ObservedAt time.Time
}

// Syncer does the work for the pod workers. The calls for one pod are
// sequential; calls for different pods run concurrently. Every call's
// context is cancelled when the pod worker stops; the SyncPod context is
// also cancelled as soon as termination is requested, and the
// SyncTerminatingPod context when the grace period is shortened (it is then
// called again with the shorter period). A call that notices should return
// an error wrapping ctx.Err().
type Syncer interface {
	// SyncPod makes the pod run as specified.
	SyncPod(ctx context.Context, req SyncRequest) (SyncResult, error)
	// SyncTerminatingPod stops all of the pod's containers, giving them
	// req.GracePeriod. Once it succeeds no container of the pod runs or
	// will ever be started again.
	SyncTerminatingPod(ctx context.Context, req TerminatingRequest) error
	// SyncTerminatedPod releases what the stopped pod still holds (and
	// reports its final status). It is the last call for the pod.
	SyncTerminatedPod(ctx context.Context, req TerminatedRequest) error
}

// State is where a pod is in its lifecycle.
type State int

const (
	// Syncing: SyncPod runs the pod.
	Syncing State = iota
	// Terminating: termination was requested; SyncTerminatingPod stops
	// the containers.
	Terminating
	// Terminated: no container runs any more; SyncTerminatedPod cleans up.
	Terminated
	// Finished: SyncTerminatedPod succeeded; the worker goroutine is gone
	// and updates for the UID are ignored until SyncKnownPods forgets it.
	Finished
)

func (s State) String() string {
	switch s {
	case Syncing:
		return "syncing"
	case Terminating:
		return "terminating"
	case Terminated:
		return "terminated"
	case Finished:
		return "finished"
	}
	return "unknown"
}

// Info describes what the pod workers know of one pod.
type Info struct {
	State State
	// GracePeriod is the effective grace period once termination was
	// requested, zero before.
	GracePeriod time.Duration
	// Deleted: the pod was deleted (it had a DeletionTimestamp, or
	// SyncKnownPods no longer listed it).
	Deleted bool
	// Evicted: a kill asked for eviction.
	Evicted bool
	// Reason is the first non-empty KillPodOptions.Reason.
	Reason string
}

// Options tune the pod workers. The zero value is valid.
type Options struct {
	// ResyncInterval is how long after a successful SyncPod the pod is
	// synced again with its newest spec; default 1m (the kubelet's
	// --sync-frequency).
	ResyncInterval time.Duration
	// BackOffPeriod is how long after a failed Sync* call it is retried;
	// default 10s. An update that arrives meanwhile is handled at once.
	BackOffPeriod time.Duration
}

// Hook is one per-pod resource (the pod directory, volumes, the pod
// cgroup, probe workers…) that owns both its setup and its teardown, and
// hands back what it set up: the runtime manager gets it in the sync
// requests (podsetup.Setup) and so depends on no hook. For every pod the
// workers call, in this order:
//
//  1. Prepare of every hook, in the order given to New, before every
//     SyncPod (the first call sets the resource up, later ones refresh it
//     with the newest spec: it must be idempotent). The setups they
//     return are merged in that order (podsetup.Merge) into
//     SyncRequest.Setup; the pod keeps each hook's latest one for the
//     SyncTerminatingPod and SyncTerminatedPod requests. The first error
//     stops the round; SyncPod then runs with SyncRequest.Unprepared set,
//     and the sync counts as failed (retried after the back-off).
//  2. SyncPod, SyncTerminatingPod, SyncTerminatedPod (the Syncer).
//  3. Cleanup of every hook, in reverse order, once SyncTerminatedPod has
//     succeeded: no container of the pod runs or will run again. Every
//     hook's Cleanup is called even if one fails; a failure retries all of
//     them after the back-off, so Cleanup must be idempotent too. The pod
//     is finished only when every Cleanup has succeeded.
//
// Cleanup is called for every pod that reaches termination, prepared or
// not (a pod killed before its first sync, an orphan left by an earlier
// nodelet), so that nothing prepared by an earlier process is leaked.
type Hook interface {
	// Name names the hook in errors and logs.
	Name() string
	Prepare(ctx context.Context, pod *v1.Pod) (podsetup.Setup, error)
	Cleanup(ctx context.Context, pod *v1.Pod) error
}

// Metrics observes how long the Syncer's calls take.
type Metrics interface {
	// ObservePodWorker records one SyncPod (with its reason) or, with
	// podupdate.Kill, one SyncTerminatingPod.
	ObservePodWorker(reason podupdate.Reason, took time.Duration)
}

const (
	defaultResyncInterval = time.Minute
	defaultBackOffPeriod  = 10 * time.Second
)
