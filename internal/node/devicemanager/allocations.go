package devicemanager

import (
	"cmp"
	"slices"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// allocation is what one container of a pod holds of one resource (the
// kubelet's podDevices entry).
type allocation struct {
	podUID, container, resource string
	devices                     []string
	resp                        *pluginapi.ContainerAllocateResponse
}

type allocKey struct{ podUID, container, resource string }

// allocations are every allocation, by pod, container and resource.
type allocations map[allocKey]allocation

func (as allocations) set(a allocation) {
	as[allocKey{a.podUID, a.container, a.resource}] = a
}

func (as allocations) get(podUID, container, resource string) (allocation, bool) {
	a, ok := as[allocKey{podUID, container, resource}]
	return a, ok
}

// inUse are the devices of resource that any container holds.
func (as allocations) inUse(resource string) map[string]bool {
	out := map[string]bool{}
	for k, a := range as {
		if k.resource == resource {
			for _, d := range a.devices {
				out[d] = true
			}
		}
	}
	return out
}

// container is what one container holds, by resource name order.
func (as allocations) container(podUID, container string) []allocation {
	var out []allocation
	for k, a := range as {
		if k.podUID == podUID && k.container == container {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, func(a, b allocation) int { return cmp.Compare(a.resource, b.resource) })
	return out
}

// removePod forgets every allocation of podUID and tells whether there
// was one.
func (as allocations) removePod(podUID string) bool {
	removed := false
	for k := range as {
		if k.podUID == podUID {
			delete(as, k)
			removed = true
		}
	}
	return removed
}

// sorted is every allocation in a stable order (pod, container, resource).
func (as allocations) sorted() []allocation {
	out := make([]allocation, 0, len(as))
	for _, a := range as {
		out = append(out, a)
	}
	slices.SortFunc(out, func(a, b allocation) int {
		return cmp.Or(cmp.Compare(a.podUID, b.podUID), cmp.Compare(a.container, b.container), cmp.Compare(a.resource, b.resource))
	})
	return out
}
