package podworker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/pure/podsetup"
	"github.com/nodelet/nodelet/internal/pure/podspec"
	"github.com/nodelet/nodelet/internal/pure/podupdate"
)

// Workers runs one goroutine per pod UID. Each pod moves through these
// states, never backwards:
//
//	UpdatePod (first time)
//	      |
//	      v
//	+-----------+  Hooks' Prepare, then SyncPod; ok: again after ResyncInterval
//	|           |  (or sooner: SyncResult.RequeueAfter)
//	|  syncing  |  SyncPod error: again after BackOffPeriod
//	+-----------+  newer update: again at once (newest spec wins)
//	      |
//	      | a Remove/Delete/Kill reason, DeletionTimestamp, terminal phase,
//	      | SyncKnownPods without the UID, or SyncPod reports terminal
//	      | (an in-flight SyncPod has its context cancelled)
//	      v
//	+-------------+  SyncTerminatingPod(grace); error: again after
//	| terminating |  BackOffPeriod; grace shortened: context cancelled,
//	+-------------+  again at once with the shorter grace
//	      |
//	      | SyncTerminatingPod ok
//	      v
//	+------------+  SyncTerminatedPod, then every Hook's Cleanup;
//	| terminated |  error: again after BackOffPeriod
//	+------------+
//	      |
//	      | SyncTerminatedPod ok: the goroutine exits
//	      v
//	+----------+  updates ignored
//	| finished | ----------------------------> forgotten
//	+----------+  SyncKnownPods without the UID, or with
//	              it once an Add came after termination
//	              was requested (to restart it)
//
// Updates never block and coalesce: while a call is in flight, further
// updates collapse into one pending update carrying the newest pod. A
// termination request is state, not a queued update, so it is never lost;
// its grace period is the first requested value (a kill's override, the
// API's DeletionGracePeriodSeconds, else the spec's
// TerminationGracePeriodSeconds, else 30s) and can afterwards only shorten;
// it is never below 1s.
//
// A pod killed before its first sync still gets SyncTerminatingPod and
// SyncTerminatedPod (the runtime may hold containers from before a
// restart), where the kubelet would skip them; static pods excepted (below).
//
// Static pods of one full name (namespace/name) run one at a time, as the
// kubelet's: a static pod whose manifest changed is a new UID, and it does
// not start (no Prepare, no SyncPod) while the one started before it has
// not finished. Static pods waiting to start start in the order they came,
// skipping those whose termination was requested; so of many quick
// rewrites only the newest starts. A static pod whose termination is
// requested before it started is finished at once, with no Syncer or Hook
// call, as the kubelet's; whatever an earlier nodelet left of it is an
// orphan for housekeeping. IsStaticPodTerminating tells the mirror pods
// to wait while a static pod's containers stop.
//
// A UID whose termination was requested is never synced (started) again
// by the same worker: updates only refresh the spec the terminating calls
// see, and once finished, updates are ignored. Only after SyncKnownPods has
// forgotten a finished UID does an update with it start a new worker.
// SyncKnownPods forgets a finished UID when it is absent from desired, or
// when an Add came for it after its termination was requested (the same
// pod created again: our static pods derive their UID from the manifest
// content, so a manifest removed and written back is the same UID, as the
// kubelet's "restartRequested"). Such an Add is otherwise ignored; the
// UIDs forgotten for it are SyncKnownPods' result, for the caller to send
// an Add again, which starts the pod anew (its old containers, exited,
// still in the runtime).
type Workers struct {
	syncer  Syncer
	hooks   []Hook
	metrics Metrics
	// onFinished: Deps.OnFinished.
	onFinished func(uid types.UID)
	clk        clock.WithTicker
	log        *slog.Logger
	opts       Options

	mu   sync.Mutex
	pods map[types.UID]*podState
	// ctx is Run's context; nil before Run. Worker goroutines start only
	// once it is set.
	ctx context.Context
	// stopped is set when Run's context has ended: no goroutine starts
	// after that (so wg.Add never races wg.Wait).
	stopped bool
	// podsSynced is set by the first SyncKnownPods: from then on a UID
	// the workers do not know has no containers that should run.
	podsSynced bool
	// startedStatic is, by full name, the static pod that started and has
	// not finished; waitingStatic, the static pods not started yet, in the
	// order they came (those finished unstarted are dropped).
	startedStatic map[string]types.UID
	waitingStatic map[string][]types.UID
	wg            sync.WaitGroup

	// Test hooks, set before Run. idleHook is called each time a worker
	// goroutine is about to wait, with the time its timer fires (zero if
	// none); exitHook when a worker goroutine returns.
	idleHook func(uid types.UID, next time.Time)
	exitHook func(uid types.UID)
}

