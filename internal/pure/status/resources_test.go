package status

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/internal/pure/observed"
	"github.com/nodelet/nodelet/internal/pure/resize"
)

func withResources(p *v1.Pod) {
	p.Spec.Containers[0].Resources = v1.ResourceRequirements{
		Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("100m"), v1.ResourceMemory: resource.MustParse("64Mi")},
		Limits:   v1.ResourceList{v1.ResourceCPU: resource.MustParse("200m"), v1.ResourceMemory: resource.MustParse("128Mi")},
	}
}

// Without the allocation, no container reports resources: the API server
// then refuses a resize ("Pod running on node without support for
// resize") rather than accept one nothing would actuate.
func TestResourcesNotReportedWithoutAllocation(t *testing.T) {
	pod := newPod(app("app"), withResources)
	s := Generate(facts(pod, obs(running("app", "c1", 1))))
	if got := s.ContainerStatuses[0]; got.Resources != nil || got.AllocatedResources != nil {
		t.Errorf("resources = %v, allocated = %v; want neither", got.Resources, got.AllocatedResources)
	}
}

func TestResourcesReported(t *testing.T) {
	pod := newPod(app("app"), withResources)
	// The spec asks for a resize (300m) that is not allocated (still 100m).
	allocated := resize.AllocationOf(pod)
	pod.Spec.Containers[0].Resources.Requests[v1.ResourceCPU] = resource.MustParse("300m")

	c := running("app", "c1", 1)
	// The runtime runs it with 100m (102 shares), 200m (quota 20000/100000), 128Mi.
	c.Resources = &observed.Resources{CPUShares: 102, CPUQuota: 20000, CPUPeriod: 100000, MemoryLimit: 128 << 20}
	f := facts(pod, obs(c))
	f.Resources = &Resources{Allocation: allocated, Actuated: map[string]resize.Resources{"app": {MemRequest: 64 << 20}}}
	pending := metav1.NewTime(now)
	f.ResizeConditions = []v1.PodCondition{{Type: v1.PodResizePending, Status: v1.ConditionTrue, Reason: v1.PodReasonDeferred, LastTransitionTime: pending}}
	s := Generate(f)

	st := s.ContainerStatuses[0]
	if st.Resources == nil {
		t.Fatal("no resources reported for a running container")
	}
	for _, tc := range []struct {
		what string
		list v1.ResourceList
		name v1.ResourceName
		want string
	}{
		{"requests.cpu", st.Resources.Requests, v1.ResourceCPU, "100m"},
		{"limits.cpu", st.Resources.Limits, v1.ResourceCPU, "200m"},
		{"requests.memory", st.Resources.Requests, v1.ResourceMemory, "64Mi"},
		{"limits.memory", st.Resources.Limits, v1.ResourceMemory, "128Mi"},
	} {
		got := tc.list[tc.name]
		if got.Cmp(resource.MustParse(tc.want)) != 0 {
			t.Errorf("status resources %s = %s, want %s", tc.what, got.String(), tc.want)
		}
	}
	if got := st.AllocatedResources[v1.ResourceCPU]; got.Cmp(resource.MustParse("100m")) != 0 {
		t.Errorf("allocatedResources cpu = %s, want the allocated 100m, not the desired 300m", got.String())
	}
	var found *v1.PodCondition
	for i := range s.Conditions {
		if s.Conditions[i].Type == v1.PodResizePending {
			found = &s.Conditions[i]
		}
	}
	if found == nil || found.Reason != v1.PodReasonDeferred || !found.LastTransitionTime.Equal(&pending) {
		t.Errorf("PodResizePending = %+v, want it as given", found)
	}
}
