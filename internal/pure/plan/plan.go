package plan

import (
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/internal/pure/observed"
	"github.com/nodelet/nodelet/internal/pure/podspec"
)

// Compute is the kubelet's computePodActions as a pure function: from the
// pod's spec and what the runtime has, what to kill, create and start now,
// what waits and why. It decides in this order:
//
//  1. Sandbox: (re)create it if there is none, none or more than one is
//     ready, the newest is not ready, its network mode or fingerprint
//     changed, or a pod-network sandbox has no IP. Recreating kills every
//     running container and starts from the first init container (or every
//     container that should run) — unless the pod is finished, when nothing
//     is created and whatever still runs is killed.
//  2. Init containers, in order, in the current sandbox: one regular init
//     container at a time; a sidecar (restartPolicy Always) must be running,
//     and past its startup probe, before the next starts. A regular init
//     container that fails under restartPolicy Never fails the pod.
//  3. Containers, once initialized: start those not created, restart exited
//     ones per restart policy, kill and restart running ones whose spec
//     changed or whose liveness or startup probe failed, kill and restart
//     instances in the created or unknown state. Restarts after an exit are
//     held back by the crash-loop back-off (BackoffDelay).
//  4. If nothing runs or will be restarted, the pod has completed: kill it
//     (sidecars included) and stop its sandbox.
//
// Ephemeral containers are started in the current sandbox once, whatever
// the stage of the pod (planEphemeral), unless it is stopped.
//
// Compute does not modify in.
func Compute(in Input) Actions {
	if in.Pod == nil {
		return Actions{}
	}
	p := &planner{in: in, pod: in.Pod, st: in.Status, killed: map[string]bool{}}
	if p.st == nil {
		p.st = &observed.PodStatus{}
	}
	p.plan()
	return p.a
}

// planner holds one Compute call's input and the actions built so far.
type planner struct {
	in     Input
	pod    *v1.Pod
	st     *observed.PodStatus
	a      Actions
	killed map[string]bool // container IDs in a.ContainersToKill
	// stopped is set once stopPod decided the pod stays down.
	stopped bool
}

func (p *planner) plan() {
	if deadline, ok := p.deadline(); ok {
		if !p.in.Now.Before(deadline) {
			p.fail(ReasonDeadlineExceeded, "Pod was active on the node longer than the specified deadline")
			p.stopPod(ReasonDeadlineExceeded, p.a.Failure.Message)
			return
		}
		p.requeueAt(deadline.Add(time.Second))
	}
	defer p.requeueAfterBackOff()
	sb := sandboxChange(p.pod, p.st)
	if sb.create {
		p.planNewSandbox(sb)
		return
	}
	p.a.SandboxID = sb.id
	defer p.planEphemeral()
	initialized, upkeep := p.planInit(sb.id)
	switch {
	case p.a.PodFailed:
		p.stopPod(ReasonPodFailed, "the pod has failed")
	case !initialized:
		p.upkeepSidecars(sb.id, upkeep)
		for i := range p.pod.Spec.Containers {
			p.wait(p.pod.Spec.Containers[i].Name, Waiting{Reason: ReasonPodInitializing})
		}
	default:
		if !p.planContainers() {
			p.upkeepSidecars(sb.id, upkeep)
		}
	}
}

// deadline is when the pod's activeDeadlineSeconds runs out, if it has
// one: from its startTime, or from now for a pod whose first status (and
// so its startTime) this sync makes.
func (p *planner) deadline() (time.Time, bool) {
	d := p.pod.Spec.ActiveDeadlineSeconds
	if d == nil {
		return time.Time{}, false
	}
	start := p.in.Now
	if p.in.StartTime != nil {
		start = *p.in.StartTime
	}
	return start.Add(time.Duration(*d) * time.Second), true
}

// fail marks the pod failed for good.
func (p *planner) fail(reason, message string) {
	p.a.PodFailed = true
	p.a.Failure = Failure{Reason: reason, Message: message}
	p.reason("pod failed (%s): %s", reason, message)
}

// requeueAt asks for a sync at t unless an earlier one is asked already.
func (p *planner) requeueAt(t time.Time) {
	d := max(t.Sub(p.in.Now), time.Millisecond)
	if p.a.RequeueAfter == 0 || d < p.a.RequeueAfter {
		p.a.RequeueAfter = d
	}
}

// requeueAfterBackOff asks for a sync when the first back-off of a
// waiting container ends, so that it restarts then, not at the next
// periodic sync.
func (p *planner) requeueAfterBackOff() {
	for _, w := range p.a.Waiting {
		if !w.Until.IsZero() {
			p.requeueAt(w.Until)
		}
	}
}

// reason appends one line to a.Reasons.
func (p *planner) reason(format string, args ...any) {
	p.a.Reasons = append(p.a.Reasons, fmt.Sprintf(format, args...))
}

func (p *planner) restartPolicy() v1.RestartPolicy {
	if p.pod.Spec.RestartPolicy == "" {
		return v1.RestartPolicyAlways
	}
	return p.pod.Spec.RestartPolicy
}

// podGrace is the pod's termination grace period.
func (p *planner) podGrace() time.Duration {
	return time.Duration(podspec.GracePeriodSeconds(p.pod)) * time.Second
}

