package podspec

import v1 "k8s.io/api/core/v1"

// GracePeriodSeconds is the pod's own termination grace period: its
// terminationGracePeriodSeconds, else the API's default (30 s) for a spec
// that has none (a static pod's, say). What shortens it for one stop (a
// deletion's grace, an eviction, a probe's own) is the caller's.
func GracePeriodSeconds(pod *v1.Pod) int64 {
	if g := pod.Spec.TerminationGracePeriodSeconds; g != nil {
		return *g
	}
	return v1.DefaultTerminationGracePeriodSeconds
}
