package devicemanager

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

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
