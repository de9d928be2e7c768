package status

import (
	"fmt"
	"math/rand"
	"reflect"
	"testing"
	"testing/quick"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/internal/pure/plan"
)

// restartCase is one container that exited, with its own restart policy
// and rules, in a pod with a restart policy. Init says whether it is a
// regular init container (the app container then never ran) or the app
// container.
type restartCase struct {
	Pod      v1.RestartPolicy
	Policy   *v1.ContainerRestartPolicy
	Rules    []v1.ContainerRestartRule
	ExitCode int32
	Init     bool
}

func (restartCase) Generate(r *rand.Rand, _ int) reflect.Value {
	pick := func(n int) int { return r.Intn(n) }
	c := restartCase{
		Pod:      []v1.RestartPolicy{v1.RestartPolicyAlways, v1.RestartPolicyOnFailure, v1.RestartPolicyNever}[pick(3)],
		ExitCode: []int32{0, 1, 42}[pick(3)],
		Init:     pick(2) == 0,
	}
	if c.Init && c.ExitCode == 0 {
		c.ExitCode = 1 // a succeeded init container is not restarted, whatever the policy
	}
	if p := pick(4); p > 0 {
		policy := []v1.ContainerRestartPolicy{v1.ContainerRestartPolicyAlways, v1.ContainerRestartPolicyOnFailure, v1.ContainerRestartPolicyNever}[p-1]
		if c.Init && policy == v1.ContainerRestartPolicyAlways {
			policy = v1.ContainerRestartPolicyNever // Always makes it a sidecar
		}
		c.Policy = &policy
		if pick(2) == 0 {
			op := []v1.ContainerRestartRuleOnExitCodesOperator{v1.ContainerRestartRuleOnExitCodesOpIn, v1.ContainerRestartRuleOnExitCodesOpNotIn}[pick(2)]
			c.Rules = []v1.ContainerRestartRule{{Action: v1.ContainerRestartRuleActionRestart,
				ExitCodes: &v1.ContainerRestartRuleOnExitCodes{Operator: op, Values: []int32{42}}}}
		}
	}
	return reflect.ValueOf(c)
}

// GoString shows the policy rather than its address, for quick's message.
func (c restartCase) GoString() string {
	return fmt.Sprintf("pod %s, container %s, rules %v, exit code %d, init %v", c.Pod, ptr.Deref(c.Policy, "-"), c.Rules, c.ExitCode, c.Init)
}

// The planner restarts an exited container exactly when the status says
// the pod is not done with it: plan and status read the one restart rule
// (podspec.ShouldRestart), so they cannot disagree.
func TestPlanAndStatusAgreeOnRestarts(t *testing.T) {
	check := func(c restartCase) bool {
		name := "a"
		opts := []podOpt{policy(c.Pod), app("a")}
		if c.Init {
			name = "i"
			opts = append([]podOpt{initc("i")}, opts...)
		}
		opts = append(opts, withContainer(name, func(ctr *v1.Container) {
			ctr.RestartPolicy, ctr.RestartPolicyRules = c.Policy, c.Rules
		}))
		pod := newPod(opts...)
		o := obs(exited(name, name+"1", 1, c.ExitCode, ""))

		a := plan.Compute(plan.Input{Pod: pod, Status: o, Now: now})
		restarted := !a.PodFailed && (len(a.ContainersToStart)+len(a.InitContainersToStart) > 0 ||
			a.Waiting[name].Reason == plan.ReasonCrashLoopBackOff)
		phase := Generate(facts(pod, o)).Phase
		done := phase == v1.PodSucceeded || phase == v1.PodFailed
		if restarted == done {
			t.Logf("%#v: plan restarts=%v (%+v), status phase %s", c, restarted, a, phase)
			return false
		}
		return true
	}
	if err := quick.Check(check, &quick.Config{MaxCount: 1000}); err != nil {
		t.Error(err)
	}
}
