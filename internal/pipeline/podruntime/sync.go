package podruntime

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/base/metrics"
	"github.com/nodelet/nodelet/internal/pipeline/podworker"
	"github.com/nodelet/nodelet/internal/pure/observed"
	"github.com/nodelet/nodelet/internal/pure/plan"
	"github.com/nodelet/nodelet/internal/pure/podsetup"
	"github.com/nodelet/nodelet/internal/pure/podspec"
	"github.com/nodelet/nodelet/internal/pure/podupdate"
	"github.com/nodelet/nodelet/internal/pure/status"
)

// SyncPod brings one pod's runtime state to its spec (the pod workers'
// Syncer):
//
//  1. observe the pod in the runtime (Observe);
//  2. plan (plan.Compute, pure);
//  3. execute the actions in plan.Actions' order (execute), ephemeral
//     containers before init containers, with what the pod's hooks set
//     up (req.Setup); a pod whose hooks could not prepare it
//     (req.Unprepared) only has what must stop stopped;
//  4. publish the status computed from the facts: for a pod whose sync
//     only made new objects (a new sandbox and its containers), from
//     what the sync's own calls told and one ContainerStatus per started
//     container (afterStart); otherwise from a second look (Observe).
//
// The result is terminal when the pod reached Succeeded or Failed and
// will never run again, and asks for the sync the plan needs next (when a
// back-off or the activeDeadlineSeconds runs out). An error means part of
// the plan failed (a pull, a create); the pod worker retries.
func (m *Manager) SyncPod(ctx context.Context, req podworker.SyncRequest) (podworker.SyncResult, error) {
	st, out, err := m.sync(ctx, req)
	res := podworker.SyncResult{Terminal: st.Phase == v1.PodSucceeded || st.Phase == v1.PodFailed, ObservedAt: out.observedAt}
	if !res.Terminal {
		res.RequeueAfter = out.requeueAfter
	}
	return res, err
}

// syncPod is SyncPod returning the status it published.
func (m *Manager) syncPod(ctx context.Context, req podworker.SyncRequest) (v1.PodStatus, error) {
	st, _, err := m.sync(ctx, req)
	return st, err
}

// syncOutcome is what a sync tells the pod worker besides the status.
type syncOutcome struct {
	requeueAfter time.Duration
	// observedAt is when the sync's last look at the runtime began.
	observedAt time.Time
}

