// Package syncloop is the third stage of the pipeline: the kubelet's
// syncLoopIteration. One select over config updates, runtime (PLEG) events,
// probe results, a resync ticker and a housekeeping ticker; it dispatches
// work to the pod workers and does none itself.
package syncloop

import (
	"context"
	"log/slog"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/admission"
)

// Op is what a config update asks for (the kubelet's PodOperation).
type Op int

const (
	// Add: pods new to the node.
	Add Op = iota
	// Update: pods whose spec changed.
	Update
	// Remove: pods no source wants any more.
	Remove
	// Reconcile: pods whose status-only fields changed.
	Reconcile
)

// ConfigUpdate is one merged change from the sources.
type ConfigUpdate struct {
	Op   Op
	Pods []*v1.Pod
}

// SyncKind says why a pod is being synced.
type SyncKind int

const (
	SyncCreate SyncKind = iota
	SyncUpdate
	SyncPeriodic
	SyncEvent
)

// Dispatcher is what the loop hands pods to: the pod workers.
type Dispatcher interface {
	// Sync asks for the pod to be synced (latest spec wins).
	Sync(pod *v1.Pod, kind SyncKind)
	// Kill asks for the pod to be terminated.
	Kill(pod *v1.Pod)
	// Known reports whether the workers still hold the pod (not yet fully
	// terminated), so that admission can count it.
	Active(uid types.UID) bool
}

// Rejector records a pod refused by admission: Failed, nothing started.
type Rejector interface {
	Reject(pod *v1.Pod, reason, message string)
}

// Options are the loop's periods and node facts.
type Options struct {
	// SyncFrequency resyncs every pod (--sync-frequency, 1m).
	SyncFrequency time.Duration
	// HousekeepingPeriod runs housekeeping (2s).
	HousekeepingPeriod time.Duration
	// Node is what admission checks against.
	Node admission.Node
}

// Loop is the sync loop. Construct with New, start with Run.
type Loop struct {
	opts     Options
	clock    clock.WithTicker
	log      *slog.Logger
	workers  Dispatcher
	rejector Rejector
	// housekeeping runs every HousekeepingPeriod with the pods the sources
	// want; it removes what no source wants (orphans) and collects garbage.
	housekeeping func(ctx context.Context, desired map[types.UID]*v1.Pod)
	// sourcesReady reports whether every source has delivered once; before
	// that nothing is removed as an orphan.
	sourcesReady func() bool

	pods     map[types.UID]*v1.Pod // desired pods by UID (admitted or not)
	rejected map[types.UID]bool
}

// New returns a loop. It starts nothing.
func New(opts Options, clk clock.WithTicker, log *slog.Logger, workers Dispatcher, rejector Rejector,
	housekeeping func(context.Context, map[types.UID]*v1.Pod), sourcesReady func() bool) *Loop {
	if opts.SyncFrequency <= 0 {
		opts.SyncFrequency = time.Minute
	}
	if opts.HousekeepingPeriod <= 0 {
		opts.HousekeepingPeriod = 2 * time.Second
	}
	return &Loop{opts: opts, clock: clk, log: log, workers: workers, rejector: rejector,
		housekeeping: housekeeping, sourcesReady: sourcesReady,
		pods: map[types.UID]*v1.Pod{}, rejected: map[types.UID]bool{}}
}

// Run selects until ctx ends. config carries merged source updates; pleg
// and probes carry the UIDs of pods whose runtime state or probe results
// changed.
func (l *Loop) Run(ctx context.Context, config <-chan ConfigUpdate, pleg, probes <-chan types.UID) {
	resync := l.clock.NewTicker(l.opts.SyncFrequency)
	defer resync.Stop()
	housekeeping := l.clock.NewTicker(l.opts.HousekeepingPeriod)
	defer housekeeping.Stop()
	for l.iterate(ctx, config, pleg, probes, resync.C(), housekeeping.C()) {
	}
}

// iterate is one syncLoopIteration; it reports false when the loop ends.
func (l *Loop) iterate(ctx context.Context, config <-chan ConfigUpdate, pleg, probes <-chan types.UID,
	resync, housekeeping <-chan time.Time) bool {
	select {
	case <-ctx.Done():
		return false
	case u, ok := <-config:
		if !ok {
			l.log.Error("config update channel closed; sync loop exits")
			return false
		}
		l.handleConfig(u)
	case uid := <-pleg:
		l.syncUID(uid)
	case uid := <-probes:
		l.syncUID(uid)
	case <-resync:
		for _, pod := range l.pods {
			if !l.rejected[pod.UID] {
				l.workers.Sync(pod, SyncPeriodic)
			}
		}
	case <-housekeeping:
		if l.sourcesReady == nil || l.sourcesReady() {
			l.housekeeping(ctx, l.desired())
		}
	}
	return true
}

func (l *Loop) handleConfig(u ConfigUpdate) {
	switch u.Op {
	case Add:
		for _, pod := range u.Pods {
			l.add(pod)
		}
	case Update:
		for _, pod := range u.Pods {
			l.pods[pod.UID] = pod
			if !l.rejected[pod.UID] {
				l.workers.Sync(pod, SyncUpdate)
			}
		}
	case Remove:
		for _, pod := range u.Pods {
			delete(l.pods, pod.UID)
			delete(l.rejected, pod.UID)
			l.workers.Kill(pod)
		}
	case Reconcile:
		for _, pod := range u.Pods {
			l.pods[pod.UID] = pod
		}
	}
}

// add admits a new pod against the pods already admitted, as the kubelet's
// HandlePodAdditions does, and dispatches it.
func (l *Loop) add(pod *v1.Pod) {
	l.pods[pod.UID] = pod
	var active []*v1.Pod
	for uid, p := range l.pods {
		if uid != pod.UID && !l.rejected[uid] && l.workers.Active(uid) {
			active = append(active, p)
		}
	}
	if r := admission.Admit(pod, active, l.opts.Node); !r.Admit {
		l.rejected[pod.UID] = true
		l.log.Warn("pod rejected by admission", "pod", pod.Namespace+"/"+pod.Name, "reason", r.Reason, "message", r.Message)
		l.rejector.Reject(pod, r.Reason, r.Message)
		return
	}
	l.workers.Sync(pod, SyncCreate)
}

func (l *Loop) syncUID(uid types.UID) {
	if pod, ok := l.pods[uid]; ok && !l.rejected[uid] {
		l.workers.Sync(pod, SyncEvent)
	}
}

func (l *Loop) desired() map[types.UID]*v1.Pod {
	out := make(map[types.UID]*v1.Pod, len(l.pods))
	for uid, p := range l.pods {
		out[uid] = p
	}
	return out
}
