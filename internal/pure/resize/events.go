package resize

import (
	"encoding/json"

	v1 "k8s.io/api/core/v1"
)

// The kubelet's resize event reasons.
const (
	EventResizeStarted    = "ResizeStarted"
	EventResizeDeferred   = "ResizeDeferred"
	EventResizeInfeasible = "ResizeInfeasible"
	EventResizeCompleted  = "ResizeCompleted"
	EventResizeError      = "ResizeError"
)

// StartedMessage, PendingMessage, CompletedMessage and ErrorMessage are
// the kubelet's event texts: a prefix, then the pod's container resources
// and the generation (and the error) as JSON.
func StartedMessage(pod *v1.Pod) string {
	return eventMessage(pod, "", "Pod resize started")
}

// PendingMessage is for a Deferred or Infeasible resize (reason is the verdict).
func PendingMessage(pod *v1.Pod, reason, message string) string {
	return eventMessage(pod, message, "Pod resize "+reason)
}

// CompletedMessage is for a resize actuated in full.
func CompletedMessage(pod *v1.Pod) string {
	return eventMessage(pod, "", "Pod resize completed")
}

// ErrorMessage is for a resize whose actuation failed.
func ErrorMessage(pod *v1.Pod, err string) string {
	return eventMessage(pod, err, "Pod resize error")
}

type containerSummary struct {
	Name      string                  `json:"name"`
	Resources v1.ResourceRequirements `json:"resources,omitempty"`
}

type resourceSummary struct {
	InitContainers []containerSummary `json:"initContainers,omitempty"`
	Containers     []containerSummary `json:"containers,omitempty"`
	Generation     int64              `json:"generation"`
	Error          string             `json:"error,omitempty"`
}

func eventMessage(pod *v1.Pod, errMsg, prefix string) string {
	s := resourceSummary{Generation: pod.Generation, Error: errMsg}
	for _, c := range pod.Spec.InitContainers {
		s.InitContainers = append(s.InitContainers, containerSummary{c.Name, c.Resources})
	}
	for _, c := range pod.Spec.Containers {
		s.Containers = append(s.Containers, containerSummary{c.Name, c.Resources})
	}
	b, err := json.Marshal(s)
	if err != nil {
		return prefix
	}
	return prefix + ": " + string(b)
}