func (m *Manager) sync(ctx context.Context, req podworker.SyncRequest) (v1.PodStatus, syncOutcome, error) {
	pod, probes := req.Pod, req.Setup.Probes
	log := m.log.With("pod", pod.Namespace+"/"+pod.Name, "podUID", pod.UID)
	t0 := m.clock.Now()
	observedAt := t0
	// A periodic resync reads the pod from the PLEG's view where that
	// shows it as the last look did, and a new pod's first sync where that
	// shows nothing of it; every other sync looks.
	var obs *observed.PodStatus
	switch req.Reason {
	case podupdate.Resync:
		if v, at, ok := m.lookFromView(pod.UID, pod.Name, pod.Namespace); ok {
			obs, observedAt = v, at
		}
	case podupdate.Add:
		if v, at, ok := m.newFromView(pod.UID, pod.Name, pod.Namespace); ok {
			obs, observedAt = v, at
		}
	}
	if obs == nil {
		var err error
		if obs, err = m.Observe(ctx, pod.UID, pod.Name, pod.Namespace); err != nil {
			return v1.PodStatus{}, syncOutcome{}, err
		}
	}
	t1 := m.clock.Now()
	start := m.startupOf(pod, obs)
	if seen, err := time.Parse(time.RFC3339Nano, pod.Annotations[podspec.AnnotationConfigSeen]); err == nil {
		m.stage(start, metrics.PodStartStageDispatch, t0.Sub(seen))
	}
	m.stage(start, metrics.PodStartStageObserve, t1.Sub(t0))
	m.initContainersDone(pod, start, obs)
	var rz *resizing
	if req.Unprepared == nil {
		rz = m.planResize(pod, obs, req.Setup, log)
	}
	actions := plan.Compute(plan.Input{
		Pod: pod, Status: obs, Now: t1, StartTime: m.startTime(pod),
		LivenessFailed: livenessFailures(probes, obs), StartupDone: startupDone(pod, probes, obs),
		ResizeRestarts: rz.restartsOrNil(),
	})
	m.stage(start, metrics.PodStartStagePlan, m.clock.Since(t1))
	if actions.Failure.Reason == plan.ReasonDeadlineExceeded {
		m.recorder.Event(pod, v1.EventTypeWarning, actions.Failure.Reason, actions.Failure.Message)
		log.Warn("pod failed", "reason", actions.Failure.Reason, "message", actions.Failure.Message)
	}
	for _, r := range actions.Reasons {
		log.Debug("plan", "reason", r)
	}
	if netErr := m.networkNotReady(ctx, pod, actions); netErr != nil {
		// The kubelet's SyncPod publishes the status, then stops here:
		// a pod on the pod network neither starts nor changes (nothing
		// running is killed) until the network is ready, and the pod
		// worker retries after its back-off. A pod that has finished is
		// reported so, with no event.
		st := m.publish(ctx, pod, probes, obs, waitingOf(actions.Waiting, nil), nil, false)
		out := syncOutcome{observedAt: observedAt}
		if st.Phase == v1.PodSucceeded || st.Phase == v1.PodFailed {
			return st, out, nil
		}
		m.recorder.Event(pod, v1.EventTypeWarning, ReasonNetworkNotReady, netErr.Error())
		log.Info("pod waits for the network", "err", netErr)
		return st, out, netErr
	}
	for name, w := range actions.Waiting {
		if w.Reason == plan.ReasonCrashLoopBackOff {
			m.recorder.Event(pod, v1.EventTypeWarning, "BackOff", fmt.Sprintf("Back-off restarting failed container %s in pod %s", name, podRef(pod)))
		}
	}
	var lrn learned
	failures, execErr := m.execute(ctx, pod, obs, actions, start, req.Setup, req.Unprepared, rz, &lrn, log)
	if changesRuntime(actions) || rz.updatedAny() {
		again := m.clock.Now()
		m.observed.touch(pod.UID, again)
		fresh, err := (*observed.PodStatus)(nil), errLookAgain
		if onlyMadeNew(obs, actions, rz, &lrn, execErr) {
			fresh, err = m.afterStart(ctx, obs, &lrn)
		}
		if err != nil {
			again = m.clock.Now()
			fresh, err = m.Observe(ctx, pod.UID, pod.Name, pod.Namespace)
		}
		if err == nil {
			obs, observedAt = fresh, again
		}
	}
	var failed *status.Rejection
	if actions.PodFailed {
		failed = &status.Rejection{Reason: actions.Failure.Reason, Message: actions.Failure.Message}
		if actions.Failure.Reason != plan.ReasonDeadlineExceeded {
			// The kubelet gives a pod failed by its init container no
			// reason of its own: the container's status says why.
			failed = &status.Rejection{}
		}
	}
	if !actions.KillPod {
		m.finishResize(pod, obs, rz)
	}
	st := m.publish(ctx, pod, probes, obs, waitingOf(actions.Waiting, failures), failed, false)
	if st.Phase == v1.PodRunning && !start.started.IsZero() {
		m.stage(start, metrics.PodStartStageStatus, m.clock.Since(start.started))
	}
	m.podReady(pod, start, st)
	return st, syncOutcome{requeueAfter: actions.RequeueAfter, observedAt: observedAt}, execErr
}

// committed is ctx without its cancellation, for the calls that make
// something run (RunPodSandbox, CreateContainer, StartContainer): a sync is
// cancelled when its pod is to stop, and a call the client gives up on
// goes on in the runtime. A sandbox or container that started after the
// kill's look at the runtime would run on with nothing to stop it, its
// processes holding the pod's cgroup. The call finishes instead (bounded
// by the client's per-call timeout), and the kill that follows the
// cancelled sync sees what it made.
func committed(ctx context.Context) context.Context { return context.WithoutCancel(ctx) }

// errLookAgain: what the sync did is not enough to tell the pod's state.
var errLookAgain = errors.New("look at the runtime again")

// learned is what a sync's own calls told it about the objects it made.
type learned struct {
	// sandbox is the status of the sandbox the sync created (nil for
	// none, or when its status could not be read), ips its IPs.
	sandbox *runtimeapi.PodSandboxStatus
	ips     []string
	// started are the containers created and started, by ID, in order.
	started []string
	// incomplete: a container could not be started (it may have been
	// created, or killed by its postStart hook).
	incomplete bool
}

// onlyMadeNew tells whether the sync's calls alone tell the pod's state
// after it: obs, the look before, showed nothing running and no ready
// sandbox, so that the plan's KillPod stopped nothing; the sync created a
// sandbox (lrn holds its status) and started containers in it, all of
// them, and changed nothing else. What obs showed (exited containers,
// sandboxes not ready) stays as it was, and every object that can still
// change is one the sync made. This is a pod's first start, and a pod's
// start in a new sandbox after its old one died with its containers.
func onlyMadeNew(obs *observed.PodStatus, actions plan.Actions, rz *resizing, lrn *learned, execErr error) bool {
	if execErr != nil || lrn.incomplete || lrn.sandbox == nil || !actions.CreateSandbox ||
		len(actions.ContainersToKill) > 0 || actions.PodFailed || rz.updatedAny() || len(obs.Running()) > 0 {
		return false
	}
	for _, s := range obs.Sandboxes {
		if s.State == observed.SandboxReady {
			return false
		}
	}
	return true
}

