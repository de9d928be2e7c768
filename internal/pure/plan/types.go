// Package plan is the pure heart of the runtime manager (pipeline stage 5):
// Compute takes a pod's spec and the runtime's observed facts and returns
// the actions that bring the runtime to the spec, each with a reason. It
// does no I/O, keeps no state, logs nothing and reads no clock: everything
// it needs is in Input.
package plan

import (
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/internal/pure/observed"
)

// Input is everything Compute may look at.
type Input struct {
	Pod    *v1.Pod
	Status *observed.PodStatus
	Now    time.Time
	// LivenessFailed holds the IDs of running containers whose liveness
	// probe (or startup probe) has failed and must be restarted.
	LivenessFailed map[string]ProbeFailure
	// StartupDone holds the IDs of running containers whose startup probe
	// has succeeded (or that have none); used for sidecar ordering.
	StartupDone map[string]bool
	// StartTime is the pod's status startTime (activeDeadlineSeconds
	// counts from it); nil before the pod's first status (it starts now)
	// and once it finished.
	StartTime *time.Time
	// ResizeRestarts are the running containers, by ID, that an in-place
	// resize restarts (resizePolicy RestartContainer), with the message
	// of their kill: each is killed and started again in this sync,
	// whatever the restart policy, as the kubelet's
	// computePodResizeAction has it.
	ResizeRestarts map[string]string
}

// ProbeFailure says which probe failed and why.
type ProbeFailure struct {
	Probe   string // "liveness" or "startup"
	Message string
}

// Actions are what the executor does for one sync, in this order:
//
//  1. If KillPod, kill every running container of the pod (ContainersToKill
//     lists them with reasons) and stop every sandbox.
//  2. Otherwise, kill ContainersToKill.
//  3. If CreateSandbox, create a sandbox with Attempt; else use SandboxID.
//  4. Start InitContainersToStart in order; a regular init container is
//     started alone and the rest wait for the next sync.
//  5. Start ContainersToStart in order.
//
// EphemeralContainersToStart are started in the sandbox before step 4, as
// the kubelet does, so that a failing init container does not keep a
// debugging container from starting.
//
// Containers held back are in Waiting with the kubelet's reason, so that
// status can say why (CrashLoopBackOff, PodInitializing, ...).
type Actions struct {
	KillPod bool
	// CreateSandbox implies KillPod of whatever sandbox exists.
	CreateSandbox bool
	// SandboxID is the sandbox to start containers in when not creating.
	SandboxID string
	// Attempt is the attempt number of the sandbox to create.
	Attempt uint32

	ContainersToKill []Kill
	// InitContainersToStart are indexes into Pod.Spec.InitContainers.
	InitContainersToStart []Start
	// ContainersToStart are indexes into Pod.Spec.Containers.
	ContainersToStart []Start
	// EphemeralContainersToStart are indexes into
	// Pod.Spec.EphemeralContainers: those never started (RestartCount 0).
	EphemeralContainersToStart []Start
	// Waiting maps a container name to why it is not started now.
	Waiting map[string]Waiting
	// PodFailed is set when the pod can never run again (an init container
	// failed under restartPolicy Never, or the pod ran past its
	// activeDeadlineSeconds); nothing is started. Failure says why, with
	// the kubelet's reason.
	PodFailed bool
	Failure   Failure
	// RequeueAfter, when positive, is when the pod needs its next sync
	// regardless of events: when a back-off ends, or a second after its
	// activeDeadlineSeconds runs out.
	RequeueAfter time.Duration
	// Reasons explains each decision, one line each, for logs and tests.
	Reasons []string
}

// Failure is why a pod failed: its status's reason and message.
type Failure struct {
	Reason  string // ReasonDeadlineExceeded, ReasonInitContainerFailed
	Message string
}

// Kill is a container to stop.
type Kill struct {
	ID     string
	Name   string
	Reason string // e.g. "LivenessProbe", "SpecChanged", "PodSandboxChanged", "PodFailed"
	// Message is the human-readable detail.
	Message string
	// GracePeriod to give the container.
	GracePeriod time.Duration
}

// Start is a container to create and start.
type Start struct {
	Index int
	// RestartCount for the new instance (previous instance's count + 1, or 0).
	RestartCount int
	// BackoffStep for the new instance: consecutive quick crashes before it
	// (see BackoffDelay).
	BackoffStep int
	Reason      string
}

// Waiting is why a container is not started in this sync.
type Waiting struct {
	Reason  string // "CrashLoopBackOff", "PodInitializing", ...
	Message string
	// Until is when a back-off ends (zero if not a back-off).
	Until time.Time
}
