package podspec

import (
	"testing"

	v1 "k8s.io/api/core/v1"
)

func TestEphemeralContainers(t *testing.T) {
	pod := &v1.Pod{Spec: v1.PodSpec{EphemeralContainers: []v1.EphemeralContainer{
		{EphemeralContainerCommon: v1.EphemeralContainerCommon{Name: "a", Image: "busybox", Command: []string{"sh"}}, TargetContainerName: "app"},
		{EphemeralContainerCommon: v1.EphemeralContainerCommon{Name: "b", Image: "agnhost"}},
	}}}
	got := EphemeralContainers(pod)
	if len(got) != 2 || got[0].Name != "a" || got[0].Image != "busybox" || got[0].Command[0] != "sh" || got[1].Name != "b" {
		t.Fatalf("EphemeralContainers = %+v", got)
	}
	// The single conversion aliases the spec: what podruntime creates is
	// the spec's container.
	if c := EphemeralContainer(&pod.Spec.EphemeralContainers[1]); c.Name != "b" || &c.Image != &pod.Spec.EphemeralContainers[1].Image {
		t.Fatalf("EphemeralContainer does not alias the spec")
	}
	if EphemeralContainers(&v1.Pod{}) != nil {
		t.Fatal("no ephemeral containers: want nil")
	}
}
