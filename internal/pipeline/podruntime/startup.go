package podruntime

import (
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/internal/pure/observed"
	"github.com/nodelet/nodelet/internal/pure/podspec"
)

// The start-up steps of a pod that no kubelet event marks are recorded as
// Normal events with these reasons, once per pod, at the moment the sync
// completes each: the events' times (the recorder's clock, to the
// nanosecond) are what `nodelet describe pod` draws its timeline from,
// where the status's times have whole seconds. The other steps have the
// kubelet's events: Pulled for an image, Started for a container.
const (
	// ReasonAdmitted: the first sync of a pod with nothing in the runtime.
	ReasonAdmitted = "Admitted"
	// ReasonSandboxReady: the pod's first sandbox was created, with its
	// network.
	ReasonSandboxReady = "SandboxReady"
	// ReasonInitContainerCompleted: a sync saw an init container exit 0
	// (message "Init container <name> completed").
	ReasonInitContainerCompleted = "InitContainerCompleted"
	// ReasonPodReady: the pod's Ready condition became true the first
	// time.
	ReasonPodReady = "PodReady"
)

// startup is which steps of a pod's start-up the manager has recorded.
// Only the pod's own syncs touch it, and the pod worker serialises them.
type startup struct {
	// tracked is false for a pod that had something in the runtime when
	// this manager first synced it (adopted after a restart): its
	// start-up happened before and is not recorded.
	tracked  bool
	admitted bool
	sandbox  bool
	initDone map[string]bool
	ready    bool
	// stages are the start-up stages already observed; started is when
	// the sync that started the pod's containers finished starting them.
	stages  map[string]bool
	started time.Time
}

// stage observes a start-up stage of a tracked pod once.
func (m *Manager) stage(s *startup, name string, took time.Duration) {
	if m.stages == nil || !s.tracked || s.stages[name] {
		return
	}
	if s.stages == nil {
		s.stages = map[string]bool{}
	}
	s.stages[name] = true
	m.stages.ObservePodStartStage(name, took)
}

// startupOf returns the pod's start-up record, creating it at the pod's
// first sync; a pod with nothing in the runtime then is admitted now.
func (m *Manager) startupOf(pod *v1.Pod, obs *observed.PodStatus) *startup {
	m.mu.Lock()
	s := m.startups[pod.UID]
	if s == nil {
		s = &startup{tracked: len(obs.Sandboxes) == 0 && len(obs.Containers) == 0, initDone: map[string]bool{}}
		m.startups[pod.UID] = s
	}
	m.mu.Unlock()
	if s.tracked && !s.admitted {
		s.admitted = true
		m.recorder.Event(pod, v1.EventTypeNormal, ReasonAdmitted, "Pod admitted")
	}
	return s
}

// sandboxReady records that the pod's first sandbox is up, with ips.
func (m *Manager) sandboxReady(pod *v1.Pod, s *startup, ips []string) {
	if !s.tracked || s.sandbox {
		return
	}
	s.sandbox = true
	msg := "Pod sandbox is ready"
	if len(ips) > 0 {
		msg += ", IP " + ips[0]
	}
	m.recorder.Event(pod, v1.EventTypeNormal, ReasonSandboxReady, msg)
}

// initContainersDone records every init container obs shows exited 0
// (sidecars, which never complete, aside) that was not recorded yet. The
// sync that sees it runs it before it starts the next container.
func (m *Manager) initContainersDone(pod *v1.Pod, s *startup, obs *observed.PodStatus) {
	if !s.tracked {
		return
	}
	for _, c := range pod.Spec.InitContainers {
		if s.initDone[c.Name] || podspec.IsSidecar(&c) {
			continue
		}
		if n := obs.Newest(c.Name); n != nil && n.State == observed.ContainerExited && n.ExitCode == 0 {
			s.initDone[c.Name] = true
			m.recorder.Event(pod, v1.EventTypeNormal, ReasonInitContainerCompleted, "Init container "+c.Name+" completed")
		}
	}
}

// podReady records the first time st has the pod Ready.
func (m *Manager) podReady(pod *v1.Pod, s *startup, st v1.PodStatus) {
	if !s.tracked || s.ready {
		return
	}
	for _, c := range st.Conditions {
		if c.Type == v1.PodReady && c.Status == v1.ConditionTrue {
			s.ready = true
			m.recorder.Event(pod, v1.EventTypeNormal, ReasonPodReady, "Pod is ready")
			return
		}
	}
}
