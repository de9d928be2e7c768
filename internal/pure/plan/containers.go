package plan

import (
	"fmt"

	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/internal/pure/observed"
	"github.com/nodelet/nodelet/internal/pure/podspec"
)

// planContainers plans the app containers of an initialized pod, from the
// newest instance of each (in any sandbox):
//
//	none             start
//	running          kill and restart if its spec changed or a resize
//	                 requires it (any policy);
//	                 kill if a liveness or startup probe failed, restart
//	                 unless its restartPolicy (else the pod's) is Never;
//	                 else keep
//	exited           restart if podspec.ShouldRestart says so (the
//	                 container's restart rules and policy, else the pod's),
//	                 after the crash-loop back-off
//	created/unknown  kill and start again
//
// If then nothing is kept, started or waiting for its back-off, the pod has
// completed: it is killed, sidecars included, and planContainers reports
// true.
func (p *planner) planContainers() (completed bool) {
	keep, pending := 0, 0
	for i := range p.pod.Spec.Containers {
		c := &p.pod.Spec.Containers[i]
		inst := p.newest(c.Name)
		switch {
		case inst == nil:
			p.start(appContainer, i, "not created yet")
			pending++
		case inst.State == observed.ContainerRunning:
			k, r := p.planRunning(i, inst)
			keep, pending = keep+k, pending+r
		case inst.State == observed.ContainerExited:
			if podspec.ShouldRestart(p.pod, c, inst.ExitCode) {
				p.start(appContainer, i, p.exitedWhy(c, inst))
				pending++
			} else {
				p.reason("not restarting container %s: %s", c.Name, p.exitedWhy(c, inst))
			}
		default:
			p.killUnknown(inst)
			p.start(appContainer, i, "previous instance in \""+inst.State.String()+"\" state")
			pending++
		}
	}
	if keep > 0 || pending > 0 {
		return false
	}
	p.stopPod(ReasonPodCompleted, "the pod has completed: no container runs or will be restarted")
	return true
}

// planRunning plans a running instance of the idx-th container; it returns
// 1, 0 if the instance is kept, 0, 1 if it is replaced by a new one, and
// 0, 0 if it is killed for good.
func (p *planner) planRunning(idx int, inst *observed.Container) (keep, pending int) {
	c := &p.pod.Spec.Containers[idx]
	if specChanged(inst.Hash, ContainerHash(c)) {
		p.killChanged(c, inst)
		p.start(appContainer, idx, "definition changed")
		return 0, 1
	}
	if msg, ok := p.in.ResizeRestarts[inst.ID]; ok {
		p.kill(inst, ReasonResize, msg, p.podGrace())
		p.start(appContainer, idx, "resize requires restart")
		return 0, 1
	}
	f, failed := p.in.LivenessFailed[inst.ID]
	if !failed {
		return 1, 0
	}
	restart := podspec.ShouldRestartAfterKill(p.pod, c)
	p.probeKill(c, inst, f, restart)
	if !restart {
		return 0, 0
	}
	p.start(appContainer, idx, probeName(f)+" probe failed")
	return 0, 1
}

// exitedWhy says why an exited instance of c is restarted or not: the
// restart rule that matched its exit code, else the restart policy that
// applies to it.
func (p *planner) exitedWhy(c *v1.Container, inst *observed.Container) string {
	if r, ok := podspec.MatchingRestartRule(c, inst.ExitCode); ok && c.RestartPolicy != nil {
		return fmt.Sprintf("exited with code %d, restart rule %s exit code %s %v", inst.ExitCode, r.Action, r.ExitCodes.Operator, r.ExitCodes.Values)
	}
	return fmt.Sprintf("exited with code %d, restartPolicy=%s", inst.ExitCode, podspec.EffectiveRestartPolicy(p.pod, c))
}