// afterStart is the pod's state after a sync that only made new objects
// (onlyMadeNew): obs with the sandbox the sync created and the containers
// it started, each as one ContainerStatus call tells it; what Observe
// would have found, without its lists and the sandbox's status call. It
// keeps what it learned for the next Observe, as Observe does.
func (m *Manager) afterStart(ctx context.Context, obs *observed.PodStatus, lrn *learned) (*observed.PodStatus, error) {
	began := m.clock.Now()
	sandboxID := lrn.sandbox.GetId()
	started := make([]observed.Container, 0, len(lrn.started))
	for _, id := range lrn.started {
		resp, err := m.rt.ContainerStatus(ctx, id)
		if err != nil {
			return nil, fmt.Errorf("read container %s status: %w", id, err)
		}
		started = append(started, m.startedContainer(ctx, sandboxID, resp.GetStatus()))
	}
	st := &observed.PodStatus{UID: obs.UID, Name: obs.Name, Namespace: obs.Namespace,
		Sandboxes:  append([]observed.Sandbox{sandboxFromStatus(lrn.sandbox)}, obs.Sandboxes...),
		Containers: append(started, obs.Containers...),
	}
	sortSandboxes(st.Sandboxes)
	sortContainers(st.Containers)
	seen := podFacts{containers: map[string]observed.Container{}, sandboxes: sandboxStates(st.Sandboxes)}
	if newest := st.Sandboxes[0]; newest.ID == sandboxID && newest.State == observed.SandboxReady {
		st.IPs = slices.Clone(lrn.ips)
		seen.keepSandbox(sandboxID, lrn.ips, onHostNetwork(lrn.sandbox))
	}
	// What the sync's own look kept of the containers it saw (a finished
	// init container, say) stays: Observe asks again about any whose state
	// the list shows changed since, as one this sync stopped.
	known := m.observed.get(obs.UID)
	for _, c := range obs.Containers {
		if f, ok := known.containers[c.ID]; ok {
			seen.containers[c.ID] = f
		}
	}
	for _, c := range started {
		if settled(c.State) {
			seen.containers[c.ID] = c
		}
	}
	// As a look would record it: whole when every container is kept.
	seen.complete = len(seen.containers) == len(st.Containers)
	m.observed.set(obs.UID, seen, began)
	return st, nil
}

// ReasonNetworkNotReady is the kubelet's event reason for a pod that waits
// for the runtime's network (events.NetworkNotReady).
const ReasonNetworkNotReady = "NetworkNotReady"

// NetworkNotReadyErrorMsg starts the error of a pod that waits for the
// network, as the kubelet's.
const NetworkNotReadyErrorMsg = "network is not ready"

// networkNotReady is why pod may not go on while the runtime's pod network
// is not ready, nil if it may: a pod on the host network, and one the plan
// fails (its deadline passed; the kubelet stops it before this check), go
// on regardless.
func (m *Manager) networkNotReady(ctx context.Context, pod *v1.Pod, actions plan.Actions) error {
	if m.network == nil || pod.Spec.HostNetwork || actions.PodFailed {
		return nil
	}
	if err := m.network.NetworkErr(ctx); err != nil {
		return fmt.Errorf("%s: %w", NetworkNotReadyErrorMsg, err)
	}
	return nil
}

// startTime is the pod's status startTime while it may still run: what
// its activeDeadlineSeconds counts from.
func (m *Manager) startTime(pod *v1.Pod) *time.Time {
	prev, ok := m.status.Get(pod.UID)
	if !ok || prev.StartTime == nil || prev.Phase == v1.PodSucceeded || prev.Phase == v1.PodFailed {
		return nil
	}
	t := prev.StartTime.Time
	return &t
}

// startFailure is a container that could not be started in this sync,
// with the waiting reason the kubelet gives it (ErrImagePull,
// CreateContainerConfigError, ...): what its status shows until the next
// attempt.
type startFailure struct {
	container string
	waiting   plan.Waiting
}

// waitingOf is the waiting state of every container the status shows: the
// plan's (back-offs), then this sync's start failures, which are newer.
func waitingOf(planned map[string]plan.Waiting, failures []startFailure) map[string]plan.Waiting {
	out := make(map[string]plan.Waiting, len(planned)+len(failures))
	for name, w := range planned {
		out[name] = w
	}
	for _, f := range failures {
		out[f.container] = f.waiting
	}
	return out
}