// podState is everything known about one pod; guarded by Workers.mu.
type podState struct {
	uid types.UID
	// fullName is namespace/name; static: the pod is a static pod, which
	// starts only when no other of its full name runs (see Workers).
	fullName string
	static   bool
	// started: a static pod passed that gate (unused for other pods).
	started bool
	// pod is the newest spec received.
	pod *v1.Pod
	// pending is true when an update arrived since the worker last took
	// work; pendingReason is its (merged) reason.
	pending       bool
	pendingReason podupdate.Reason
	// pendingObservedAt is the newest ObservedAt of the pending Event
	// updates (zero when the pending reason is not Event).
	pendingObservedAt time.Time
	// wake holds at most one token telling the worker to look at its
	// state again. Capacity 1 so that senders never block: a token already
	// there means the same thing as a second one.
	wake chan struct{}
	// retryAt is the worker's own next resync or retry, reset whenever it
	// takes work; requeueAt is a RequeueAfter request, kept until due.
	retryAt, requeueAt time.Time
	// running: the goroutine is started.
	running bool
	// cancel cancels the in-flight Sync* call; nil when none.
	cancel context.CancelFunc

	terminatingAt time.Time // termination requested
	// startedTerminating: the worker has begun acting on the termination
	// (no SyncPod will run any more).
	startedTerminating bool
	terminatedAt       time.Time // SyncTerminatingPod succeeded
	finished           bool      // SyncTerminatedPod succeeded
	// graceSet and grace (seconds) are the effective grace period.
	graceSet         bool
	grace            int64
	deleted, evicted bool
	reason           string
	// restartRequested: an Add came after termination was requested; once
	// finished, SyncKnownPods forgets the UID so that it may start again.
	restartRequested bool
	// prepared holds, per hook, what its latest successful Prepare set up
	// (the zero value before). Made under mu; its elements are read and
	// written only by the pod's goroutine, whose calls are sequential.
	prepared []podsetup.Setup
}

// Deps are what the pod workers call. Syncer, Clock and Log are required.
type Deps struct {
	Syncer Syncer
	// Hooks are the per-pod resources, in the order they are prepared
	// (see Hook).
	Hooks   []Hook
	Metrics Metrics // nil: none
	// OnFinished, when set, is called once a pod's worker finished (see
	// IsPodFinished), from its goroutine: a pod deleted in the API may go
	// at once (statussync).
	OnFinished func(uid types.UID)
	Clock      clock.WithTicker
	Log        *slog.Logger
}

// New returns pod workers calling deps.Syncer and deps.Hooks. It starts
// nothing; call Run.
func New(deps Deps, opts Options) *Workers {
	if opts.ResyncInterval <= 0 {
		opts.ResyncInterval = defaultResyncInterval
	}
	if opts.BackOffPeriod <= 0 {
		opts.BackOffPeriod = defaultBackOffPeriod
	}
	return &Workers{
		syncer:     deps.Syncer,
		hooks:      deps.Hooks,
		metrics:    deps.Metrics,
		onFinished: deps.OnFinished,
		clk:        deps.Clock,
		log:        deps.Log,
		opts:       opts,
		pods:       map[types.UID]*podState{},

		startedStatic: map[string]types.UID{},
		waitingStatic: map[string][]types.UID{},
	}
}

