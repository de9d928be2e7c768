// Package metrics is beside the pipeline: the kubelet's own metrics
// (kubelet_*) with the kubelet's names, help texts, labels and buckets, for
// the /metrics endpoint. New registers them on a registry it is given
// (never the global one) and returns them as fields; the integrator
// observes them where the kubelet does:
//
//   - PodStartDuration: once per pod, from the pod worker first seeing the
//     pod to all its containers running (kubelet_pod_start_duration_seconds);
//   - PodStartSLIDuration{first_with_network}: the same from the pod's
//     creation timestamp, excluding image pulls;
//   - PodWorkerDuration{operation_type}: each sync of a pod worker, labelled
//     create, update, sync or kill (the PodWorker* constants);
//   - PLEGRelistDuration and PLEGRelistInterval: each PLEG relist, and the
//     time since the previous one;
//   - HousekeepingDuration: each housekeeping round (nodelet's own);
//   - EventedPLEGConn, EventedPLEGConnErr and EventedPLEGConnLatency: the
//     runtime's container event stream opened, failed or ended, and each
//     event's delay (a pleg.StreamMetrics); EventedPLEGActive says whether
//     the PLEG follows the stream or relists every period;
//   - RuntimeOperations*{operation_type}: each CRI call, through
//     ObserveRuntimeOp with the kubelet's operation names (the Op*
//     constants);
//   - RunningPods and RunningContainers{container_state}: computed at
//     scrape time by the running function given to New, or set by the
//     integrator when it gives none;
//   - StartedPods(Errors) and StartedContainers(Errors){container_type}:
//     each sandbox (resp. container) start and failure.
package metrics

import (
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/pure/podupdate"
)

const subsystem = "kubelet"

// Values of operation_type of kubelet_pod_worker_duration_seconds: the
// kubelet's SyncPodType.
const (
	PodWorkerSync   = "sync"
	PodWorkerUpdate = "update"
	PodWorkerCreate = "create"
	PodWorkerKill   = "kill"
)

// Values of container_state of kubelet_running_containers: the kubelet's
// container states.
const (
	ContainerStateCreated = "created"
	ContainerStateRunning = "running"
	ContainerStateExited  = "exited"
	ContainerStateUnknown = "unknown"
)

// Values of container_type of kubelet_started_containers_total.
const (
	ContainerTypeContainer = "container"
	ContainerTypeInit      = "init_container"
	ContainerTypeEphemeral = "ephemeral_container"
)

// Values of operation_type of the kubelet_runtime_operations_* metrics:
// the kubelet's names of the CRI calls.
const (
	OpVersion              = "version"
	OpStatus               = "status"
	OpRunPodSandbox        = "run_podsandbox"
	OpStopPodSandbox       = "stop_podsandbox"
	OpRemovePodSandbox     = "remove_podsandbox"
	OpPodSandboxStatus     = "podsandbox_status"
	OpListPodSandbox       = "list_podsandbox"
	OpCreateContainer      = "create_container"
	OpStartContainer       = "start_container"
	OpStopContainer        = "stop_container"
	OpRemoveContainer      = "remove_container"
	OpListContainers       = "list_containers"
	OpContainerStatus      = "container_status"
	OpUpdateContainer      = "update_container"
	OpReopenContainerLog   = "reopen_container_log"
	OpExecSync             = "exec_sync"
	OpExec                 = "exec"
	OpAttach               = "attach"
	OpPortForward          = "port_forward"
	OpContainerStats       = "container_stats"
	OpListContainerStats   = "list_container_stats"
	OpPodSandboxStats      = "podsandbox_stats"
	OpListPodSandboxStats  = "list_podsandbox_stats"
	OpUpdateRuntimeConfig  = "update_runtime_config"
	OpListImages           = "list_images"
	OpImageStatus          = "image_status"
	OpPullImage            = "pull_image"
	OpRemoveImage          = "remove_image"
	OpImageFsInfo          = "image_fs_info"
	OpGetContainerEvents   = "get_container_events"
	OpListMetricDescriptor = "list_metric_descriptors"
)