// execute carries out actions with what the pod's hooks set up and
// returns the containers that could not start, with the kubelet's
// reasons, beside the error. With unprepared set it only stops what must
// stop. An in-place resize (rz, nil for none) is actuated after the kills
// and before anything starts, in the sandbox that stays, as the kubelet's
// SyncPod; its error is rz.err and holds nothing else back.
func (m *Manager) execute(ctx context.Context, pod *v1.Pod, obs *observed.PodStatus, actions plan.Actions,
	start *startup, setup podsetup.Setup, unprepared error, rz *resizing, lrn *learned, log *slog.Logger) ([]startFailure, error) {
	// Step 1-2: kills.
	if err := m.killContainers(ctx, pod, firstIP(obs), actions.ContainersToKill, log); err != nil {
		return nil, err
	}
	if actions.KillPod {
		if err := m.stopSandboxes(ctx, obs, log); err != nil {
			return nil, err
		}
	}
	if actions.PodFailed {
		return nil, nil
	}
	// A pod its hooks could not prepare (its volumes, say) stays as it
	// is and is retried.
	if unprepared != nil {
		return nil, unprepared
	}
	if rz != nil && rz.err == nil && !actions.CreateSandbox && !rz.plan.Empty() {
		began := m.clock.Now()
		err := m.actuate(ctx, pod, rz, setup, log)
		m.resizes.Actuation(m.clock.Since(began), err)
		if err != nil {
			log.Warn("resize not actuated", "err", err)
			rz.err = err
		}
	}
	// Step 3: sandbox.
	userNS, err := podUserNamespace(pod, setup)
	if err != nil {
		return m.sandboxFailed(pod, err, fmt.Errorf("user namespace of pod %s/%s: %w", pod.Namespace, pod.Name, err))
	}
	net, warnings, err := m.sandboxNet(pod, setup.CgroupParent, userNS)
	if err != nil {
		// The kubelet fails the sandbox's config with these.
		return m.sandboxFailed(pod, err, err)
	}
	sandboxCfg := sandboxConfig(pod, m.opts.PodLogsDir, actions.Attempt, net)
	sandboxID := actions.SandboxID
	// The container a new sandbox starts first, and its image as looked
	// up while the sandbox is made (neither without a new sandbox).
	var first *v1.Container
	var ahead *lookedUp
	sandboxStart := m.clock.Now()
	if actions.CreateSandbox {
		for _, w := range warnings {
			if w.NodeMessage != "" {
				m.recorder.NodeEvent(m.opts.NodeName, v1.EventTypeWarning, w.Reason, w.NodeMessage)
			}
			m.recorder.Event(pod, v1.EventTypeWarning, w.Reason, w.Message)
		}
		// The handler of the pod's RuntimeClass, looked up for every
		// sandbox as the kubelet's createPodSandbox: a class that cannot
		// be resolved fails the sandbox, never falls back to the default.
		handler, err := m.runtimeHandler(pod)
		if err != nil {
			return m.sandboxFailed(pod, err, fmt.Errorf("create sandbox of pod %s/%s: %w", pod.Namespace, pod.Name, err))
		}
		// What the hooks ask of that handler before every sandbox (one
		// that does not know user namespaces would run the pod on the
		// host's).
		for _, check := range setup.SandboxChecks {
			if err := check(ctx, handler); err != nil {
				return m.sandboxFailed(pod, err, fmt.Errorf("create sandbox of pod %s/%s: %w", pod.Namespace, pod.Name, err))
			}
		}
		if m.sandboxes != nil {
			select {
			case m.sandboxes <- struct{}{}:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		// What the containers to start will be created with is recorded
		// while the runtime makes the sandbox, off the start's path; each
		// container's own record before its creation then finds it made.
		// The first container's image is looked up then too.
		first = firstToStart(pod, actions)
		recorded := make(chan struct{})
		go func() {
			defer close(recorded)
			m.recordPlanned(pod, actions, log)
			ahead = m.pulls.lookUp(ctx, first, sandboxCfg)
		}()
		id, err := m.rt.RunPodSandbox(committed(ctx), sandboxCfg, handler)
		<-recorded
		if m.sandboxes != nil {
			<-m.sandboxes
		}
		if err != nil {
			// A handler the runtime does not have fails here, with the
			// runtime's words (containerd: no runtime for "x" is
			// configured).
			return m.sandboxFailed(pod, err, fmt.Errorf("create sandbox of pod %s/%s: %w", pod.Namespace, pod.Name, err))
		}
		sandboxID = id
		if m.starts != nil {
			m.starts.CountPodStart(false)
		}
		if handler != "" {
			log.Info("sandbox created", "sandboxID", id, "attempt", actions.Attempt, "runtimeHandler", handler)
		} else {
			log.Info("sandbox created", "sandboxID", id, "attempt", actions.Attempt)
		}
	}
	if sandboxID == "" {
		return nil, nil
	}
	podIPs := obs.IPs
	if actions.CreateSandbox {
		sb, ips, err := m.sandboxStatus(ctx, sandboxID)
		if err == nil && sb != nil {
			lrn.sandbox, lrn.ips = sb, ips
		}
		podIPs = ips
		m.stage(start, metrics.PodStartStageSandbox, m.clock.Since(sandboxStart))
		m.sandboxReady(pod, start, podIPs)
	}
	containersStart := m.clock.Now()
	podIP := ""
	if len(podIPs) > 0 {
		podIP = podIPs[0]
	}
	var failures []startFailure
	var errs []error
	// Step 3b: the image volumes' images, once, if anything starts.
	var imageVolumes imageVolumePulls
	if len(actions.EphemeralContainersToStart)+len(actions.InitContainersToStart)+len(actions.ContainersToStart) > 0 {
		imageVolumes = m.pullImageVolumes(ctx, pod, sandboxCfg, setup.PullCredentials, log)
	}
	run := func(a startArgs) error {
		id, waiting, err := m.startContainer(ctx, a, log)
		m.countContainerStart(a, waiting, err)
		if err != nil || waiting != nil {
			lrn.incomplete = true
		} else {
			lrn.started = append(lrn.started, id)
		}
		if waiting != nil {
			failures = append(failures, startFailure{container: a.c.Name, waiting: *waiting})
		}
		errs = append(errs, err)
		return err
	}
	args := func(c *v1.Container, s plan.Start) startArgs {
		a := startArgs{pod: pod, c: c, s: s, sandboxID: sandboxID, sandboxCfg: sandboxCfg, podIP: podIP, podIPs: podIPs, setup: setup,
			imageVolumes: imageVolumes}
		if c == first {
			a.image = ahead
		}
		return a
	}
	// Ephemeral containers first, as the kubelet's: an init container
	// failing to start does not hold back the one that debugs it.
	for _, s := range actions.EphemeralContainersToStart {
		ec := &pod.Spec.EphemeralContainers[s.Index]
		target, err := targetID(obs, sandboxID, ec)
		if err != nil {
			failures = append(failures, startFailure{
				container: ec.Name,
				waiting:   plan.Waiting{Reason: "CreateContainerConfigError", Message: err.Error()},
			})
			m.recorder.Event(pod, v1.EventTypeWarning, "Failed", "Error: "+err.Error())
			errs = append(errs, fmt.Errorf("ephemeral container %q: %w", ec.Name, err))
			continue
		}
		a := args(podspec.EphemeralContainer(ec), s)
		a.ephemeral, a.targetID = true, target
		run(a)
	}
	// Step 4: init containers, in order; the first failure stops the rest.
	for _, s := range actions.InitContainersToStart {
		if err := run(args(&pod.Spec.InitContainers[s.Index], s)); err != nil {
			return failures, errors.Join(errs...)
		}
	}
	// Step 5: containers; one failing does not hold back the others.
	for _, s := range actions.ContainersToStart {
		run(args(&pod.Spec.Containers[s.Index], s))
	}
	err = errors.Join(errs...)
	if len(actions.ContainersToStart) > 0 && err == nil && start.started.IsZero() {
		start.started = m.clock.Now()
		m.stage(start, metrics.PodStartStageContainers, start.started.Sub(containersStart))
	}
	return failures, err
}

// firstToStart is the init or app container a sync starts first, the one
// whose image is looked up while a new sandbox is made; nil if none, or if
// the pod's image volumes are pulled before it (the look-up would be a
// pull's time old). Ephemeral containers the sync starts before it look
// their images up themselves.
func firstToStart(pod *v1.Pod, actions plan.Actions) *v1.Container {
	for _, v := range pod.Spec.Volumes {
		if v.Image != nil {
			return nil
		}
	}
	if len(actions.InitContainersToStart) > 0 {
		return &pod.Spec.InitContainers[actions.InitContainersToStart[0].Index]
	}
	if len(actions.ContainersToStart) > 0 {
		return &pod.Spec.Containers[actions.ContainersToStart[0].Index]
	}
	return nil
}

// sandboxFailed records why the pod's sandbox could not be created, as
// the kubelet's FailedCreatePodSandBox event, and returns, beside ret, its
// containers waiting with the kubelet's reason and the cause as message,
// so that the pod's status says why nothing runs.
func (m *Manager) sandboxFailed(pod *v1.Pod, cause, ret error) ([]startFailure, error) {
	if m.starts != nil {
		m.starts.CountPodStart(true)
	}
	msg := fmt.Sprintf("Failed to create pod sandbox: %v", cause)
	m.recorder.Event(pod, v1.EventTypeWarning, "FailedCreatePodSandBox", msg)
	reason := status.ReasonContainerCreating
	if len(pod.Spec.InitContainers) > 0 {
		reason = status.ReasonPodInitializing
	}
	var out []startFailure
	for _, cs := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			out = append(out, startFailure{container: cs[i].Name, waiting: plan.Waiting{Reason: reason, Message: msg}})
		}
	}
	return out, ret
}

