package volume

import (
	"testing"

	v1 "k8s.io/api/core/v1"
)

func TestPropagated(t *testing.T) {
	bidi, none := v1.MountPropagationBidirectional, v1.MountPropagationNone
	pod := &v1.Pod{Spec: v1.PodSpec{Containers: []v1.Container{{VolumeMounts: []v1.VolumeMount{{Name: "a", MountPropagation: &none}}}}}}
	if propagated(pod, "a") {
		t.Error("propagation None needs nothing")
	}
	pod.Spec.InitContainers = []v1.Container{{VolumeMounts: []v1.VolumeMount{{Name: "a", MountPropagation: &bidi}}}}
	if !propagated(pod, "a") || propagated(pod, "b") {
		t.Error("Bidirectional on a: a shared, b not")
	}
}
