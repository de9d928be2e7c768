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
)

// UpdateType says why a pod update was sent (the kubelet's SyncPodType).
type UpdateType int

const (
	// SyncPodSync is a periodic or event-driven resync of an unchanged pod.
	SyncPodSync UpdateType = iota
	// SyncPodUpdate carries a changed pod spec.
	SyncPodUpdate
	// SyncPodCreate is the first update of a pod.
	SyncPodCreate
	// SyncPodKill asks for the pod to be terminated.
	SyncPodKill
)

func (t UpdateType) String() string {
	switch t {
	case SyncPodSync:
		return "sync"
	case SyncPodUpdate:
		return "update"
	case SyncPodCreate:
		return "create"
	case SyncPodKill:
		return "kill"
	}
	return "unknown"
}

// KillPodOptions qualify a SyncPodKill update.
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
// names the worker.
type UpdatePodOptions struct {
	UpdateType     UpdateType
	Pod            *v1.Pod
	KillPodOptions *KillPodOptions
}

// Syncer does the work for the pod workers. The calls for one pod are
// sequential; calls for different pods run concurrently. Every call's
// context is cancelled when the pod worker stops; the SyncPod context is
// also cancelled as soon as termination is requested, and the
// SyncTerminatingPod context when the grace period is shortened (it is then
// called again with the shorter period). A call that notices should return
// an error wrapping ctx.Err().
type Syncer interface {
	// SyncPod makes the pod run as specified. terminal reports that the
	// pod has reached Succeeded or Failed and must now be terminated.
	SyncPod(ctx context.Context, updateType UpdateType, pod *v1.Pod) (terminal bool, err error)
	// SyncTerminatingPod stops all of the pod's containers, giving them
	// gracePeriod. Once it succeeds no container of the pod runs or will
	// ever be started again.
	SyncTerminatingPod(ctx context.Context, pod *v1.Pod, gracePeriod time.Duration) error
	// SyncTerminatedPod releases what the stopped pod still holds (and
	// reports its final status). It is the last call for the pod.
	SyncTerminatedPod(ctx context.Context, pod *v1.Pod) error
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

const (
	defaultResyncInterval = time.Minute
	defaultBackOffPeriod  = 10 * time.Second
	// defaultGracePeriodSeconds applies when the pod spec has none (the API
	// server's default).
	defaultGracePeriodSeconds = 30
)