// startArgs are what starting one container needs.
type startArgs struct {
	pod        *v1.Pod
	c          *v1.Container
	s          plan.Start
	sandboxID  string
	sandboxCfg *runtimeapi.PodSandboxConfig
	podIP      string
	podIPs     []string
	// ephemeral marks an ephemeral container; targetID, if set, is the
	// container whose PID namespace it shares (its targetContainerName).
	ephemeral bool
	targetID  string
	// setup is what the pod's hooks set up.
	setup podsetup.Setup
	// imageVolumes are the pulls of the pod's image volumes in this sync.
	imageVolumes imageVolumePulls
	// image is the container's image as looked up while the sandbox was
	// made (nil: not looked up).
	image *lookedUp
}

// targetID is the ID of the container an ephemeral container targets: the
// newest instance of its targetContainerName in the sandbox, as the
// kubelet's getTargetID. "" without a target.
func targetID(obs *observed.PodStatus, sandboxID string, ec *v1.EphemeralContainer) (string, error) {
	if ec.TargetContainerName == "" {
		return "", nil
	}
	for i := range obs.Containers {
		if c := &obs.Containers[i]; c.Name == ec.TargetContainerName && c.SandboxID == sandboxID {
			return c.ID, nil
		}
	}
	return "", fmt.Errorf("unable to find target container %s", ec.TargetContainerName)
}

