// Package podhooks is beside the pod workers (stage 4): the per-pod
// resources as lifecycle hooks (podworker.Hook). Each owns both ends of one
// resource: Prepare sets it up (or refreshes it) before every sync and
// hands back what it set up (podsetup.Setup: the pod directory, the cgroup
// parent, the user namespace, mounts and env files, probe results, and
// what to add to every container), which the pod workers carry to the
// runtime manager; Cleanup releases it once the pod's containers have
// stopped; and Holding lists what is held on the machine, so that
// housekeeping can clean up what an earlier nodelet prepared and no pod
// worker holds any more.
//
// The order the agent gives them to the pod workers, and so the order of
// Prepare (Cleanup runs in reverse):
//
//  1. PodDir: the pod's directory <root-dir>/pods/<uid>, where the other
//     hooks and the runtime manager keep the pod's files; removed last;
//  2. Cgroup: the pod cgroup under its QoS tier (the sandbox's parent),
//     and every container's resources;
//  3. CPUs: the CPU manager's cpuset of every container (its own CPUs
//     or the shared pool), given back once the pod's containers stopped;
//  4. Objects: the API objects the pod refers to, registered in cluster
//     mode so that they are watched before volumes and env read them,
//     and unregistered once the volumes are gone;
//  5. PullSecrets: the credentials the pod's images are pulled with, its
//     imagePullSecrets', then the node's, then the credential provider
//     plugins' (read after Objects has registered them);
//  6. UserNamespaces: the block of host IDs of a pod with hostUsers:
//     false, given before its volumes and freed after they are gone (its
//     file is in the pod directory);
//  7. Volumes: the pod's volumes, refreshed on every sync, and every
//     container's mounts of them;
//  8. Probes: the pod's probe workers (bound to running containers by
//     the status they hear of).
package podhooks

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/base/beneath"
	"github.com/nodelet/nodelet/internal/node/podresources"
	"github.com/nodelet/nodelet/internal/node/userns"
	"github.com/nodelet/nodelet/internal/node/volume"
	"github.com/nodelet/nodelet/internal/pure/envvars"
	"github.com/nodelet/nodelet/internal/pure/podsetup"
	"github.com/nodelet/nodelet/internal/pure/podspec"
	"github.com/nodelet/nodelet/internal/pure/resize"
)

// PodDir is the pod's directory, <PodsDir>/<uid>: created (0750) before
// everything else and removed after everything else, whatever the other
// hooks and the runtime manager left in it (its /etc/hosts, termination
// message files), never across a mount point (a volume still mounted is
// an error, retried) and never through a symlink.
type PodDir struct {
	// PodsDir is <root-dir>/pods.
	PodsDir string
}

func (PodDir) Name() string { return "pod directory" }

func (h PodDir) Prepare(_ context.Context, pod *v1.Pod) (podsetup.Setup, error) {
	if err := checkUID(pod.UID); err != nil {
		return podsetup.Setup{}, err
	}
	dir := filepath.Join(h.PodsDir, string(pod.UID))
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return podsetup.Setup{}, fmt.Errorf("create pod directory: %w", err)
	}
	return podsetup.Setup{PodDir: dir}, nil
}

func (h PodDir) Cleanup(_ context.Context, pod *v1.Pod) error {
	if err := checkUID(pod.UID); err != nil {
		return err
	}
	root, err := beneath.OpenRoot(h.PodsDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("remove pod directory: %w", err)
	}
	defer root.Close()
	if err := root.RemoveAll(string(pod.UID)); err != nil {
		return fmt.Errorf("remove pod directory: %w", err)
	}
	return nil
}

// Holding lists every entry of PodsDir (anything there, a symlink
// included, is taken for a pod directory, so that Cleanup removes it).
func (h PodDir) Holding() ([]types.UID, error) {
	entries, err := os.ReadDir(h.PodsDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list pod directories: %w", err)
	}
	uids := make([]types.UID, 0, len(entries))
	for _, e := range entries {
		uids = append(uids, types.UID(e.Name()))
	}
	return uids, nil
}

// checkUID refuses a pod UID that is not one path element.
func checkUID(uid types.UID) error { return podspec.CheckUIDPathElement(uid) }

