package podresources

// KubepodsLimits are the limits of the QoS hierarchy's top cgroup
// (kubepods): the node's allocatable resources for pods, as the kubelet
// enforces them there at start (createNodeAllocatableCgroups and
// enforceNodeAllocatableCgroups with its default enforceNodeAllocatable
// ["pods"]). 0 leaves a resource alone.
type KubepodsLimits struct {
	// MilliCPU is the CPU pods may use in all: kubepods' cpu.shares
	// (v1) or cpu.weight (v2), so that pods together get their share of
	// the machine and no less (the default weight is far less).
	MilliCPU int64
	// Memory is kubepods' memory limit, in bytes.
	Memory int64
	// Pids is kubepods' process limit.
	Pids int64
}

// kubepodsConfig is the top cgroup's settings on cgroup v2 (and its
// systemd slice's properties).
func (l KubepodsLimits) kubepodsConfig() UnifiedPodConfig {
	var cfg UnifiedPodConfig
	if l.MilliCPU > 0 {
		cfg.CPUWeight = SharesToWeight(MilliCPUToShares(l.MilliCPU))
	}
	cfg.MemoryMax, cfg.PidsMax = l.Memory, l.Pids
	return cfg
}
