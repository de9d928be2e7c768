package eviction

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/base/metrics"
	"github.com/nodelet/nodelet/internal/pipeline/podworker"
	"github.com/nodelet/nodelet/internal/pure/podspec"
	"github.com/nodelet/nodelet/internal/pure/podupdate"
	"github.com/nodelet/nodelet/internal/pure/status"
)

// Defaults, the kubelet's.
const (
	// DefaultMonitoringInterval is how often the signals are read (the
	// kubelet's housekeeping interval, 10 s).
	DefaultMonitoringInterval = 10 * time.Second
	// DefaultPressureTransitionPeriod is evictionPressureTransitionPeriod.
	DefaultPressureTransitionPeriod = 5 * time.Minute
	// Reason is the evicted pod's status reason and event reason.
	Reason = "Evicted"

	// hardGracePeriodSeconds is an evicted pod's grace period under a hard
	// threshold (the kubelet's immediateEvictionGracePeriodSeconds).
	hardGracePeriodSeconds = 1
	// cleanupTimeout and cleanupPoll: how long, and how often, the manager
	// waits for an evicted pod to be gone before it looks again.
	cleanupTimeout = 30 * time.Second
	cleanupPoll    = time.Second
)

// Summary gives the stats the signals are read from (*stats.Provider):
// Summary and NodeSummary may be cached (their stats' times tell how
// old), FreshSummary is read now. NodeSummary's Node is whole, its Pods
// may be empty.
type Summary interface {
	Summary(ctx context.Context, onlyCPUAndMemory bool) (*statsapi.Summary, error)
	NodeSummary(ctx context.Context) (*statsapi.Summary, error)
	FreshSummary(ctx context.Context) (*statsapi.Summary, error)
}

// Workers are the pod workers (*podworker.Workers): an evicted pod is
// killed through them, and is gone once finished.
type Workers interface {
	UpdatePod(opts podworker.UpdatePodOptions)
	IsPodFinished(uid types.UID) bool
}

// Statuses is the status cache (*statusmanager.Manager).
type Statuses interface {
	StopByNode(uid types.UID, r status.Rejection)
}

// Recorder records events (*events.Recorder).
type Recorder interface {
	Event(pod *v1.Pod, eventType, reason, message string)
	NodeEvent(node, eventType, reason, message string)
}

// Options configure a Manager.
type Options struct {
	Thresholds []Threshold
	// PressureTransitionPeriod is evictionPressureTransitionPeriod
	// (0: DefaultPressureTransitionPeriod).
	PressureTransitionPeriod time.Duration
	// MaxPodGracePeriodSeconds is evictionMaxPodGracePeriod: the longest
	// grace period a pod evicted under a soft threshold gets.
	MaxPodGracePeriodSeconds int64
	// MonitoringInterval (0: DefaultMonitoringInterval).
	MonitoringInterval time.Duration
	NodeName           string
	// LocalStorageCapacityIsolation is the kubelet's
	// localStorageCapacityIsolation: pods over their ephemeral-storage
	// limits or emptyDir sizeLimits are evicted (LocalStorage).
	LocalStorageCapacityIsolation bool
}

// Deps are the manager's collaborators. ReclaimContainers and
// ReclaimImages may be nil.
type Deps struct {
	Summary  Summary
	Workers  Workers
	Statuses Statuses
	Recorder Recorder
	// ActivePods are the pods admitted and not yet terminated.
	ActivePods func() []*v1.Pod
	// ReclaimContainers removes dead containers (the kubelet's
	// DeleteAllUnusedContainers).
	ReclaimContainers func(ctx context.Context) error
	// ReclaimImages removes every image no container uses (the kubelet's
	// DeleteUnusedImages).
	ReclaimImages func(ctx context.Context) (freedBytes int64, err error)
	Metrics       prometheus.Registerer
	Clock         clock.WithTicker
	Log           *slog.Logger
}

// Manager is the eviction manager.
type Manager struct {
	opts      Options
	deps      Deps
	evictions *prometheus.CounterVec

	mu         sync.Mutex
	state      State
	conditions []v1.NodeConditionType
}

// New returns a manager; nothing runs until Run.
func New(opts Options, deps Deps) *Manager {
	if opts.PressureTransitionPeriod <= 0 {
		opts.PressureTransitionPeriod = DefaultPressureTransitionPeriod
	}
	if opts.MonitoringInterval <= 0 {
		opts.MonitoringInterval = DefaultMonitoringInterval
	}
	if deps.Log == nil {
		deps.Log = slog.New(slog.DiscardHandler)
	}
	return &Manager{opts: opts, deps: deps,
		evictions: metrics.Register(deps.Metrics, prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: "kubelet", Name: "evictions",
			Help: "Cumulative number of pod evictions by eviction signal",
		}, []string{"eviction_signal"})),
	}
}

// Conditions are the node's pressure conditions now, sorted.
func (m *Manager) Conditions() []v1.NodeConditionType {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.conditions)
}

