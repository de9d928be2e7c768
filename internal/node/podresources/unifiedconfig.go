package podresources

import (
	"math"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodelet/nodelet/internal/pure/podspec"
)

// cgroup v2 interface file names and values.
const (
	fileCPUWeight      = "cpu.weight"
	fileCPUMax         = "cpu.max"
	fileMemoryMax      = "memory.max"
	fileMemoryHigh     = "memory.high"
	fileMemoryMin      = "memory.min"
	fileMemoryLow      = "memory.low"
	filePidsMax        = "pids.max"
	fileSubtreeControl = "cgroup.subtree_control"
	fileKill           = "cgroup.kill"
	valueMax           = "max"
)

// DefaultMemoryThrottlingFactor is the kubelet's memoryThrottlingFactor
// default.
const DefaultMemoryThrottlingFactor = 0.9

// SharesToWeight is cpu.weight for cpu.shares, as runc and the kubelet
// convert them: [2, 262144] onto [1, 10000]; 0 (unset) stays 0.
func SharesToWeight(shares int64) int64 {
	if shares == 0 {
		return 0
	}
	shares = min(max(shares, MinShares), MaxShares)
	return 1 + ((shares-MinShares)*9999)/(MaxShares-MinShares)
}

// MemoryQoS is the kubelet's MemoryQoS feature (cgroup v2 only) with the
// None memory reservation policy: memory.high throttles a container, or a
// pod with pod-level resources, before it reaches its limit, and no
// memory.min or memory.low protects it.
type MemoryQoS struct {
	// ThrottlingFactor is memoryThrottlingFactor, in (0, 1].
	ThrottlingFactor float64
	// NodeAllocatableMemory is the node's allocatable memory, in bytes:
	// the limit of a container without one.
	NodeAllocatableMemory int64
	// PageSize rounds memory.high down.
	PageSize int64
}

// memoryHigh is the KEP-2570 formula: request plus factor times the room
// up to the limit, rounded down to a page, or 0 when that is no more
// than the request.
func (q MemoryQoS) memoryHigh(request, limit int64) int64 {
	page := max(q.PageSize, 1)
	high := int64(math.Floor(float64(request)+(float64(limit)-float64(request))*q.ThrottlingFactor)/float64(page)) * page
	if high <= 0 || high <= request {
		return 0
	}
	return high
}

// ContainerUnified is the CRI LinuxContainerResources.Unified map of
// container c of pod on a cgroup v2 host, as the kubelet's
// generateLinuxContainerResources: with MemoryQoS (q non-nil),
// memory.min and memory.low "0" and, unless the container is guaranteed
// (request equal to its limit), memory.high from the formula against its
// limit or, without one, the node's allocatable memory; a container
// without a memory limit in a pod with a pod-level memory limit is left
// to the pod cgroup's memory.high. Without MemoryQoS, memory.high "max"
// (clears a throttle left from when it was on).
func ContainerUnified(pod *v1.Pod, c *v1.Container, q *MemoryQoS) map[string]string {
	if q == nil {
		return map[string]string{fileMemoryHigh: valueMax}
	}
	out := map[string]string{fileMemoryMin: "0", fileMemoryLow: "0"}
	request := c.Resources.Requests.Memory().Value()
	limit := c.Resources.Limits.Memory().Value()
	podLimit := false
	if r := pod.Spec.Resources; r != nil {
		podLimit = !r.Limits.Memory().IsZero()
	}
	if limit == 0 && podLimit {
		return out
	}
	if request == limit && request != 0 {
		return out
	}
	var high int64
	switch {
	case limit != 0:
		high = q.memoryHigh(request, limit)
	case q.NodeAllocatableMemory > 0:
		high = q.memoryHigh(request, q.NodeAllocatableMemory)
	}
	if high > 0 {
		out[fileMemoryHigh] = strconv.FormatInt(high, 10)
	}
	return out
}

// podMemoryHigh is the pod cgroup's memory.high under MemoryQoS, as the
// kubelet's ApplyPodLevelMemoryHigh: only for a pod with pod-level
// resources whose memory limit is declared (at pod level or by every
// container), and not when its request equals its limit; 0 for none.
func podMemoryHigh(pod *v1.Pod, q *MemoryQoS) int64 {
	if q == nil || pod.Spec.Resources == nil || !podLevelSet(pod.Spec.Resources) {
		return 0
	}
	reqs, limits, _, memDeclared := podTotals(pod)
	if !memDeclared || limits.mem == 0 || (reqs.mem == limits.mem && reqs.mem != 0) {
		return 0
	}
	return q.memoryHigh(reqs.mem, limits.mem)
}