// Values of stage of nodelet_pod_start_stage_duration_seconds, in order;
// together they cover kubelet_pod_start_duration_seconds.
const (
	// PodStartStageDispatch: from the merge first seeing the pod
	// (config.seen) to its pod worker's first sync: admission, the pod
	// worker's queue, the hooks' Prepare.
	PodStartStageDispatch = "dispatch"
	// PodStartStageObserve: the first sync's look at the runtime.
	PodStartStageObserve = "observe"
	// PodStartStagePlan: the first sync's plan.
	PodStartStagePlan = "plan"
	// PodStartStageSandbox: creating the sandbox, its network included.
	PodStartStageSandbox = "sandbox"
	// PodStartStageContainers: pulling, creating and starting the
	// containers of the sync that started them.
	PodStartStageContainers = "containers"
	// PodStartStageStatus: from the last container started to the status
	// that says Running (the look at the runtime that sees them running).
	PodStartStageStatus = "status"
)

// podStartStageBuckets are for stages of milliseconds to seconds.
var podStartStageBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}

// podStartupBuckets are the kubelet's buckets of the pod start histograms,
// in seconds.
var podStartupBuckets = []float64{0.5, 1, 2, 3, 4, 5, 6, 8, 10, 20, 30, 45, 60, 120, 180, 240, 300, 360, 480, 600, 900, 1200, 1800, 2700, 3600}

// Metrics are the kubelet's metrics. Every field is registered by New.
type Metrics struct {
	// PodStartDuration is kubelet_pod_start_duration_seconds.
	PodStartDuration prometheus.Histogram
	// PodStartStageDuration is nodelet_pod_start_stage_duration_seconds
	// {stage}: the parts of PodStartDuration (the PodStartStage*
	// constants), once per pod started by this nodelet. The kubelet has no
	// such metric; its name is nodelet's.
	PodStartStageDuration *prometheus.HistogramVec
	// PodStartSLIDuration is kubelet_pod_start_sli_duration_seconds
	// {first_with_network}.
	PodStartSLIDuration *prometheus.HistogramVec
	// PodWorkerDuration is kubelet_pod_worker_duration_seconds
	// {operation_type}.
	PodWorkerDuration *prometheus.HistogramVec
	// PLEGRelistDuration is kubelet_pleg_relist_duration_seconds.
	PLEGRelistDuration prometheus.Histogram
	// PLEGRelistInterval is kubelet_pleg_relist_interval_seconds.
	PLEGRelistInterval prometheus.Histogram
	// HousekeepingDuration is nodelet_housekeeping_duration_seconds: each
	// housekeeping round (the kubelet's HandlePodCleanups). The kubelet has
	// no such metric; its name is nodelet's.
	HousekeepingDuration prometheus.Histogram
	// EventedPLEGConn is kubelet_evented_pleg_connection_success_count:
	// container event streams opened.
	EventedPLEGConn prometheus.Counter
	// EventedPLEGConnErr is kubelet_evented_pleg_connection_error_count:
	// container event streams that failed to open or ended.
	EventedPLEGConnErr prometheus.Counter
	// EventedPLEGConnLatency is
	// kubelet_evented_pleg_connection_latency_seconds: from the runtime
	// creating a container event to nodelet receiving it.
	EventedPLEGConnLatency prometheus.Histogram
	// EventedPLEGActive is kubelet_evented_pleg_active: 1 while the PLEG
	// follows the container event stream, 0 while it relists every period.
	// The kubelet has no such metric; it is nodelet's, named in the
	// kubelet's style beside the other evented PLEG metrics.
	EventedPLEGActive prometheus.Gauge
	// RuntimeOperations is kubelet_runtime_operations_total
	// {operation_type}.
	RuntimeOperations *prometheus.CounterVec
	// RuntimeOperationsDuration is
	// kubelet_runtime_operations_duration_seconds{operation_type}.
	RuntimeOperationsDuration *prometheus.HistogramVec
	// RuntimeOperationsErrors is kubelet_runtime_operations_errors_total
	// {operation_type}.
	RuntimeOperationsErrors *prometheus.CounterVec
	// RunningPods is kubelet_running_pods: pods with a running sandbox.
	// With a running function given to New it is set at every scrape.
	RunningPods prometheus.Gauge
	// RunningContainers is kubelet_running_containers{container_state}.
	// With a running function given to New it is set at every scrape.
	RunningContainers *prometheus.GaugeVec
	// StartedPods is kubelet_started_pods_total.
	StartedPods prometheus.Counter
	// StartedPodsErrors is kubelet_started_pods_errors_total.
	StartedPodsErrors prometheus.Counter
	// StartedContainers is kubelet_started_containers_total
	// {container_type}.
	StartedContainers *prometheus.CounterVec
	// StartedContainersErrors is kubelet_started_containers_errors_total
	// {container_type, code}.
	StartedContainersErrors *prometheus.CounterVec

	clk clock.PassiveClock
}

