// Package resize is beside the pipeline, between the pod workers and the
// runtime manager: it decides an in-place pod resize (the `resize`
// subresource) as the kubelet v1.37 does. Allocate applies the resources
// allocated to a pod to its spec; Admit decides whether the pod's desired
// resources may replace them (accepted, or pending as Deferred or
// Infeasible with the kubelet's messages); Plan turns allocated but not yet
// actuated resources into ordered steps (restarts for a RestartContainer
// policy, UpdateContainerResources calls and pod cgroup writes: memory
// before CPU, decreases before increases, the pod cgroup grown before its
// containers and shrunk after them); CheckMemoryDecrease refuses a memory
// limit below current usage; the Pending and InProgress conditions are
// built from those facts. Pure: no I/O.
package resize

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodelet/nodelet/internal/pure/admission"
	"github.com/nodelet/nodelet/internal/pure/podspec"
)

// Allocation is what the node has allocated to one pod: the resources of
// each container (app and init) by name, the pod-level resources and the
// sizeLimit of each memory-backed emptyDir, as the kubelet's allocation
// checkpoint keeps them.
type Allocation struct {
	Containers    map[string]v1.ResourceRequirements `json:"containers,omitempty"`
	Pod           *v1.ResourceRequirements           `json:"pod,omitempty"`
	MemoryVolumes map[string]resource.Quantity       `json:"memoryVolumes,omitempty"`
}

// AllocationOf is the allocation of pod as its spec stands (what a newly
// admitted pod, or an accepted resize, is allocated).
func AllocationOf(pod *v1.Pod) Allocation {
	a := Allocation{Containers: map[string]v1.ResourceRequirements{}}
	for _, c := range pod.Spec.InitContainers {
		a.Containers[c.Name] = *c.Resources.DeepCopy()
	}
	for _, c := range pod.Spec.Containers {
		a.Containers[c.Name] = *c.Resources.DeepCopy()
	}
	if pod.Spec.Resources != nil {
		a.Pod = pod.Spec.Resources.DeepCopy()
	}
	for _, v := range pod.Spec.Volumes {
		if memoryBacked(&v) {
			if a.MemoryVolumes == nil {
				a.MemoryVolumes = map[string]resource.Quantity{}
			}
			a.MemoryVolumes[v.Name] = v.EmptyDir.SizeLimit.DeepCopy()
		}
	}
	return a
}

// memoryBacked: a memory-backed emptyDir with a sizeLimit.
func memoryBacked(v *v1.Volume) bool {
	return v.EmptyDir != nil && v.EmptyDir.Medium == v1.StorageMediumMemory && v.EmptyDir.SizeLimit != nil && !v.EmptyDir.SizeLimit.IsZero()
}

// Allocate returns pod with the allocated resources in place of the
// desired ones, and whether anything differed (the kubelet's
// UpdatePodFromAllocation). A container missing from a is left as it is;
// pod is not modified.
func Allocate(pod *v1.Pod, a Allocation) (*v1.Pod, bool) {
	out := pod.DeepCopy()
	changed := false
	apply := func(cs []v1.Container) {
		for i := range cs {
			r, ok := a.Containers[cs[i].Name]
			if !ok || equality.Semantic.DeepEqual(cs[i].Resources, r) {
				continue
			}
			cs[i].Resources = *r.DeepCopy()
			changed = true
		}
	}
	apply(out.Spec.InitContainers)
	apply(out.Spec.Containers)
	if a.Pod != nil && !equality.Semantic.DeepEqual(out.Spec.Resources, a.Pod) {
		out.Spec.Resources = a.Pod.DeepCopy()
		changed = true
	}
	for i := range out.Spec.Volumes {
		v := &out.Spec.Volumes[i]
		q, ok := a.MemoryVolumes[v.Name]
		if !ok || !memoryBacked(v) || v.EmptyDir.SizeLimit.Equal(q) {
			continue
		}
		v.EmptyDir.SizeLimit = &q
		changed = true
	}
	return out, changed
}

// Verdict is the outcome of Admit.
type Verdict int

// The verdicts.
const (
	// Unchanged: the desired resources are the allocated ones; a pending
	// resize (if any) was reverted.
	Unchanged Verdict = iota
	// Accepted: the desired resources become the allocation.
	Accepted
	// Deferred: they do not fit now (the kubelet's PodReasonDeferred) and
	// are tried again when something changes.
	Deferred
	// Infeasible: this node can never do it (PodReasonInfeasible).
	Infeasible
)

func (v Verdict) String() string {
	switch v {
	case Unchanged:
		return "unchanged"
	case Accepted:
		return "accepted"
	case Deferred:
		return v1.PodReasonDeferred
	case Infeasible:
		return v1.PodReasonInfeasible
	}
	return fmt.Sprintf("Verdict(%d)", int(v))
}

// Decision is Admit's answer: the verdict and, when pending, the message
// of the PodResizePending condition and of the ResizeDeferred or
// ResizeInfeasible event.
type Decision struct {
	Verdict Verdict
	Message string
	// Detail is an Infeasible verdict's reason_detail label of
	// kubelet_pod_infeasible_resizes_total.
	Detail string
}