// countContainerStart counts a start of a.c as the kubelet's SyncPod
// does: every try, and its failure with the kubelet's error code.
func (m *Manager) countContainerStart(a startArgs, waiting *plan.Waiting, err error) {
	if m.starts == nil {
		return
	}
	kind := metrics.ContainerTypeContainer
	switch {
	case a.ephemeral:
		kind = metrics.ContainerTypeEphemeral
	case slices.ContainsFunc(a.pod.Spec.InitContainers, func(c v1.Container) bool { return c.Name == a.c.Name }):
		kind = metrics.ContainerTypeInit
	}
	code := ""
	var hook postStartError
	switch {
	case waiting != nil:
		code = waiting.Reason
	case errors.As(err, &hook):
		code = "PostStartHookError"
	case err != nil:
		code = "Unknown" // nodelet stopping in the middle, say
	}
	m.starts.CountContainerStart(kind, code)
}

// startContainer pulls, creates and starts one container, then runs its
// postStart hook; a failed hook kills the container (it restarts per
// policy). It returns the ID of the container it started; a container
// that could not be started comes back with the waiting reason its status
// shows.
func (m *Manager) startContainer(ctx context.Context, a startArgs, log *slog.Logger) (string, *plan.Waiting, error) {
	pod, c := a.pod, a.c
	// The image volumes first, as the kubelet's: a container that cannot
	// have them does not pull its own image.
	images, waiting, err := m.containerImageVolumes(ctx, pod, c, a.imageVolumes)
	if err != nil {
		log.Warn("image volumes not available", "container", c.Name, "err", err)
		return "", waiting, fmt.Errorf("container %q: %w", c.Name, err)
	}
	img, err := m.pulls.ensure(ctx, c, a.sandboxCfg, a.setup.PullCredentials, func() { m.pullingEvent(pod, c.Image) }, a.image)
	var pe *pullError
	if errors.As(err, &pe) {
		m.pullEvent(pod, c, pe)
		log.Warn("image not available", "container", c.Name, "reason", pe.waiting.Reason, "message", pe.waiting.Message)
		return "", &pe.waiting, fmt.Errorf("container %q: %w", c.Name, err)
	}
	if err != nil {
		return "", nil, fmt.Errorf("container %q: %w", c.Name, err)
	}
	m.pulledEvent(pod, c.Image, img)
	extras, err := m.containerExtras(ctx, pod, c, a.podIPs, a.setup, images)
	if err != nil {
		w := plan.Waiting{Reason: "CreateContainerConfigError", Message: err.Error()}
		m.recorder.Event(pod, v1.EventTypeWarning, "Failed", "Error: "+err.Error())
		return "", &w, fmt.Errorf("container %q: %w", c.Name, err)
	}
	userNS := a.sandboxCfg.GetLinux().GetSecurityContext().GetNamespaceOptions().GetUsernsOptions()
	if err := m.containerSecurity(ctx, pod, c, img, userNS, &extras); err != nil {
		w := plan.Waiting{Reason: "CreateContainerConfigError", Message: err.Error()}
		m.recorder.Event(pod, v1.EventTypeWarning, "Failed", "Error: "+err.Error())
		return "", &w, fmt.Errorf("container %q: %w", c.Name, err)
	}
	extras.ephemeral, extras.targetID = a.ephemeral, a.targetID
	// The termination message file, made last: a config that cannot be
	// made leaves none behind.
	termMount, err := m.terminationMessageMount(a.setup.PodDir, c)
	if err != nil {
		// As the kubelet: the container runs without it.
		log.Warn("no termination message file", "container", c.Name, "err", err)
	}
	if termMount != nil {
		if userNS != nil {
			termMount.UidMappings, termMount.GidMappings = userNS.GetUids(), userNS.GetGids()
		}
		extras.mounts = append(extras.mounts, termMount)
	}
	cfg := containerConfig(pod, c, img.ref, a.s.RestartCount, a.s.BackoffStep, extras)
	if !a.ephemeral {
		// Before the creation, as the kubelet's SetActuatedResources: a
		// container never runs with resources nodelet has no record of.
		m.recordCreated(pod, c, log)
	}
	id, err := m.rt.CreateContainer(committed(ctx), a.sandboxID, cfg, a.sandboxCfg)
	if err != nil {
		m.removeTerminationMessage(a.setup.PodDir, c, termMount)
		w := plan.Waiting{Reason: "CreateContainerError", Message: err.Error()}
		m.recorder.Event(pod, v1.EventTypeWarning, "Failed", "Error: "+err.Error())
		return "", &w, fmt.Errorf("create container %q: %w", c.Name, err)
	}
	m.recorder.Event(pod, v1.EventTypeNormal, "Created", "Created container "+c.Name)
	if err := m.rt.StartContainer(committed(ctx), id); err != nil {
		w := plan.Waiting{Reason: "RunContainerError", Message: err.Error()}
		m.recorder.Event(pod, v1.EventTypeWarning, "Failed", "Error: "+err.Error())
		return "", &w, fmt.Errorf("start container %q: %w", c.Name, err)
	}
	m.recorder.Event(pod, v1.EventTypeNormal, "Started", "Started container "+c.Name)
	m.linkLegacyLog(pod, c.Name, id, cfg.LogPath, log)
	log.Info("container started", "container", c.Name, "containerID", id, "restartCount", a.s.RestartCount, "reason", a.s.Reason)
	if c.Lifecycle != nil && c.Lifecycle.PostStart != nil {
		if err := m.postStart(ctx, a, id, log); err != nil {
			return "", nil, postStartError{err}
		}
	}
	return id, nil, nil
}