// CgroupManager is what the Cgroup hook needs of podresources.Manager.
type CgroupManager interface {
	EnsurePod(pod *v1.Pod) (cgroupParent string, err error)
	RemovePod(podUID types.UID, qos v1.PodQOSClass) error
	Pods() ([]types.UID, error)
	// ContainerUnified is the CRI Unified map (cgroup v2 files) of a
	// container, MemoryQoS's memory.high among them; nil for none.
	ContainerUnified(pod *v1.Pod, c *v1.Container) map[string]string
	// PodCgroupNow and SetPodCgroup read and write the values of the
	// pod's cgroup an in-place resize changes.
	PodCgroupNow(pod *v1.Pod) (resize.PodCgroup, error)
	SetPodCgroup(pod *v1.Pod, s resize.Step) error
	PodMemoryUsage(pod *v1.Pod) (uint64, error)
}

// Cgroup is the pod cgroup, the sandbox's parent, and every container's
// CRI resources (podresources.ContainerResources: CPU, memory, hugepages,
// OOM score, the cgroup manager's Unified map, and the swap limit of
// memorySwap.swapBehavior). Without a cgroup
// manager (cgroupsPerQOS false) there is no pod cgroup, but containers
// still get their resources.
type Cgroup struct {
	Cgroups CgroupManager // nil: no pod cgroups
	// NodeMemoryCapacity sizes the OOM score of burstable containers.
	NodeMemoryCapacity int64
	// Swap is how much swap each container may use.
	Swap podresources.Swap
	// Log says when a container's swap share cannot be computed (it then
	// gets none).
	Log *slog.Logger
}

func (Cgroup) Name() string { return "pod cgroup" }

func (h Cgroup) Prepare(_ context.Context, pod *v1.Pod) (podsetup.Setup, error) {
	setup := podsetup.Setup{Containers: []podsetup.Contributor{containerResources(h)}, ContainerResources: containerResources(h).of}
	if h.Cgroups == nil {
		return setup, nil
	}
	parent, err := h.Cgroups.EnsurePod(pod)
	if err != nil {
		return podsetup.Setup{}, err
	}
	setup.CgroupParent = parent
	setup.PodCgroup = podCgroup{h.Cgroups, pod}
	return setup, nil
}

// podCgroup is the pod's cgroup as a resize reads and writes it.
type podCgroup struct {
	m   CgroupManager
	pod *v1.Pod
}

func (p podCgroup) Now() (resize.PodCgroup, error) { return p.m.PodCgroupNow(p.pod) }
func (p podCgroup) Set(s resize.Step) error        { return p.m.SetPodCgroup(p.pod, s) }
func (p podCgroup) MemoryUsage() (uint64, error)   { return p.m.PodMemoryUsage(p.pod) }

// Want is podresources.PodConfig of the pod: no quota is 0 (the current
// one stays), no memory limit 0.
func (p podCgroup) Want() resize.PodCgroup {
	c := podresources.PodConfig(p.pod)
	return resize.PodCgroup{CPUShares: c.CPUShares, CPUQuota: c.CPUQuota, MemoryLimit: c.MemoryLimit}
}

// Cleanup removes the cgroup from whichever QoS tier holds it: an orphan's
// spec (and so its class) is unknown, and a pod's class never changes.
func (h Cgroup) Cleanup(_ context.Context, pod *v1.Pod) error {
	if h.Cgroups == nil {
		return nil
	}
	return h.Cgroups.RemovePod(pod.UID, "")
}

func (h Cgroup) Holding() ([]types.UID, error) {
	if h.Cgroups == nil {
		return nil, nil
	}
	return h.Cgroups.Pods()
}

// containerResources gives each container its CRI resources.
type containerResources Cgroup

func (h containerResources) ContributeContainer(c podsetup.Container) (podsetup.Additions, error) {
	return podsetup.Additions{Resources: h.of(c.Pod, c.Container)}, nil
}

// of is c's CRI resources: the same at its creation and in an in-place
// resize (podsetup.Setup.ContainerResources).
func (h containerResources) of(pod *v1.Pod, c *v1.Container) *runtimeapi.LinuxContainerResources {
	res := podresources.ContainerResources(pod, c, h.NodeMemoryCapacity)
	if h.Cgroups != nil {
		res.Unified = h.Cgroups.ContainerUnified(pod, c)
	}
	if err := h.Swap.ApplySwap(pod, c, res); err != nil && h.Log != nil {
		h.Log.Error("no swap for the container", "pod", pod.Namespace+"/"+pod.Name, "container", c.Name, "err", err)
	}
	return res
}

