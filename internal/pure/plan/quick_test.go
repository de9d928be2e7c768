package plan_test

import (
	"fmt"
	"math/rand"
	"reflect"
	"testing"
	"testing/quick"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/internal/pure/observed"
	"github.com/nodelet/nodelet/internal/pure/plan"
)

// appPod is a random pod with only app containers, in a ready sandbox.
type appPod struct {
	Policy     v1.RestartPolicy
	Containers []appContainer
}

// appContainer is the newest instance of one container (Present false: none).
type appContainer struct {
	Present      bool
	State        observed.ContainerState
	ExitCode     int32
	RestartCount int
	BackoffStep  int
	Ran          time.Duration
	FinishedAgo  time.Duration
}

func (appPod) Generate(r *rand.Rand, _ int) reflect.Value {
	policies := []v1.RestartPolicy{v1.RestartPolicyAlways, v1.RestartPolicyOnFailure, v1.RestartPolicyNever}
	states := []observed.ContainerState{observed.ContainerRunning, observed.ContainerExited, observed.ContainerCreated, observed.ContainerUnknown}
	p := appPod{Policy: policies[r.Intn(len(policies))]}
	for range 1 + r.Intn(4) {
		p.Containers = append(p.Containers, appContainer{
			Present:      r.Intn(5) > 0,
			State:        states[r.Intn(len(states))],
			ExitCode:     int32(r.Intn(2)),
			RestartCount: r.Intn(10),
			BackoffStep:  r.Intn(9),
			Ran:          time.Duration(r.Intn(1200)) * time.Second,
			FinishedAgo:  time.Duration(r.Intn(400)) * time.Second,
		})
	}
	return reflect.ValueOf(p)
}

func (p appPod) input() plan.Input {
	pod := &v1.Pod{}
	pod.Name, pod.Namespace, pod.UID = "web", "default", "uid-1"
	pod.Spec.RestartPolicy = p.Policy
	st := &observed.PodStatus{
		Sandboxes: []observed.Sandbox{{ID: "s1", State: observed.SandboxReady}},
		IPs:       []string{"10.88.0.2"},
	}
	for i, c := range p.Containers {
		spec := v1.Container{Name: fmt.Sprintf("c%d", i), Image: "img"}
		pod.Spec.Containers = append(pod.Spec.Containers, spec)
		if !c.Present {
			continue
		}
		inst := observed.Container{
			ID: spec.Name + ".0", Name: spec.Name, SandboxID: "s1", State: c.State,
			RestartCount: c.RestartCount, BackoffStep: c.BackoffStep, Hash: plan.ContainerHash(&spec),
		}
		switch c.State {
		case observed.ContainerRunning:
			inst.StartedAt = now.Add(-c.Ran)
		case observed.ContainerExited:
			inst.ExitCode = c.ExitCode
			inst.FinishedAt = now.Add(-c.FinishedAgo)
			inst.StartedAt = inst.FinishedAt.Add(-c.Ran)
		}
		st.Containers = append(st.Containers, inst)
	}
	return plan.Input{Pod: pod, Status: st, Now: now}
}

// naiveWantsRun is the restart policy written out plainly: should container
// c have a new instance?
func naiveWantsRun(policy v1.RestartPolicy, c appContainer) bool {
	if !c.Present {
		return true
	}
	switch c.State {
	case observed.ContainerRunning:
		return false
	case observed.ContainerExited:
		return policy == v1.RestartPolicyAlways || (policy == v1.RestartPolicyOnFailure && c.ExitCode != 0)
	}
	return true // created or unknown
}

// naiveHeld says whether the crash-loop back-off holds c now.
func naiveHeld(c appContainer) bool {
	if !c.Present || c.State != observed.ContainerExited || c.Ran >= 10*time.Minute || c.BackoffStep == 0 {
		return false
	}
	delay := 10 * time.Second
	for i := 1; i < c.BackoffStep; i++ {
		delay *= 2
	}
	delay = min(delay, 300*time.Second)
	return c.FinishedAgo < delay
}

// With a ready sandbox and only app containers, the containers started plus
// those held by the back-off are exactly those the restart policy wants
// running, and the pod is killed exactly when nothing runs or will.
func TestComputeMatchesNaivePolicy(t *testing.T) {
	check := func(p appPod) bool {
		in := p.input()
		before := in.Pod.DeepCopy()
		a := plan.Compute(in)
		if !reflect.DeepEqual(before, in.Pod) {
			t.Logf("Compute modified the pod")
			return false
		}
		started := map[int]plan.Start{}
		for _, s := range a.ContainersToStart {
			started[s.Index] = s
		}
		anyRuns := false
		for i, c := range p.Containers {
			name := in.Pod.Spec.Containers[i].Name
			want, held := naiveWantsRun(p.Policy, c), naiveHeld(c)
			s, isStarted := started[i]
			w, isWaiting := a.Waiting[name]
			anyRuns = anyRuns || want || (c.Present && c.State == observed.ContainerRunning)
			switch {
			case want && held:
				if isStarted || !isWaiting || w.Reason != plan.ReasonCrashLoopBackOff {
					t.Logf("%s: want held by back-off, got started=%v waiting=%+v", name, isStarted, w)
					return false
				}
			case want:
				wantCount := 0
				if c.Present {
					wantCount = c.RestartCount + 1
				}
				if !isStarted || isWaiting || s.RestartCount != wantCount {
					t.Logf("%s: want started with RestartCount %d, got %+v (started=%v) waiting=%v", name, wantCount, s, isStarted, isWaiting)
					return false
				}
			default:
				if isStarted || isWaiting {
					t.Logf("%s: want nothing, got started=%v waiting=%v", name, isStarted, isWaiting)
					return false
				}
			}
		}
		if a.CreateSandbox || a.SandboxID != "s1" || len(a.InitContainersToStart) > 0 || a.PodFailed {
			t.Logf("unexpected pod-level actions: %+v", a)
			return false
		}
		if a.KillPod == anyRuns {
			t.Logf("KillPod=%v, but something runs or will: %v", a.KillPod, anyRuns)
			return false
		}
		return true
	}
	if err := quick.Check(check, &quick.Config{MaxCount: 2000}); err != nil {
		t.Fatal(err)
	}
}
