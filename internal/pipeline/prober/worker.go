package prober

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"
)

// kind is a probe type.
type kind int

const (
	liveness kind = iota
	readiness
	startup
	numKinds
)

// String is the kubelet's name of the probe type, used in events, logs and
// the probe_type metric label.
func (k kind) String() string {
	switch k {
	case liveness:
		return "Liveness"
	case readiness:
		return "Readiness"
	case startup:
		return "Startup"
	}
	return fmt.Sprintf("kind(%d)", int(k))
}

// spec returns c's probe of kind k, or nil.
func (k kind) spec(c *v1.Container) *v1.Probe {
	switch k {
	case liveness:
		return c.LivenessProbe
	case readiness:
		return c.ReadinessProbe
	case startup:
		return c.StartupProbe
	}
	return nil
}

// result is a worker's view of one probe run (kubelet results.Result).
type result int

const (
	resultUnknown result = iota
	resultSuccess
	resultFailure
)

// maxRetries bounds the attempts of a probe that errors (could not be run
// at all), as the kubelet's maxProbeRetries. Failures are not retried.
const maxRetries = 3

// Kubelet API defaults for probe fields left at zero (static pods may not
// have gone through API defaulting).
const (
	defaultTimeout          = time.Second
	defaultPeriod           = 10 * time.Second
	defaultSuccessThreshold = 1
	defaultFailureThreshold = 3
)

// Event reasons, the kubelet's.
const (
	ReasonUnhealthy    = "Unhealthy"
	ReasonProbeWarning = "ProbeWarning"
)

// worker probes one probe of one container of one pod.
type worker struct {
	m       *Manager
	kind    kind
	pod     *podProbes
	c       *containerProbes
	handler handler
	labels  workerLabels

	initialDelay     time.Duration
	period           time.Duration
	timeout          time.Duration
	successThreshold int
	failureThreshold int

	// wake (size 1) tells the goroutine to decide again; a token is only
	// sent with dirty set, under m.mu, so one pending token is enough.
	wake   chan struct{}
	cancel context.CancelFunc // set when started, under m.mu

	// Guarded by m.mu.
	id         string // bound instance; "" when none
	startedAt  time.Time
	gen        uint64 // bumped at every (un)binding: older probes are stale
	rebound    bool   // binding changed: schedule from the initial delay
	triggered  bool   // probe as soon as the initial delay allows
	nextAt     time.Time
	lastResult result
	resultRun  int  // how many times in a row lastResult came
	onHold     bool // liveness/startup failed: wait for a new instance
	dirty      bool // something changed since the last decision
	parked     bool // waiting on its timer or wake (tests use it)
}

// newWorker returns a worker (not started) for probe spec of kind k.
func (m *Manager) newWorker(p *podProbes, cp *containerProbes, c *v1.Container, k kind, spec *v1.Probe) *worker {
	w := &worker{
		m: m, kind: k, pod: p, c: cp,
		handler: m.newHandler(spec, c),
		labels: workerLabels{
			probeType: k.String(), container: c.Name,
			pod: p.pod.Name, namespace: p.pod.Namespace, podUID: string(p.pod.UID),
		},
		initialDelay:     seconds(spec.InitialDelaySeconds, 0),
		period:           seconds(spec.PeriodSeconds, defaultPeriod),
		timeout:          seconds(spec.TimeoutSeconds, defaultTimeout),
		successThreshold: positive(spec.SuccessThreshold, defaultSuccessThreshold),
		failureThreshold: positive(spec.FailureThreshold, defaultFailureThreshold),
		wake:             make(chan struct{}, 1),
	}
	return w
}

func seconds(s int32, def time.Duration) time.Duration {
	if s <= 0 {
		return def
	}
	return time.Duration(s) * time.Second
}

func positive(n int32, def int) int {
	if n <= 0 {
		return def
	}
	return int(n)
}