// ObjectRegistry is what the Objects hook needs of objects.Watcher.
type ObjectRegistry interface {
	RegisterPod(pod *v1.Pod)
	UnregisterPod(pod *v1.Pod)
}

// Objects are the ConfigMaps and Secrets the pod's env reads. In cluster
// mode it registers those a pod refers to with the API server's watches
// before every sync, as the kubelet's SyncPod does (a pod's references can
// change with its spec), and unregisters them once the pod's containers
// have stopped and, Cleanup running in reverse order, its volumes are torn
// down (the kubelet's SyncTerminatedPod). It holds nothing on the machine.
type Objects struct {
	Registry ObjectRegistry // nil: nothing to register (standalone)
	// Objects is where the pod's env reads them from.
	Objects envvars.Objects
}

func (Objects) Name() string { return "api objects" }

func (h Objects) Prepare(_ context.Context, pod *v1.Pod) (podsetup.Setup, error) {
	if h.Registry != nil {
		h.Registry.RegisterPod(pod)
	}
	return podsetup.Setup{Objects: h.Objects}, nil
}

func (h Objects) Cleanup(_ context.Context, pod *v1.Pod) error {
	if h.Registry != nil {
		h.Registry.UnregisterPod(pod)
	}
	return nil
}

// UserNamespaceManager is what the UserNamespaces hook needs of
// userns.Manager.
type UserNamespaceManager interface {
	// Allocate gives the pod its block of host IDs (the one it has if
	// any), after asking the runtime whether it supports user namespaces.
	Allocate(ctx context.Context, pod *v1.Pod) (userns.Mapping, error)
	// CheckRuntime fails, saying why, unless the runtime handler the
	// pod's sandbox runs with supports user namespaces; asked before
	// every sandbox of the pod.
	CheckRuntime(ctx context.Context, handler string) error
	Release(podUID types.UID) error
	Pods() ([]types.UID, error)
}

// UserNamespaces gives a pod with hostUsers: false its user namespace's
// block of host IDs before its first sync (the setup's UserNamespace, and
// a check that the runtime supports it before every sandbox) and frees it
// once the pod is cleaned up. A pod that cannot have one (the runtime does not support
// user namespaces, say) stays pending, with the kubelet's
// FailedCreatePodSandBox event saying why, and is retried.
type UserNamespaces struct {
	Manager  UserNamespaceManager
	Recorder Recorder
}

func (UserNamespaces) Name() string { return "user namespace" }

func (h UserNamespaces) Prepare(ctx context.Context, pod *v1.Pod) (podsetup.Setup, error) {
	if !userns.Wants(pod) {
		return podsetup.Setup{}, nil
	}
	mp, err := h.Manager.Allocate(ctx, pod)
	if err != nil {
		if ctx.Err() == nil {
			h.Recorder.Event(pod, v1.EventTypeWarning, "FailedCreatePodSandBox", "Failed to create pod sandbox: "+oneLine(err))
		}
		return podsetup.Setup{}, err
	}
	return podsetup.Setup{UserNamespace: mp.CRI(), SandboxChecks: []podsetup.Check{h.Manager.CheckRuntime}}, nil
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
	// Mounts are a container's mounts of the pod's volumes (supportsRRO:
	// the runtime handler supports recursive read-only mounts; env
	// expands subPathExpr; images are the pulled images of the image
	// volumes, by volume name).
	Mounts(pod *v1.Pod, c *v1.Container, env map[string]string, supportsRRO bool, images map[string]*runtimeapi.ImageSpec) ([]*runtimeapi.Mount, error)
	// EnvFile is what the pod's fileKeyRef entries read (envvars.Files).
	EnvFile(pod *v1.Pod, volume, path string, limit int64) ([]byte, error)
}

// Recorder records pod events.
type Recorder interface {
	Event(pod *v1.Pod, eventType, reason, message string)
}

