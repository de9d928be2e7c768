package nodeconfig

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodelet/nodelet/internal/node/cpumanager"
	"github.com/nodelet/nodelet/internal/pure/cpuset"
)

// validateCPUManager checks the CPU and topology manager settings by the
// kubelet's names.
func (cfg Config) validateCPUManager() error {
	switch cfg.CPUManagerPolicy {
	case cpumanager.PolicyNone, cpumanager.PolicyStatic:
	default:
		return fmt.Errorf("cpuManagerPolicy %q: want none or static", cfg.CPUManagerPolicy)
	}
	switch cfg.TopologyManagerPolicy {
	case cpumanager.TopologyPolicyNone, cpumanager.TopologyPolicySingleNUMANode:
	default:
		return fmt.Errorf("topologyManagerPolicy %q: nodelet has none and single-numa-node", cfg.TopologyManagerPolicy)
	}
	if cfg.CPUManagerReconcilePeriod <= 0 {
		return fmt.Errorf("cpuManagerReconcilePeriod %v: want more than 0", cfg.CPUManagerReconcilePeriod)
	}
	if _, err := cpuset.Parse(cfg.ReservedSystemCPUs); err != nil {
		return fmt.Errorf("reservedSystemCPUs: %w", err)
	}
	return nil
}

// ReserveCPUs makes reservedSystemCPUs, when set, the node's CPU
// reservation, as the kubelet does: systemReserved cpu becomes their
// number and kubeReserved keeps no cpu.
func (cfg *Config) ReserveCPUs() error {
	cpus, err := cpuset.Parse(cfg.ReservedSystemCPUs)
	if err != nil {
		return fmt.Errorf("reservedSystemCPUs: %w", err)
	}
	if cpus.IsEmpty() {
		return nil
	}
	if cfg.KubeReserved != nil {
		delete(cfg.KubeReserved, v1.ResourceCPU)
	}
	if cfg.SystemReserved == nil {
		cfg.SystemReserved = v1.ResourceList{}
	}
	cfg.SystemReserved[v1.ResourceCPU] = *resource.NewQuantity(int64(cpus.Size()), resource.DecimalSI)
	return nil
}

// CPUManagerOptions are the CPU manager's settings.
func (cfg Config) CPUManagerOptions() cpumanager.Options {
	reserved, _ := cpuset.Parse(cfg.ReservedSystemCPUs) // validated
	milli := cfg.SystemReserved.Cpu().MilliValue() + cfg.KubeReserved.Cpu().MilliValue()
	return cpumanager.Options{
		Policy:             cfg.CPUManagerPolicy,
		TopologyPolicy:     cfg.TopologyManagerPolicy,
		ReconcilePeriod:    cfg.CPUManagerReconcilePeriod,
		RootDir:            cfg.RootDir,
		Topology:           cfg.CPUTopology,
		ReservedSystemCPUs: reserved,
		ReservedMilliCPU:   milli,
	}
}
