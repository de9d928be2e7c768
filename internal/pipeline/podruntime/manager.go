// Package podruntime is the fifth stage of the pipeline: the runtime
// manager. For one pod it observes what the runtime has (CRI → observed
// facts), asks the pure planner (plan.Compute) what to do, and executes the
// actions in the order plan.Actions documents: kill, sandbox, init
// containers, containers. It reports status computed from the facts.
//
// What the pod's hooks set up comes with each request (podsetup.Setup):
// the sandbox's cgroup parent and user namespace, the checks before a
// sandbox, the pod directory, the env's objects and files, the probe
// results, and the contributors whose additions (mounts, resources,
// devices, annotations) go into every container's config. So it depends on
// no per-pod resource manager (volumes, cgroups, user namespaces, prober).
package podruntime

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"

	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/internal/pure/observed"
	"github.com/nodelet/nodelet/internal/pure/status"
)

// Runtime is what the manager needs of the CRI client.
type Runtime interface {
	RunPodSandbox(ctx context.Context, cfg *runtimeapi.PodSandboxConfig, handler string) (string, error)
	StopPodSandbox(ctx context.Context, id string) error
	RemovePodSandbox(ctx context.Context, id string) error
	ListPodSandbox(ctx context.Context, filter *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error)
	PodSandboxStatus(ctx context.Context, id string) (*runtimeapi.PodSandboxStatusResponse, error)
	CreateContainer(ctx context.Context, sandboxID string, cfg *runtimeapi.ContainerConfig, sandboxCfg *runtimeapi.PodSandboxConfig) (string, error)
	StartContainer(ctx context.Context, id string) error
	StopContainer(ctx context.Context, id string, grace time.Duration) error
	RemoveContainer(ctx context.Context, id string) error
	ListContainers(ctx context.Context, filter *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error)
	ContainerStatus(ctx context.Context, id string) (*runtimeapi.ContainerStatusResponse, error)
	ExecSync(ctx context.Context, id string, cmd []string, timeout time.Duration) (stdout, stderr []byte, exitCode int32, err error)
	ImageStatus(ctx context.Context, image *runtimeapi.ImageSpec) (*runtimeapi.ImageStatusResponse, error)
	UpdateContainerResources(ctx context.Context, id string, res *runtimeapi.ContainerResources) error
	ContainerStats(ctx context.Context, id string) (*runtimeapi.ContainerStats, error)
	PullImage(ctx context.Context, image *runtimeapi.ImageSpec, auth *runtimeapi.AuthConfig, sandboxCfg *runtimeapi.PodSandboxConfig) (string, error)
}

// Statuses is the status cache (statusmanager.Manager): the manager sets
// every pod status it computes there, and reads the last one back (a
// pod's startTime and conditions carry over from it).
type Statuses interface {
	SetPodStatus(pod *v1.Pod, status v1.PodStatus)
	Get(uid types.UID) (v1.PodStatus, bool)
	// SetSeen records the runtime objects the status comes from, so that
	// the sync loop can tell a lifecycle event it already reflects.
	SetSeen(uid types.UID, running map[string]bool)
	// StoppedByNode says why the node stops the pod for good (evicted,
	// node shutdown), nil if it does not.
	StoppedByNode(uid types.UID) *status.Rejection
}

// Observer observes one value of a histogram (a prometheus.Observer).
type Observer interface{ Observe(float64) }

// StageObserver observes the stages of a pod's start
// (metrics.Metrics: nodelet_pod_start_stage_duration_seconds).
type StageObserver interface {
	ObservePodStartStage(stage string, took time.Duration)
}

// StartCounter counts every sandbox and container start and its failure
// (metrics.Metrics: kubelet_started_pods_total, kubelet_started_containers_total
// and their _errors_total). code is "" for a start that worked, else the
// kubelet's error code (the waiting reason: ErrImagePull,
// CreateContainerError, RunContainerError, ... or PostStartHookError).
type StartCounter interface {
	CountPodStart(failed bool)
	CountContainerStart(containerType, code string)
}

// Recorder records pod events, and events of the node (named
// Options.NodeName), with the kubelet's reasons.
type Recorder interface {
	Event(pod *v1.Pod, eventType, reason, message string)
	NodeEvent(node, eventType, reason, message string)
}