// Volumes are the pod's volumes, every container's mounts of them and the
// env files of the pod's fileKeyRef entries. A failed set-up is a
// FailedMount event, as the kubelet's; the pod stays pending and is
// retried.
type Volumes struct {
	Volumes  VolumeManager
	Recorder Recorder
}

func (Volumes) Name() string { return "volumes" }

func (h Volumes) Prepare(ctx context.Context, pod *v1.Pod) (podsetup.Setup, error) {
	if err := h.Volumes.SetUp(ctx, pod); err != nil {
		if ctx.Err() == nil {
			for _, msg := range FailedMountMessages(err) {
				h.Recorder.Event(pod, v1.EventTypeWarning, "FailedMount", msg)
			}
		}
		return podsetup.Setup{}, fmt.Errorf("set up volumes: %w", err)
	}
	return podsetup.Setup{Files: h.Volumes, Containers: []podsetup.Contributor{volumeMounts{h.Volumes}}}, nil
}

func (h Volumes) Cleanup(ctx context.Context, pod *v1.Pod) error {
	return h.Volumes.TearDown(ctx, pod.UID)
}

func (h Volumes) Holding() ([]types.UID, error) { return h.Volumes.Pods() }

// FailedMountMessages are the FailedMount events of a failed SetUp, as
// the kubelet words them: one per volume that failed to mount
// ("MountVolume.SetUp failed for volume "<name>" : <why>", the
// PersistentVolume's name for a claimed volume) and, when a claim could
// not be resolved, the volume manager's one "Unable to attach or mount
// volumes: unmounted volumes=[...], unattached volumes=[], failed to
// process volumes=[...]: <why>; <why>" (nodelet has no attachable
// volumes). An error that names no volume is one "Unable to attach or
// mount volumes" event.
func FailedMountMessages(err error) []string {
	failed := volume.SetUpErrors(err)
	if len(failed) == 0 {
		return []string{"Unable to attach or mount volumes: " + oneLine(err)}
	}
	var msgs, unmounted, unprocessed, why []string
	for _, ve := range failed {
		unmounted = append(unmounted, ve.Volume)
		if ve.Unprocessed {
			unprocessed = append(unprocessed, ve.Volume)
			why = append(why, oneLine(ve.Err))
			continue
		}
		step := cmp.Or(ve.Step, "MountVolume.SetUp failed")
		msgs = append(msgs, fmt.Sprintf("%s for volume %q : %s", step, ve.EventVolume(), oneLine(ve.Err)))
	}
	if len(unprocessed) > 0 {
		slices.Sort(unmounted)
		slices.Sort(unprocessed)
		msgs = append(msgs, fmt.Sprintf("Unable to attach or mount volumes: unmounted volumes=%v, unattached volumes=[], failed to process volumes=%v: %s",
			unmounted, unprocessed, strings.Join(why, "; ")))
	}
	return msgs
}

// volumeMounts gives each container its mounts of the pod's volumes.
type volumeMounts struct{ volumes VolumeManager }

func (v volumeMounts) ContributeContainer(c podsetup.Container) (podsetup.Additions, error) {
	mounts, err := v.volumes.Mounts(c.Pod, c.Container, c.Env, c.RecursiveReadOnlyMounts, c.ImageVolumes)
	if err != nil {
		return podsetup.Additions{}, err
	}
	return podsetup.Additions{Mounts: mounts}, nil
}

// Prober is what the Probes hook needs of prober.Manager.
type Prober interface {
	AddPod(pod *v1.Pod)
	RemovePod(pod *v1.Pod)
	podsetup.ProbeResults
}

// Probes are the pod's probe workers, and their results (the setup's
// Probes). They live in memory only, so there is nothing to list for
// housekeeping.
type Probes struct{ Prober Prober }

func (Probes) Name() string { return "probes" }

func (h Probes) Prepare(_ context.Context, pod *v1.Pod) (podsetup.Setup, error) {
	h.Prober.AddPod(pod)
	return podsetup.Setup{Probes: h.Prober}, nil
}

func (h Probes) Cleanup(_ context.Context, pod *v1.Pod) error {
	h.Prober.RemovePod(pod)
	return nil
}

// oneLine joins a multi-line error (errors.Join) into one line.
func oneLine(err error) string { return strings.Join(strings.Fields(err.Error()), " ") }
