package devicemanager

import (
	"context"
	"fmt"
	"maps"
	"slices"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/nodelet/nodelet/internal/pure/podsetup"
)

// Name names the manager as a pod worker hook.
func (m *Manager) Name() string { return "devices" }

// Prepare allocates the pod's devices (nothing new when it holds them
// already) and hands the runtime, for each container, what the plugins
// answered.
func (m *Manager) Prepare(ctx context.Context, pod *v1.Pod) (podsetup.Setup, error) {
	if err := m.Allocate(ctx, pod); err != nil {
		return podsetup.Setup{}, err
	}
	// PreStartContainer outlives the Prepare call; it has its own timeout.
	base := context.WithoutCancel(ctx)
	return podsetup.Setup{Containers: []podsetup.Contributor{podsetup.ContributorFunc(func(c podsetup.Container) (podsetup.Additions, error) {
		return m.contribute(base, c)
	})}}, nil
}

// Cleanup frees the devices of a pod that is gone.
func (m *Manager) Cleanup(_ context.Context, pod *v1.Pod) error {
	return m.Release(string(pod.UID))
}

// contribute is the kubelet's GetDeviceRunContainerOptions: the plugins'
// answers for the container, merged (a mount or device path, or a CDI
// name, once: the first; an env or annotation key: the last), after
// PreStartContainer for plugins that ask for it.
func (m *Manager) contribute(ctx context.Context, c podsetup.Container) (podsetup.Additions, error) {
	m.mu.Lock()
	held := m.allocs.container(string(c.Pod.UID), c.Container.Name)
	plugins := make(map[string]*plugin, len(held))
	for _, a := range held {
		if r := m.resources[a.resource]; r != nil && r.plugin != nil {
			plugins[a.resource] = r.plugin
		}
	}
	m.mu.Unlock()
	for _, a := range held {
		if p := plugins[a.resource]; p != nil && p.opts.GetPreStartRequired() {
			if err := preStart(ctx, p, a.devices); err != nil {
				return podsetup.Additions{}, err
			}
		}
	}
	return merge(held), nil
}

func preStart(ctx context.Context, p *plugin, devices []string) error {
	ctx, cancel := context.WithTimeout(ctx, preStartTimeout)
	defer cancel()
	if _, err := p.client.PreStartContainer(ctx, &pluginapi.PreStartContainerRequest{DevicesIds: devices}); err != nil {
		return fmt.Errorf("device plugin PreStartContainer rpc failed with err: %w", err)
	}
	return nil
}

// merge is the answers of a container's allocations as the runtime takes
// them.
func merge(held []allocation) podsetup.Additions {
	var out podsetup.Additions
	env, annotations := map[string]string{}, map[string]string{}
	mounts, devices, cdi := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, a := range held {
		r := a.resp
		maps.Copy(env, r.GetEnvs())
		maps.Copy(annotations, r.GetAnnotations())
		for _, mnt := range r.GetMounts() {
			if !mounts[mnt.GetContainerPath()] {
				mounts[mnt.GetContainerPath()] = true
				out.Mounts = append(out.Mounts, &runtimeapi.Mount{ContainerPath: mnt.GetContainerPath(), HostPath: mnt.GetHostPath(), Readonly: mnt.GetReadOnly()})
			}
		}
		for _, d := range r.GetDevices() {
			if !devices[d.GetContainerPath()] {
				devices[d.GetContainerPath()] = true
				out.Devices = append(out.Devices, &runtimeapi.Device{ContainerPath: d.GetContainerPath(), HostPath: d.GetHostPath(), Permissions: d.GetPermissions()})
			}
		}
		for _, d := range r.GetCdiDevices() {
			if !cdi[d.GetName()] {
				cdi[d.GetName()] = true
				out.CDIDevices = append(out.CDIDevices, &runtimeapi.CDIDevice{Name: d.GetName()})
			}
		}
	}
	for _, k := range slices.Sorted(maps.Keys(env)) {
		out.Env = append(out.Env, &runtimeapi.KeyValue{Key: k, Value: []byte(env[k])})
	}
	if len(annotations) > 0 {
		out.Annotations = annotations
	}
	return out
}

// Holding is the pods that hold devices, so that housekeeping frees the
// devices of a pod that went away while nodelet was down (the kubelet's
// UpdateAllocatedDevices).
func (m *Manager) Holding() ([]types.UID, error) {
	m.loadOnce.Do(m.load)
	m.mu.Lock()
	defer m.mu.Unlock()
	seen := map[types.UID]bool{}
	var out []types.UID
	for k := range m.allocs {
		if uid := types.UID(k.podUID); !seen[uid] {
			seen[uid] = true
			out = append(out, uid)
		}
	}
	slices.Sort(out)
	return out, nil
}