// Deps are the manager's collaborators; Status is required, and all but
// Clock and Log may be nil. What a pod's hooks set up for it (its cgroup
// parent, user namespace, volumes, probe results…) is not among them: it
// comes with each request (podsetup.Setup).
type Deps struct {
	Clock    clock.Clock
	Log      *slog.Logger
	Status   Statuses
	Recorder Recorder
	// PodStartDuration, when set, observes once per pod the seconds from
	// its config.seen annotation to the first status with phase Running
	// (kubelet_pod_start_duration_seconds).
	PodStartDuration Observer
	// PodStartStages, when set, observes once per pod the stages of its
	// start (the metrics.PodStartStage* names).
	PodStartStages StageObserver
	// Starts, when set, counts the sandbox and container starts.
	Starts StartCounter
	// Services, when set (cluster mode), are what the service environment
	// variables come from.
	Services Services
	// RuntimeFeatures, when set, tells whether the runtime handler
	// supports recursive read-only mounts; without it none does.
	RuntimeFeatures RuntimeFeatures
	// RuntimeClasses, when set (cluster mode), resolves the pods'
	// runtimeClassName to the runtime handler of their sandboxes; without
	// it a pod naming a RuntimeClass does not start (ErrNoRuntimeClasses).
	RuntimeClasses RuntimeClasses
	// Network, when set, tells whether the runtime's pod network is
	// ready (cri.NetworkState); without it the network is always ready.
	Network Network
	// PullRecords, when set (pulledimages.Manager), decide whether a pod
	// may use an image already present or must pull it with its own
	// credentials, and learn every pull (ensure-secret-pulled-images);
	// without them every pod may use every image present.
	PullRecords PullRecords
	// ImageVolumes, when set, tells whether the runtime mounts image
	// volumes (cri.ImageVolumes); without it they are left to the runtime.
	ImageVolumes ImageVolumeSupport
	// Resizes, when set (allocation.Manager), make in-place resizes of
	// running containers: what each container is given is recorded, and a
	// change of a running pod's (allocated) resources is actuated in place
	// or by a restart, as its resizePolicy says; its status then reports
	// containerStatuses[].resources and allocatedResources and the resize
	// conditions. Without it a change of resources does nothing to
	// running containers and the status reports neither.
	Resizes Resizes
}

// Network is the runtime's pod network readiness (cri.NetworkState).
type Network interface {
	// NetworkErr is nil when the network is ready, else why not.
	NetworkErr(ctx context.Context) error
}

// RuntimeFeatures are the runtime handlers' features (cri.HandlerFeatures,
// which asks the runtime at most once a minute).
type RuntimeFeatures interface {
	RecursiveReadOnlyMounts(ctx context.Context, handler string) bool
	// CDI is nil when the runtime injects CDI devices (or is not known
	// not to), else why it does not.
	CDI(ctx context.Context) error
}

// Options tune the manager.
type Options struct {
	// PodLogsDir is where container logs go (/var/log/pods).
	PodLogsDir string
	// LegacyLogLinks makes the kubelet's /var/log/containers symlinks
	// (beside PodLogsDir) to the containers' logs.
	LegacyLogLinks bool
	// MaxParallelImagePulls bounds concurrent pulls (kubelet
	// --max-parallel-image-pulls); 0 means 5.
	MaxParallelImagePulls int
	// MaxParallelSandboxes bounds concurrent RunPodSandbox calls; 0 means
	// no bound.
	MaxParallelSandboxes int
	// HostIP is reported in pod status.
	HostIP string
	// RuntimeName prefixes container IDs in status ("containerd").
	RuntimeName string
	// NodeName and Allocatable feed the downward API.
	NodeName    string
	Allocatable v1.ResourceList
	// PodsDir is where the pod directory hook keeps the pod directories
	// (<root-dir>/pods): a container's termination message is read back
	// only from a file below it. The files are written in the directory
	// each request hands (podsetup.Setup.PodDir).
	PodsDir string
	// HostResolvConf and HostHosts are the node's /etc/resolv.conf and
	// /etc/hosts, read once at start.
	HostResolvConf []byte
	HostHosts      []byte
	// ClusterDNS and ClusterDomain are the kubelet's --cluster-dns and
	// --cluster-domain (none and "cluster.local" standalone).
	ClusterDNS    []string
	ClusterDomain string
	// SeccompRoot holds Localhost seccomp profiles (<root-dir>/seccomp).
	SeccompRoot string
}