// Option tunes New.
type Option func(*Metrics)

// WithClock sets the clock ObserveRuntimeOp measures with (the real one by
// default).
func WithClock(clk clock.PassiveClock) Option { return func(m *Metrics) { m.clk = clk } }

// New creates the metrics and registers them on reg (a nil reg leaves them
// unregistered). running, if not nil, is called at every scrape for the
// number of pods with a running sandbox and the number of containers by
// state (keys: the ContainerState* constants), which set RunningPods and
// RunningContainers. Metrics that reg already holds (an earlier New on the
// same registry) are reused.
func New(reg prometheus.Registerer, running func() (pods int, containersByState map[string]int), opts ...Option) *Metrics {
	calls := NewRuntimeCalls(reg)
	m := &Metrics{
		PodStartDuration: Register(reg, prometheus.NewHistogram(prometheus.HistogramOpts{
			Subsystem: subsystem,
			Name:      "pod_start_duration_seconds",
			Help:      "Duration in seconds from kubelet seeing a pod for the first time to the pod starting to run",
			Buckets:   podStartupBuckets,
		})),
		PodStartStageDuration: Register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "nodelet_pod_start_stage_duration_seconds",
			Help:    "Duration in seconds of each stage of a pod's start, from nodelet seeing it to its status running",
			Buckets: podStartStageBuckets,
		}, []string{"stage"})),
		PodStartSLIDuration: Register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Subsystem: subsystem,
			Name:      "pod_start_sli_duration_seconds",
			Help:      "Duration in seconds to start a pod, excluding time to pull images and run init containers, measured from pod creation timestamp to when all its containers are reported as started and observed via watch",
			Buckets:   podStartupBuckets,
		}, []string{"first_with_network"})),
		PodWorkerDuration: Register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Subsystem: subsystem,
			Name:      "pod_worker_duration_seconds",
			Help:      "Duration in seconds to sync a single pod. Broken down by operation type: create, update, or sync",
			Buckets:   prometheus.DefBuckets,
		}, []string{"operation_type"})),
		PLEGRelistDuration: Register(reg, prometheus.NewHistogram(prometheus.HistogramOpts{
			Subsystem: subsystem,
			Name:      "pleg_relist_duration_seconds",
			Help:      "Duration in seconds for relisting pods in PLEG.",
			Buckets:   prometheus.DefBuckets,
		})),
		PLEGRelistInterval: Register(reg, prometheus.NewHistogram(prometheus.HistogramOpts{
			Subsystem: subsystem,
			Name:      "pleg_relist_interval_seconds",
			Help:      "Interval in seconds between relisting in PLEG.",
			Buckets:   prometheus.DefBuckets,
		})),
		HousekeepingDuration: Register(reg, prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "nodelet_housekeeping_duration_seconds",
			Help:    "Duration in seconds of a housekeeping round (the pod cleanups of the sync loop).",
			Buckets: prometheus.DefBuckets,
		})),
		EventedPLEGConn: Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Subsystem: subsystem,
			Name:      "evented_pleg_connection_success_count",
			Help:      "The number of times a streaming client was obtained to receive CRI Events.",
		})),
		EventedPLEGConnErr: Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Subsystem: subsystem,
			Name:      "evented_pleg_connection_error_count",
			Help:      "The number of errors encountered during the establishment of streaming connection with the CRI runtime.",
		})),
		EventedPLEGConnLatency: Register(reg, prometheus.NewHistogram(prometheus.HistogramOpts{
			Subsystem: subsystem,
			Name:      "evented_pleg_connection_latency_seconds",
			Help:      "The latency of streaming connection with the CRI runtime, measured in seconds.",
			Buckets:   prometheus.DefBuckets,
		})),
		EventedPLEGActive: Register(reg, prometheus.NewGauge(prometheus.GaugeOpts{
			Subsystem: subsystem,
			Name:      "evented_pleg_active",
			Help:      "1 while the PLEG follows the CRI container event stream (relisting only as a safety net), 0 while it relists every period. nodelet's own metric.",
		})),
		RuntimeOperations:         calls.operations,
		RuntimeOperationsDuration: calls.duration,
		RuntimeOperationsErrors:   calls.errors,
		StartedPods: Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Subsystem: subsystem,
			Name:      "started_pods_total",
			Help:      "Cumulative number of pods started",
		})),
		StartedPodsErrors: Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Subsystem: subsystem,
			Name:      "started_pods_errors_total",
			Help:      "Cumulative number of errors when starting pods",
		})),
		StartedContainers: Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: subsystem,
			Name:      "started_containers_total",
			Help:      "Cumulative number of containers started",
		}, []string{"container_type"})),
		StartedContainersErrors: Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: subsystem,
			Name:      "started_containers_errors_total",
			Help:      "Cumulative number of errors when starting containers",
		}, []string{"container_type", "code"})),
		clk: clock.RealClock{},
	}
	rc := Register(reg, &runningCollector{
		running: running,
		pods: prometheus.NewGauge(prometheus.GaugeOpts{
			Subsystem: subsystem,
			Name:      "running_pods",
			Help:      "Number of pods that have a running pod sandbox",
		}),
		containers: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Subsystem: subsystem,
			Name:      "running_containers",
			Help:      "Number of containers currently running",
		}, []string{"container_state"}),
	})
	m.RunningPods, m.RunningContainers = rc.pods, rc.containers
	// The Go runtime's and the process's own series, as the kubelet's
	// /metrics has them (component-base's registry): go_memstats_*,
	// go_gc_duration_seconds, go_goroutines, process_resident_memory_bytes,
	// process_cpu_seconds_total. A scrape reads them; nothing polls.
	Register(reg, collectors.NewGoCollector())
	Register(reg, collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, o := range opts {
		o(m)
	}
	return m
}