// Run starts the worker goroutines (for updates received so far and from
// now on) and blocks until ctx ends and every worker goroutine has
// returned. In-flight calls see ctx cancelled. Run is called once.
func (w *Workers) Run(ctx context.Context) {
	w.mu.Lock()
	if w.ctx != nil {
		w.mu.Unlock()
		w.log.Error("podworker: Run called twice")
		return
	}
	w.ctx = ctx
	for _, ps := range w.pods {
		w.startLocked(ps)
	}
	w.mu.Unlock()

	<-ctx.Done()
	w.mu.Lock()
	w.stopped = true
	w.mu.Unlock()
	w.wg.Wait()
}

// startLocked starts ps's goroutine if it should run and does not.
func (w *Workers) startLocked(ps *podState) {
	if ps.running || ps.finished || w.ctx == nil || w.stopped {
		return
	}
	ps.running = true
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		w.loop(w.ctx, ps)
	}()
}

// wakeLocked makes sure ps's goroutine runs and looks at its state.
func (w *Workers) wakeLocked(ps *podState) {
	w.startLocked(ps)
	select {
	case ps.wake <- struct{}{}:
	default:
	}
}

// UpdatePod hands an update to the pod's worker, creating the worker for a
// new UID. It never blocks. See Workers for how updates coalesce and when
// they request termination.
func (w *Workers) UpdatePod(opts UpdatePodOptions) {
	pod := opts.Pod
	if pod == nil {
		w.log.Error("podworker: update without a pod ignored", "reason", opts.Reason)
		return
	}
	uid := pod.UID
	log := w.log.With("pod", pod.Namespace+"/"+pod.Name, "podUID", uid)

	w.mu.Lock()
	defer w.mu.Unlock()
	ps, ok := w.pods[uid]
	if !ok {
		ps = &podState{uid: uid, wake: make(chan struct{}, 1),
			fullName: pod.Namespace + "/" + pod.Name, static: podspec.IsStatic(pod)}
		w.pods[uid] = ps
		if ps.static {
			w.waitingStatic[ps.fullName] = append(w.waitingStatic[ps.fullName], uid)
		}
	}
	if ok && !ps.terminatingAt.IsZero() && opts.Reason == podupdate.Add {
		// The same UID created again while (or after) the old one stops.
		log.Debug("pod created again while terminating, will restart once finished")
		ps.restartRequested = true
		return
	}
	if ps.finished {
		log.Debug("pod worker finished, update ignored", "reason", opts.Reason)
		return
	}
	now := w.clk.Now()

	if pod.DeletionTimestamp != nil {
		ps.deleted = true
	}
	if k := opts.KillPodOptions; opts.Reason.Terminates() && k != nil {
		ps.evicted = ps.evicted || k.Evict
		if ps.reason == "" {
			ps.reason = k.Reason
		}
	}
	becameTerminating := false
	if ps.terminatingAt.IsZero() {
		switch {
		case pod.DeletionTimestamp != nil:
			log.Debug("pod marked for deletion, terminating")
			becameTerminating = true
		case pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed:
			log.Debug("pod in a terminal phase, terminating", "phase", pod.Status.Phase)
			becameTerminating = true
		case opts.Reason.Terminates():
			log.Debug("pod termination requested", "reason", opts.Reason)
			becameTerminating = true
		}
		if becameTerminating {
			ps.terminatingAt = now
		}
	}
	shortened := false
	if !ps.terminatingAt.IsZero() && ps.terminatedAt.IsZero() {
		var kill *KillPodOptions
		if opts.Reason.Terminates() {
			kill = opts.KillPodOptions
		}
		g := effectiveGrace(ps, pod, kill)
		shortened = ps.graceSet && g < ps.grace
		ps.grace, ps.graceSet = g, true
	}

	ps.pod = pod
	// The newest reason wins, except that an Add not yet delivered stays
	// an Add (SyncPod has never seen the pod).
	if !ps.pending || ps.pendingReason != podupdate.Add || opts.Reason.Terminates() {
		ps.pendingReason = opts.Reason
	}
	switch {
	case ps.pendingReason != podupdate.Event || opts.ObservedAt.IsZero():
		ps.pendingObservedAt = time.Time{}
	case !ps.pending || opts.ObservedAt.After(ps.pendingObservedAt):
		ps.pendingObservedAt = opts.ObservedAt
	}
	ps.pending = true
	w.wakeLocked(ps)

	if (becameTerminating || shortened) && ps.cancel != nil {
		log.Debug("cancelling the in-flight sync", "terminating", becameTerminating, "gracePeriodShortened", shortened)
		ps.cancel()
	}
}

