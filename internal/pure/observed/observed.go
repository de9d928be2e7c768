// Package observed is beside the pipeline: the runtime's facts about a pod
// as nodelet sees them, free of CRI and gRPC types. podruntime builds these
// from CRI; plan, status and pleg read them. Pure data, no I/O.
package observed

import (
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// SandboxState is a sandbox's state as the runtime reports it.
type SandboxState int

const (
	SandboxNotReady SandboxState = iota
	SandboxReady
)

// ContainerState is a container's state as the runtime reports it.
type ContainerState int

const (
	ContainerUnknown ContainerState = iota
	ContainerCreated
	ContainerRunning
	ContainerExited
)

func (s ContainerState) String() string {
	switch s {
	case ContainerCreated:
		return "created"
	case ContainerRunning:
		return "running"
	case ContainerExited:
		return "exited"
	}
	return "unknown"
}

// PodStatus is everything the runtime knows about one pod.
type PodStatus struct {
	UID       types.UID
	Name      string
	Namespace string
	// Sandboxes, newest first (by CreatedAt).
	Sandboxes []Sandbox
	// Containers of every sandbox of the pod, newest first (by CreatedAt);
	// several may share a name (older, exited instances).
	Containers []Container
	// IPs of the newest ready sandbox, primary first.
	IPs []string
}

// Sandbox is one pod sandbox.
type Sandbox struct {
	ID        string
	State     SandboxState
	Attempt   uint32
	CreatedAt time.Time
	// NetworkNode is true when the sandbox uses the node's network
	// namespace (hostNetwork).
	NetworkNode bool
	// Hash is the sandbox fingerprint nodelet recorded at creation (see
	// plan.SandboxHash); "" for sandboxes of unknown origin.
	Hash string
}

// Container is one container instance.
type Container struct {
	ID        string
	Name      string
	SandboxID string
	State     ContainerState
	CreatedAt time.Time
	// StartedAt and FinishedAt are zero when not reached.
	StartedAt  time.Time
	FinishedAt time.Time
	ExitCode   int32
	// Reason and Message are the runtime's, e.g. "OOMKilled", "Error",
	// "Completed".
	Reason  string
	Message string
	// Image is what the spec asked for; ImageRef the resolved image ID.
	Image    string
	ImageRef string
	// RestartCount is the count recorded on the instance at creation.
	RestartCount int
	// Hash is the spec fingerprint recorded at creation (plan.ContainerHash).
	Hash string
	// BackoffStep recorded at creation: consecutive quick crashes before
	// this instance (plan.Start.BackoffStep).
	BackoffStep int
	// GracePeriod recorded at creation, used when nodelet must kill a
	// container whose pod spec it no longer has.
	GracePeriod time.Duration
	// Resources are what the runtime reports the container runs with
	// (ContainerStatus.resources.linux); nil when it reports none.
	Resources *Resources
}

// Resources are a container's CPU and memory as the runtime reports them:
// cpu.shares, the CFS quota and period (quota -1: none) and the memory
// limit in bytes; 0 for not reported.
type Resources struct {
	CPUShares, CPUQuota, CPUPeriod int64
	MemoryLimit                    int64
}

// Newest returns the newest instance of the named container, or nil.
func (s *PodStatus) Newest(name string) *Container {
	for i := range s.Containers {
		if s.Containers[i].Name == name {
			return &s.Containers[i]
		}
	}
	return nil
}

// Running returns the running containers.
func (s *PodStatus) Running() []*Container {
	var out []*Container
	for i := range s.Containers {
		if s.Containers[i].State == ContainerRunning {
			out = append(out, &s.Containers[i])
		}
	}
	return out
}
