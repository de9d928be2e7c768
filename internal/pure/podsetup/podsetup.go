// Package podsetup is beside stage 4: what the per-pod hooks hand the
// runtime manager. Each podworker.Hook returns a Setup describing what it
// set up for one pod (the pod cgroup, the user namespace, the volumes, the
// probe workers…); the pod workers merge them, in hook order, and carry the
// result to the runtime manager in every sync request. So the runtime
// manager depends on no hook, and a new per-pod resource contributes to
// the sandbox or to every container through these types alone.
//
// The package is pure: data and the merge rule, no I/O.
package podsetup

import (
	"context"
	"maps"
	"time"

	"google.golang.org/protobuf/proto"
	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/pure/envvars"
	"github.com/nodelet/nodelet/internal/pure/pullcreds"
	"github.com/nodelet/nodelet/internal/pure/resize"
)

// Setup is what the hooks set up for one pod. The zero value is a pod no
// hook prepared: no pod directory, no cgroup parent, the host's user
// namespace, no objects, no env files, no probes, anonymous pulls, no
// contributions.
type Setup struct {
	// PodDir is the pod's directory on the host (<root-dir>/pods/<uid>),
	// where the runtime manager keeps the pod's managed /etc/hosts and its
	// containers' termination message files; "" for none.
	PodDir string
	// CgroupParent is the pod cgroup its sandbox goes under; "" for the
	// runtime's default.
	CgroupParent string
	// UserNamespace is the pod's CRI user namespace option: nil for the
	// host's. Every mount of every container carries its ID mappings.
	UserNamespace *runtimeapi.UserNamespace
	// Objects are the ConfigMaps and Secrets the pod's env refers to.
	Objects envvars.Objects
	// Files are the env files of the pod's fileKeyRef entries (its
	// volumes); nil: every fileKeyRef fails.
	Files envvars.Files
	// Probes are the results of the pod's probes; nil: none were handed
	// over (the probes hook did not run), and a container with a
	// readiness or startup probe is not ready or not started.
	Probes ProbeResults
	// PullCredentials are the credentials the pod's images are pulled
	// with (its image pull secrets, then the node's: a pullcreds.Union);
	// nil: every pull is anonymous.
	PullCredentials pullcreds.Lookup
	// SandboxChecks run, in order, before every sandbox of the pod is
	// created; the first that fails stops the creation, with its error as
	// the FailedCreatePodSandBox event.
	SandboxChecks []Check
	// Containers contribute, in order, to the config of every container
	// the pod starts.
	Containers []Contributor
	// PodCgroup resizes the pod's cgroup in place, in the order an
	// in-place resize plans (resize.Compute); nil: the pod has no cgroup
	// of its own (cgroupsPerQOS false), and a resize changes only its
	// containers.
	PodCgroup PodCgroup
	// ContainerResources, when set, are the CRI Linux resources container
	// c of pod gets (the ones its creation gets from the contributors):
	// what an in-place resize sends with UpdateContainerResources, c's
	// resources being the ones to give. Without it a resize changes
	// nothing in place.
	ContainerResources func(pod *v1.Pod, c *v1.Container) *runtimeapi.LinuxContainerResources
}

// PodCgroup is one pod's cgroup as an in-place resize sees it.
type PodCgroup interface {
	// Now reads the values a resize changes, as they are.
	Now() (resize.PodCgroup, error)
	// Want is what the pod's (allocated) resources make them.
	Want() resize.PodCgroup
	// Set writes one pod cgroup step of a resize plan.
	Set(resize.Step) error
	// MemoryUsage is the pod's memory usage in bytes, what a memory
	// limit decrease is checked against (resize.CheckMemoryDecrease).
	MemoryUsage() (uint64, error)
}

// Check is a condition the runtime must meet before the pod's sandbox is
// created with handler, the CRI runtime handler of the pod's RuntimeClass
// ("": the runtime's default): that the handler supports user
// namespaces, say.
type Check func(ctx context.Context, handler string) error

// ProbeResults tells the runtime manager which running containers failed
// liveness, passed startup or are ready (prober.Manager).
type ProbeResults interface {
	LivenessFailed(containerID string) (failed bool, probe, message string)
	StartupDone(containerID string) bool
	Ready(containerID string) (ready, known bool)
	Bound(containerID string) bool
	ReadyUnbound(pod *v1.Pod, container string, startedAt time.Time) bool
}

