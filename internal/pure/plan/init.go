package plan

import (
	"github.com/nodelet/nodelet/internal/pure/observed"
	"github.com/nodelet/nodelet/internal/pure/podspec"
)

// planInit plans the init containers in the current sandbox and reports
// whether the pod is initialized there. Only instances in this sandbox
// count: a new sandbox starts initialization afresh.
//
// Progress is read from the latest init container that has an instance (or
// from any container having one, which means initialization finished), as
// the kubelet does, so that init containers removed by garbage collection
// are not run again:
//
//	for each init container, in order:
//	  before the latest started one  regular: done; sidecar: kept running
//	                                 (returned in upkeep, planned by the
//	                                 caller unless the pod stops)
//	  regular                        missing → start; running → wait;
//	                                 exited 0 → next; failed → restart if
//	                                 podspec.ShouldRestart, else PodFailed;
//	                                 created/unknown → kill and restart
//	                                 unless its restartPolicy (else the
//	                                 pod's) is Never, else PodFailed
//	  sidecar                        running, past its startup probe → next;
//	                                 otherwise (re)start it and wait
func (p *planner) planInit(sandboxID string) (initialized bool, upkeep []int) {
	inits := p.pod.Spec.InitContainers
	latest := -1
	if p.anyContainerIn(sandboxID) {
		latest = len(inits)
	} else {
		for i := range inits {
			if p.newestIn(inits[i].Name, sandboxID) != nil {
				latest = i
			}
		}
	}
	for i := range inits {
		c := &inits[i]
		inst := p.newestIn(c.Name, sandboxID)
		switch {
		case i < latest:
			if podspec.IsSidecar(c) {
				upkeep = append(upkeep, i)
			}
		case podspec.IsSidecar(c):
			if !p.planSidecar(i, inst, false) {
				return false, upkeep
			}
		default:
			if !p.planRegularInit(i, inst) {
				return false, upkeep
			}
		}
	}
	return true, upkeep
}

// upkeepSidecars keeps the sidecars that later init containers already got
// past running.
func (p *planner) upkeepSidecars(sandboxID string, upkeep []int) {
	for _, i := range upkeep {
		p.planSidecar(i, p.newestIn(p.pod.Spec.InitContainers[i].Name, sandboxID), true)
	}
}

func (p *planner) anyContainerIn(sandboxID string) bool {
	for i := range p.pod.Spec.Containers {
		if p.newestIn(p.pod.Spec.Containers[i].Name, sandboxID) != nil {
			return true
		}
	}
	return false
}

// planRegularInit plans the next regular init container and reports whether
// it has succeeded.
func (p *planner) planRegularInit(idx int, inst *observed.Container) bool {
	c := &p.pod.Spec.InitContainers[idx]
	switch {
	case inst == nil:
		p.start(initContainer, idx, "next init container")
	case inst.State == observed.ContainerRunning:
		p.reason("wait for init container %s: running", c.Name)
	case inst.State == observed.ContainerExited && inst.ExitCode == 0:
		return true
	case inst.State == observed.ContainerExited && !podspec.ShouldRestart(p.pod, c, inst.ExitCode):
		p.a.PodFailed = true
		p.a.Failure = initContainerFailed
		p.reason("pod failed: init container %s %s", c.Name, p.exitedWhy(c, inst))
	case inst.State == observed.ContainerExited:
		p.start(initContainer, idx, p.exitedWhy(c, inst))
	case inst.State != observed.ContainerCreated && !podspec.ShouldRestartAfterKill(p.pod, c):
		p.a.PodFailed = true
		p.a.Failure = initContainerFailed
		p.reason("pod failed: init container %s is in %q state and restartPolicy=%s", c.Name, inst.State.String(), podspec.EffectiveRestartPolicy(p.pod, c))
	default:
		p.killUnknown(inst)
		p.start(initContainer, idx, "previous instance in \""+inst.State.String()+"\" state")
	}
	return false
}

// planSidecar plans a sidecar and reports whether the init containers after
// it may start: it runs and its startup probe, if any, succeeded. A sidecar
// is restarted whenever it is not running, whatever the pod's restart
// policy. settled means later init containers have started already, so it
// is only kept running.
func (p *planner) planSidecar(idx int, inst *observed.Container, settled bool) bool {
	c := &p.pod.Spec.InitContainers[idx]
	if inst == nil {
		why := "next init container (sidecar)"
		if settled {
			why = "sidecar has no instance in this sandbox"
		}
		p.start(initContainer, idx, why)
		return false
	}
	switch inst.State {
	case observed.ContainerRunning:
		if specChanged(inst.Hash, ContainerHash(c)) {
			p.killChanged(c, inst)
			p.start(initContainer, idx, "sidecar definition changed")
			return false
		}
		if msg, ok := p.in.ResizeRestarts[inst.ID]; ok {
			p.kill(inst, ReasonResize, msg, p.podGrace())
			p.start(initContainer, idx, "sidecar resize requires restart")
			return false
		}
		if f, failed := p.in.LivenessFailed[inst.ID]; failed {
			p.probeKill(c, inst, f, true)
			p.start(initContainer, idx, "sidecar "+probeName(f)+" probe failed")
			return false
		}
		if c.StartupProbe != nil && !p.in.StartupDone[inst.ID] {
			if !settled {
				p.reason("wait for sidecar %s: startup probe has not succeeded yet", c.Name)
			}
			return false
		}
		return true
	case observed.ContainerExited:
		p.start(initContainer, idx, p.exitedWhy(c, inst)+" (sidecar)")
	default:
		p.killUnknown(inst)
		p.start(initContainer, idx, "previous instance in \""+inst.State.String()+"\" state")
	}
	return false
}