// effectiveGrace returns the grace period in seconds for a terminating pod
// given what was already decided and what this update asks for.
func effectiveGrace(ps *podState, pod *v1.Pod, kill *KillPodOptions) int64 {
	g, set := ps.grace, ps.graceSet
	lower := func(v int64) {
		if !set || v < g {
			g, set = v, true
		}
	}
	if pod != nil && pod.DeletionTimestamp != nil && pod.DeletionGracePeriodSeconds != nil {
		lower(*pod.DeletionGracePeriodSeconds)
	}
	if kill != nil && kill.PodTerminationGracePeriodSecondsOverride != nil {
		lower(*kill.PodTerminationGracePeriodSecondsOverride)
	}
	if !set {
		g = v1.DefaultTerminationGracePeriodSeconds
		if pod != nil {
			g = podspec.GracePeriodSeconds(pod)
		}
	}
	return max(g, 1)
}

// SyncKnownPods is housekeeping with the complete set of pods that should
// exist. Every known pod not in desired is marked deleted and, unless
// already terminating, terminated with its own grace period (an in-flight
// SyncPod is cancelled). Finished pods not in desired are forgotten. After
// the first call, UIDs unknown to the workers count as having no
// containers that should run (see CouldHaveRunningContainers).
//
// It returns the desired pods it forgot because they were created again
// after their termination was requested (see Workers), sorted: the caller
// sends each an Add update, which starts it as a new worker.
func (w *Workers) SyncKnownPods(desired map[types.UID]bool) []types.UID {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.podsSynced = true
	now := w.clk.Now()
	var restart []types.UID
	for uid, ps := range w.pods {
		if desired[uid] {
			if ps.finished && ps.restartRequested {
				w.log.Debug("forgetting finished pod created again, to restart it", "podUID", uid)
				delete(w.pods, uid)
				restart = append(restart, uid)
			}
			continue
		}
		if ps.finished {
			w.log.Debug("forgetting finished pod", "podUID", uid)
			delete(w.pods, uid)
			continue
		}
		ps.deleted = true
		if !ps.terminatingAt.IsZero() {
			continue // already on its way; it retries on its own
		}
		w.log.Debug("pod no longer desired, terminating", "podUID", uid)
		ps.terminatingAt = now
		ps.grace, ps.graceSet = effectiveGrace(ps, ps.pod, nil), true
		ps.pending, ps.pendingReason = true, podupdate.Remove
		w.wakeLocked(ps)
		if ps.cancel != nil {
			ps.cancel()
		}
	}
	slices.Sort(restart)
	return restart
}

// Requeue asks for the pod to be synced again now (with its newest spec, in
// whatever state it is in). Unknown and finished pods are ignored.
func (w *Workers) Requeue(uid types.UID) { w.RequeueAfter(uid, 0) }

// RequeueAfter asks for the pod to be synced again d from now, e.g. when a
// container's restart back-off expires. Requests coalesce: only the
// earliest one not yet due is kept. A sync for another reason (an update,
// the periodic resync, a retry) before then does not consume it. Unknown
// and finished pods are ignored.
func (w *Workers) RequeueAfter(uid types.UID, d time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	ps, ok := w.pods[uid]
	if !ok || ps.finished {
		return
	}
	at := w.clk.Now().Add(d)
	if ps.requeueAt.IsZero() || at.Before(ps.requeueAt) {
		ps.requeueAt = at
	}
	w.wakeLocked(ps)
}

