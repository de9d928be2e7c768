package podspec

import v1 "k8s.io/api/core/v1"

// EphemeralContainer is an ephemeral container's common part as a
// container: what creating, logging and reporting it need. The two types
// have the same fields.
func EphemeralContainer(ec *v1.EphemeralContainer) *v1.Container {
	return (*v1.Container)(&ec.EphemeralContainerCommon)
}

// EphemeralContainers are the pod's ephemeral containers as containers,
// in spec order.
func EphemeralContainers(pod *v1.Pod) []v1.Container {
	if len(pod.Spec.EphemeralContainers) == 0 {
		return nil
	}
	out := make([]v1.Container, 0, len(pod.Spec.EphemeralContainers))
	for i := range pod.Spec.EphemeralContainers {
		out = append(out, *EphemeralContainer(&pod.Spec.EphemeralContainers[i]))
	}
	return out
}
