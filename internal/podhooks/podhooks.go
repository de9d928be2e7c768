// Package podhooks is beside the pod workers (stage 4): the per-pod
// resources as lifecycle hooks (podworker.Hook). Each owns both ends of one
// resource: Prepare sets it up (or refreshes it) before every sync,
// Cleanup releases it once the pod's containers have stopped, and Holding
// lists what is held on the machine, so that housekeeping can clean up
// what an earlier nodelet prepared and no pod worker holds any more.
//
// The order the agent gives them to the pod workers, and so the order of
// Prepare (Cleanup runs in reverse):
//
//  1. Cgroup: the pod cgroup under its QoS tier (the sandbox's parent);
//  2. Objects (cluster mode): the API objects the pod refers to,
//     registered so that they are watched before volumes and env read
//     them, and unregistered once the volumes are gone;
//  3. UserNamespaces: the block of host IDs of a pod with hostUsers:
//     false, given before its volumes and freed after they are gone;
//  4. Volumes: the pod's volumes, refreshed on every sync;
//  5. Probes: the pod's probe workers (bound to running containers by
//     the status they hear of).
package podhooks

import (
	"context"
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/internal/userns"
	"github.com/nodelet/nodelet/internal/volume"
)

// CgroupManager is what the Cgroup hook needs of podresources.Manager.
type CgroupManager interface {
	EnsurePod(pod *v1.Pod) (cgroupParent string, err error)
	RemovePod(podUID types.UID, qos v1.PodQOSClass) error
	Pods() ([]types.UID, error)
}

// Cgroup is the pod cgroup.
type Cgroup struct{ Cgroups CgroupManager }

func (Cgroup) Name() string { return "pod cgroup" }

func (h Cgroup) Prepare(_ context.Context, pod *v1.Pod) error {
	_, err := h.Cgroups.EnsurePod(pod)
	return err
}

// Cleanup removes the cgroup from whichever QoS tier holds it: an orphan's
// spec (and so its class) is unknown, and a pod's class never changes.
func (h Cgroup) Cleanup(_ context.Context, pod *v1.Pod) error {
	return h.Cgroups.RemovePod(pod.UID, "")
}

func (h Cgroup) Holding() ([]types.UID, error) { return h.Cgroups.Pods() }

// ObjectRegistry is what the Objects hook needs of objects.Watcher.
type ObjectRegistry interface {
	RegisterPod(pod *v1.Pod)
	UnregisterPod(pod *v1.Pod)
}

// Objects registers the ConfigMaps and Secrets a pod refers to with the
// API server's watches before every sync, as the kubelet's SyncPod does
// (a pod's references can change with its spec), and unregisters them once
// the pod's containers have stopped and, Cleanup running in reverse
// order, its volumes are torn down (the kubelet's SyncTerminatedPod). It
// holds nothing on the machine.
type Objects struct{ Registry ObjectRegistry }

func (Objects) Name() string { return "api objects" }

func (h Objects) Prepare(_ context.Context, pod *v1.Pod) error {
	h.Registry.RegisterPod(pod)
	return nil
}

func (h Objects) Cleanup(_ context.Context, pod *v1.Pod) error {
	h.Registry.UnregisterPod(pod)
	return nil
}

// UserNamespaceManager is what the UserNamespaces hook needs of
// userns.Manager.
type UserNamespaceManager interface {
	// Allocate gives the pod its block of host IDs (the one it has if
	// any), after asking the runtime whether it supports user namespaces.
	Allocate(ctx context.Context, pod *v1.Pod) (userns.Mapping, error)
	Release(podUID types.UID) error
	Pods() ([]types.UID, error)
}

// UserNamespaces gives a pod with hostUsers: false its user namespace's
// block of host IDs before its first sync and frees it once the pod is
// cleaned up. A pod that cannot have one (the runtime does not support
// user namespaces, say) stays pending, with the kubelet's
// FailedCreatePodSandBox event saying why, and is retried.
type UserNamespaces struct {
	Manager  UserNamespaceManager
	Recorder Recorder
}

func (UserNamespaces) Name() string { return "user namespace" }

func (h UserNamespaces) Prepare(ctx context.Context, pod *v1.Pod) error {
	if !userns.Wants(pod) {
		return nil
	}
	if _, err := h.Manager.Allocate(ctx, pod); err != nil {
		if ctx.Err() == nil {
			h.Recorder.Event(pod, v1.EventTypeWarning, "FailedCreatePodSandBox", "Failed to create pod sandbox: "+oneLine(err))
		}
		return err
	}
	return nil
}

func (h UserNamespaces) Cleanup(_ context.Context, pod *v1.Pod) error {
	return h.Manager.Release(pod.UID)
}

func (h UserNamespaces) Holding() ([]types.UID, error) { return h.Manager.Pods() }

// VolumeManager is what the Volumes hook needs of volume.Manager.
type VolumeManager interface {
	SetUp(ctx context.Context, pod *v1.Pod) error
	TearDown(ctx context.Context, podUID types.UID) error
	Pods() ([]types.UID, error)
}

// Recorder records pod events.
type Recorder interface {
	Event(pod *v1.Pod, eventType, reason, message string)
}

// Volumes are the pod's volumes. A failed set-up is a FailedMount event,
// as the kubelet's; the pod stays pending and is retried.
type Volumes struct {
	Volumes  VolumeManager
	Recorder Recorder
}

func (Volumes) Name() string { return "volumes" }

func (h Volumes) Prepare(ctx context.Context, pod *v1.Pod) error {
	if err := h.Volumes.SetUp(ctx, pod); err != nil {
		if ctx.Err() == nil {
			// One event per volume, as the kubelet's volume manager words
			// it; anything else as one.
			failed := volume.SetUpErrors(err)
			for _, ve := range failed {
				h.Recorder.Event(pod, v1.EventTypeWarning, "FailedMount",
					fmt.Sprintf("MountVolume.SetUp failed for volume %q : %s", ve.Volume, oneLine(ve.Err)))
			}
			if len(failed) == 0 {
				h.Recorder.Event(pod, v1.EventTypeWarning, "FailedMount", "Unable to attach or mount volumes: "+oneLine(err))
			}
		}
		return fmt.Errorf("set up volumes: %w", err)
	}
	return nil
}

func (h Volumes) Cleanup(ctx context.Context, pod *v1.Pod) error {
	return h.Volumes.TearDown(ctx, pod.UID)
}

func (h Volumes) Holding() ([]types.UID, error) { return h.Volumes.Pods() }

// Prober is what the Probes hook needs of prober.Manager.
type Prober interface {
	AddPod(pod *v1.Pod)
	RemovePod(pod *v1.Pod)
}

// Probes are the pod's probe workers. They live in memory only, so there
// is nothing to list for housekeeping.
type Probes struct{ Prober Prober }

func (Probes) Name() string { return "probes" }

func (h Probes) Prepare(_ context.Context, pod *v1.Pod) error {
	h.Prober.AddPod(pod)
	return nil
}

func (h Probes) Cleanup(_ context.Context, pod *v1.Pod) error {
	h.Prober.RemovePod(pod)
	return nil
}

// oneLine joins a multi-line error (errors.Join) into one line.
func oneLine(err error) string { return strings.Join(strings.Fields(err.Error()), " ") }
