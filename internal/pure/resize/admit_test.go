package resize_test

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/internal/pure/admission"
	"github.com/nodelet/nodelet/internal/pure/resize"
)

func rl(cpu, mem string) v1.ResourceList {
	l := v1.ResourceList{}
	if cpu != "" {
		l[v1.ResourceCPU] = resource.MustParse(cpu)
	}
	if mem != "" {
		l[v1.ResourceMemory] = resource.MustParse(mem)
	}
	return l
}

// basePod is a running Burstable pod of one container c1 (cpu 100m/200m,
// memory 64Mi/128Mi).
func basePod() *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u1", Generation: 2},
		Spec: v1.PodSpec{Containers: []v1.Container{{
			Name:      "c1",
			Resources: v1.ResourceRequirements{Requests: rl("100m", "64Mi"), Limits: rl("200m", "128Mi")},
		}}},
	}
}

func guaranteed(p *v1.Pod) {
	p.Spec.Containers[0].Resources = v1.ResourceRequirements{Requests: rl("100m", "64Mi"), Limits: rl("100m", "64Mi")}
}

func node() resize.Node {
	return resize.Node{Admission: admission.Node{MaxPods: 110, Allocatable: rl("1", "1Gi")}}
}

func TestAdmit(t *testing.T) {
	other := basePod()
	other.UID, other.Name = "u2", "other"
	other.Spec.Containers[0].Resources.Requests = rl("700m", "512Mi")

	tests := []struct {
		name    string
		desired func(*v1.Pod)      // the resize asked for
		alloc   func(*v1.Pod)      // what was allocated, from the base pod
		node    func(*resize.Node) // the node
		others  []*v1.Pod
		want    resize.Decision
	}{
		{name: "nothing asked", want: resize.Decision{Verdict: resize.Unchanged}},
		{
			name:    "a CPU increase that fits",
			desired: func(p *v1.Pod) { p.Spec.Containers[0].Resources.Requests = rl("200m", "64Mi") },
			want:    resize.Decision{Verdict: resize.Accepted},
		},
		{
			name:    "a revert to the allocation",
			desired: func(p *v1.Pod) {},
			alloc:   func(p *v1.Pod) {},
			want:    resize.Decision{Verdict: resize.Unchanged},
		},
		{
			name:    "more CPU than the others leave: Deferred with the admit handler's message",
			desired: func(p *v1.Pod) { p.Spec.Containers[0].Resources.Requests = rl("400m", "64Mi") },
			others:  []*v1.Pod{other},
			want: resize.Decision{Verdict: resize.Deferred,
				Message: "Node didn't have enough resource: cpu, requested: 400, used: 700, capacity: 1000"},
		},
		{
			name: "the pod's own allocation is not counted among the others",
			desired: func(p *v1.Pod) {
				p.Spec.Containers[0].Resources.Requests = rl("900m", "64Mi")
				p.Spec.Containers[0].Resources.Limits = rl("900m", "128Mi")
			},
			others: []*v1.Pod{basePod()},
			want:   resize.Decision{Verdict: resize.Accepted},
		},
		{
			name:    "more than the node has at all is Deferred too (v1.37)",
			desired: func(p *v1.Pod) { p.Spec.Containers[0].Resources.Requests = rl("100m", "2Gi") },
			node:    func(n *resize.Node) {},
			want: resize.Decision{Verdict: resize.Deferred,
				Message: "Node didn't have enough resource: memory, requested: 2147483648, used: 0, capacity: 1073741824"},
		},
		{
			name:    "a memory request changes in place while the container may swap",
			desired: func(p *v1.Pod) { p.Spec.Containers[0].Resources.Requests = rl("100m", "96Mi") },
			node: func(n *resize.Node) {
				n.Swaps = func(*v1.Pod, *v1.Container) bool { return true }
			},
			want: resize.Decision{Verdict: resize.Infeasible, Message: "In-place resize of containers with swap is not supported.", Detail: "swap_limitation"},
		},
		{
			name: "a swapping container restarted for memory is fine",
			desired: func(p *v1.Pod) {
				p.Spec.Containers[0].Resources.Requests = rl("100m", "96Mi")
				p.Spec.Containers[0].ResizePolicy = []v1.ContainerResizePolicy{{ResourceName: v1.ResourceMemory, RestartPolicy: v1.RestartContainer}}
			},
			alloc: func(p *v1.Pod) {
				p.Spec.Containers[0].ResizePolicy = []v1.ContainerResizePolicy{{ResourceName: v1.ResourceMemory, RestartPolicy: v1.RestartContainer}}
			},
			node: func(n *resize.Node) {
				n.Swaps = func(*v1.Pod, *v1.Container) bool { return true }
			},
			want: resize.Decision{Verdict: resize.Accepted},
		},
		{
			name: "a memory-backed emptyDir's sizeLimit (gate off in v1.37)",
			desired: func(p *v1.Pod) {
				q := resource.MustParse("20Mi")
				p.Spec.Volumes = []v1.Volume{{Name: "m", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{Medium: v1.StorageMediumMemory, SizeLimit: &q}}}}
				p.Spec.Containers[0].Resources.Requests = rl("150m", "64Mi")
			},
			alloc: func(p *v1.Pod) {
				q := resource.MustParse("10Mi")
				p.Spec.Volumes = []v1.Volume{{Name: "m", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{Medium: v1.StorageMediumMemory, SizeLimit: &q}}}}
			},
			want: resize.Decision{Verdict: resize.Infeasible, Message: "Memory-backed emptyDir volume resize is disabled", Detail: "feature_gate_off"},
		},
		{
			name: "a Guaranteed pod's CPU under the static CPU manager",
			desired: func(p *v1.Pod) {
				p.Spec.Containers[0].Resources = v1.ResourceRequirements{Requests: rl("200m", "64Mi"), Limits: rl("200m", "64Mi")}
			},
			alloc: guaranteed,
			node:  func(n *resize.Node) { n.CPUManagerStatic = true },
			want:  resize.Decision{Verdict: resize.Infeasible, Message: `Resize is infeasible for Guaranteed Pods alongside CPU Manager policy "static"`, Detail: "guaranteed_pod_cpu_manager_static_policy"},
		},
		{
			name: "a Guaranteed pod's memory under the static CPU manager is fine",
			desired: func(p *v1.Pod) {
				p.Spec.Containers[0].Resources = v1.ResourceRequirements{Requests: rl("100m", "96Mi"), Limits: rl("100m", "96Mi")}
			},
			alloc: guaranteed,
			node:  func(n *resize.Node) { n.CPUManagerStatic = true },
			want:  resize.Decision{Verdict: resize.Accepted},
		},
		{
			name: "a Guaranteed pod's memory under the Static memory manager",
			desired: func(p *v1.Pod) {
				p.Spec.Containers[0].Resources = v1.ResourceRequirements{Requests: rl("100m", "96Mi"), Limits: rl("100m", "96Mi")}
			},
			alloc: guaranteed,
			node:  func(n *resize.Node) { n.MemoryManagerStatic = true },
			want:  resize.Decision{Verdict: resize.Infeasible, Message: `Resize is infeasible for Guaranteed Pods alongside Memory Manager policy "Static"`, Detail: "guaranteed_pod_memory_manager_static_policy"},
		},
		{
			name:    "the node shutting down defers",
			desired: func(p *v1.Pod) { p.Spec.Containers[0].Resources.Requests = rl("150m", "64Mi") },
			node:    func(n *resize.Node) { n.Admission.ShuttingDown = true },
			want:    resize.Decision{Verdict: resize.Deferred, Message: "Pod was rejected as the node is shutting down."},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			allocated := basePod()
			if tt.alloc != nil {
				tt.alloc(allocated)
			}
			desired := allocated.DeepCopy()
			if tt.desired != nil {
				tt.desired(desired)
			}
			n := node()
			if tt.node != nil {
				tt.node(&n)
			}
			got := resize.Admit(desired, resize.AllocationOf(allocated), tt.others, n)
			if got != tt.want {
				t.Errorf("Admit = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestAllocate(t *testing.T) {
	pod := basePod()
	pod.Spec.InitContainers = []v1.Container{{Name: "side", Resources: v1.ResourceRequirements{Requests: rl("10m", "")}}}
	alloc := resize.AllocationOf(pod)

	desired := pod.DeepCopy()
	desired.Spec.Containers[0].Resources.Requests = rl("300m", "64Mi")
	desired.Spec.InitContainers[0].Resources.Requests = rl("20m", "")
	got, changed := resize.Allocate(desired, alloc)
	if !changed {
		t.Fatal("Allocate: changed = false for a resized pod")
	}
	if q := got.Spec.Containers[0].Resources.Requests.Cpu(); q.MilliValue() != 100 {
		t.Errorf("container cpu request = %v, want the allocated 100m", q)
	}
	if q := got.Spec.InitContainers[0].Resources.Requests.Cpu(); q.MilliValue() != 10 {
		t.Errorf("init container cpu request = %v, want the allocated 10m", q)
	}
	if q := desired.Spec.Containers[0].Resources.Requests.Cpu(); q.MilliValue() != 300 {
		t.Errorf("Allocate modified its argument: %v", q)
	}
	if _, changed := resize.Allocate(pod, alloc); changed {
		t.Error("Allocate: changed = true for the allocated pod itself")
	}
	// A container the allocation does not know keeps its spec.
	desired.Spec.Containers = append(desired.Spec.Containers, v1.Container{Name: "new", Resources: v1.ResourceRequirements{Requests: rl("1", "")}})
	got, _ = resize.Allocate(desired, alloc)
	if q := got.Spec.Containers[1].Resources.Requests.Cpu(); q.MilliValue() != 1000 {
		t.Errorf("unknown container cpu request = %v, want 1", q)
	}
}

func TestVerdictStrings(t *testing.T) {
	for v, want := range map[resize.Verdict]string{resize.Deferred: "Deferred", resize.Infeasible: "Infeasible"} {
		if v.String() != want {
			t.Errorf("%d.String() = %q, want %q", int(v), v.String(), want)
		}
	}
}