// podLevelSet tells whether pod-level resources set CPU or memory.
func podLevelSet(r *v1.ResourceRequirements) bool {
	for _, l := range []v1.ResourceList{r.Requests, r.Limits} {
		for name := range l {
			if name == v1.ResourceCPU || name == v1.ResourceMemory {
				return true
			}
		}
	}
	return false
}

// UnifiedPodConfig is what a pod cgroup on cgroup v2 holds: PodConfig's
// values in v2 files. Zero or "" is "max" (unlimited).
type UnifiedPodConfig struct {
	// CPUWeight is cpu.weight, from PodConfig's CPUShares.
	CPUWeight int64
	// CPUMax is cpu.max: "quota period", or "max period" without a quota.
	CPUMax string
	// MemoryMax is memory.max, in bytes; 0 is "max".
	MemoryMax int64
	// MemoryHigh is memory.high under MemoryQoS; 0 is "max".
	MemoryHigh int64
	// PidsMax is pids.max: the node's podPidsLimit; 0 is "max".
	PidsMax int64
	// Hugetlb is the bytes of huge pages of each size the pod requests
	// (key: page size in bytes); a size it does not request gets 0.
	Hugetlb map[int64]int64
}

// UnifiedConfig is the pod cgroup's configuration on cgroup v2.
// pidsLimit > 0 is the node's podPidsLimit; q, when set, is MemoryQoS.
func UnifiedConfig(pod *v1.Pod, pidsLimit int64, q *MemoryQoS) UnifiedPodConfig {
	cfg := PodConfig(pod)
	out := UnifiedPodConfig{
		CPUWeight:  SharesToWeight(cfg.CPUShares),
		CPUMax:     valueMax + " " + strconv.Itoa(QuotaPeriod),
		MemoryMax:  cfg.MemoryLimit,
		MemoryHigh: podMemoryHigh(pod, q),
		Hugetlb:    hugePages(pod),
	}
	if cfg.CPUQuota > 0 {
		out.CPUMax = strconv.FormatInt(cfg.CPUQuota, 10) + " " + strconv.FormatInt(cfg.CPUPeriod, 10)
	}
	if pidsLimit > 0 {
		out.PidsMax = pidsLimit
	}
	return out
}

// hugePages is the pod's hugepages-<size> requests by page size in
// bytes, summed over its containers (the API server requires requests
// equal to limits for huge pages), pod-level ones winning.
func hugePages(pod *v1.Pod) map[int64]int64 {
	out := map[int64]int64{}
	add := func(l v1.ResourceList, into map[int64]int64) {
		for name, q := range l {
			size, ok := hugePageSize(name)
			if ok {
				into[size] += q.Value()
			}
		}
	}
	running, initPeak := map[int64]int64{}, map[int64]int64{}
	for i := range pod.Spec.Containers {
		add(pod.Spec.Containers[i].Resources.Requests, running)
	}
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		if podspec.IsSidecar(c) {
			add(c.Resources.Requests, running)
			continue
		}
		one := map[int64]int64{}
		add(c.Resources.Requests, one)
		for k, v := range one {
			initPeak[k] = max(initPeak[k], v)
		}
	}
	for k, v := range running {
		out[k] = v
	}
	for k, v := range initPeak {
		out[k] = max(out[k], v)
	}
	if r := pod.Spec.Resources; r != nil {
		level := map[int64]int64{}
		add(r.Requests, level)
		for k, v := range level {
			out[k] = v
		}
	}
	return out
}

// hugePageSize is the page size of a hugepages-<size> resource.
func hugePageSize(name v1.ResourceName) (int64, bool) {
	s, ok := strings.CutPrefix(string(name), v1.ResourceHugePagesPrefix)
	if !ok {
		return 0, false
	}
	q, err := resource.ParseQuantity(s)
	if err != nil || q.Value() <= 0 {
		return 0, false
	}
	return q.Value(), true
}

// parseCPUMax splits a cpu.max value; quota is 0 for "max".
func parseCPUMax(s string) (quota, period int64, ok bool) {
	q, p, found := strings.Cut(s, " ")
	if !found {
		return 0, 0, false
	}
	period, err := strconv.ParseInt(p, 10, 64)
	if err != nil || period <= 0 {
		return 0, 0, false
	}
	if q == valueMax {
		return 0, period, true
	}
	quota, err = strconv.ParseInt(q, 10, 64)
	if err != nil || quota <= 0 {
		return 0, 0, false
	}
	return quota, period, true
}
