package plan

import "time"

// Kill.Reason values.
const (
	// ReasonSandboxChanged: the sandbox is being recreated (or is gone and
	// not recreated), so every running container goes.
	ReasonSandboxChanged = "PodSandboxChanged"
	// ReasonSpecChanged: the container's spec fingerprint changed.
	ReasonSpecChanged = "SpecChanged"
	// ReasonLivenessProbe and ReasonStartupProbe: a probe failed.
	ReasonLivenessProbe = "LivenessProbe"
	ReasonStartupProbe  = "StartupProbe"
	// ReasonUnknown: the instance is in the created or unknown state; it is
	// killed before being started again so that two never run at once.
	ReasonUnknown = "Unknown"
	// ReasonPodFailed: the pod can never run again (Actions.PodFailed).
	ReasonPodFailed = "PodFailed"
	// ReasonPodCompleted: no container of the pod runs or will be restarted;
	// what still runs (sidecars) is stopped with the sandbox.
	ReasonPodCompleted = "PodCompleted"
	// ReasonResize: an in-place resize of the container requires its
	// restart (Input.ResizeRestarts).
	ReasonResize = "Resize"
)

// Failure.Reason values (and, for DeadlineExceeded, Kill.Reason).
const (
	// ReasonDeadlineExceeded: the pod ran longer than its
	// activeDeadlineSeconds (the kubelet's active deadline handler).
	ReasonDeadlineExceeded = "DeadlineExceeded"
	// ReasonInitContainerFailed: an init container failed and the pod's
	// restartPolicy is Never.
	ReasonInitContainerFailed = "InitContainerFailed"
)

// initContainerFailed is the failure of a pod whose init container (or
// sandbox, before a container ran) is lost under restartPolicy Never.
var initContainerFailed = Failure{Reason: ReasonInitContainerFailed, Message: "an init container failed and the pod's restartPolicy is Never"}

// Waiting.Reason values.
const (
	ReasonCrashLoopBackOff = "CrashLoopBackOff"
	ReasonPodInitializing  = "PodInitializing"
)

// ProbeFailure.Probe values.
const (
	ProbeLiveness = "liveness"
	ProbeStartup  = "startup"
)

const (
	// backoffReset is how long an instance must have run for its exit not
	// to count as a crash of a crash loop.
	backoffReset = 10 * time.Minute
	backoffFirst = 10 * time.Second
	backoffMax   = 300 * time.Second
)