// kill adds inst to ContainersToKill once.
func (p *planner) kill(inst *observed.Container, reason, message string, grace time.Duration) {
	if p.killed[inst.ID] {
		return
	}
	p.killed[inst.ID] = true
	p.a.ContainersToKill = append(p.a.ContainersToKill, Kill{
		ID: inst.ID, Name: inst.Name, Reason: reason, Message: message, GracePeriod: grace,
	})
	p.reason("kill container %s (%s): %s", inst.Name, inst.ID, message)
}

// killRunning kills every running container not already being killed.
func (p *planner) killRunning(reason, message string) {
	for _, inst := range p.st.Running() {
		p.kill(inst, reason, message, p.podGrace())
	}
}

// anythingRuns reports whether the pod has a running container or a ready
// sandbox, i.e. whether killing it would change anything.
func (p *planner) anythingRuns() bool {
	if len(p.st.Running()) > 0 {
		return true
	}
	for _, s := range p.st.Sandboxes {
		if s.State == observed.SandboxReady {
			return true
		}
	}
	return false
}

// stopPod sets KillPod (if anything runs), kills every running container
// and drops any start: the pod stays down.
func (p *planner) stopPod(reason, message string) {
	p.stopped = true
	p.a.InitContainersToStart = nil
	p.a.ContainersToStart = nil
	p.a.EphemeralContainersToStart = nil
	for name, w := range p.a.Waiting {
		if w.Reason == ReasonCrashLoopBackOff {
			delete(p.a.Waiting, name)
		}
	}
	if !p.anythingRuns() {
		return
	}
	p.a.KillPod = true
	p.reason("kill pod: %s", message)
	p.killRunning(reason, message)
}

func (p *planner) wait(name string, w Waiting) {
	if p.a.Waiting == nil {
		p.a.Waiting = map[string]Waiting{}
	}
	p.a.Waiting[name] = w
}

// newest is the newest instance of the named container in any sandbox: it
// carries the restart count and back-off of the container.
func (p *planner) newest(name string) *observed.Container {
	return p.st.Newest(name)
}

// newestIn is the newest instance of the named container in the sandbox.
func (p *planner) newestIn(name, sandboxID string) *observed.Container {
	for i := range p.st.Containers {
		c := &p.st.Containers[i]
		if c.Name == name && c.SandboxID == sandboxID {
			return c
		}
	}
	return nil
}

// kind says which list of the spec a container is in.
type kind int

const (
	appContainer kind = iota
	initContainer
)

func (k kind) String() string {
	if k == initContainer {
		return "init container"
	}
	return "container"
}

// start starts the idx-th container of kind k now, or, if a crash-loop
// back-off holds it, makes it wait. It reports whether it started.
func (p *planner) start(k kind, idx int, why string) bool {
	c := p.spec(k, idx)
	prev := p.newest(c.Name)
	// A new spec, or new resources a resize restarts it for, start the
	// back-off afresh: neither is a crash.
	fresh := prev != nil && specChanged(prev.Hash, ContainerHash(c))
	if prev != nil && prev.State == observed.ContainerRunning {
		_, resized := p.in.ResizeRestarts[prev.ID]
		fresh = fresh || resized
	}
	r := nextInstance(prev, p.in.Now, fresh)
	if !r.until.IsZero() {
		msg := backoffMessage(p.pod, c.Name, r.delay)
		p.wait(c.Name, Waiting{Reason: ReasonCrashLoopBackOff, Message: msg, Until: r.until})
		p.reason("wait %s %s: %s (%s)", k, c.Name, msg, why)
		return false
	}
	s := Start{Index: idx, RestartCount: r.count, BackoffStep: r.step, Reason: why}
	if k == initContainer {
		p.a.InitContainersToStart = append(p.a.InitContainersToStart, s)
	} else {
		p.a.ContainersToStart = append(p.a.ContainersToStart, s)
	}
	p.reason("start %s %s: %s", k, c.Name, why)
	return true
}

func (p *planner) spec(k kind, idx int) *v1.Container {
	if k == initContainer {
		return &p.pod.Spec.InitContainers[idx]
	}
	return &p.pod.Spec.Containers[idx]
}

// probeKill kills a running instance whose liveness or startup probe failed.
func (p *planner) probeKill(c *v1.Container, inst *observed.Container, f ProbeFailure, restart bool) {
	reason, probe := ReasonLivenessProbe, c.LivenessProbe
	if f.Probe == ProbeStartup {
		reason, probe = ReasonStartupProbe, c.StartupProbe
	}
	grace := p.podGrace()
	if probe != nil && probe.TerminationGracePeriodSeconds != nil {
		grace = time.Duration(*probe.TerminationGracePeriodSeconds) * time.Second
	}
	msg := fmt.Sprintf("%s probe failed", probeName(f))
	if f.Message != "" {
		msg += ": " + f.Message
	}
	if restart {
		msg += ", will be restarted"
	}
	p.kill(inst, reason, msg, grace)
}

func probeName(f ProbeFailure) string {
	if f.Probe == ProbeStartup {
		return ProbeStartup
	}
	return ProbeLiveness
}

// killUnknown kills an instance in the created or unknown state before it
// is started again.
func (p *planner) killUnknown(inst *observed.Container) {
	p.kill(inst, ReasonUnknown, fmt.Sprintf("container is in %q state, killing it before restart", inst.State), p.podGrace())
}

// killChanged kills a running instance whose spec changed.
func (p *planner) killChanged(c *v1.Container, inst *observed.Container) {
	p.kill(inst, ReasonSpecChanged,
		fmt.Sprintf("container definition changed (hash %s, now %s), will be restarted", inst.Hash, ContainerHash(c)),
		p.podGrace())
}