// Pressure reports the three conditions (the node status setters' view).
func (m *Manager) Pressure() (memory, disk, pid bool) {
	c := m.Conditions()
	return slices.Contains(c, v1.NodeMemoryPressure), slices.Contains(c, v1.NodeDiskPressure), slices.Contains(c, v1.NodePIDPressure)
}

// Run looks at the signals every monitoring interval until ctx ends; after
// an eviction it waits for the pod to be gone, then looks again at once.
func (m *Manager) Run(ctx context.Context) {
	if len(m.opts.Thresholds) == 0 && !m.opts.LocalStorageCapacityIsolation {
		m.deps.Log.Info("eviction manager: no thresholds and no local storage limits, nothing to watch")
		return
	}
	for ctx.Err() == nil {
		if evicted := m.Synchronize(ctx); len(evicted) > 0 {
			m.waitForCleanup(ctx, evicted)
			continue
		}
		select {
		case <-ctx.Done():
		case <-m.deps.Clock.After(m.opts.MonitoringInterval):
		}
	}
}

// Synchronize is one look at the signals (the kubelet's synchronize): the
// node's conditions updated; then, with local storage capacity isolation,
// every pod over its local storage limits evicted; if none was, node-level
// reclaim and at most one pod evicted if a threshold calls for it. It
// returns the evicted pods.
//
// The signals are the node's. The pods' stats are read only when a pod
// has a local storage limit to check (HasLocalStorageLimits), and, fresh,
// when one must be ranked for eviction: the kubelet reads the whole
// summary every 10 s, which at 100 idle pods was a third of nodelet's idle
// CPU, for limits that most pods do not have.
func (m *Manager) Synchronize(ctx context.Context) []*v1.Pod {
	log := m.deps.Log
	withPods := m.opts.LocalStorageCapacityIsolation && slices.ContainsFunc(m.deps.ActivePods(), HasLocalStorageLimits)
	var summary *statsapi.Summary
	var err error
	if withPods {
		summary, err = m.deps.Summary.Summary(ctx, false)
	} else {
		summary, err = m.deps.Summary.NodeSummary(ctx)
	}
	if err != nil {
		log.Warn("eviction manager: cannot read stats", "err", err)
		return nil
	}
	obs := Observe(summary)
	m.mu.Lock()
	before := m.conditions
	d := Decide(m.opts.Thresholds, &m.state, obs, m.opts.PressureTransitionPeriod, m.deps.Clock.Now())
	m.conditions = d.Conditions
	m.mu.Unlock()
	if !slices.Equal(before, d.Conditions) {
		log.Info("eviction manager: node conditions", "pressure", d.Conditions)
	}
	if withPods {
		if evicted := m.localStorageEviction(summary); len(evicted) > 0 {
			return evicted
		}
	}
	if d.Reclaim == nil {
		return nil
	}
	t := *d.Reclaim
	log.Info("eviction manager: attempting to reclaim", "resource", d.Resource, "signal", t.Signal,
		"threshold", t.Value.String(), "available", obs[t.Signal].Available)
	m.deps.Recorder.NodeEvent(m.opts.NodeName, v1.EventTypeWarning, "EvictionThresholdMet", fmt.Sprintf("Attempting to reclaim %s", d.Resource))

	dedicated := dedicatedImageFs(summary)
	resolved, fresh := m.reclaimNodeLevel(ctx, t.Signal, dedicated)
	if resolved {
		log.Info("eviction manager: able to reduce resource pressure without evicting pods", "resource", d.Resource)
		return nil
	}
	// Rank on stats read now: the cached summary's volume usage may be a
	// minute old, and hide the pod that just filled its emptyDir.
	if fresh == nil {
		if fresh, err = m.deps.Summary.FreshSummary(ctx); err != nil {
			log.Warn("eviction manager: cannot read stats now; ranking on the last ones", "err", err)
			fresh = summary
		}
	}
	pods := slices.Clone(m.deps.ActivePods())
	if len(pods) == 0 {
		log.Warn("eviction manager: thresholds met, but no pod is active to evict", "resource", d.Resource)
		return nil
	}
	stats := StatsFrom(fresh)
	Rank(t.Signal, dedicated, pods, stats)
	log.Info("eviction manager: must evict a pod to reclaim", "resource", d.Resource, "ranked", podNames(pods))
	for _, pod := range pods {
		if podspec.IsCritical(pod) {
			log.Warn("eviction manager: cannot evict a critical pod", "pod", pod.Namespace+"/"+pod.Name)
			continue
		}
		grace := int64(hardGracePeriodSeconds)
		if !t.Hard() {
			grace = min(m.opts.MaxPodGracePeriodSeconds, podspec.GracePeriodSeconds(pod))
		}
		msg := Message(d.Resource, pod, stats, d.Met, obs)
		m.evict(pod, grace, status.Rejection{Reason: Reason, Message: msg})
		m.evictions.WithLabelValues(string(t.Signal)).Inc()
		return []*v1.Pod{pod}
	}
	log.Warn("eviction manager: unable to evict any pod from the node", "resource", d.Resource)
	return nil
}