// IsPodTerminationRequested reports whether the pod is known and its
// termination was requested (it may still be running).
func (w *Workers) IsPodTerminationRequested(uid types.UID) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	ps, ok := w.pods[uid]
	return ok && !ps.terminatingAt.IsZero()
}

// IsPodKnownTerminated reports whether the pod is known and
// SyncTerminatingPod succeeded for it: none of its containers runs.
func (w *Workers) IsPodKnownTerminated(uid types.UID) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	ps, ok := w.pods[uid]
	return ok && !ps.terminatedAt.IsZero()
}

// IsPodActive reports whether the pod is known and not yet terminated:
// it counts for admission.
func (w *Workers) IsPodActive(uid types.UID) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	ps, ok := w.pods[uid]
	return ok && ps.terminatedAt.IsZero()
}

// CouldHaveRunningContainers reports whether the pod may have running
// containers: a known pod until it is terminated; an unknown UID until the
// first SyncKnownPods.
func (w *Workers) CouldHaveRunningContainers(uid types.UID) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if ps, ok := w.pods[uid]; ok {
		return ps.terminatedAt.IsZero()
	}
	return !w.podsSynced
}

// ShouldPodContainersBeTerminating reports whether the pod's containers
// must be stopped and not restarted: a known pod once its worker began
// terminating it; an unknown UID after the first SyncKnownPods.
func (w *Workers) ShouldPodContainersBeTerminating(uid types.UID) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if ps, ok := w.pods[uid]; ok {
		return ps.startedTerminating
	}
	return w.podsSynced
}

// ShouldPodRuntimeBeRemoved reports whether the pod's sandboxes and
// containers may be removed: a known pod once terminated; an unknown UID
// after the first SyncKnownPods.
func (w *Workers) ShouldPodRuntimeBeRemoved(uid types.UID) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if ps, ok := w.pods[uid]; ok {
		return !ps.terminatedAt.IsZero()
	}
	return w.podsSynced
}

// ShouldPodContentBeRemoved reports whether the pod's local content
// (volumes, directories) may be removed: a known pod when evicted, or
// deleted and terminated; an unknown UID after the first SyncKnownPods.
func (w *Workers) ShouldPodContentBeRemoved(uid types.UID) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if ps, ok := w.pods[uid]; ok {
		return ps.evicted || (ps.deleted && !ps.terminatedAt.IsZero())
	}
	return w.podsSynced
}

// IsPodFinished reports whether the pod is done on this node: its
// containers stopped and every hook cleaned up (the kubelet's "resources
// reclaimed"); an unknown UID after the first SyncKnownPods (a finished
// pod no source wants is forgotten). A deleted pod may then leave the API.
func (w *Workers) IsPodFinished(uid types.UID) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if ps, ok := w.pods[uid]; ok {
		return ps.finished
	}
	return w.podsSynced
}

// IsStaticPodTerminating reports whether the static pod of fullName
// (namespace/name) that started is terminating: its termination was
// requested and its containers have not all stopped yet. Its mirror pod
// then stays as it is (neither deleted nor replaced), as the kubelet's
// IsPodForMirrorPodTerminatingByFullName says.
func (w *Workers) IsStaticPodTerminating(fullName string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	uid, ok := w.startedStatic[fullName]
	if !ok {
		return false
	}
	ps, ok := w.pods[uid]
	return ok && !ps.terminatingAt.IsZero() && ps.terminatedAt.IsZero()
}

