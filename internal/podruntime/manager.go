// Package podruntime is the fifth stage of the pipeline: the runtime
// manager. For one pod it observes what the runtime has (CRI → observed
// facts), asks the pure planner (plan.Compute) what to do, and executes the
// actions in the order plan.Actions documents: kill, sandbox, init
// containers, containers. It reports status computed from the facts.
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

	"github.com/nodelet/nodelet/internal/envvars"
	"github.com/nodelet/nodelet/internal/status"
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
	PullImage(ctx context.Context, image *runtimeapi.ImageSpec, auth *runtimeapi.AuthConfig, sandboxCfg *runtimeapi.PodSandboxConfig) (string, error)
}

// ProbeResults tells the planner which running containers failed liveness
// or passed startup. The prober implements it; nil means no probes.
type ProbeResults interface {
	LivenessFailed(containerID string) (failed bool, probe, message string)
	StartupDone(containerID string) bool
	Ready(containerID string) (ready, known bool)
	Bound(containerID string) bool
	ReadyUnbound(pod *v1.Pod, container string, startedAt time.Time) bool
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

// Recorder records pod events with the kubelet's reasons.
type Recorder interface {
	Event(pod *v1.Pod, eventType, reason, message string)
}

// Deps are the manager's collaborators; Status is required, and all but
// Clock and Log may be nil.
type Deps struct {
	Clock    clock.Clock
	Log      *slog.Logger
	Probes   ProbeResults
	Status   Statuses
	Recorder Recorder
	// PodStartDuration, when set, observes once per pod the seconds from
	// its config.seen annotation to the first status with phase Running
	// (kubelet_pod_start_duration_seconds).
	PodStartDuration Observer
	// PodStartStages, when set, observes once per pod the stages of its
	// start (the metrics.PodStartStage* names).
	PodStartStages StageObserver
	// Objects are the ConfigMaps and Secrets env refers to.
	Objects envvars.Objects
	// Services, when set (cluster mode), are what the service environment
	// variables come from.
	Services Services
	// Cgroups, when set, names the pod cgroup a sandbox goes under (the
	// pod cgroup hook creates it before the sync).
	Cgroups PodCgroups
	// Volumes, when set, gives containers their volume mounts and the env
	// files of their fileKeyRef entries (the volumes hook sets the volumes
	// up before the sync); without it every fileKeyRef fails.
	Volumes Volumes
	// UserNamespaces, when set, gives pods with hostUsers: false their
	// user namespace (the user namespaces hook allocates it before the
	// sync); without it such pods are refused.
	UserNamespaces UserNamespaces
	// RuntimeFeatures, when set, tells whether the runtime handler
	// supports recursive read-only mounts; without it none does.
	RuntimeFeatures RuntimeFeatures
}

// RuntimeFeatures are the runtime handlers' features (cri.HandlerFeatures,
// which asks the runtime at most once a minute).
type RuntimeFeatures interface {
	RecursiveReadOnlyMounts(ctx context.Context, handler string) bool
}

// runtimeHandler is the CRI runtime handler of every sandbox: the
// runtime's default (nodelet does not resolve runtimeClassName).
const runtimeHandler = ""

// UserNamespaces are the pods' user namespaces (userns.Manager).
type UserNamespaces interface {
	// PodUserNamespace is the pod's CRI user namespace option: nil on the
	// host's, its ID mappings for a pod with hostUsers: false.
	PodUserNamespace(pod *v1.Pod) (*runtimeapi.UserNamespace, error)
	// CheckRuntime fails, saying why, unless the runtime supports user
	// namespaces; asked before every sandbox of such a pod is created.
	CheckRuntime(ctx context.Context) error
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
	// PodsDir holds per-pod files (<root-dir>/pods); "" disables the
	// managed /etc/hosts.
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
	// NodeMemoryCapacity sizes the OOM score of burstable containers.
	NodeMemoryCapacity int64
}

// Volumes gives each container its mounts of the pod's volumes
// (supportsRRO: the runtime handler supports recursive read-only mounts),
// and the env files (envvars.Files) its fileKeyRef entries read from them.
type Volumes interface {
	Mounts(pod *v1.Pod, c *v1.Container, env map[string]string, supportsRRO bool) ([]*runtimeapi.Mount, error)
	envvars.Files
}

// Services gives the Services the service environment variables of a pod
// come from (objects.Services).
type Services interface {
	// ServicesFor returns the Services of namespace and the master service
	// default/kubernetes; an error until they have been read once.
	ServicesFor(namespace string) ([]*v1.Service, error)
}

// PodCgroups names pod cgroups under the QoS hierarchy.
type PodCgroups interface {
	CgroupParent(pod *v1.Pod) string
	// ContainerUnified is the CRI Unified map (cgroup v2 files) of a
	// container, MemoryQoS's memory.high among them; nil for none.
	ContainerUnified(pod *v1.Pod, c *v1.Container) map[string]string
}

// Manager creates, restarts and removes pods in the runtime.
type Manager struct {
	rt       Runtime
	opts     Options
	clock    clock.Clock
	log      *slog.Logger
	probes   ProbeResults
	status   Statuses
	recorder Recorder
	podStart Observer
	stages   StageObserver
	objects  envvars.Objects
	services Services
	cgroups  PodCgroups
	volumes  Volumes
	userns   UserNamespaces
	features RuntimeFeatures

	pulls *imagePuller
	// sandboxes is a counting semaphore over RunPodSandbox; nil: no bound.
	sandboxes chan struct{}
	// dialHook opens the connections of httpGet lifecycle hooks.
	dialHook dialFunc

	mu       sync.Mutex
	startups map[types.UID]*startup // start-up steps recorded per pod

	observed observedFacts // what Observe need not ask again
}

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
		rt: rt, opts: opts, clock: clk, log: log, probes: deps.Probes, status: deps.Status, recorder: recorder, podStart: deps.PodStartDuration, stages: deps.PodStartStages, objects: deps.Objects, services: deps.Services, cgroups: deps.Cgroups, volumes: deps.Volumes, userns: deps.UserNamespaces, features: deps.RuntimeFeatures,
		pulls: newImagePuller(rt, opts.MaxParallelImagePulls, clk),
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

// supportsRRO is whether the pods' runtime handler supports recursive
// read-only mounts.
func (m *Manager) supportsRRO(ctx context.Context) bool {
	return m.features != nil && m.features.RecursiveReadOnlyMounts(ctx, runtimeHandler)
}

type nopRecorder struct{}

func (nopRecorder) Event(*v1.Pod, string, string, string) {}
