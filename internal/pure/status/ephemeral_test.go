package status

import (
	"testing"

	v1 "k8s.io/api/core/v1"
)

// Ephemeral containers have statuses of their own, by name, never Ready,
// and take no part in the phase or the conditions.
func TestEphemeralContainerStatuses(t *testing.T) {
	tests := []struct {
		name string
		f    Facts
		want string
	}{{
		name: "one runs, one exited, one not created yet",
		f: facts(newPod(app("app"), ephemeral("dbg3", "dbg1", "dbg2")),
			obs(running("app", "ca", 1), running("dbg1", "cd1", 10), exited("dbg2", "cd2", 20, 1, ""))),
		want: `
phase: Running
cond PodReadyToStartContainers=True
cond Initialized=True
cond Ready=True
cond ContainersReady=True
cond PodScheduled=True
app app: running@2 restarts=0 ready=true started=true id=containerd://ca
ephemeral dbg1: running@11 restarts=0 ready=false started=true id=containerd://cd1
ephemeral dbg2: terminated(Error exit=1 20-25) restarts=0 ready=false started=false id=containerd://cd2
ephemeral dbg3: waiting(ContainerCreating) restarts=0 ready=false started=false
`,
	}, {
		name: "an image that cannot be pulled says so",
		f: func() Facts {
			f := facts(newPod(app("app"), ephemeral("dbg")), obs(running("app", "ca", 1)))
			f.Waiting = waiting("dbg", "ErrImagePull", "not found")
			return f
		}(),
		want: `
phase: Running
cond PodReadyToStartContainers=True
cond Initialized=True
cond Ready=True
cond ContainersReady=True
cond PodScheduled=True
app app: running@2 restarts=0 ready=true started=true id=containerd://ca
ephemeral dbg: waiting(ErrImagePull: not found) restarts=0 ready=false started=false
`,
	}, {
		name: "a running ephemeral container does not keep a completed pod running",
		f: facts(newPod(policy(v1.RestartPolicyNever), app("app"), ephemeral("dbg")),
			obs(exited("app", "ca", 1, 0, ""), running("dbg", "cd", 10))),
		want: `
phase: Succeeded
cond PodReadyToStartContainers=True
cond Initialized=True (PodCompleted: )
cond Ready=False (PodCompleted: )
cond ContainersReady=False (PodCompleted: )
cond PodScheduled=True
app app: terminated(Completed exit=0 1-6) restarts=0 ready=false started=false id=containerd://ca
ephemeral dbg: running@11 restarts=0 ready=false started=true id=containerd://cd
`,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { checkGolden(t, Generate(tc.f), tc.want) })
	}
	if s := Generate(facts(newPod(app("app")), obs(running("app", "ca", 1)))); s.EphemeralContainerStatuses != nil {
		t.Errorf("a pod without ephemeral containers has ephemeral statuses %v", s.EphemeralContainerStatuses)
	}
}
