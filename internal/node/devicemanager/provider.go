package devicemanager

import (
	"slices"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// DevicesFor is what the container holds, for the pod-resources API: per
// resource and NUMA node, the devices (a device without topology is in an
// entry without).
func (m *Manager) DevicesFor(podUID, container string) []*podresourcesapi.ContainerDevices {
	m.loadOnce.Do(m.load)
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*podresourcesapi.ContainerDevices
	for _, a := range m.allocs.container(podUID, container) {
		var known map[string]*pluginapi.Device
		if r := m.resources[a.resource]; r != nil {
			known = r.devices
		}
		out = append(out, byNode(a.resource, a.devices, known)...)
	}
	return out
}

// AllocatableDevices is every device plugins report (healthy or not), for
// the pod-resources API's GetAllocatableResources, by resource name.
func (m *Manager) AllocatableDevices() []*podresourcesapi.ContainerDevices {
	m.loadOnce.Do(m.load)
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*podresourcesapi.ContainerDevices
	for _, name := range sortedKeys(m.resources) {
		r := m.resources[name]
		out = append(out, byNode(name, r.order, r.devices)...)
	}
	return out
}

// byNode groups ids by the first NUMA node of each device's topology, in
// the order the nodes first appear; -1 for none.
func byNode(resource string, ids []string, known map[string]*pluginapi.Device) []*podresourcesapi.ContainerDevices {
	var nodes []int64
	groups := map[int64][]string{}
	for _, id := range ids {
		node := int64(-1)
		if ns := known[id].GetTopology().GetNodes(); len(ns) > 0 {
			node = ns[0].GetID()
		}
		if _, ok := groups[node]; !ok {
			nodes = append(nodes, node)
		}
		groups[node] = append(groups[node], id)
	}
	out := make([]*podresourcesapi.ContainerDevices, 0, len(nodes))
	for _, node := range nodes {
		cd := &podresourcesapi.ContainerDevices{ResourceName: resource, DeviceIds: slices.Clone(groups[node])}
		if node >= 0 {
			cd.Topology = &podresourcesapi.TopologyInfo{Nodes: []*podresourcesapi.NUMANode{{ID: node}}}
		}
		out = append(out, cd)
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
