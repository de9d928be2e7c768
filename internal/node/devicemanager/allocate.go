package devicemanager

import (
	"context"
	"fmt"
	"slices"
	"sort"

	v1 "k8s.io/api/core/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// Allocate gives every container of pod (init containers first) the
// devices its limits ask of each device plugin resource, as the kubelet's
// admission does; a container that holds its devices already keeps them
// and costs no call. The error is the kubelet's (the admission refuses the
// pod with UnexpectedAdmissionError).
func (m *Manager) Allocate(ctx context.Context, pod *v1.Pod) error {
	m.loadOnce.Do(m.load)
	reuse := map[string][]string{}
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		if err := m.allocateContainer(ctx, pod, c, reuse); err != nil {
			return err
		}
		sidecar := c.RestartPolicy != nil && *c.RestartPolicy == v1.ContainerRestartPolicyAlways
		for _, a := range m.held(pod, c.Name) {
			if sidecar {
				reuse[a.resource] = without(reuse[a.resource], a.devices)
			} else {
				reuse[a.resource] = union(reuse[a.resource], a.devices)
			}
		}
	}
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		if err := m.allocateContainer(ctx, pod, c, reuse); err != nil {
			return err
		}
		for _, a := range m.held(pod, c.Name) {
			reuse[a.resource] = without(reuse[a.resource], a.devices)
		}
	}
	return nil
}

func (m *Manager) held(pod *v1.Pod, container string) []allocation {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.allocs.container(string(pod.UID), container)
}

// allocateContainer allocates each device plugin resource of c's limits,
// in name order.
func (m *Manager) allocateContainer(ctx context.Context, pod *v1.Pod, c *v1.Container, reuse map[string][]string) error {
	names := make([]string, 0, len(c.Resources.Limits))
	for name := range c.Resources.Limits {
		names = append(names, string(name))
	}
	sort.Strings(names)
	for _, name := range names {
		q := c.Resources.Limits[v1.ResourceName(name)]
		if err := m.allocateResource(ctx, pod, c.Name, name, int(q.Value()), reuse[name]); err != nil {
			return err
		}
	}
	return nil
}

// allocateResource is the kubelet's devicesToAllocate and allocation for
// one container and resource.
func (m *Manager) allocateResource(ctx context.Context, pod *v1.Pod, container, name string, need int, reusable []string) error {
	uid := string(pod.UID)
	m.mu.Lock()
	r, registered := m.resources[name]
	a, allocated := m.allocs.get(uid, container, name)
	switch {
	case allocated && len(a.devices) == need:
		m.mu.Unlock()
		return nil
	case allocated:
		m.mu.Unlock()
		return fmt.Errorf("pod %q container %q changed request for resource %q from %d to %d", uid, container, name, len(a.devices), need)
	case !registered:
		// Not a device plugin resource: not the device manager's.
		m.mu.Unlock()
		return nil
	case need == 0:
		m.mu.Unlock()
		return nil
	}
	inUse := m.allocs.inUse(name)
	var available []string
	for _, id := range r.healthy() {
		if !inUse[id] {
			available = append(available, id)
		}
	}
	var healthyReuse []string
	for _, id := range reusable {
		if r.plugin != nil && r.devices[id].GetHealth() == pluginapi.Healthy {
			healthyReuse = append(healthyReuse, id)
		}
	}
	p := r.plugin
	m.mu.Unlock()
	if p == nil {
		return fmt.Errorf("requested number of devices unavailable for %s. Requested: %d, Available: 0", name, need)
	}
	c := choice{need: need, available: available, reusable: healthyReuse}
	if p.opts.GetGetPreferredAllocationAvailable() && len(healthyReuse) < need {
		c.preferred = m.preferred(ctx, p, union(available, healthyReuse), healthyReuse, need)
	}
	devices, err := choose(name, c)
	if err != nil {
		return err
	}
	began := m.deps.Clock.Now()
	resp, err := allocateRPC(ctx, p, devices)
	m.allocDuration.WithLabelValues(name).Observe(m.deps.Clock.Since(began).Seconds())
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	// Another pod may have been given some of these devices meanwhile.
	inUse = m.allocs.inUse(name)
	for _, id := range devices {
		if inUse[id] && !slices.Contains(healthyReuse, id) {
			return fmt.Errorf("device %s of %s was allocated to another container meanwhile", id, name)
		}
	}
	m.allocs.set(allocation{podUID: uid, container: container, resource: name, devices: devices, resp: resp})
	if err := m.checkpointLocked(); err != nil {
		return err
	}
	return nil
}

// preferred asks the plugin which devices it prefers; a failure is logged
// and the default order used, as the kubelet continues without it.
func (m *Manager) preferred(ctx context.Context, p *plugin, available, mustInclude []string, size int) []string {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := p.client.GetPreferredAllocation(ctx, &pluginapi.PreferredAllocationRequest{
		ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{
			AvailableDeviceIDs: available, MustIncludeDeviceIDs: mustInclude, AllocationSize: int32(size),
		}},
	})
	if err != nil {
		m.log.Warn("device plugin GetPreferredAllocation", "resource", p.resource, "err", err)
		return nil
	}
	if rs := resp.GetContainerResponses(); len(rs) == 1 {
		return rs[0].GetDeviceIDs()
	}
	return nil
}

func allocateRPC(ctx context.Context, p *plugin, devices []string) (*pluginapi.ContainerAllocateResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := p.client.Allocate(ctx, &pluginapi.AllocateRequest{
		ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: devices}},
	})
	if err != nil {
		return nil, fmt.Errorf("allocate %s devices %v: %w", p.resource, devices, err)
	}
	rs := resp.GetContainerResponses()
	if len(rs) != 1 {
		return nil, fmt.Errorf("allocate %s: the plugin answered for %d containers, want 1", p.resource, len(rs))
	}
	return rs[0], nil
}

// Release forgets every allocation of the pod, freeing its devices.
func (m *Manager) Release(podUID string) error {
	m.loadOnce.Do(m.load)
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.allocs.removePod(podUID) {
		return nil
	}
	return m.checkpointLocked()
}

func union(a, b []string) []string {
	out := slices.Clone(a)
	for _, d := range b {
		if !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	return out
}

func without(a, b []string) []string {
	return slices.DeleteFunc(slices.Clone(a), func(d string) bool { return slices.Contains(b, d) })
}
