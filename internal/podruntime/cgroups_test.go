package podruntime

import (
	"context"
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"
)

// fakeCgroups names every pod's cgroup and gives each container a
// Unified map naming it.
type fakeCgroups struct{}

func (fakeCgroups) CgroupParent(pod *v1.Pod) string {
	return "kubepods-pod" + string(pod.UID) + ".slice"
}

func (fakeCgroups) ContainerUnified(_ *v1.Pod, c *v1.Container) map[string]string {
	return map[string]string{"memory.high": "for-" + c.Name}
}

// The sandbox goes under the pod cgroup, and each container's CRI
// resources carry the cgroup manager's Unified map (cgroup v2 files such
// as MemoryQoS's memory.high).
func TestSyncPodPodCgroups(t *testing.T) {
	f := newFixture(t)
	f.m.cgroups = fakeCgroups{}
	pod := testPod()
	if _, err := f.m.syncPod(context.Background(), pod, nil); err != nil {
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
	net, _, err := f.m.sandboxNet(pod, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := sandboxConfig(pod, "/var/log/pods", 0, net)
	if got, want := cfg.GetLinux().GetCgroupParent(), fmt.Sprintf("kubepods-pod%s.slice", pod.UID); got != want {
		t.Errorf("sandbox cgroup parent %q, want %q", got, want)
	}
}