// postStartError is a failed postStart hook.
type postStartError struct{ error }

func (e postStartError) Unwrap() error { return e.error }

// postStart runs the hook; on failure the container is killed with the
// kubelet's FailedPostStartHook event and restarts per policy.
func (m *Manager) postStart(ctx context.Context, a startArgs, id string, log *slog.Logger) error {
	hookCtx, cancel := context.WithTimeout(ctx, hookTimeout)
	err := m.runHook(hookCtx, a.c.Lifecycle.PostStart, id, a.c, a.podIP)
	cancel()
	if err == nil {
		return nil
	}
	msg := fmt.Sprintf("PostStartHook failed: %v", err)
	m.recorder.Event(a.pod, v1.EventTypeWarning, "FailedPostStartHook", msg)
	log.Warn("postStart hook failed; killing the container", "container", a.c.Name, "err", err)
	kill := plan.Kill{ID: id, Name: a.c.Name, Reason: "FailedPostStartHook", Message: msg, GracePeriod: gracePeriod(a.pod)}
	if kerr := m.killContainer(ctx, a.pod, a.podIP, kill, nil, log); kerr != nil {
		return errors.Join(fmt.Errorf("postStart hook of %q: %w", a.c.Name, err), kerr)
	}
	return fmt.Errorf("postStart hook of %q: %w", a.c.Name, err)
}

// pullEvent records why c's image is not available: the image's event,
// then the container's Failed event with the reason, as the kubelet's
// startContainer.
func (m *Manager) pullEvent(pod *v1.Pod, c *v1.Container, pe *pullError) {
	m.pullFailedEvent(pod, c.Image, pe)
	m.recorder.Event(pod, v1.EventTypeWarning, "Failed", "Error: "+pe.waiting.Reason)
}

func gracePeriod(pod *v1.Pod) time.Duration {
	return time.Duration(podspec.GracePeriodSeconds(pod)) * time.Second
}

func podRef(pod *v1.Pod) string { return fmt.Sprintf("%s_%s(%s)", pod.Name, pod.Namespace, pod.UID) }

// stopSandboxes stops every ready sandbox of the pod.
func (m *Manager) stopSandboxes(ctx context.Context, obs *observed.PodStatus, log *slog.Logger) error {
	for _, s := range obs.Sandboxes {
		if s.State != observed.SandboxReady {
			continue
		}
		if err := m.rt.StopPodSandbox(ctx, s.ID); err != nil {
			return fmt.Errorf("stop sandbox %s: %w", s.ID, err)
		}
		log.Info("sandbox stopped", "sandboxID", s.ID)
	}
	return nil
}

func livenessFailures(probes podsetup.ProbeResults, obs *observed.PodStatus) map[string]plan.ProbeFailure {
	if probes == nil {
		return nil
	}
	out := map[string]plan.ProbeFailure{}
	for _, c := range obs.Running() {
		if failed, probe, msg := probes.LivenessFailed(c.ID); failed {
			out[c.ID] = plan.ProbeFailure{Probe: probe, Message: msg}
		}
	}
	return out
}

func startupDone(pod *v1.Pod, probes podsetup.ProbeResults, obs *observed.PodStatus) map[string]bool {
	out := map[string]bool{}
	for _, c := range obs.Running() {
		out[c.ID] = startedContainer(pod, probes, c.ID, c.Name)
	}
	return out
}

