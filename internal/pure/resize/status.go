package resize

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodelet/nodelet/internal/pure/observed"
)

// The kernel's and the kubelet's floors below which a reported value is
// not shown in place of the allocated one (cm.MinShares, cm.MinMilliCPULimit).
const (
	minShares        = 2
	minMilliCPULimit = 10
	sharesPerCPU     = 1024
	milliPerCPU      = 1000
)

// StatusResources is a container status's resources, as the kubelet's
// convertContainerStatusResources: the allocated resources, with what the
// runtime reports for a running container in place of the CPU and memory
// it enforces; a value the runtime does not report is the previous
// status's for the same running container. actuated (nil: no record) is
// what nodelet last gave the container: it stands in for a runtime that
// reports nothing, and it is where the memory request comes from (no
// runtime reports one). A container not running shows its allocation.
func StatusResources(allocated v1.ResourceRequirements, c *observed.Container, actuated *Resources, prev *v1.ContainerStatus, containerID string) *v1.ResourceRequirements {
	out := allocated.DeepCopy()
	if c == nil || c.State != observed.ContainerRunning {
		return out
	}
	var old v1.ResourceRequirements
	if prev != nil && prev.State.Running != nil && prev.ContainerID == containerID && prev.Resources != nil {
		old = *prev.Resources
	}
	cpuLimit, cpuRequest, memLimit := reported(c.Resources)
	var memRequest *resource.Quantity
	if actuated != nil {
		if c.Resources == nil {
			cpuLimit, cpuRequest, memLimit = milli(actuated.CPULimit), milli(actuated.CPURequest), bytes(actuated.MemLimit)
		}
		memRequest = bytes(actuated.MemRequest)
	}
	if out.Limits != nil {
		switch {
		case cpuLimit != nil:
			if cpuLimit.MilliValue() > minMilliCPULimit || out.Limits.Cpu().MilliValue() > minMilliCPULimit {
				out.Limits[v1.ResourceCPU] = *cpuLimit
			}
		default:
			keep(out.Limits, old.Limits, v1.ResourceCPU)
		}
		if memLimit != nil {
			out.Limits[v1.ResourceMemory] = *memLimit
		} else {
			keep(out.Limits, old.Limits, v1.ResourceMemory)
		}
	}
	if out.Requests != nil {
		switch {
		case cpuRequest != nil:
			if cpuRequest.MilliValue() > minShares || out.Requests.Cpu().MilliValue() > minShares {
				out.Requests[v1.ResourceCPU] = *cpuRequest
			}
		default:
			keep(out.Requests, old.Requests, v1.ResourceCPU)
		}
		if memRequest != nil {
			out.Requests[v1.ResourceMemory] = *memRequest
		} else {
			keep(out.Requests, old.Requests, v1.ResourceMemory)
		}
	}
	return out
}

func milli(v int64) *resource.Quantity {
	if v == 0 {
		return nil
	}
	return resource.NewMilliQuantity(v, resource.DecimalSI)
}

func bytes(v int64) *resource.Quantity {
	if v == 0 {
		return nil
	}
	return resource.NewQuantity(v, resource.BinarySI)
}

func keep(into, from v1.ResourceList, name v1.ResourceName) {
	if q, ok := from[name]; ok {
		into[name] = q.DeepCopy()
	}
}

// reported turns the runtime's values into quantities, as the kubelet's
// toKubeContainerResources: a limit from quota/period, a request from the
// shares, the memory limit; nil where not reported.
func reported(r *observed.Resources) (cpuLimit, cpuRequest, memLimit *resource.Quantity) {
	if r == nil {
		return nil, nil, nil
	}
	if r.CPUPeriod > 0 && r.CPUQuota != -1 {
		if m := r.CPUQuota * milliPerCPU / r.CPUPeriod; m > 0 {
			cpuLimit = resource.NewMilliQuantity(m, resource.DecimalSI)
		}
	}
	if r.CPUShares >= minShares {
		m := (r.CPUShares*milliPerCPU + sharesPerCPU - 1) / sharesPerCPU // ceil, as math.Ceil
		cpuRequest = resource.NewMilliQuantity(m, resource.DecimalSI)
	}
	if r.MemoryLimit > 0 {
		memLimit = resource.NewQuantity(r.MemoryLimit, resource.BinarySI)
	}
	return cpuLimit, cpuRequest, memLimit
}
