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
)

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
	// defaultGracePeriod is the API default of terminationGracePeriodSeconds.
	defaultGracePeriod = 30 * time.Second
	// backoffReset is how long an instance must have run for its exit not
	// to count as a crash of a crash loop.
	backoffReset = 10 * time.Minute
	backoffFirst = 10 * time.Second
	backoffMax   = 300 * time.Second
)