// Services gives the Services the service environment variables of a pod
// come from (objects.Services).
type Services interface {
	// ServicesFor returns the Services of namespace and the master service
	// default/kubernetes; an error until they have been read once.
	ServicesFor(namespace string) ([]*v1.Service, error)
}

// Manager creates, restarts and removes pods in the runtime.
type Manager struct {
	rt       Runtime
	opts     Options
	clock    clock.Clock
	log      *slog.Logger
	status   Statuses
	recorder Recorder
	podStart Observer
	stages   StageObserver
	starts   StartCounter
	services Services
	features RuntimeFeatures
	// runtimeClasses resolves runtimeClassName; nil standalone.
	runtimeClasses RuntimeClasses
	// network gates pods on the pod network; nil: always ready.
	network Network
	// imageVolumes says whether the runtime mounts image volumes; nil:
	// not asked.
	imageVolumes ImageVolumeSupport
	// resizes records in-place resizes; nil: none are made.
	resizes Resizes

	pulls *imagePuller
	// sandboxes is a counting semaphore over RunPodSandbox; nil: no bound.
	sandboxes chan struct{}
	// dialHook opens the connections of httpGet lifecycle hooks.
	dialHook dialFunc

	mu       sync.Mutex
	startups map[types.UID]*startup // start-up steps recorded per pod

	observed observedFacts // what Observe need not ask again
	// view is the PLEG's latest relist, for resyncs (SetView); nil: every
	// sync looks at the runtime.
	view View
}

// View is the PLEG's latest relist (pleg.Generic.CurrentAt): every pod's
// sandboxes and containers as the two list calls show them, when the
// relist that read them began, and whether they are what the runtime
// holds now, give or take one relist.
type View interface {
	CurrentAt() (map[types.UID]*observed.PodStatus, time.Time, bool)
}

// SetView has the periodic resyncs read pods from v where it shows them
// as the manager last saw them (see lookFromView). Call it before the
// manager's first sync: the PLEG is built over the manager (ListPods), so
// it cannot be a Dep.
func (m *Manager) SetView(v View) { m.view = v }

// New returns a Manager.
func New(rt Runtime, opts Options, deps Deps) *Manager {
	clk, log := deps.Clock, deps.Log
	if opts.PodLogsDir == "" {
		opts.PodLogsDir = "/var/log/pods"
	}
	if opts.MaxParallelImagePulls <= 0 {
		opts.MaxParallelImagePulls = 5
	}
	if opts.RuntimeName == "" {
		opts.RuntimeName = "containerd"
	}
	if opts.ClusterDomain == "" {
		opts.ClusterDomain = "cluster.local"
	}
	if clk == nil {
		clk = clock.RealClock{}
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	recorder := deps.Recorder
	if recorder == nil {
		recorder = nopRecorder{}
	}
	return &Manager{
		rt:             rt,
		opts:           opts,
		clock:          clk,
		log:            log,
		status:         deps.Status,
		recorder:       recorder,
		podStart:       deps.PodStartDuration,
		stages:         deps.PodStartStages,
		starts:         deps.Starts,
		services:       deps.Services,
		features:       deps.RuntimeFeatures,
		runtimeClasses: deps.RuntimeClasses,
		network:        deps.Network,
		pulls:          newImagePuller(rt, opts.MaxParallelImagePulls, clk).withRecords(deps.PullRecords, log),
		imageVolumes:   deps.ImageVolumes,
		resizes:        deps.Resizes,
		sandboxes: func() chan struct{} {
			if opts.MaxParallelSandboxes <= 0 {
				return nil
			}
			return make(chan struct{}, opts.MaxParallelSandboxes)
		}(),
		dialHook: (&net.Dialer{}).DialContext,
		startups: map[types.UID]*startup{},
	}
}

// supportsRRO is whether pod's runtime handler supports recursive
// read-only mounts; not when its RuntimeClass cannot be resolved, as the
// kubelet's runtimeClassSupportsRecursiveReadOnlyMounts.
func (m *Manager) supportsRRO(ctx context.Context, pod *v1.Pod) bool {
	if m.features == nil {
		return false
	}
	handler, err := m.runtimeHandler(pod)
	return err == nil && m.features.RecursiveReadOnlyMounts(ctx, handler)
}

type nopRecorder struct{}

func (nopRecorder) Event(*v1.Pod, string, string, string)    {}
func (nopRecorder) NodeEvent(string, string, string, string) {}
