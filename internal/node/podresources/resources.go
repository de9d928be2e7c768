// Package podresources is beside the pipeline: it turns a pod's resource
// requests and limits into what the runtime and the kernel enforce, as the
// kubelet does. ContainerResources is the CRI LinuxContainerResources of
// one container (CFS shares, quota and period, memory limit, OOM score
// adjustment by QoS class) and ContainerUnified its cgroup v2 Unified map
// (MemoryQoS's memory.high), CgroupParent the pod's cgroup under the QoS
// hierarchy (/kubepods, /kubepods/burstable, /kubepods/besteffort). The
// managers create and remove those cgroups: Manager on cgroup v1 with the
// cgroupfs driver, UnifiedManager on cgroup v2 with the cgroupfs or the
// systemd driver (kubepods.slice/kubepods-burstable.slice/...); Open picks
// one for the host and Setup is how nodelet starts with them, refusing to
// start where they cannot be managed. Swap is memorySwap.swapBehavior (the
// kubelet's NoSwap and LimitedSwap limits, ApplySwap), ParseSwaps and
// CheckFailSwapOn read /proc/swaps for failSwapOn and the Node's swap
// capacity. Everything but the managers, Open, Setup and SwapController
// is pure.
package podresources

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/pure/podspec"
)

// The kernel's and the kubelet's CFS constants.
const (
	// MinShares is the smallest cpu.shares the kernel accepts; a container
	// without a CPU request gets it.
	MinShares = 2
	// MaxShares is the largest cpu.shares the kernel accepts.
	MaxShares = 262144
	// SharesPerCPU is cpu.shares for one whole CPU.
	SharesPerCPU = 1024
	// QuotaPeriod is the CFS period, in microseconds (100ms).
	QuotaPeriod = 100000
	// MinQuota is the smallest CFS quota, in microseconds (1ms).
	MinQuota = 1000

	milliPerCPU = 1000
)

// The kubelet's OOM score adjustments.
const (
	// GuaranteedOOMScoreAdj is for Guaranteed and node-critical pods.
	GuaranteedOOMScoreAdj = -997
	// BestEffortOOMScoreAdj is for BestEffort pods: first to be killed.
	BestEffortOOMScoreAdj = 1000
	// burstable pods stay strictly between the two.
	minBurstableOOMScoreAdj = 1000 + GuaranteedOOMScoreAdj
	maxBurstableOOMScoreAdj = BestEffortOOMScoreAdj - 1
)

// The cgroups' names.
const (
	podCgroupNamePrefix   = "pod"
	defaultTopCgroupName  = "kubepods"
	burstableCgroupName   = "burstable"
	bestEffortCgroupName  = "besteffort"
	cgroupfsPathSeparator = "/"
)

// MilliCPUToShares is cpu.shares for milliCPU: 1024 per CPU, at least
// MinShares (also for zero), at most MaxShares.
func MilliCPUToShares(milliCPU int64) int64 {
	if milliCPU <= 0 {
		return MinShares
	}
	shares := milliCPU * SharesPerCPU / milliPerCPU
	switch {
	case shares < MinShares:
		return MinShares
	case shares > MaxShares:
		return MaxShares
	}
	return shares
}

// MilliCPUToQuota is the CFS quota, in microseconds per QuotaPeriod, for a
// limit of milliCPU: 0 (no quota) for no limit, else at least MinQuota.
func MilliCPUToQuota(milliCPU int64) int64 {
	if milliCPU <= 0 {
		return 0
	}
	quota := milliCPU * QuotaPeriod / milliPerCPU
	if quota < MinQuota {
		return MinQuota
	}
	return quota
}

// ContainerResources is the CRI LinuxContainerResources of container c of
// pod, as the kubelet's generateLinuxContainerResources on cgroup v1:
//   - cpu_shares from the CPU request (MinShares without one); a container
//     with a CPU limit and no CPU request at all gets shares from the limit
//     (the API server defaults the request to the limit);
//   - cpu_quota and cpu_period (QuotaPeriod) only with a CPU limit, the quota
//     at least MinQuota;
//   - memory_limit_in_bytes from the memory limit (0, unlimited, without);
//   - oom_score_adj by the pod's QoS class (see OOMScoreAdj).
//
// Hugepages, swap and the cgroup v2 unified map are left unset.
// nodeMemoryCapacity is the node's memory capacity in bytes.
func ContainerResources(pod *v1.Pod, c *v1.Container, nodeMemoryCapacity int64) *runtimeapi.LinuxContainerResources {
	cpuLimit := c.Resources.Limits.Cpu().MilliValue()
	var shares int64
	if req, ok := c.Resources.Requests[v1.ResourceCPU]; ok {
		shares = MilliCPUToShares(req.MilliValue())
	} else {
		shares = MilliCPUToShares(cpuLimit)
	}
	r := &runtimeapi.LinuxContainerResources{
		CpuShares:   shares,
		OomScoreAdj: OOMScoreAdj(pod, c, nodeMemoryCapacity),
	}
	if cpuLimit > 0 {
		r.CpuPeriod = QuotaPeriod
		r.CpuQuota = MilliCPUToQuota(cpuLimit)
	}
	if mem := c.Resources.Limits.Memory().Value(); mem > 0 {
		r.MemoryLimitInBytes = mem
	}
	return r
}

