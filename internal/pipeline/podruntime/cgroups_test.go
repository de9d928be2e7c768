package podruntime

import (
	"context"
	"fmt"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/pipeline/podworker"
	"github.com/nodelet/nodelet/internal/pure/podsetup"
)

// cgroupSetup is what a pod cgroup hook hands: the pod's cgroup, and for
// each container a Unified map naming it.
func cgroupSetup(uid string) podsetup.Setup {
	return podsetup.Setup{
		CgroupParent: "kubepods-pod" + uid + ".slice",
		Containers: []podsetup.Contributor{podsetup.ContributorFunc(func(c podsetup.Container) (podsetup.Additions, error) {
			res := &runtimeapi.LinuxContainerResources{Unified: map[string]string{"memory.high": "for-" + c.Container.Name}}
			return podsetup.Additions{Resources: res}, nil
		})},
	}
}

// The sandbox goes under the pod cgroup its hooks set up, and each
// container's CRI resources are the ones they contribute (cgroup v2 files
// such as MemoryQoS's memory.high among them).
func TestSyncPodPodCgroups(t *testing.T) {
	f := newFixture(t)
	pod := testPod()
	setup := cgroupSetup(string(pod.UID))
	if _, err := f.m.syncPod(context.Background(), podworker.SyncRequest{Pod: pod, Setup: setup}); err != nil {
		t.Fatal(err)
	}
	for _, c := range pod.Spec.Containers {
		fc := containerByName(f, c.Name)
		if fc == nil {
			t.Fatalf("container %s not created", c.Name)
		}
		if got := fc.LinuxResources.GetUnified()["memory.high"]; got != "for-"+c.Name {
			t.Errorf("%s: Unified %v", c.Name, fc.LinuxResources.GetUnified())
		}
	}
	// The fake runtime keeps no sandbox config: the config as built.
	net, _, err := f.m.sandboxNet(pod, setup.CgroupParent, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := sandboxConfig(pod, "/var/log/pods", 0, net)
	if got, want := cfg.GetLinux().GetCgroupParent(), fmt.Sprintf("kubepods-pod%s.slice", pod.UID); got != want {
		t.Errorf("sandbox cgroup parent %q, want %q", got, want)
	}
}
