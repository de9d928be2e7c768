package podruntime

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/pure/observed"
	"github.com/nodelet/nodelet/internal/pure/plan"
	"github.com/nodelet/nodelet/internal/pure/podsetup"
	"github.com/nodelet/nodelet/internal/pure/resize"
	"github.com/nodelet/nodelet/internal/pure/status"
)

// Resizes is where the in-place resizes of pods are recorded
// (allocation.Manager): what each container was given, and how a resize
// ends. The pods the manager is handed carry their allocated resources
// (the sync loop's Allocator): those are what the containers get.
type Resizes interface {
	// Status is the pod's allocation with what its containers were last
	// given (nil: the pod has none), and its resize conditions.
	Status(uid types.UID) (*status.Resources, []v1.PodCondition)
	// Actuated records what container of pod uid was given, at its
	// creation or by UpdateContainerResources.
	Actuated(uid types.UID, container string, r resize.Resources) error
	// Failed records that actuating the pod's resize failed (the
	// PodResizeInProgress condition's Error); Done that everything
	// allocated to its running containers is actuated.
	Failed(pod *v1.Pod, err error)
	Done(pod *v1.Pod)
	// Actuation observes how long one actuation of a resize took and
	// whether it succeeded (kubelet_pod_resize_duration_milliseconds).
	Actuation(took time.Duration, err error)
}

// resizing is one sync's in-place resize of a pod: the plan, and the
// restarts it asks the planner for.
type resizing struct {
	plan resize.Plan
	// restarts are plan.Restart by container ID, with their kill message.
	restarts map[string]string
	// podMemory is the pod cgroup's memory limit the plan sets (0: none).
	podMemory int64
	// err is why the resize could not be planned or actuated in this
	// sync; the next sync tries again.
	err error
	// updated: some container's resources were changed in place.
	updated bool
}

// planResize compares what the pod's running containers are allocated
// (their resources in pod, the allocated pod) with what they were given,
// and plans the resize (resize.Compute): restarts for resizePolicy
// RestartContainer, the in-place writes otherwise. It is nil without
// Resizes or an allocation. A running container without a record of what
// it was given is taken to have its allocation (recorded so): it was
// created before allocations were recorded, and restarting it, or
// rewriting what it runs with, on that guess alone could harm it.
func (m *Manager) planResize(pod *v1.Pod, obs *observed.PodStatus, setup podsetup.Setup, log *slog.Logger) *resizing {
	if m.resizes == nil {
		return nil
	}
	res, _ := m.resizes.Status(pod.UID)
	if res == nil {
		return nil
	}
	rz := &resizing{}
	var in resize.Input
	changed := false
	for _, rc := range resizable(pod, obs) {
		allocated := resize.ResourcesOf(rc.spec.Resources)
		actuated, ok := res.Actuated[rc.spec.Name]
		if !ok {
			actuated = allocated
			if err := m.resizes.Actuated(pod.UID, rc.spec.Name, allocated); err != nil {
				log.Error("record the resources of a running container", "container", rc.spec.Name, "err", err)
			}
		}
		changed = changed || actuated != allocated
		in.Containers = append(in.Containers, resize.Container{
			Name: rc.spec.Name, ID: rc.inst.ID, Init: rc.init,
			Allocated: allocated, Actuated: actuated, Policy: rc.spec.ResizePolicy,
		})
	}
	if !changed {
		return rz
	}
	if setup.PodCgroup != nil {
		now, err := setup.PodCgroup.Now()
		if err != nil {
			rz.err = fmt.Errorf("read the pod cgroup: %w", err)
			return rz
		}
		in.PodCurrent, in.PodDesired = now, setup.PodCgroup.Want()
	}
	rz.plan = resize.Compute(in)
	rz.podMemory = in.PodDesired.MemoryLimit
	for _, r := range rz.plan.Restart {
		if rz.restarts == nil {
			rz.restarts = map[string]string{}
		}
		rz.restarts[r.ContainerID] = r.Message
	}
	return rz
}

// updatedAny: rz changed a container's resources in place.
func (rz *resizing) updatedAny() bool { return rz != nil && rz.updated }

// restartsOrNil are rz's restarts (none for a nil rz).
func (rz *resizing) restartsOrNil() map[string]string {
	if rz == nil {
		return nil
	}
	return rz.restarts
}

// resizableContainer is a running container a resize may change.
type resizableContainer struct {
	spec *v1.Container
	inst *observed.Container
	init bool
}

// resizable are the pod's running sidecars and app containers, in spec
// order: the containers an in-place resize changes (the kubelet's).
func resizable(pod *v1.Pod, obs *observed.PodStatus) []resizableContainer {
	var out []resizableContainer
	add := func(c *v1.Container, init bool) {
		if inst := obs.Newest(c.Name); inst != nil && inst.State == observed.ContainerRunning {
			out = append(out, resizableContainer{spec: c, inst: inst, init: init})
		}
	}
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		if c.RestartPolicy != nil && *c.RestartPolicy == v1.ContainerRestartPolicyAlways {
			add(c, true)
		}
	}
	for i := range pod.Spec.Containers {
		add(&pod.Spec.Containers[i], false)
	}
	return out
}