// ObserveRuntimeOp records a CRI call that began at start and ended now
// with err, as the kubelet's instrumented runtime service does: one
// operation, its duration and, if err is not nil, one error. A nil m
// records nothing.
func (m *Metrics) ObserveRuntimeOp(op string, start time.Time, err error) {
	if m == nil {
		return
	}
	m.RuntimeOperations.WithLabelValues(op).Inc()
	m.RuntimeOperationsDuration.WithLabelValues(op).Observe(m.clk.Since(start).Seconds())
	if err != nil {
		m.RuntimeOperationsErrors.WithLabelValues(op).Inc()
	}
}

// RuntimeCalls are the CRI call metrics (kubelet_runtime_operations_*) on
// their own: the CRI client is dialled with their Observe before the other
// metrics can exist (the running pods gauge needs the pipeline's parts).
// New on the same registry shares them.
type RuntimeCalls struct {
	operations *prometheus.CounterVec
	duration   *prometheus.HistogramVec
	errors     *prometheus.CounterVec
}

// NewRuntimeCalls creates the CRI call metrics and registers them on reg
// (a nil reg leaves them unregistered), or reuses those reg holds.
func NewRuntimeCalls(reg prometheus.Registerer) *RuntimeCalls {
	return &RuntimeCalls{
		operations: Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: subsystem,
			Name:      "runtime_operations_total",
			Help:      "Cumulative number of runtime operations by operation type.",
		}, []string{"operation_type"})),
		duration: Register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Subsystem: subsystem,
			Name:      "runtime_operations_duration_seconds",
			Help:      "Duration in seconds of runtime operations. Broken down by operation type.",
			Buckets:   prometheus.ExponentialBuckets(.005, 2.5, 14),
		}, []string{"operation_type"})),
		errors: Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: subsystem,
			Name:      "runtime_operations_errors_total",
			Help:      "Cumulative number of runtime operation errors by operation type.",
		}, []string{"operation_type"})),
	}
}

// Observe records a CRI call that took took and ended with err (a
// cri.Observer).
func (r *RuntimeCalls) Observe(op string, took time.Duration, err error) {
	r.operations.WithLabelValues(op).Inc()
	r.duration.WithLabelValues(op).Observe(took.Seconds())
	if err != nil {
		r.errors.WithLabelValues(op).Inc()
	}
}

