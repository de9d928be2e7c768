package podspec

import v1 "k8s.io/api/core/v1"

// The built-in priority classes every API server creates, and the
// priority from which a pod is system-critical (the scheduling API's
// SystemCriticalPriority).
const (
	SystemNodeCritical      = "system-node-critical"
	SystemClusterCritical   = "system-cluster-critical"
	SystemCriticalPriority  = int32(2000000000)
	systemNodeCriticalValue = SystemCriticalPriority + 1000
)

// Priority is the pod's priority: spec.priority, which the API server's
// Priority admission sets from the priority class. Static pods never went
// through it, so the two built-in system classes are resolved here; any
// other class without spec.priority is 0, as an unset priority is. A pod
// from the API server without spec.priority is 0 whatever its class, as
// for the kubelet (its cluster admits pods without the Priority plugin).
func Priority(pod *v1.Pod) int32 {
	if pod.Spec.Priority != nil {
		return *pod.Spec.Priority
	}
	if pod.Annotations[AnnotationConfigSource] == ConfigSourceAPI {
		return 0
	}
	switch pod.Spec.PriorityClassName {
	case SystemNodeCritical:
		return systemNodeCriticalValue
	case SystemClusterCritical:
		return SystemCriticalPriority
	}
	return 0
}

// IsCritical reports whether the node must keep the pod running under
// pressure: never evicted, admitted under pressure, stopped last at
// shutdown; its containers scored as Guaranteed ones for the OOM killer
// when it is also of class system-node-critical (IsNodeCritical). That is
// a pod of system-critical priority. It is the one critical-pod rule of
// nodelet: eviction, admission, shutdown and OOM scores all ask it.
//
// The kubelet also counts every static and mirror pod as critical. nodelet
// does not: standalone, every pod is static, and a node that could evict
// none of them would leave the choice to the kernel's OOM killer. A static
// pod that must survive pressure says so with priorityClassName
// system-node-critical or system-cluster-critical, as the control plane's
// static pods do.
func IsCritical(pod *v1.Pod) bool {
	return Priority(pod) >= SystemCriticalPriority
}

// IsNodeCritical reports whether the pod is critical (IsCritical) and of
// priority class system-node-critical: such a pod's containers get the
// OOM score of a Guaranteed pod, whatever its QoS class, as the kubelet's
// IsNodeCriticalPod gives them. The kubelet counts a static or mirror pod
// of that class as critical whatever its priority; here such a pod is
// critical through the class itself (Priority resolves it), so the two
// agree but for a static pod that sets both the class and a lower
// spec.priority, which the API server would never admit.
func IsNodeCritical(pod *v1.Pod) bool {
	return pod.Spec.PriorityClassName == SystemNodeCritical && IsCritical(pod)
}