// allowStaticStartLocked says whether the static pod ps, not started yet,
// may start now, and if so records it as started: no other static pod of
// its full name started and not finished, and ps is the first one waiting
// whose termination was not requested.
func (w *Workers) allowStaticStartLocked(ps *podState) bool {
	if uid, ok := w.startedStatic[ps.fullName]; ok {
		return uid == ps.uid
	}
	waiting := w.waitingStatic[ps.fullName]
	for i, uid := range waiting {
		o, ok := w.pods[uid]
		if !ok || o.finished || !o.terminatingAt.IsZero() {
			continue // will never start
		}
		if uid != ps.uid {
			w.waitingStatic[ps.fullName] = waiting[i:]
			return false
		}
		waiting = waiting[i+1:]
		break
	}
	if len(waiting) > 0 {
		w.waitingStatic[ps.fullName] = waiting
	} else {
		delete(w.waitingStatic, ps.fullName)
	}
	w.startedStatic[ps.fullName] = ps.uid
	ps.started = true
	return true
}

// releaseStaticLocked drops the finished static pod ps from the start
// gate and wakes the static pods waiting for its full name, the next of
// which may now start.
func (w *Workers) releaseStaticLocked(ps *podState) {
	if !ps.static {
		return
	}
	if w.startedStatic[ps.fullName] == ps.uid {
		delete(w.startedStatic, ps.fullName)
	}
	waiting := w.waitingStatic[ps.fullName]
	kept := waiting[:0]
	for _, uid := range waiting {
		if uid != ps.uid {
			kept = append(kept, uid)
		}
	}
	if len(kept) == 0 {
		delete(w.waitingStatic, ps.fullName)
		return
	}
	w.waitingStatic[ps.fullName] = kept
	for _, uid := range kept {
		if o, ok := w.pods[uid]; ok {
			w.wakeLocked(o)
		}
	}
}

// Info returns what the workers know of the pod; false if nothing.
func (w *Workers) Info(uid types.UID) (Info, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	ps, ok := w.pods[uid]
	if !ok {
		return Info{}, false
	}
	info := Info{State: ps.state(), Deleted: ps.deleted, Evicted: ps.evicted, Reason: ps.reason}
	if ps.graceSet {
		info.GracePeriod = time.Duration(ps.grace) * time.Second
	}
	return info, true
}

func (ps *podState) state() State {
	switch {
	case ps.finished:
		return Finished
	case !ps.terminatedAt.IsZero():
		return Terminated
	case !ps.terminatingAt.IsZero():
		return Terminating
	}
	return Syncing
}

// loop is a pod's goroutine: take work, call the syncer, record the
// outcome, until the pod is finished or ctx ends.
func (w *Workers) loop(ctx context.Context, ps *podState) {
	defer func() {
		w.mu.Lock()
		ps.running = false
		w.mu.Unlock()
		if w.exitHook != nil {
			w.exitHook(ps.uid)
		}
	}()
	for {
		wk, syncCtx, cancel, ok := w.next(ctx, ps)
		if !ok {
			return
		}
		res, err := w.call(syncCtx, wk)
		if !w.complete(ctx, ps, wk, syncCtx, cancel, res, err, w.clk.Now()) {
			if wk.state == Terminated && err == nil && w.onFinished != nil {
				w.onFinished(ps.uid)
			}
			return
		}
	}
}