// ObserveEventStreamConnected counts a container event stream opened (a
// pleg.StreamMetrics).
func (m *Metrics) ObserveEventStreamConnected() { m.EventedPLEGConn.Inc() }

// ObserveEventStreamError counts a container event stream that failed to
// open or ended.
func (m *Metrics) ObserveEventStreamError() { m.EventedPLEGConnErr.Inc() }

// ObserveEventLatency records a container event's delay.
func (m *Metrics) ObserveEventLatency(d time.Duration) { m.EventedPLEGConnLatency.Observe(d.Seconds()) }

// SetEventedPLEG sets kubelet_evented_pleg_active.
func (m *Metrics) SetEventedPLEG(on bool) {
	v := 0.0
	if on {
		v = 1
	}
	m.EventedPLEGActive.Set(v)
}

// ObservePodStartStage records one stage of a pod's start (a
// podruntime.StageObserver).
func (m *Metrics) ObservePodStartStage(stage string, took time.Duration) {
	m.PodStartStageDuration.WithLabelValues(stage).Observe(took.Seconds())
}

// ObservePodWorker records one pod worker call (a podworker.Metrics):
// kubelet_pod_worker_duration_seconds with the kubelet's operation_type
// for the reason.
func (m *Metrics) ObservePodWorker(reason podupdate.Reason, took time.Duration) {
	op := PodWorkerSync
	switch reason {
	case podupdate.Add:
		op = PodWorkerCreate
	case podupdate.Update:
		op = PodWorkerUpdate
	case podupdate.Kill, podupdate.Remove, podupdate.Delete:
		op = PodWorkerKill
	}
	m.PodWorkerDuration.WithLabelValues(op).Observe(took.Seconds())
}

// runningCollector serves kubelet_running_pods and
// kubelet_running_containers, refreshing them from running at every
// scrape when it is set.
type runningCollector struct {
	running    func() (int, map[string]int)
	mu         sync.Mutex // one refresh-and-collect at a time
	pods       prometheus.Gauge
	containers *prometheus.GaugeVec
}

func (c *runningCollector) Describe(ch chan<- *prometheus.Desc) {
	c.pods.Describe(ch)
	c.containers.Describe(ch)
}

func (c *runningCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.running != nil {
		pods, byState := c.running()
		c.pods.Set(float64(pods))
		c.containers.Reset()
		// Every state is reported, 0 when no container is in it, so a
		// state emptying shows as 0 rather than vanishing.
		for _, s := range []string{ContainerStateCreated, ContainerStateRunning, ContainerStateExited, ContainerStateUnknown} {
			c.containers.WithLabelValues(s).Set(0)
		}
		for s, n := range byState {
			c.containers.WithLabelValues(s).Set(float64(n))
		}
	}
	c.pods.Collect(ch)
	c.containers.Collect(ch)
}

// Register registers c on reg and returns it, or the collector of the same
// type reg already holds in its place, so that a component constructed
// twice on one registry shares its metrics. A nil reg leaves c
// unregistered. It panics on a clash with a different collector: that is a
// programming error. The prober registers its metrics with it too.
func Register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if reg == nil {
		return c
	}
	if err := reg.Register(c); err != nil {
		are, ok := errors.AsType[prometheus.AlreadyRegisteredError](err)
		if !ok {
			// Only a programming error (a clashing metric) gets here.
			panic("metrics: register: " + err.Error())
		}
		existing, same := are.ExistingCollector.(C)
		if !same {
			panic("metrics: register: " + err.Error())
		}
		return existing
	}
	return c
}

// CountPodStart counts a sandbox start (a podruntime.StartCounter):
// kubelet_started_pods_total, and kubelet_started_pods_errors_total when
// it failed.
func (m *Metrics) CountPodStart(failed bool) {
	m.StartedPods.Inc()
	if failed {
		m.StartedPodsErrors.Inc()
	}
}

// CountContainerStart counts a container start (a podruntime.StartCounter):
// kubelet_started_containers_total{container_type}, and
// kubelet_started_containers_errors_total{container_type,code} when code,
// the kubelet's error code, is not "".
func (m *Metrics) CountContainerStart(containerType, code string) {
	m.StartedContainers.WithLabelValues(containerType).Inc()
	if code != "" {
		m.StartedContainersErrors.WithLabelValues(containerType, code).Inc()
	}
}