// OOMScoreAdj is the kubelet's GetContainerOOMScoreAdjust: node-critical and
// Guaranteed pods GuaranteedOOMScoreAdj (-997), BestEffort pods
// BestEffortOOMScoreAdj (1000), and a Burstable pod's container
// 1000 - 1000*memoryRequest/nodeMemoryCapacity, kept within [3, 999] so that
// it stays above every Guaranteed and below every BestEffort container. A
// sidecar (restartable init container) scores no higher than the pod's
// regular container with the smallest memory request.
func OOMScoreAdj(pod *v1.Pod, c *v1.Container, nodeMemoryCapacity int64) int64 {
	if podspec.IsNodeCritical(pod) {
		return GuaranteedOOMScoreAdj
	}
	switch podspec.QOSClass(pod) {
	case v1.PodQOSGuaranteed:
		return GuaranteedOOMScoreAdj
	case v1.PodQOSBestEffort:
		return BestEffortOOMScoreAdj
	}
	adj := burstableScore(c.Resources.Requests.Memory().Value(), nodeMemoryCapacity)
	if isSidecar(pod, c) {
		if minReq, ok := minRegularMemoryRequest(pod); ok {
			adj = min(adj, burstableScore(minReq, nodeMemoryCapacity))
		}
	}
	switch {
	case adj < minBurstableOOMScoreAdj:
		return minBurstableOOMScoreAdj
	case adj >= BestEffortOOMScoreAdj:
		return maxBurstableOOMScoreAdj
	}
	return adj
}

// burstableScore is the unclamped heuristic: a container requesting 10% of
// the node's memory scores 900.
func burstableScore(memoryRequest, capacity int64) int64 {
	if capacity <= 0 || memoryRequest <= 0 {
		return BestEffortOOMScoreAdj
	}
	if memoryRequest >= capacity {
		return 0
	}
	return BestEffortOOMScoreAdj - 1000*memoryRequest/capacity
}

// isSidecar tells whether c is one of pod's restartable init containers.
func isSidecar(pod *v1.Pod, c *v1.Container) bool {
	if !podspec.IsSidecar(c) {
		return false
	}
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == c.Name {
			return true
		}
	}
	return false
}

// minRegularMemoryRequest is the smallest memory request of pod's regular
// containers.
func minRegularMemoryRequest(pod *v1.Pod) (int64, bool) {
	var least int64
	found := false
	for i := range pod.Spec.Containers {
		req := pod.Spec.Containers[i].Resources.Requests.Memory().Value()
		if !found || req < least {
			least, found = req, true
		}
	}
	return least, found
}

// CgroupParent is the pod's cgroup for the cgroupfs driver, relative to
// every hierarchy's root: "/kubepods/pod<uid>" for a Guaranteed pod,
// "/kubepods/burstable/pod<uid>" and "/kubepods/besteffort/pod<uid>" for the
// others. It is the PodSandboxConfig's linux.cgroup_parent.
func CgroupParent(pod *v1.Pod) string {
	return cgroupfsName(defaultTopCgroupName, podspec.QOSClass(pod), pod.UID)
}

// cgroupfsName is "/<top>[/<tier>]/pod<uid>".
func cgroupfsName(top string, qos v1.PodQOSClass, uid types.UID) string {
	return cgroupfsPathSeparator + qosDir(top, qos) + cgroupfsPathSeparator + podCgroupNamePrefix + string(uid)
}

// qosDir is the QoS tier's directory relative to a hierarchy's root.
func qosDir(top string, qos v1.PodQOSClass) string {
	switch qos {
	case v1.PodQOSBurstable:
		return top + cgroupfsPathSeparator + burstableCgroupName
	case v1.PodQOSBestEffort:
		return top + cgroupfsPathSeparator + bestEffortCgroupName
	}
	return top
}
