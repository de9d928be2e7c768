package podresources

import (
	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/internal/pure/podspec"
)

// PodCgroupConfig is what the pod's cgroup enforces, as the kubelet's
// ResourceConfigForPod with CFS quota enforced and the default period.
// Zero means "leave unset".
type PodCgroupConfig struct {
	// CPUShares is cpu.shares: from the pod's CPU requests (MinShares for a
	// BestEffort pod).
	CPUShares int64
	// CPUQuota and CPUPeriod are cpu.cfs_quota_us and cpu.cfs_period_us:
	// set for a Guaranteed pod and for a Burstable pod whose every container
	// has a CPU limit.
	CPUQuota  int64
	CPUPeriod int64
	// MemoryLimit is memory.limit_in_bytes: set for a Guaranteed pod and for
	// a Burstable pod whose every container has a memory limit.
	MemoryLimit int64
}

// PodConfig is the pod cgroup's configuration. The pod's effective requests
// and limits are the kubelet's: the larger of the sum over app containers
// and sidecars and the largest init container (with the sidecars started
// before it), plus the pod overhead; pod-level resources, when set, win.
func PodConfig(pod *v1.Pod) PodCgroupConfig {
	qos := podspec.QOSClass(pod)
	if qos == v1.PodQOSBestEffort {
		return PodCgroupConfig{CPUShares: MinShares}
	}
	reqs, limits, cpuDeclared, memDeclared := podTotals(pod)
	cfg := PodCgroupConfig{CPUShares: MilliCPUToShares(reqs.cpu)}
	if qos == v1.PodQOSGuaranteed || cpuDeclared {
		if q := MilliCPUToQuota(limits.cpu); q > 0 {
			cfg.CPUQuota, cfg.CPUPeriod = q, QuotaPeriod
		}
	}
	if qos == v1.PodQOSGuaranteed || memDeclared {
		cfg.MemoryLimit = limits.mem
	}
	return cfg
}

// amounts is CPU in milliCPU and memory in bytes.
type amounts struct{ cpu, mem int64 }

func (a amounts) plus(b amounts) amounts   { return amounts{a.cpu + b.cpu, a.mem + b.mem} }
func (a amounts) larger(b amounts) amounts { return amounts{max(a.cpu, b.cpu), max(a.mem, b.mem)} }

// requested is c's requests, a missing request defaulting to the limit as
// the API server's defaulting does.
func requested(c *v1.Container) amounts {
	r := c.Resources
	a := amounts{r.Limits.Cpu().MilliValue(), r.Limits.Memory().Value()}
	if q, ok := r.Requests[v1.ResourceCPU]; ok {
		a.cpu = q.MilliValue()
	}
	if q, ok := r.Requests[v1.ResourceMemory]; ok {
		a.mem = q.Value()
	}
	return a
}

// limited is c's limits.
func limited(c *v1.Container) amounts {
	return amounts{c.Resources.Limits.Cpu().MilliValue(), c.Resources.Limits.Memory().Value()}
}

// podTotals is the pod's effective requests and limits, and whether every
// container (each init container counted with the sidecars before it)
// declares a CPU and a memory limit.
func podTotals(pod *v1.Pod) (reqs, limits amounts, cpuDeclared, memDeclared bool) {
	cpuDeclared, memDeclared = true, true
	declared := func(a amounts) {
		if a.cpu == 0 {
			cpuDeclared = false
		}
		if a.mem == 0 {
			memDeclared = false
		}
	}
	reqs = aggregate(pod, requested, func(amounts) {})
	limits = aggregate(pod, limited, declared)
	if r := pod.Spec.Resources; r != nil {
		if q, ok := r.Limits[v1.ResourceCPU]; ok && !q.IsZero() {
			limits.cpu, cpuDeclared = q.MilliValue(), true
		}
		if q, ok := r.Limits[v1.ResourceMemory]; ok && !q.IsZero() {
			limits.mem, memDeclared = q.Value(), true
		}
		if q, ok := r.Requests[v1.ResourceCPU]; ok {
			reqs.cpu = q.MilliValue()
		} else if q, ok := r.Limits[v1.ResourceCPU]; ok {
			reqs.cpu = q.MilliValue()
		}
		if q, ok := r.Requests[v1.ResourceMemory]; ok {
			reqs.mem = q.Value()
		} else if q, ok := r.Limits[v1.ResourceMemory]; ok {
			reqs.mem = q.Value()
		}
	}
	// The RuntimeClass's overhead comes on top, after the pod-level
	// resources, as component-helpers' PodRequests and PodLimits add it.
	if o := pod.Spec.Overhead; o != nil {
		overhead := amounts{o.Cpu().MilliValue(), o.Memory().Value()}
		reqs = reqs.plus(overhead)
		// Overhead is added only to limits that are set.
		if limits.cpu > 0 {
			limits.cpu += overhead.cpu
		}
		if limits.mem > 0 {
			limits.mem += overhead.mem
		}
	}
	return reqs, limits, cpuDeclared, memDeclared
}

// aggregate is the kubelet's aggregation of one kind of amount over the
// pod's containers: app containers and sidecars run together, each init
// container runs beside the sidecars started before it.
func aggregate(pod *v1.Pod, get func(*v1.Container) amounts, seen func(amounts)) amounts {
	var running amounts
	for i := range pod.Spec.Containers {
		a := get(&pod.Spec.Containers[i])
		seen(a)
		running = running.plus(a)
	}
	var sidecars, initPeak amounts
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		a := get(c)
		if podspec.IsSidecar(c) {
			running = running.plus(a)
			sidecars = sidecars.plus(a)
			a = sidecars
		} else {
			a = a.plus(sidecars)
		}
		seen(a)
		initPeak = initPeak.larger(a)
	}
	return running.larger(initPeak)
}
