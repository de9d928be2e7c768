package podspec

import (
	v1 "k8s.io/api/core/v1"
)

// qosResources are the resources that decide a pod's QoS class.
var qosResources = []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory}

// QOSClass is the pod's QoS class (the kubelet's qos.GetPodQOS): the class
// already in the pod's status if any (it is immutable), else computed from
// pod-level resources when given, else from every init and app container:
// BestEffort when no container sets a CPU or memory request or limit,
// Guaranteed when every container sets CPU and memory limits equal to its
// requests, Burstable otherwise. A limit without a request is compared
// with a request of zero, as the kubelet does on a pod the API server has
// not defaulted (it sets a missing request to the limit).
func QOSClass(pod *v1.Pod) v1.PodQOSClass {
	if pod.Status.QOSClass != "" {
		return pod.Status.QOSClass
	}
	if pod.Spec.Resources != nil {
		return resourcesQOS(pod.Spec.Resources)
	}
	var class v1.PodQOSClass
	for _, list := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			c := resourcesQOS(&list[i].Resources)
			switch {
			case c == v1.PodQOSBurstable:
				return c
			case class == "":
				class = c
			case class != c:
				// One BestEffort and one Guaranteed container.
				return v1.PodQOSBurstable
			}
		}
	}
	if class == "" {
		return v1.PodQOSBestEffort
	}
	return class
}

// resourcesQOS is the class of one set of requirements.
func resourcesQOS(r *v1.ResourceRequirements) v1.PodQOSClass {
	if len(r.Requests) == 0 && len(r.Limits) == 0 {
		return v1.PodQOSBestEffort
	}
	var class v1.PodQOSClass
	for _, name := range qosResources {
		req, lim := r.Requests[name], r.Limits[name]
		if !req.Equal(lim) {
			return v1.PodQOSBurstable
		}
		c := v1.PodQOSGuaranteed
		if req.IsZero() {
			c = v1.PodQOSBestEffort
		}
		if class != "" && class != c {
			return v1.PodQOSBurstable
		}
		class = c
	}
	return class
}
