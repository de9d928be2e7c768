package podspec

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

func rules(action v1.ContainerRestartRuleAction, op v1.ContainerRestartRuleOnExitCodesOperator, codes ...int32) []v1.ContainerRestartRule {
	return []v1.ContainerRestartRule{{Action: action, ExitCodes: &v1.ContainerRestartRuleOnExitCodes{Operator: op, Values: codes}}}
}

func TestShouldRestart(t *testing.T) {
	always, onFailure, never := ptr.To(v1.ContainerRestartPolicyAlways), ptr.To(v1.ContainerRestartPolicyOnFailure), ptr.To(v1.ContainerRestartPolicyNever)
	restart, restartAll := v1.ContainerRestartRuleActionRestart, v1.ContainerRestartRuleActionRestartAllContainers
	in, notIn := v1.ContainerRestartRuleOnExitCodesOpIn, v1.ContainerRestartRuleOnExitCodesOpNotIn
	for _, tc := range []struct {
		name   string
		pod    v1.RestartPolicy
		policy *v1.ContainerRestartPolicy
		rules  []v1.ContainerRestartRule
		code   int32
		want   bool
	}{
		{"pod Always, exit 0", v1.RestartPolicyAlways, nil, nil, 0, true},
		{"pod Always, exit 1", v1.RestartPolicyAlways, nil, nil, 1, true},
		{"pod unset is Always", "", nil, nil, 0, true},
		{"pod OnFailure, exit 0", v1.RestartPolicyOnFailure, nil, nil, 0, false},
		{"pod OnFailure, exit 1", v1.RestartPolicyOnFailure, nil, nil, 1, true},
		{"pod Never, exit 0", v1.RestartPolicyNever, nil, nil, 0, false},
		{"pod Never, exit 1", v1.RestartPolicyNever, nil, nil, 1, false},
		{"container Always under pod Never", v1.RestartPolicyNever, always, nil, 0, true},
		{"container OnFailure under pod Always, exit 0", v1.RestartPolicyAlways, onFailure, nil, 0, false},
		{"container OnFailure under pod Never, exit 2", v1.RestartPolicyNever, onFailure, nil, 2, true},
		{"container Never under pod Always", v1.RestartPolicyAlways, never, nil, 1, false},
		{"container Never under pod OnFailure", v1.RestartPolicyOnFailure, never, nil, 1, false},
		{"rule In matches", v1.RestartPolicyNever, never, rules(restart, in, 42, 43), 43, true},
		{"rule In misses", v1.RestartPolicyNever, never, rules(restart, in, 42), 1, false},
		{"rule In misses, container OnFailure", v1.RestartPolicyNever, onFailure, rules(restart, in, 42), 1, true},
		{"rule NotIn matches", v1.RestartPolicyAlways, never, rules(restart, notIn, 0), 3, true},
		{"rule NotIn misses", v1.RestartPolicyAlways, never, rules(restart, notIn, 0), 0, false},
		{"rule RestartAllContainers restarts", v1.RestartPolicyNever, never, rules(restartAll, in, 7), 7, true},
		{"rule with an unknown action falls through", v1.RestartPolicyAlways, never, rules("Pause", in, 7), 7, false},
		{"rule with an unknown operator never matches", v1.RestartPolicyNever, never, rules(restart, "Maybe", 7), 7, false},
		{"rule without exitCodes never matches", v1.RestartPolicyNever, never, []v1.ContainerRestartRule{{Action: restart}}, 7, false},
		{"rules ignored without container policy", v1.RestartPolicyNever, nil, rules(restart, in, 42), 42, false},
		{"first matching rule wins", v1.RestartPolicyAlways, never, append(rules("Pause", notIn, 9), rules(restart, in, 1)...), 1, false},
		{"a later rule matches when earlier ones do not", v1.RestartPolicyAlways, never, append(rules(restart, in, 9), rules(restart, in, 1)...), 1, true},
		{"sidecar restarts after exit 0 under pod Never", v1.RestartPolicyNever, always, nil, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := &v1.Pod{Spec: v1.PodSpec{RestartPolicy: tc.pod}}
			c := &v1.Container{Name: "a", RestartPolicy: tc.policy, RestartPolicyRules: tc.rules}
			if got := ShouldRestart(pod, c, tc.code); got != tc.want {
				t.Errorf("ShouldRestart(exit %d) = %v, want %v", tc.code, got, tc.want)
			}
		})
	}
}