// Container is what a Contributor is told of one container about to be
// created.
type Container struct {
	Pod       *v1.Pod
	Container *v1.Container
	// Env is the container's environment as built, by name (what a
	// subPathExpr expands).
	Env map[string]string
	// RecursiveReadOnlyMounts: the runtime handler supports recursive
	// read-only mounts.
	RecursiveReadOnlyMounts bool
	// ImageVolumes are the images of the pod's image volumes that the
	// container mounts, by volume name, as the runtime manager pulled them
	// for this sync: the runtime mounts each (runtimeapi.Mount.Image).
	// Contributors do not modify them.
	ImageVolumes map[string]*runtimeapi.ImageSpec
}

// Additions are what one Contributor adds to a container's config.
type Additions struct {
	// Mounts are added after the earlier contributors' ones.
	Mounts []*runtimeapi.Mount
	// Resources, when set, are the container's Linux resources; a later
	// contributor's replace an earlier one's.
	Resources *runtimeapi.LinuxContainerResources
	// Devices and CDIDevices are added after the earlier contributors'.
	Devices    []*runtimeapi.Device
	CDIDevices []*runtimeapi.CDIDevice
	// Env are variables set before the container's own environment (the
	// kubelet puts a device plugin's first, so that the pod's env wins
	// over a variable of the same name); added after the earlier
	// contributors'.
	Env []*runtimeapi.KeyValue
	// Annotations are added to the container's; nodelet's own
	// (podspec.Annotation*) cannot be overridden.
	Annotations map[string]string
	// CpusetCpus, when set, is the cpuset the container runs on (the CPU
	// manager's); a later contributor's replaces an earlier one's, and it
	// goes into Resources whoever made those.
	CpusetCpus string
}

// Contributor adds to the config of each container of a pod. An error
// means the container's config cannot be made (the kubelet's
// CreateContainerConfigError); it is retried at the next sync.
type Contributor interface {
	ContributeContainer(c Container) (Additions, error)
}

// ContributorFunc is a Contributor as a function.
type ContributorFunc func(c Container) (Additions, error)

func (f ContributorFunc) ContributeContainer(c Container) (Additions, error) { return f(c) }

// Merge is the setups of the hooks in their order as one: a later setup's
// non-zero single values replace an earlier one's, lists are appended.
func Merge(setups ...Setup) Setup {
	var out Setup
	for _, s := range setups {
		out.PodDir = or(s.PodDir, out.PodDir)
		out.CgroupParent = or(s.CgroupParent, out.CgroupParent)
		if s.UserNamespace != nil {
			out.UserNamespace = s.UserNamespace
		}
		if s.Objects != nil {
			out.Objects = s.Objects
		}
		if s.Files != nil {
			out.Files = s.Files
		}
		if s.Probes != nil {
			out.Probes = s.Probes
		}
		if s.PullCredentials != nil {
			out.PullCredentials = s.PullCredentials
		}
		if s.PodCgroup != nil {
			out.PodCgroup = s.PodCgroup
		}
		if s.ContainerResources != nil {
			out.ContainerResources = s.ContainerResources
		}
		out.SandboxChecks = append(out.SandboxChecks, s.SandboxChecks...)
		out.Containers = append(out.Containers, s.Containers...)
	}
	return out
}

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// Apply asks every contributor of s, in order, for its additions to
// container c and returns them as one.
func (s Setup) Apply(c Container) (Additions, error) {
	var out Additions
	for _, k := range s.Containers {
		a, err := k.ContributeContainer(c)
		if err != nil {
			return Additions{}, err
		}
		out.Mounts = append(out.Mounts, a.Mounts...)
		if a.Resources != nil {
			out.Resources = a.Resources
		}
		out.Devices = append(out.Devices, a.Devices...)
		out.CDIDevices = append(out.CDIDevices, a.CDIDevices...)
		out.Env = append(out.Env, a.Env...)
		if len(a.Annotations) > 0 {
			if out.Annotations == nil {
				out.Annotations = map[string]string{}
			}
			maps.Copy(out.Annotations, a.Annotations)
		}
		out.CpusetCpus = or(a.CpusetCpus, out.CpusetCpus)
	}
	if out.CpusetCpus != "" {
		res := &runtimeapi.LinuxContainerResources{}
		if out.Resources != nil {
			res = proto.CloneOf(out.Resources)
		}
		res.CpusetCpus = out.CpusetCpus
		out.Resources = res
	}
	return out, nil
}
