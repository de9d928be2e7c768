package podhooks

import (
	"context"
	"errors"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/internal/pure/podsetup"
)

type fakeCPUs struct {
	err     error
	removed []types.UID
}

func (f *fakeCPUs) Allocate(*v1.Pod) error { return f.err }
func (f *fakeCPUs) ContainerCPUs(uid types.UID, name string) string {
	return string(uid) + "/" + name
}
func (f *fakeCPUs) RemovePod(uid types.UID) error { f.removed = append(f.removed, uid); return nil }
func (f *fakeCPUs) Pods() []types.UID             { return []types.UID{"held"} }

func TestCPUsHook(t *testing.T) {
	pod := &v1.Pod{Spec: v1.PodSpec{Containers: []v1.Container{{Name: "app"}}}}
	pod.UID = "u1"
	f := &fakeCPUs{}
	h := CPUs{Manager: f}
	s, err := h.Prepare(context.Background(), pod)
	if err != nil {
		t.Fatal(err)
	}
	add, err := s.Apply(podsetup.Container{Pod: pod, Container: &pod.Spec.Containers[0]})
	if err != nil || add.Resources.GetCpusetCpus() != "u1/app" {
		t.Errorf("cpuset %v %v", add.Resources, err)
	}
	if err := h.Cleanup(context.Background(), pod); err != nil || len(f.removed) != 1 || f.removed[0] != "u1" {
		t.Errorf("cleanup %v %v", f.removed, err)
	}
	if held, _ := h.Holding(); len(held) != 1 {
		t.Errorf("holding %v", held)
	}
	f.err = errors.New("not enough cpus")
	if _, err := h.Prepare(context.Background(), pod); err == nil {
		t.Error("a failed allocation prepared the pod")
	}
}
