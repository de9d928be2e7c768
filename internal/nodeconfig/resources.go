package nodeconfig

import (
	"fmt"
	"maps"
	"slices"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodelet/nodelet/internal/cluster/nodestatus"
	"github.com/nodelet/nodelet/internal/node/cpumanager"
	"github.com/nodelet/nodelet/internal/node/eviction"
	"github.com/nodelet/nodelet/internal/node/podresources"
	"github.com/nodelet/nodelet/internal/pure/resize"
)

// DefaultEvictionHard are the kubelet's hard eviction thresholds on Linux
// when none are configured: the ones node status reports pressure by.
func DefaultEvictionHard() map[string]string { return nodestatus.DefaultEvictionHard() }

// reservableResources are what systemReserved and kubeReserved may name.
var reservableResources = []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory, v1.ResourceEphemeralStorage, "pid"}

// ValidateEvictionHard checks hard eviction thresholds (signal → value).
func ValidateEvictionHard(thresholds map[string]string) error {
	_, err := eviction.ParseThresholds(eviction.Config{EvictionHard: thresholds})
	return err
}

// ParseReserved reads systemReserved or kubeReserved (resource → quantity)
// into a resource list; name is the setting, for errors.
func ParseReserved(name string, in map[string]string) (v1.ResourceList, error) {
	if len(in) == 0 {
		return nil, nil
	}
	out := v1.ResourceList{}
	for _, k := range slices.Sorted(maps.Keys(in)) {
		if !slices.Contains(reservableResources, v1.ResourceName(k)) {
			return nil, fmt.Errorf("%s: cannot reserve %q (want cpu, memory, ephemeral-storage or pid)", name, k)
		}
		q, err := resource.ParseQuantity(in[k])
		if err != nil || q.Sign() < 0 {
			return nil, fmt.Errorf("%s %s=%q: want a quantity of at least 0", name, k, in[k])
		}
		out[v1.ResourceName(k)] = q
	}
	return out, nil
}

// reservedMap is the inverse of ParseReserved, for /configz.
func reservedMap(l v1.ResourceList) map[string]string {
	if len(l) == 0 {
		return nil
	}
	out := make(map[string]string, len(l))
	for k, q := range l {
		out[string(k)] = q.String()
	}
	return out
}

// Allocatable is what pods may use of the node's capacity, as the kubelet
// computes it: for each resource of capacity, what systemReserved and
// kubeReserved reserve and what the hard eviction thresholds keep
// (memory.available of memory, nodefs.available of ephemeral storage)
// are taken off; never below zero.
func Allocatable(capacity, systemReserved, kubeReserved v1.ResourceList, evictionHard map[string]string) (v1.ResourceList, error) {
	hard, err := eviction.ParseThresholds(eviction.Config{EvictionHard: evictionHard})
	if err != nil {
		return nil, err
	}
	kept := eviction.Reservation(hard, capacity)
	out := v1.ResourceList{}
	for name, c := range capacity {
		value := c.DeepCopy()
		for _, reserved := range []v1.ResourceList{systemReserved, kubeReserved, kept} {
			if q, ok := reserved[name]; ok {
				value.Sub(q)
			}
		}
		if value.Sign() < 0 {
			value.Set(0)
		}
		out[name] = value
	}
	return out, nil
}

// ResizeNode is what an in-place resize is checked against beside
// admission: the CPU manager's static policy and the containers that may
// swap (their memory resizes are infeasible, as the kubelet's).
func (cfg Config) ResizeNode() resize.Node {
	return resize.Node{
		CgroupV1:         !cfg.CgroupV2,
		CPUManagerStatic: cfg.CPUManagerPolicy == cpumanager.PolicyStatic,
		Swaps:            cfg.Swap().Swaps,
	}
}

// Swap are the swap settings of every container (memorySwap.swapBehavior,
// validated) on this machine.
func (cfg Config) Swap() podresources.Swap {
	behavior, _ := podresources.ParseSwapBehavior(cfg.SwapBehavior)
	s := podresources.Swap{Behavior: behavior, Controller: cfg.SwapController, V2: cfg.CgroupV2, MemoryCapacity: cfg.MemoryCapacity}
	if cfg.SwapCapacity != nil {
		s.SwapCapacity = *cfg.SwapCapacity
	}
	return s
}