// actuate runs the plan's in-place writes in order, as the kubelet's
// doPodResizeAction: a memory limit set at or below what is in use is
// refused before anything is written (resize.CheckMemoryDecrease); each
// UpdateContainerResources that succeeds is recorded at once; the first
// failure ends the resize, and the next sync plans again from what was
// recorded.
func (m *Manager) actuate(ctx context.Context, pod *v1.Pod, rz *resizing, setup podsetup.Setup, log *slog.Logger) error {
	p := rz.plan
	if len(p.Steps) == 0 {
		return nil
	}
	if p.DecreasingMemory != nil {
		if err := resize.CheckMemoryDecrease(p, rz.podMemory, m.memoryUsage(ctx, p, setup)); err != nil {
			return err
		}
	}
	for _, s := range p.Steps {
		if s.Kind != resize.UpdateContainer {
			if setup.PodCgroup == nil {
				continue
			}
			if err := setup.PodCgroup.Set(s); err != nil {
				return fmt.Errorf("resize the pod cgroup: %w", err)
			}
			continue
		}
		c := containerNamed(pod, s.Container)
		if c == nil || setup.ContainerResources == nil {
			return fmt.Errorf("resize container %q: no resources to give it", s.Container)
		}
		linux := setup.ContainerResources(pod, withResources(c, s.Resources))
		if err := m.rt.UpdateContainerResources(ctx, s.ContainerID, &runtimeapi.ContainerResources{Linux: linux}); err != nil {
			return fmt.Errorf("update resources of container %q: %w", s.Container, err)
		}
		rz.updated = true
		m.observed.forget(pod.UID, s.ContainerID)
		if err := m.resizes.Actuated(pod.UID, s.Container, s.Resources); err != nil {
			return fmt.Errorf("record the resources of container %q: %w", s.Container, err)
		}
		log.Info("container resized", "container", s.Container, "containerID", s.ContainerID,
			"cpuRequest", s.Resources.CPURequest, "cpuLimit", s.Resources.CPULimit,
			"memoryRequest", s.Resources.MemRequest, "memoryLimit", s.Resources.MemLimit)
	}
	return nil
}

// memoryUsage is what the plan's memory decreases are checked against:
// the pod cgroup's usage, and each container's from the runtime's stats.
// What cannot be read is left out (the check then refuses the decrease).
func (m *Manager) memoryUsage(ctx context.Context, p resize.Plan, setup podsetup.Setup) resize.Usage {
	u := resize.Usage{Containers: map[string]uint64{}}
	if p.PodMemoryDecreasing && setup.PodCgroup != nil {
		if v, err := setup.PodCgroup.MemoryUsage(); err == nil {
			u.Pod = &v
		}
	}
	ids := map[string]string{}
	for _, s := range p.Steps {
		if s.Kind == resize.UpdateContainer {
			ids[s.Container] = s.ContainerID
		}
	}
	for name := range p.DecreasingMemory {
		st, err := m.rt.ContainerStats(ctx, ids[name])
		if err != nil || st.GetMemory().GetUsageBytes() == nil {
			continue
		}
		u.Containers[name] = st.GetMemory().GetUsageBytes().GetValue()
	}
	return u
}

// finishResize records how the sync's resize ended: its error, or, once
// every running container has what it is allocated, that it is done
// (PodResizeInProgress goes, with ResizeCompleted if it was there).
func (m *Manager) finishResize(pod *v1.Pod, obs *observed.PodStatus, rz *resizing) {
	if rz == nil {
		return
	}
	if rz.err != nil {
		m.resizes.Failed(pod, rz.err)
		return
	}
	res, _ := m.resizes.Status(pod.UID)
	if res == nil {
		return
	}
	for _, rc := range resizable(pod, obs) {
		if a, ok := res.Actuated[rc.spec.Name]; !ok || a != resize.ResourcesOf(rc.spec.Resources) {
			return
		}
	}
	m.resizes.Done(pod)
}

// recordPlanned records what the init and app containers actions start
// will be created with (recordCreated for each).
func (m *Manager) recordPlanned(pod *v1.Pod, actions plan.Actions, log *slog.Logger) {
	for _, s := range actions.InitContainersToStart {
		m.recordCreated(pod, &pod.Spec.InitContainers[s.Index], log)
	}
	for _, s := range actions.ContainersToStart {
		m.recordCreated(pod, &pod.Spec.Containers[s.Index], log)
	}
}

// recordCreated records what a container is created with.
func (m *Manager) recordCreated(pod *v1.Pod, c *v1.Container, log *slog.Logger) {
	if m.resizes == nil {
		return
	}
	if err := m.resizes.Actuated(pod.UID, c.Name, resize.ResourcesOf(c.Resources)); err != nil {
		log.Error("record the resources of a new container", "container", c.Name, "err", err)
	}
}

// containerNamed is the pod's app container or sidecar named name.
func containerNamed(pod *v1.Pod, name string) *v1.Container {
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == name {
			return &pod.Spec.Containers[i]
		}
	}
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == name {
			return &pod.Spec.InitContainers[i]
		}
	}
	return nil
}

// withResources is c with its CPU and memory requests and limits as r
// has them (0: none), its other resources as they are.
func withResources(c *v1.Container, r resize.Resources) *v1.Container {
	out := c.DeepCopy()
	set := func(l *v1.ResourceList, name v1.ResourceName, q *resource.Quantity) {
		if q == nil {
			delete(*l, name)
			return
		}
		if *l == nil {
			*l = v1.ResourceList{}
		}
		(*l)[name] = *q
	}
	milli := func(v int64) *resource.Quantity {
		if v == 0 {
			return nil
		}
		return resource.NewMilliQuantity(v, resource.DecimalSI)
	}
	bytes := func(v int64) *resource.Quantity {
		if v == 0 {
			return nil
		}
		return resource.NewQuantity(v, resource.BinarySI)
	}
	set(&out.Resources.Requests, v1.ResourceCPU, milli(r.CPURequest))
	set(&out.Resources.Limits, v1.ResourceCPU, milli(r.CPULimit))
	set(&out.Resources.Requests, v1.ResourceMemory, bytes(r.MemRequest))
	set(&out.Resources.Limits, v1.ResourceMemory, bytes(r.MemLimit))
	return out
}