// startedContainer is whether a running container has started: its startup probe
// succeeded, or it has none. Without the pod's probe results (its hooks
// could not prepare it, after a restart say) a container with a startup
// probe has not, as the prober says of one it is not bound to yet.
func startedContainer(pod *v1.Pod, probes podsetup.ProbeResults, id, name string) bool {
	if probes == nil {
		c := specContainer(pod, name)
		return c == nil || c.StartupProbe == nil
	}
	return probes.StartupDone(id)
}

// readyContainer is whether a running container is ready. Without the pod's probe
// results a container with a readiness probe is not.
func readyContainer(pod *v1.Pod, probes podsetup.ProbeResults, c *observed.Container) bool {
	if probes == nil {
		spec := specContainer(pod, c.Name)
		return spec == nil || spec.ReadinessProbe == nil
	}
	if !probes.Bound(c.ID) {
		return probes.ReadyUnbound(pod, c.Name, c.StartedAt)
	}
	if r, known := probes.Ready(c.ID); known {
		return r
	}
	return true
}

// publish computes the pod's status from the facts (and its probes'
// results) and hands it on; terminal: the pod was stopped for good
// (status.Facts.Terminal).
func (m *Manager) publish(ctx context.Context, pod *v1.Pod, probes podsetup.ProbeResults, obs *observed.PodStatus, waiting map[string]plan.Waiting,
	failed *status.Rejection, terminal bool) v1.PodStatus {
	ready, started := map[string]bool{}, map[string]bool{}
	for _, c := range obs.Running() {
		started[c.ID] = startedContainer(pod, probes, c.ID, c.Name)
		ready[c.ID] = readyContainer(pod, probes, c)
	}
	var prev *v1.PodStatus
	if p, ok := m.status.Get(pod.UID); ok {
		prev = &p
	}
	facts := status.Facts{
		Pod: pod, Observed: obs, Waiting: waiting, Ready: ready, Started: started,
		HostIP: m.opts.HostIP, Now: m.clock.Now(), Previous: prev, Failed: failed, ByNode: m.status.StoppedByNode(pod.UID),
		RuntimeName: m.opts.RuntimeName, Terminal: terminal, RecursiveReadOnlyMounts: m.supportsRRO(ctx, pod),
	}
	if m.resizes != nil {
		facts.Resources, facts.ResizeConditions = m.resizes.Status(pod.UID)
	}
	st := status.Generate(facts)
	if st.Phase == v1.PodRunning && (prev == nil || prev.Phase != v1.PodRunning) {
		m.observeStart(pod)
	}
	seen := make(map[string]bool, len(obs.Sandboxes)+len(obs.Containers))
	for _, sb := range obs.Sandboxes {
		seen[sb.ID] = sb.State == observed.SandboxReady
	}
	for _, c := range obs.Containers {
		seen[c.ID] = c.State == observed.ContainerRunning
	}
	m.status.SetSeen(pod.UID, seen)
	m.status.SetPodStatus(pod, st)
	return st
}

// observeStart observes how long the pod took from first seen (its
// config.seen annotation) to running.
func (m *Manager) observeStart(pod *v1.Pod) {
	if m.podStart == nil {
		return
	}
	if seen, err := time.Parse(time.RFC3339Nano, pod.Annotations[podspec.AnnotationConfigSeen]); err == nil {
		m.podStart.Observe(m.clock.Since(seen).Seconds())
	}
}

// SyncTerminatedPod forgets what the manager recorded of the pod's
// start-up and kept of its runtime objects: it is the last call for the
// pod.
func (m *Manager) SyncTerminatedPod(_ context.Context, req podworker.TerminatedRequest) error {
	m.mu.Lock()
	delete(m.startups, req.Pod.UID)
	m.mu.Unlock()
	m.observed.drop(req.Pod.UID)
	return nil
}

// changesRuntime reports whether executing actions touches the runtime; a
// steady pod's sync then costs one observation instead of two.
func changesRuntime(a plan.Actions) bool {
	return a.KillPod || a.CreateSandbox || len(a.ContainersToKill) > 0 ||
		len(a.InitContainersToStart) > 0 || len(a.ContainersToStart) > 0 || len(a.EphemeralContainersToStart) > 0
}

// linkLegacyLog makes the kubelet's /var/log/containers symlink to the
// container's log (podspec.LegacyLogLink), as log shippers expect it; gc
// removes it with the container. A failure is only logged, as the
// kubelet's.
func (m *Manager) linkLegacyLog(pod *v1.Pod, container, id, logPath string, log *slog.Logger) {
	if logPath == "" || !m.opts.LegacyLogLinks {
		return
	}
	target := filepath.Join(PodLogDir(m.opts.PodLogsDir, pod), logPath)
	link := podspec.LegacyLogLink(m.opts.PodLogsDir, pod.Name, pod.Namespace, container, id)
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		log.Warn("no /var/log/containers link", "container", container, "err", err)
		return
	}
	if err := os.Symlink(target, link); err != nil && !errors.Is(err, fs.ErrExist) {
		log.Warn("no /var/log/containers link", "container", container, "err", err)
	}
}
