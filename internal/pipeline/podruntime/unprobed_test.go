package podruntime

import (
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/internal/pure/observed"
)

// A pod whose hooks have not handed over its probe results (its first
// Prepare round failed after a restart that adopted its containers) shows
// a container with a readiness probe not ready and one with a startup
// probe not started, as the prober does for containers it is not bound to
// yet; a container without probes is both.
func TestWithoutProbeResults(t *testing.T) {
	probe := &v1.Probe{ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"true"}}}}
	pod := &v1.Pod{Spec: v1.PodSpec{
		InitContainers: []v1.Container{{Name: "sidecar", ReadinessProbe: probe}},
		Containers: []v1.Container{
			{Name: "plain"},
			{Name: "ready", ReadinessProbe: probe},
			{Name: "slow", StartupProbe: probe},
		},
	}}
	for _, tc := range []struct {
		name           string
		ready, started bool
	}{
		{"plain", true, true},
		{"ready", false, true},
		{"slow", true, false},
		{"sidecar", false, true},
		{"gone-from-spec", true, true},
	} {
		c := &observed.Container{ID: "id-" + tc.name, Name: tc.name, State: observed.ContainerRunning}
		if got := readyContainer(pod, nil, c); got != tc.ready {
			t.Errorf("%s: ready = %v, want %v", tc.name, got, tc.ready)
		}
		if got := startedContainer(pod, nil, c.ID, c.Name); got != tc.started {
			t.Errorf("%s: started = %v, want %v", tc.name, got, tc.started)
		}
	}
}
