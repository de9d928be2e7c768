package plan

import (
	"fmt"

	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/internal/pure/observed"
)

// sandboxDecision is whether the pod needs a new sandbox.
type sandboxDecision struct {
	create  bool
	attempt uint32 // of the sandbox to create, or of the one kept
	id      string // the sandbox kept
	why     string
}

// sandboxChange is the kubelet's PodSandboxChanged plus the fingerprint.
// The new attempt is one more than the highest attempt seen, so that the
// new sandbox's name never collides with an old one's.
func sandboxChange(pod *v1.Pod, st *observed.PodStatus) sandboxDecision {
	if len(st.Sandboxes) == 0 {
		return sandboxDecision{create: true, why: "pod has no sandbox"}
	}
	ready, maxAttempt := 0, uint32(0)
	for _, s := range st.Sandboxes {
		if s.State == observed.SandboxReady {
			ready++
		}
		maxAttempt = max(maxAttempt, s.Attempt)
	}
	newest := st.Sandboxes[0]
	var why string
	switch {
	case ready > 1:
		why = fmt.Sprintf("%d sandboxes are ready", ready)
	case ready == 0:
		why = "no sandbox is ready"
	case newest.State != observed.SandboxReady:
		why = fmt.Sprintf("newest sandbox %s is not ready", newest.ID)
	case newest.NetworkNode != pod.Spec.HostNetwork:
		why = fmt.Sprintf("network mode changed (hostNetwork=%t, sandbox %s on the node's network=%t)",
			pod.Spec.HostNetwork, newest.ID, newest.NetworkNode)
	case !pod.Spec.HostNetwork && len(st.IPs) == 0:
		why = fmt.Sprintf("sandbox %s has no IP", newest.ID)
	case specChanged(newest.Hash, SandboxHash(pod)):
		why = fmt.Sprintf("sandbox spec changed (hash %s, now %s)", newest.Hash, SandboxHash(pod))
	default:
		return sandboxDecision{attempt: newest.Attempt, id: newest.ID}
	}
	return sandboxDecision{create: true, attempt: maxAttempt + 1, why: why}
}

// planNewSandbox plans a pod whose sandbox must be (re)created.
func (p *planner) planNewSandbox(sb sandboxDecision) {
	if why, done := p.finished(); done {
		p.reason("no new sandbox (%s): %s", sb.why, why)
		if p.restartPolicy() == v1.RestartPolicyNever && p.neverRanContainer() != "" {
			p.a.PodFailed = true
			p.a.Failure = initContainerFailed
			p.reason("pod failed: sandbox lost under restartPolicy=Never before container %s ran", p.neverRanContainer())
			p.stopPod(ReasonPodFailed, "the pod has failed")
			return
		}
		p.stopPod(ReasonSandboxChanged, "pod sandbox changed and the pod is finished")
		return
	}
	p.a.KillPod, p.a.CreateSandbox, p.a.Attempt = true, true, sb.attempt
	verb := "create"
	if len(p.st.Sandboxes) > 0 {
		verb = "recreate"
	}
	p.reason("%s sandbox (attempt %d): %s", verb, sb.attempt, sb.why)
	p.killRunning(ReasonSandboxChanged, "pod sandbox changed, it will be killed and re-created")
	if len(p.pod.Spec.InitContainers) > 0 {
		p.start(initContainer, 0, "first init container in a new sandbox")
		for i := range p.pod.Spec.Containers {
			p.wait(p.pod.Spec.Containers[i].Name, Waiting{Reason: ReasonPodInitializing})
		}
		return
	}
	for i := range p.pod.Spec.Containers {
		c := &p.pod.Spec.Containers[i]
		if why, ok := p.runInNewSandbox(c); ok {
			p.start(appContainer, i, why)
		} else {
			p.reason("not starting container %s in the new sandbox: %s", c.Name, why)
		}
	}
}

// runInNewSandbox says whether c runs again in a new sandbox, given its
// earlier instances.
func (p *planner) runInNewSandbox(c *v1.Container) (string, bool) {
	prev := p.newest(c.Name)
	switch {
	case prev == nil:
		return "not created yet", true
	case p.restartPolicy() == v1.RestartPolicyNever:
		return "it has run and restartPolicy=Never", false
	case runsOnce(p.pod, c) && prev.State == observed.ContainerExited && prev.ExitCode == 0:
		return "it succeeded and restartPolicy=OnFailure", false
	}
	return "restarting in the new sandbox", true
}

// runsOnce reports whether c, once it succeeded, is not run again in a new
// sandbox: its own restartPolicy is OnFailure, or it has none and the pod's
// is (the kubelet's computePodActions; its own Never does not count there).
func runsOnce(pod *v1.Pod, c *v1.Container) bool {
	if c.RestartPolicy != nil {
		return *c.RestartPolicy == v1.ContainerRestartPolicyOnFailure
	}
	return pod.Spec.RestartPolicy == v1.RestartPolicyOnFailure
}

// finished reports whether the pod is done and must not get a new sandbox.
// As the kubelet: under restartPolicy Never, a pod that had a sandbox and
// created containers is never given another one (a new sandbox would re-run
// its init containers and move its network); otherwise a pod is finished
// when no container would run again in a new sandbox (all succeeded under
// OnFailure).
func (p *planner) finished() (string, bool) {
	if p.restartPolicy() == v1.RestartPolicyNever && len(p.st.Sandboxes) > 0 && len(p.st.Containers) > 0 {
		return "restartPolicy=Never and the pod's containers have been created", true
	}
	for i := range p.pod.Spec.Containers {
		if _, ok := p.runInNewSandbox(&p.pod.Spec.Containers[i]); ok {
			return "", false
		}
	}
	return "no container needs to run again", true
}

// neverRanContainer is the first container with no instance at all.
func (p *planner) neverRanContainer() string {
	for i := range p.pod.Spec.Containers {
		if name := p.pod.Spec.Containers[i].Name; p.newest(name) == nil {
			return name
		}
	}
	return ""
}