func TestShouldRestartAfterKill(t *testing.T) {
	always, onFailure, never := ptr.To(v1.ContainerRestartPolicyAlways), ptr.To(v1.ContainerRestartPolicyOnFailure), ptr.To(v1.ContainerRestartPolicyNever)
	for _, tc := range []struct {
		pod    v1.RestartPolicy
		policy *v1.ContainerRestartPolicy
		rules  []v1.ContainerRestartRule
		want   bool
	}{
		{"", nil, nil, true},
		{v1.RestartPolicyAlways, nil, nil, true},
		{v1.RestartPolicyOnFailure, nil, nil, true},
		{v1.RestartPolicyNever, nil, nil, false},
		{v1.RestartPolicyNever, always, nil, true},
		{v1.RestartPolicyNever, onFailure, nil, true},
		{v1.RestartPolicyAlways, never, nil, false},
		// No exit code: a rule that would restart on any code is not read.
		{v1.RestartPolicyAlways, never, rules(v1.ContainerRestartRuleActionRestart, v1.ContainerRestartRuleOnExitCodesOpNotIn), false},
	} {
		pod := &v1.Pod{Spec: v1.PodSpec{RestartPolicy: tc.pod}}
		c := &v1.Container{Name: "a", RestartPolicy: tc.policy, RestartPolicyRules: tc.rules}
		if got := ShouldRestartAfterKill(pod, c); got != tc.want {
			t.Errorf("pod %q, container %v, rules %v: ShouldRestartAfterKill = %v, want %v", tc.pod, ptr.Deref(tc.policy, ""), tc.rules, got, tc.want)
		}
	}
}

func TestEffectiveRestartPolicy(t *testing.T) {
	for _, tc := range []struct {
		pod    v1.RestartPolicy
		policy *v1.ContainerRestartPolicy
		want   string
	}{
		{"", nil, "Always"},
		{v1.RestartPolicyNever, nil, "Never"},
		{v1.RestartPolicyAlways, ptr.To(v1.ContainerRestartPolicyOnFailure), "OnFailure"},
	} {
		pod := &v1.Pod{Spec: v1.PodSpec{RestartPolicy: tc.pod}}
		if got := EffectiveRestartPolicy(pod, &v1.Container{RestartPolicy: tc.policy}); got != tc.want {
			t.Errorf("pod %q, container %v: %q, want %q", tc.pod, ptr.Deref(tc.policy, ""), got, tc.want)
		}
	}
}

func TestIsSidecar(t *testing.T) {
	for _, tc := range []struct {
		policy *v1.ContainerRestartPolicy
		want   bool
	}{
		{nil, false},
		{ptr.To(v1.ContainerRestartPolicyAlways), true},
		{ptr.To(v1.ContainerRestartPolicyOnFailure), false},
		{ptr.To(v1.ContainerRestartPolicyNever), false},
	} {
		if got := IsSidecar(&v1.Container{RestartPolicy: tc.policy}); got != tc.want {
			t.Errorf("IsSidecar(restartPolicy %v) = %v, want %v", ptr.Deref(tc.policy, ""), got, tc.want)
		}
	}
}

func TestManaged(t *testing.T) {
	sel := ManagedSelector()
	if !IsManaged(sel) {
		t.Errorf("IsManaged(ManagedSelector()) = false")
	}
	sel["x"] = "y"
	if len(ManagedSelector()) != 1 {
		t.Errorf("ManagedSelector shares its map between calls")
	}
	if IsManaged(map[string]string{LabelManagedBy: "someone-else"}) || IsManaged(nil) {
		t.Errorf("IsManaged accepts an object nodelet does not own")
	}
}