// pokeLocked makes the worker decide again.
func (w *worker) pokeLocked() {
	w.dirty = true
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// bindLocked binds the worker to instance rc (an empty ID unbinds it) and
// starts its state afresh.
func (w *worker) bindLocked(rc RunningContainer) {
	w.id, w.startedAt = rc.ID, rc.StartedAt
	w.gen++
	w.rebound, w.triggered = true, false
	w.lastResult, w.resultRun, w.onHold = resultUnknown, 0, false
	w.pokeLocked()
}

// step is what a worker does next.
type step int

const (
	stepIdle  step = iota // wait for a wake
	stepWait              // wait for the timer (or a wake)
	stepProbe             // probe now
)

// probeCall is what one probe needs, taken under m.mu.
type probeCall struct {
	gen    uint64
	target target
	pod    *v1.Pod
}

// run is the worker's goroutine.
func (w *worker) run(ctx context.Context) {
	defer w.m.wg.Done()
	defer w.close()
	timer := w.m.clock.NewTimer(time.Hour)
	stopTimer(timer)
	defer stopTimer(timer)
	for ctx.Err() == nil {
		w.m.mu.Lock()
		st, wait, call := w.decideLocked(w.m.clock.Now())
		if st == stepWait {
			resetTimer(timer, wait)
		} else {
			stopTimer(timer)
		}
		w.parked = st != stepProbe
		w.m.mu.Unlock()

		if st == stepProbe {
			w.probe(ctx, call)
			continue
		}
		select {
		case <-ctx.Done():
		case <-w.wake:
		case <-timer.C():
		}
		w.m.mu.Lock()
		w.parked = false
		w.m.mu.Unlock()
	}
}

// close releases the worker's resources and metric series.
func (w *worker) close() {
	w.handler.close()
	w.m.metrics.forget(w.labels)
}

// decideLocked says what to do next (as the kubelet's doProbe does before
// probing) and, for stepWait, for how long.
func (w *worker) decideLocked(now time.Time) (step, time.Duration, probeCall) {
	w.dirty = false
	select { // a token sent before now is answered by this decision
	case <-w.wake:
	default:
	}
	if w.id == "" {
		return stepIdle, 0, probeCall{}
	}
	in := w.m.results[w.id]
	if w.rebound {
		w.rebound, w.triggered = false, false
		w.nextAt = w.startedAt.Add(w.initialDelay)
	}
	if w.onHold || in == nil {
		return stepIdle, 0, probeCall{}
	}
	if w.pod.pod.DeletionTimestamp != nil && w.kind != readiness {
		// Graceful deletion: report success so that nothing gets killed
		// for a probe now, and stop probing.
		w.succeedOnDeletionLocked(in, now)
		w.onHold = true
		return stepIdle, 0, probeCall{}
	}
	switch {
	case w.kind == startup && in.startupDone:
		return stepIdle, 0, probeCall{} // never again for this instance
	case w.kind != startup && in.hasStartup && !in.startupDone:
		return stepIdle, 0, probeCall{} // held back until started
	}
	if w.triggered {
		w.triggered = false
		w.nextAt = later(now, w.startedAt.Add(w.initialDelay))
	}
	if now.Before(w.nextAt) {
		return stepWait, w.nextAt.Sub(now), probeCall{}
	}
	return stepProbe, 0, probeCall{
		gen:    w.gen,
		target: target{containerID: w.id, host: w.pod.podIP},
		pod:    w.pod.pod,
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// succeedOnDeletionLocked sets a liveness or startup result of success.
func (w *worker) succeedOnDeletionLocked(in *instance, now time.Time) {
	changed := false
	if in.failed && in.failedProbe == w.probeName() {
		in.failed, in.failedProbe, in.message = false, "", ""
		changed = true
	}
	if w.kind == startup && !in.startupDone {
		in.startupDone = true
		w.startedLocked(now)
		changed = true
	}
	if changed {
		w.m.notifyLocked(w.pod.pod.UID)
	}
}

// probeName is the name LivenessFailed reports for w's failures.
func (w *worker) probeName() string {
	if w.kind == startup {
		return ProbeStartup
	}
	return ProbeLiveness
}

// probe runs the probe once (retrying errors) and records its result.
func (w *worker) probe(ctx context.Context, call probeCall) {
	start := w.m.clock.Now()
	var (
		out    outcome
		output string
		err    error
	)
	for range maxRetries {
		out, output, err = w.handler.probe(ctx, call.target, w.timeout)
		if err == nil || ctx.Err() != nil {
			break
		}
	}
	if ctx.Err() != nil {
		return // removed or stopping: the result means nothing
	}
	w.m.metrics.observe(w.labels, out, err, w.m.clock.Since(start))

	log := w.m.log.With("probe", w.kind.String(), "pod", call.pod.Namespace+"/"+call.pod.Name,
		"podUID", call.pod.UID, "container", w.c.name, "containerID", call.target.containerID)
	var reason, message string
	r := resultSuccess
	switch {
	case err != nil:
		log.Debug("probe errored", "err", err)
		reason, message = ReasonUnhealthy, fmt.Sprintf("%s probe errored: %v", w.kind, err)
		r = resultUnknown
	case out == outcomeFailure:
		log.Debug("probe failed", "output", output)
		reason, message = ReasonUnhealthy, fmt.Sprintf("%s probe failed: %s", w.kind, output)
		r = resultFailure
	case out == outcomeWarning:
		log.Debug("probe succeeded with a warning", "output", output)
		reason, message = ReasonProbeWarning, fmt.Sprintf("%s probe warning: %s", w.kind, output)
	}

	w.m.mu.Lock()
	w.nextAt = start.Add(w.period)
	stale := call.gen != w.gen
	if !stale && r != resultUnknown { // an errored probe's result is thrown away
		w.applyLocked(r, output, log)
	}
	w.m.mu.Unlock()
	if reason != "" && !stale {
		w.m.recorder.Event(call.pod, v1.EventTypeWarning, reason, message)
	}
}

// applyLocked counts r against the thresholds and sets the result when
// one is reached (the kubelet's worker.doProbe).
func (w *worker) applyLocked(r result, output string, log *slog.Logger) {
	in := w.m.results[w.id]
	if in == nil {
		return
	}
	if r == w.lastResult {
		w.resultRun++
	} else {
		w.lastResult, w.resultRun = r, 1
	}
	if (r == resultFailure && w.resultRun < w.failureThreshold) ||
		(r == resultSuccess && w.resultRun < w.successThreshold) {
		return // below threshold: the result stays as it was
	}
	changed := false
	switch {
	case w.kind == readiness:
		ready := r == resultSuccess
		changed = in.ready != ready
		in.ready = ready
	case r == resultFailure:
		if !in.failed {
			in.failed, in.failedProbe, in.message = true, w.probeName(), output
			changed = true
		}
	case w.kind == startup && !in.startupDone:
		in.startupDone = true
		w.startedLocked(w.m.clock.Now())
		changed = true
	}
	if w.kind != readiness && r == resultFailure {
		// The container will be killed: stop probing it until a new
		// instance is bound.
		w.onHold, w.resultRun = true, 0
	}
	if changed {
		log.Info("probe result changed", "result", resultName(w.kind, r))
		w.m.notifyLocked(w.pod.pod.UID)
	}
}

func resultName(k kind, r result) string {
	switch {
	case k == readiness && r == resultSuccess:
		return "ready"
	case k == readiness:
		return "not ready"
	case k == startup && r == resultSuccess:
		return "started"
	case r == resultFailure:
		return "failed, container will be restarted"
	}
	return "success"
}

// startedLocked reacts to the startup probe's success: readiness is probed
// at once (as the kubelet triggers it), liveness one period later.
func (w *worker) startedLocked(now time.Time) {
	if r := w.c.workers[readiness]; r != nil && r.id == w.id {
		r.triggered = true
		r.pokeLocked()
	}
	if l := w.c.workers[liveness]; l != nil && l.id == w.id {
		if l.rebound {
			l.rebound = false
			l.nextAt = l.startedAt.Add(l.initialDelay)
		}
		l.nextAt = later(l.nextAt, now.Add(l.period))
		l.pokeLocked()
	}
}

// stopTimer stops t and drains a tick it may already have delivered.
func stopTimer(t clock.Timer) {
	if !t.Stop() {
		select {
		case <-t.C():
		default:
		}
	}
}

// resetTimer makes t fire once after d.
func resetTimer(t clock.Timer, d time.Duration) {
	stopTimer(t)
	t.Reset(d)
}
