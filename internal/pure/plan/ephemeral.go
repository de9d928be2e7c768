package plan

// planEphemeral starts each ephemeral container of the spec that has never
// been started: no instance of its name exists in any sandbox of the pod.
// As the kubelet's computePodActions, this happens in the current sandbox
// whether or not the pod is initialized (an ephemeral container debugs a
// pod stuck in its init containers too), and an ephemeral container is
// never restarted, never killed for a spec change, and not started again
// in a new sandbox. A pod being deleted, or that the plan stops (failed,
// completed), starts none. It is planned last, once that is known.
func (p *planner) planEphemeral() {
	if p.pod.DeletionTimestamp != nil || p.stopped || p.a.PodFailed {
		return
	}
	for i := range p.pod.Spec.EphemeralContainers {
		name := p.pod.Spec.EphemeralContainers[i].Name
		if p.newest(name) != nil {
			continue
		}
		p.a.EphemeralContainersToStart = append(p.a.EphemeralContainersToStart, Start{Index: i, Reason: "not created yet"})
		p.reason("start ephemeral container %s: not created yet", name)
	}
}