// Node is what a resize is admitted against.
type Node struct {
	// Admission is what a new pod is admitted against: a resize is
	// checked by every admit handler, as the kubelet's allocation manager
	// does (any refusal but the resize handler's is Deferred).
	Admission admission.Node
	// CgroupV1: the node runs cgroup v1.
	CgroupV1 bool
	// CPUManagerStatic and MemoryManagerStatic: cpuManagerPolicy and
	// memoryManagerPolicy are static.
	CPUManagerStatic, MemoryManagerStatic bool
	// Swaps tells whether a container of a pod may swap under the node's
	// memorySwap.swapBehavior (nil: NoSwap, nothing swaps).
	Swaps func(pod *v1.Pod, c *v1.Container) bool
}

// The kubelet's messages for an infeasible resize (allocation/handlers.go).
const (
	msgSwap              = "In-place resize of containers with swap is not supported."
	msgMemoryVolumesGate = "Memory-backed emptyDir volume resize is disabled"
	msgCPUManagerStatic  = `Resize is infeasible for Guaranteed Pods alongside CPU Manager policy "static"`
	msgMemManagerStatic  = `Resize is infeasible for Guaranteed Pods alongside Memory Manager policy "Static"`
)

// Admit decides whether desired's resources may become its allocation,
// given what is allocated to it now and others, the other active pods
// with their allocated resources (the pod itself is skipped among them).
// The order is the kubelet's: nothing to do, then the resize handler's
// infeasible cases, then the admit handlers every pod passes (their
// refusal, such as "Node didn't have enough resource", is Deferred).
func Admit(desired *v1.Pod, allocated Allocation, others []*v1.Pod, node Node) Decision {
	current, changed := Allocate(desired, allocated)
	if !changed {
		return Decision{Verdict: Unchanged}
	}
	if msg, detail := infeasible(desired, current, allocated, node); msg != "" {
		return Decision{Verdict: Infeasible, Message: msg, Detail: detail}
	}
	rest := make([]*v1.Pod, 0, len(others))
	for _, p := range others {
		if p.UID != desired.UID {
			rest = append(rest, p)
		}
	}
	if r := admission.Admit(desired, rest, node.Admission); !r.Admit {
		return Decision{Verdict: Deferred, Message: r.Message}
	}
	return Decision{Verdict: Accepted}
}

// infeasible is the kubelet's podResizesAdmitHandler with v1.37's default
// feature gates: pod-level resize (beta) and init container resize (GA)
// on, memory-backed volume resize (alpha) and the exclusive CPU and memory
// resizes (alpha) off.
func infeasible(desired, current *v1.Pod, allocated Allocation, node Node) (msg, detail string) {
	if swapResize(desired, current, node.Swaps) {
		return msgSwap, "swap_limitation"
	}
	if memoryVolumeResized(desired, current) {
		return msgMemoryVolumesGate, "feature_gate_off"
	}
	if podspec.QOSClass(desired) == v1.PodQOSGuaranteed {
		if node.CPUManagerStatic && requestChanged(desired, allocated, v1.ResourceCPU) {
			return msgCPUManagerStatic, "guaranteed_pod_cpu_manager_static_policy"
		}
		if node.MemoryManagerStatic && requestChanged(desired, allocated, v1.ResourceMemory) {
			return msgMemManagerStatic, "guaranteed_pod_memory_manager_static_policy"
		}
	}
	return "", ""
}

// swapResize: a container's memory request changes in place (its memory
// resize policy is not RestartContainer) while it may swap, before or
// after.
func swapResize(desired, current *v1.Pod, swaps func(*v1.Pod, *v1.Container) bool) bool {
	if swaps == nil {
		return false
	}
	now := map[string]*v1.Container{}
	for _, cs := range [][]v1.Container{current.Spec.Containers, current.Spec.InitContainers} {
		for i := range cs {
			now[cs[i].Name] = &cs[i]
		}
	}
	for _, cs := range [][]v1.Container{desired.Spec.Containers, desired.Spec.InitContainers} {
		for i := range cs {
			c := &cs[i]
			old, ok := now[c.Name]
			if !ok || c.Resources.Requests.Memory().Equal(*old.Resources.Requests.Memory()) {
				continue
			}
			if restartPolicy(old, v1.ResourceMemory) == v1.RestartContainer {
				continue
			}
			if swaps(desired, c) || swaps(current, old) {
				return true
			}
		}
	}
	return false
}

// memoryVolumeResized: the sizeLimit of a memory-backed emptyDir changed.
func memoryVolumeResized(desired, current *v1.Pod) bool {
	if len(desired.Spec.Volumes) != len(current.Spec.Volumes) {
		return false
	}
	for i, v := range current.Spec.Volumes {
		if !memoryBacked(&v) {
			continue
		}
		d := desired.Spec.Volumes[i].EmptyDir
		if d == nil || !equality.Semantic.DeepEqual(v.EmptyDir.SizeLimit, d.SizeLimit) {
			return true
		}
	}
	return false
}

// requestChanged: some resizable container's request of name differs from
// its allocation.
func requestChanged(desired *v1.Pod, allocated Allocation, name v1.ResourceName) bool {
	for _, cs := range [][]v1.Container{desired.Spec.InitContainers, desired.Spec.Containers} {
		for _, c := range cs {
			a := allocated.Containers[c.Name]
			if !c.Resources.Requests.Name(name, "").Equal(*a.Requests.Name(name, "")) {
				return true
			}
		}
	}
	return false
}

// restartPolicy is c's resize policy for name; NotRequired when unset.
func restartPolicy(c *v1.Container, name v1.ResourceName) v1.ResourceResizeRestartPolicy {
	for _, p := range c.ResizePolicy {
		if p.ResourceName == name {
			return p.RestartPolicy
		}
	}
	return v1.NotRequired
}
