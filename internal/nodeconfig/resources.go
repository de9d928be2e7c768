package nodeconfig

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodelet/nodelet/internal/nodestatus"
)

// DefaultEvictionHard are the kubelet's hard eviction thresholds on Linux
// when none are configured: the ones node status reports pressure by.
func DefaultEvictionHard() map[string]string { return nodestatus.DefaultEvictionHard() }

// evictionSignals are the signals a threshold may name.
var evictionSignals = []string{
	"memory.available", "allocatableMemory.available",
	"nodefs.available", "nodefs.inodesFree",
	"imagefs.available", "imagefs.inodesFree",
	"containerfs.available", "containerfs.inodesFree",
	"pid.available",
}

// reservableResources are what systemReserved and kubeReserved may name.
var reservableResources = []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory, v1.ResourceEphemeralStorage, "pid"}

// threshold is one hard eviction threshold: a quantity, or a fraction of
// the capacity.
type threshold struct {
	quantity *resource.Quantity
	fraction float64
}

// of is the threshold's amount of capacity.
func (t threshold) of(capacity resource.Quantity) resource.Quantity {
	if t.quantity != nil {
		return *t.quantity
	}
	return *resource.NewQuantity(int64(float64(capacity.Value())*t.fraction), resource.BinarySI)
}

// parseThreshold reads a threshold as the kubelet does: "N%" (0% and 100%
// mean none) or a positive quantity. ok is false for a threshold that is
// none.
func parseThreshold(signal, value string) (t threshold, ok bool, err error) {
	if !slices.Contains(evictionSignals, signal) {
		return threshold{}, false, fmt.Errorf("evictionHard: unknown signal %q (want one of %s)", signal, strings.Join(evictionSignals, ", "))
	}
	if pct, isPct := strings.CutSuffix(value, "%"); isPct {
		if value == "0%" || value == "100%" {
			return threshold{}, false, nil
		}
		f, err := strconv.ParseFloat(pct, 32)
		if err != nil || f < 0 || f > 100 {
			return threshold{}, false, fmt.Errorf("evictionHard %s=%q: want a percentage from 0%% to 100%%", signal, value)
		}
		return threshold{fraction: f / 100}, true, nil
	}
	q, err := resource.ParseQuantity(value)
	if err != nil || q.Sign() <= 0 {
		return threshold{}, false, fmt.Errorf("evictionHard %s=%q: want a positive quantity or a percentage", signal, value)
	}
	return threshold{quantity: &q}, true, nil
}

// ValidateEvictionHard checks hard eviction thresholds (signal → value).
func ValidateEvictionHard(thresholds map[string]string) error {
	for _, signal := range slices.Sorted(maps.Keys(thresholds)) {
		if _, _, err := parseThreshold(signal, thresholds[signal]); err != nil {
			return err
		}
	}
	return nil
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
	eviction := v1.ResourceList{}
	for signal, resourceName := range map[string]v1.ResourceName{"memory.available": v1.ResourceMemory, "nodefs.available": v1.ResourceEphemeralStorage} {
		value, set := evictionHard[signal]
		if !set {
			continue
		}
		t, ok, err := parseThreshold(signal, value)
		if err != nil {
			return nil, err
		}
		if ok {
			eviction[resourceName] = t.of(capacity[resourceName])
		}
	}
	out := v1.ResourceList{}
	for name, c := range capacity {
		value := c.DeepCopy()
		for _, reserved := range []v1.ResourceList{systemReserved, kubeReserved, eviction} {
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
