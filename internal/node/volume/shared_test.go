package volume

import (
	"testing"

	v1 "k8s.io/api/core/v1"
)

func TestParseMountInfoShared(t *testing.T) {
	mounts, err := parseMountInfo([]byte("36 35 98:0 / /var/lib/nodelet rw,noatime shared:12 master:1 - ext4 /dev/root rw\n" +
		"37 35 98:0 / /mnt rw,noatime - ext4 /dev/root rw\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !mounts[0].shared || mounts[1].shared {
		t.Errorf("shared: %v %v, want true false", mounts[0].shared, mounts[1].shared)
	}
}

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