// next waits until the pod has work due and takes it, returning the
// context for the call (cancellable through ps.cancel). ok is false when
// the goroutine must return.
func (w *Workers) next(ctx context.Context, ps *podState) (wk work, syncCtx context.Context, cancel context.CancelFunc, ok bool) {
	for {
		w.mu.Lock()
		if ctx.Err() != nil || ps.finished {
			w.mu.Unlock()
			return work{}, nil, nil, false
		}
		now := w.clk.Now()
		if ps.static && !ps.started {
			if !ps.terminatingAt.IsZero() {
				// Never started: nothing of it runs in this process.
				w.log.Debug("static pod terminated before it started", "pod", ps.fullName, "podUID", ps.uid)
				ps.pending, ps.startedTerminating, ps.terminatedAt, ps.finished = false, true, now, true
				w.releaseStaticLocked(ps)
				w.mu.Unlock()
				if w.onFinished != nil {
					w.onFinished(ps.uid)
				}
				return work{}, nil, nil, false
			}
			if !w.allowStaticStartLocked(ps) {
				// Woken when the one before it finishes, or when
				// its own termination is requested; timers wait.
				w.mu.Unlock()
				if w.idleHook != nil {
					w.idleHook(ps.uid, time.Time{})
				}
				select {
				case <-ctx.Done():
				case <-ps.wake:
				}
				continue
			}
			w.log.Debug("static pod may start", "pod", ps.fullName, "podUID", ps.uid)
		}
		if wk, ok := w.takeLocked(ps, now); ok {
			syncCtx, cancel := context.WithCancel(ctx)
			ps.cancel = cancel
			w.mu.Unlock()
			return wk, syncCtx, cancel, true
		}
		wakeAt := ps.retryAt
		if wakeAt.IsZero() || (!ps.requeueAt.IsZero() && ps.requeueAt.Before(wakeAt)) {
			wakeAt = ps.requeueAt
		}
		var timer clock.Timer
		var fired <-chan time.Time
		if !wakeAt.IsZero() {
			timer = w.clk.NewTimer(wakeAt.Sub(now))
			fired = timer.C()
		}
		w.mu.Unlock()

		if w.idleHook != nil {
			w.idleHook(ps.uid, wakeAt)
		}
		select {
		case <-ctx.Done():
		case <-ps.wake:
		case <-fired:
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

// takeLocked consumes the pod's due work, if any.
func (w *Workers) takeLocked(ps *podState, now time.Time) (work, bool) {
	due := func(t time.Time) bool { return !t.IsZero() && !now.Before(t) }
	if !ps.pending && !due(ps.retryAt) && !due(ps.requeueAt) {
		return work{}, false
	}
	select {
	case <-ps.wake: // this round covers it
	default:
	}
	if ps.prepared == nil {
		ps.prepared = make([]podsetup.Setup, len(w.hooks))
	}
	wk := work{state: ps.state(), reason: podupdate.Resync, pod: ps.pod, prepared: ps.prepared}
	if ps.pending {
		wk.reason = ps.pendingReason
	}
	ps.pending = false
	ps.retryAt = time.Time{}
	if due(ps.requeueAt) {
		ps.requeueAt = time.Time{}
	}
	if wk.state == Terminating {
		ps.startedTerminating = true
		wk.gracePeriod = time.Duration(ps.grace) * time.Second
	}
	return wk, true
}

// work is one Sync* call to make.
type work struct {
	state       State
	reason      podupdate.Reason
	pod         *v1.Pod
	gracePeriod time.Duration
	// prepared is the pod's podState.prepared.
	prepared []podsetup.Setup
}

// call makes the Sync* call for wk's state, with the hooks around it.
func (w *Workers) call(ctx context.Context, wk work) (res SyncResult, err error) {
	start := w.clk.Now()
	switch wk.state {
	case Syncing:
		req := SyncRequest{Reason: wk.reason, Pod: wk.pod, Unprepared: w.prepare(ctx, wk.pod, wk.prepared)}
		req.Setup = podsetup.Merge(wk.prepared...)
		res, err = w.syncer.SyncPod(ctx, req)
		w.observe(wk.reason, start)
		if err != nil {
			err = fmt.Errorf("SyncPod (%s): %w", wk.reason, err)
		}
	case Terminating:
		req := TerminatingRequest{Pod: wk.pod, GracePeriod: wk.gracePeriod, Setup: podsetup.Merge(wk.prepared...)}
		err = w.syncer.SyncTerminatingPod(ctx, req)
		w.observe(podupdate.Kill, start)
		if err != nil {
			err = fmt.Errorf("SyncTerminatingPod (grace period %s): %w", wk.gracePeriod, err)
		}
	case Terminated:
		req := TerminatedRequest{Pod: wk.pod, Setup: podsetup.Merge(wk.prepared...)}
		if err = w.syncer.SyncTerminatedPod(ctx, req); err != nil {
			err = fmt.Errorf("SyncTerminatedPod: %w", err)
		} else {
			err = w.cleanup(ctx, wk.pod)
		}
	default:
		err = fmt.Errorf("podworker: no call for state %s", wk.state)
	}
	return res, err
}

// prepare runs every hook's Prepare in order until one fails, keeping in
// prepared (one slot per hook) what each hook that succeeded set up.
func (w *Workers) prepare(ctx context.Context, pod *v1.Pod, prepared []podsetup.Setup) error {
	for i, h := range w.hooks {
		setup, err := h.Prepare(ctx, pod)
		if err != nil {
			return fmt.Errorf("prepare %s: %w", h.Name(), err)
		}
		prepared[i] = setup
	}
	return nil
}

// cleanup runs every hook's Cleanup, in reverse order, whatever fails.
func (w *Workers) cleanup(ctx context.Context, pod *v1.Pod) error {
	var errs []error
	for i := len(w.hooks) - 1; i >= 0; i-- {
		if err := w.hooks[i].Cleanup(ctx, pod); err != nil {
			errs = append(errs, fmt.Errorf("clean up %s: %w", w.hooks[i].Name(), err))
		}
	}
	return errors.Join(errs...)
}

func (w *Workers) observe(reason podupdate.Reason, start time.Time) {
	if w.metrics != nil {
		w.metrics.ObservePodWorker(reason, w.clk.Since(start))
	}
}

// complete records the outcome of a call made at end and schedules what
// comes next. It returns false when the goroutine must return.
func (w *Workers) complete(ctx context.Context, ps *podState, wk work, syncCtx context.Context, cancel context.CancelFunc,
	res SyncResult, err error, end time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	// Checked under the lock, before ps.cancel is dropped: only UpdatePod
	// and SyncKnownPods cancel, under the same lock.
	preempted := syncCtx.Err() != nil && ctx.Err() == nil
	ps.cancel = nil
	cancel()
	if ctx.Err() != nil {
		return false
	}
	log := w.log.With("pod", ps.pod.Namespace+"/"+ps.pod.Name, "podUID", ps.uid, "state", wk.state)
	switch {
	case err != nil && preempted:
		// Termination was requested or the grace period shortened; the
		// request left work pending, which runs at once.
		log.Debug("sync cancelled", "err", err)
	case err != nil:
		d := w.opts.BackOffPeriod
		log.Error("pod sync failed, will retry", "err", err, "retryIn", d)
		ps.retryAt = end.Add(d)
	case wk.state == Terminated:
		log.Debug("pod finished")
		ps.finished = true
		w.releaseStaticLocked(ps)
		return false
	case wk.state == Terminating:
		log.Debug("pod terminated")
		ps.terminatedAt = end
		ps.retryAt = end
	case res.Terminal:
		if ps.terminatingAt.IsZero() {
			log.Debug("pod reached a terminal phase, terminating")
			ps.terminatingAt = end
			ps.grace, ps.graceSet = effectiveGrace(ps, wk.pod, nil), true
		}
		ps.retryAt = end
	default:
		ps.retryAt = end.Add(w.opts.ResyncInterval)
		// Events that came in during the sync, found by looks at the
		// runtime that began before the sync's own last look, are seen.
		if ps.pending && ps.pendingReason == podupdate.Event && !ps.pendingObservedAt.IsZero() &&
			!res.ObservedAt.IsZero() && ps.pendingObservedAt.Before(res.ObservedAt) {
			log.Debug("events seen by the sync dropped")
			ps.pending, ps.pendingObservedAt = false, time.Time{}
		}
		if res.RequeueAfter > 0 {
			if at := end.Add(res.RequeueAfter); ps.requeueAt.IsZero() || at.Before(ps.requeueAt) {
				ps.requeueAt = at
			}
		}
	}
	return true
}
