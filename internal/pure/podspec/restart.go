package podspec

import (
	"slices"

	v1 "k8s.io/api/core/v1"
)

// ShouldRestart is the one restart rule for a container c of pod that
// exited with exitCode (the kubelet's ContainerShouldRestart, v1.37 with
// ContainerRestartRules and RestartAllContainersOnContainerExits on):
//
//  1. when c has its own restartPolicy, the first of its
//     restartPolicyRules whose exitCodes match decides: action Restart (or
//     RestartAllContainers) restarts it; another action falls through;
//  2. then c's own restartPolicy, when set: Always restarts, OnFailure
//     restarts after a non-zero exit, Never does not;
//  3. else the pod's restartPolicy, the same way; unset means Always.
//
// A sidecar (restartPolicy Always) is therefore always restarted. Callers
// apply what comes before the rule themselves: a pod being deleted
// restarts nothing, and a succeeded regular init container is not run
// again.
func ShouldRestart(pod *v1.Pod, c *v1.Container, exitCode int32) bool {
	if c.RestartPolicy != nil {
		if r, ok := MatchingRestartRule(c, exitCode); ok {
			switch r.Action {
			case v1.ContainerRestartRuleActionRestart, v1.ContainerRestartRuleActionRestartAllContainers:
				return true
			}
		}
		switch *c.RestartPolicy {
		case v1.ContainerRestartPolicyAlways:
			return true
		case v1.ContainerRestartPolicyOnFailure:
			return exitCode != 0
		case v1.ContainerRestartPolicyNever:
			return false
		}
	}
	switch pod.Spec.RestartPolicy {
	case v1.RestartPolicyOnFailure:
		return exitCode != 0
	case v1.RestartPolicyNever:
		return false
	}
	return true
}

// ShouldRestartAfterKill is the rule for a container that did not exit by
// itself: one nodelet kills because a liveness or startup probe failed, or
// a regular init container the runtime reports in an unknown state. There
// is no exit code, so restartPolicyRules do not apply: c's own
// restartPolicy decides when set, else the pod's; anything but Never
// restarts (the kubelet's computePodActions and
// computeInitContainerActions).
func ShouldRestartAfterKill(pod *v1.Pod, c *v1.Container) bool {
	if c.RestartPolicy != nil {
		return *c.RestartPolicy != v1.ContainerRestartPolicyNever
	}
	return pod.Spec.RestartPolicy != v1.RestartPolicyNever
}

// EffectiveRestartPolicy names the policy ShouldRestart falls back to for
// c when no rule matches: c's own restartPolicy, else the pod's (Always
// when unset). It is for reasons and messages.
func EffectiveRestartPolicy(pod *v1.Pod, c *v1.Container) string {
	if c.RestartPolicy != nil {
		return string(*c.RestartPolicy)
	}
	if pod.Spec.RestartPolicy == "" {
		return string(v1.RestartPolicyAlways)
	}
	return string(pod.Spec.RestartPolicy)
}

// MatchingRestartRule returns the first of c's restartPolicyRules whose
// exitCodes match exitCode. Rules without exitCodes, or with an unknown
// operator, never match. ShouldRestart reads the rules only when c has its
// own restartPolicy.
func MatchingRestartRule(c *v1.Container, exitCode int32) (v1.ContainerRestartRule, bool) {
	for _, r := range c.RestartPolicyRules {
		if r.ExitCodes == nil {
			continue
		}
		in := slices.Contains(r.ExitCodes.Values, exitCode)
		switch r.ExitCodes.Operator {
		case v1.ContainerRestartRuleOnExitCodesOpIn:
			if in {
				return r, true
			}
		case v1.ContainerRestartRuleOnExitCodesOpNotIn:
			if !in {
				return r, true
			}
		}
	}
	return v1.ContainerRestartRule{}, false
}
