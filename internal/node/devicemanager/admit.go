package devicemanager

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
)

// ReasonUnexpectedAdmissionError is the kubelet's refusal of a pod whose
// devices could not be allocated.
const ReasonUnexpectedAdmissionError = "UnexpectedAdmissionError"

// Admit allocates the devices of every container of a new pod, as the
// device manager's part of the kubelet's resource-allocating admit
// handler; a failure refuses the pod with the kubelet's
// UnexpectedAdmissionError (what it was given part-way is for RemovePod).
func (m *Manager) Admit(ctx context.Context, pod *v1.Pod) (ok bool, reason, message string) {
	if err := m.Allocate(ctx, pod); err != nil {
		return false, ReasonUnexpectedAdmissionError, fmt.Sprintf("Allocate failed due to %v, which is unexpected", err)
	}
	return true, "", ""
}

// RemovePod frees the devices of a pod refused after all.
func (m *Manager) RemovePod(uid types.UID) error { return m.Release(string(uid)) }

// AdmissionAllocatable is what admission counts the pods' device plugin
// resources against once a new pod's devices are allocated: the healthy
// devices of each resource, but never fewer than the devices pods hold,
// as the kubelet's sanitizeNodeAllocatable raises the Node's allocatable
// before its resource predicate. So a device that went unhealthy under a
// running pod does not refuse a new pod that was given a healthy one.
func (m *Manager) AdmissionAllocatable() v1.ResourceList {
	_, out := m.Capacity()
	m.mu.Lock()
	defer m.mu.Unlock()
	held := map[string]int64{}
	for k := range m.allocs {
		if _, ok := held[k.resource]; !ok {
			held[k.resource] = int64(len(m.allocs.inUse(k.resource)))
		}
	}
	for name, n := range held {
		if q, ok := out[v1.ResourceName(name)]; !ok || q.Value() < n {
			out[v1.ResourceName(name)] = *resource.NewQuantity(n, resource.DecimalSI)
		}
	}
	return out
}