// localStorageEviction evicts every pod over its local storage limits by
// the stats of summary (the kubelet's localStorageEviction), critical pods
// but, at once (the kubelet's immediate grace period) and without a
// DisruptionTarget condition, as the kubelet passes none. It returns them.
func (m *Manager) localStorageEviction(summary *statsapi.Summary) []*v1.Pod {
	found := LocalStorage(m.deps.ActivePods(), StatsFrom(summary), dedicatedImageFs(summary))
	var evicted []*v1.Pod
	for _, e := range found {
		if podspec.IsCritical(e.Pod) {
			m.deps.Log.Warn("eviction manager: cannot evict a critical pod", "pod", e.Pod.Namespace+"/"+e.Pod.Name, "message", e.Message)
			continue
		}
		m.evict(e.Pod, hardGracePeriodSeconds, status.Rejection{Reason: Reason, Message: e.Message, NoDisruptionTarget: true})
		m.evictions.WithLabelValues(e.Signal).Inc()
		evicted = append(evicted, e.Pod)
	}
	return evicted
}

// evict stops pod for good with the eviction's status.
func (m *Manager) evict(pod *v1.Pod, grace int64, r status.Rejection) {
	msg := r.Message
	m.deps.Recorder.Event(pod, v1.EventTypeWarning, Reason, msg)
	m.deps.Log.Warn("eviction manager: evicting pod", "pod", pod.Namespace+"/"+pod.Name, "podUID", pod.UID,
		"gracePeriod", grace, "message", msg)
	m.deps.Statuses.StopByNode(pod.UID, r)
	m.deps.Workers.UpdatePod(podworker.UpdatePodOptions{Reason: podupdate.Kill, Pod: pod,
		KillPodOptions: &podworker.KillPodOptions{PodTerminationGracePeriodSecondsOverride: &grace, Evict: true, Reason: Reason}})
}

// reclaimNodeLevel frees what the node holds for a disk signal (dead
// containers, unused images) and reports whether every threshold is then
// resolved, minimum reclaim included, with the stats read after (nil when
// there was nothing to reclaim, or they could not be read).
func (m *Manager) reclaimNodeLevel(ctx context.Context, sig Signal, dedicated bool) (bool, *statsapi.Summary) {
	disk := signalInfo[sig].condition == v1.NodeDiskPressure
	imageSignal := sig == SignalImageFsAvailable || sig == SignalImageFsInodesFree
	if !disk || (dedicated && !imageSignal) {
		return false, nil
	}
	log := m.deps.Log
	if f := m.deps.ReclaimContainers; f != nil {
		if err := f(ctx); err != nil {
			log.Warn("eviction manager: removing dead containers failed", "err", err)
		}
	}
	if f := m.deps.ReclaimImages; f != nil {
		freed, err := f(ctx)
		if err != nil {
			log.Warn("eviction manager: removing unused images failed", "err", err)
		}
		log.Info("eviction manager: removed unused images", "freedBytes", freed)
	}
	summary, err := m.deps.Summary.FreshSummary(ctx)
	if err != nil {
		log.Warn("eviction manager: cannot read stats after reclaim", "err", err)
		return false, nil
	}
	return len(StillMet(m.opts.Thresholds, Observe(summary))) == 0, summary
}

// waitForCleanup waits until the evicted pods' workers finished, or
// cleanupTimeout.
func (m *Manager) waitForCleanup(ctx context.Context, pods []*v1.Pod) {
	deadline := m.deps.Clock.Now().Add(cleanupTimeout)
	finished := func() bool {
		for _, pod := range pods {
			if !m.deps.Workers.IsPodFinished(pod.UID) {
				return false
			}
		}
		return true
	}
	for !finished() {
		if !m.deps.Clock.Now().Before(deadline) {
			m.deps.Log.Warn("eviction manager: timed out waiting for the evicted pods to be cleaned up", "pods", podNames(pods))
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-m.deps.Clock.After(cleanupPoll):
		}
	}
	m.deps.Log.Info("eviction manager: evicted pods cleaned up", "pods", podNames(pods))
}

// dedicatedImageFs reports whether the runtime keeps its images on a
// filesystem other than the node's. The summary does not name devices: two
// filesystems of the same size in bytes and in inodes are taken to be one.
func dedicatedImageFs(s *statsapi.Summary) bool {
	if s == nil || s.Node.Fs == nil || s.Node.Runtime == nil || s.Node.Runtime.ImageFs == nil {
		return false
	}
	n, i := s.Node.Fs, s.Node.Runtime.ImageFs
	same := func(a, b *uint64) bool { return a != nil && b != nil && *a == *b }
	return !(same(n.CapacityBytes, i.CapacityBytes) && same(n.Inodes, i.Inodes))
}

func podNames(pods []*v1.Pod) string {
	names := make([]string, len(pods))
	for i, p := range pods {
		names[i] = p.Namespace + "/" + p.Name
	}
	return strings.Join(names, ",")
}

// AdmitMessage is the kubelet's message for a pod refused under pressure.
func AdmitMessage(conditions []v1.NodeConditionType) string {
	return fmt.Sprintf("The node had condition: %v. ", conditions)
}
