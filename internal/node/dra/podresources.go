package dra

import (
	v1 "k8s.io/api/core/v1"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// DynamicResourcesFor is what the pod-resources API lists of the
// container's claims: per claim it names, the devices prepared for it
// that serve the requests it names, each with its CDI devices. A pod
// whose claims cannot be resolved lists none.
func (m *Manager) DynamicResourcesFor(pod *v1.Pod, c *v1.Container) []*podresourcesapi.DynamicResource {
	devices, err := m.ContainerClaims(pod, c)
	if err != nil {
		return nil
	}
	var out []*podresourcesapi.DynamicResource
	for _, d := range devices {
		if len(out) == 0 || out[len(out)-1].ClaimName != d.ClaimName {
			out = append(out, &podresourcesapi.DynamicResource{ClaimName: d.ClaimName, ClaimNamespace: d.ClaimNamespace})
		}
		r := &podresourcesapi.ClaimResource{DriverName: d.Driver, PoolName: d.Pool, DeviceName: d.Device}
		if d.ShareID != nil {
			id := string(*d.ShareID)
			r.ShareId = &id
		}
		for _, id := range d.CDIDeviceIDs {
			r.CdiDevices = append(r.CdiDevices, &podresourcesapi.CDIDevice{Name: id})
		}
		out[len(out)-1].ClaimResources = append(out[len(out)-1].ClaimResources, r)
	}
	return out
}
