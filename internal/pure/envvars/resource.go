package envvars

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// ResourceRef returns the downward API value of a resource field selector,
// as the kubelet does for env resourceFieldRef and downwardAPI volume items.
//
// The container is ref.ContainerName, or containerName when that is empty
// (env refers to its own container); it is looked up among the pod's
// containers, init containers and ephemeral containers.
//
// Supported resources: limits.cpu, requests.cpu, limits.memory,
// requests.memory, limits.ephemeral-storage, requests.ephemeral-storage,
// limits.hugepages-<size>, requests.hugepages-<size>. The value is the
// quantity divided by ref.Divisor (1 when unset), rounded up: cpu in
// millicores over the divisor's millicores (so 250m with divisor 1 is "1",
// with divisor 1m "250"), the others in units.
//
// A cpu, memory or ephemeral-storage limit that is unset or zero is the
// node's allocatable amount (nodeAllocatable) or, for cpu and memory, the
// pod-level limit (pod.spec.resources.limits) when the pod has one and
// nodeAllocatable has the resource. Unset requests are 0 (the API server
// defaults requests to limits).
func ResourceRef(pod *v1.Pod, containerName string, ref *v1.ResourceFieldSelector, nodeAllocatable v1.ResourceList) (string, error) {
	if pod == nil || ref == nil {
		return "", errors.New("envvars: nil pod or resource field selector")
	}
	name := ref.ContainerName
	if name == "" {
		name = containerName
	}
	c := findContainer(pod, name)
	if c == nil {
		return "", fmt.Errorf("container %s not found", name)
	}
	return containerResource(pod, c, ref, nodeAllocatable)
}

// resourceRef is ResourceRef for env: without a container name the
// selector refers to c itself, which may not be in the pod's spec.
func resourceRef(pod *v1.Pod, c *v1.Container, ref *v1.ResourceFieldSelector, nodeAllocatable v1.ResourceList) (string, error) {
	if ref.ContainerName == "" {
		return containerResource(pod, c, ref, nodeAllocatable)
	}
	return ResourceRef(pod, "", ref, nodeAllocatable)
}

func findContainer(pod *v1.Pod, name string) *v1.Container {
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == name {
			return &pod.Spec.Containers[i]
		}
	}
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == name {
			return &pod.Spec.InitContainers[i]
		}
	}
	for i := range pod.Spec.EphemeralContainers {
		if pod.Spec.EphemeralContainers[i].Name == name {
			c := v1.Container(pod.Spec.EphemeralContainers[i].EphemeralContainerCommon)
			return &c
		}
	}
	return nil
}

// defaultedLimit returns the limit of name for c, defaulted as the kubelet's
// defaultPodLimitsForDownwardAPI does.
func defaultedLimit(pod *v1.Pod, c *v1.Container, name v1.ResourceName, nodeAllocatable v1.ResourceList) resource.Quantity {
	if q, ok := c.Resources.Limits[name]; ok && !q.IsZero() {
		return q
	}
	switch name {
	case v1.ResourceCPU, v1.ResourceMemory, v1.ResourceEphemeralStorage:
	default:
		return resource.Quantity{}
	}
	alloc, ok := nodeAllocatable[name]
	if !ok {
		return resource.Quantity{}
	}
	if name != v1.ResourceEphemeralStorage && pod.Spec.Resources != nil {
		if q, ok := pod.Spec.Resources.Limits[name]; ok && !q.IsZero() {
			return q
		}
	}
	return alloc
}

func containerResource(pod *v1.Pod, c *v1.Container, ref *v1.ResourceFieldSelector, nodeAllocatable v1.ResourceList) (string, error) {
	divisor := ref.Divisor
	if divisor.IsZero() {
		divisor = resource.MustParse("1")
	}
	kind, name, ok := strings.Cut(ref.Resource, ".")
	if !ok || (kind != "limits" && kind != "requests") {
		return "", fmt.Errorf("unsupported container resource : %v", ref.Resource)
	}
	rn := v1.ResourceName(name)
	switch {
	case rn == v1.ResourceCPU, rn == v1.ResourceMemory, rn == v1.ResourceEphemeralStorage:
	case strings.HasPrefix(name, v1.ResourceHugePagesPrefix):
	default:
		return "", fmt.Errorf("unsupported container resource : %v", ref.Resource)
	}
	var q resource.Quantity
	if kind == "limits" {
		q = defaultedLimit(pod, c, rn, nodeAllocatable)
	} else {
		q = c.Resources.Requests[rn]
	}
	if rn == v1.ResourceCPU {
		return ceilDiv(q.MilliValue(), divisor.MilliValue(), ref)
	}
	return ceilDiv(q.Value(), divisor.Value(), ref)
}

// ceilDiv returns a/b rounded up, in decimal.
func ceilDiv(a, b int64, ref *v1.ResourceFieldSelector) (string, error) {
	if b <= 0 {
		return "", fmt.Errorf("invalid divisor %s for %s", ref.Divisor.String(), ref.Resource)
	}
	q := a / b
	if a%b > 0 {
		q++
	}
	return strconv.FormatInt(q, 10), nil
}
