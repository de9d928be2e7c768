package shutdown

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/base/atomicfile"
	"github.com/nodelet/nodelet/internal/base/bounded"
	"github.com/nodelet/nodelet/internal/base/metrics"
	"github.com/nodelet/nodelet/internal/pipeline/podworker"
	"github.com/nodelet/nodelet/internal/pure/podupdate"
)

// The kubelet's words.
const (
	// ReasonNodeShutdown and MessageNodeShutdown are admission's refusal
	// of a new pod while the node shuts down.
	ReasonNodeShutdown  = "NodeShutdown"
	MessageNodeShutdown = "Pod was rejected as the node is shutting down."
	// ReasonTerminated and MessageTerminated are the status of a pod the
	// shutdown stopped (phase Failed, a DisruptionTarget condition).
	ReasonTerminated  = "Terminated"
	MessageTerminated = "Pod was terminated in response to imminent node shutdown."
	// StateFile, under the root directory, holds when the last shutdown
	// began and ended.
	StateFile = "graceful_node_shutdown_state"

	// eventNodeShutdown is the node event's reason.
	eventNodeShutdown = "NodeShutdown"
	// ErrShuttingDown's text is the Ready condition's message.
	shuttingDownText = "node is shutting down"
)

// ErrShuttingDown is Status while the node shuts down.
var ErrShuttingDown = errors.New(shuttingDownText)

const (
	// pollPeriod is how often a group's pods are checked for finished.
	pollPeriod = 200 * time.Millisecond
	// reconnectPeriod is how long after a lost logind connection it is
	// made again (the kubelet's dbusReconnectPeriod).
	reconnectPeriod = time.Second
	// maxStateFile bounds what is read of the state file.
	maxStateFile = 4096
)

// Workers is what the manager needs of the pod workers.
type Workers interface {
	UpdatePod(opts podworker.UpdatePodOptions)
	// IsPodActive: the pod was admitted and is not yet terminated.
	IsPodActive(uid types.UID) bool
	// IsPodFinished: the pod's containers stopped and its resources
	// (volumes, cgroup) were cleaned up.
	IsPodFinished(uid types.UID) bool
}

// Statuses records why the node stops a pod (statusmanager.Manager).
type Statuses interface {
	SetStoppedByNode(uid types.UID, reason, message string)
}

// EventRecorder records events about the node (events.Recorder).
type EventRecorder interface {
	NodeEvent(node, eventType, reason, message string)
}

// Config are the manager's settings.
type Config struct {
	// Periods are the groups' priorities and grace periods (Periods);
	// none: the manager does nothing.
	Periods []PriorityPeriod
	// StatePath is where the last shutdown's start and end are kept
	// (<root-dir>/graceful_node_shutdown_state); empty: nowhere.
	StatePath string
	// NodeName names the node in its events.
	NodeName string
}

// Sources are the pods the sources want (podconfig.Config).
type Sources interface {
	Pods() []*v1.Pod
}

// Deps are the manager's collaborators. Workers, Statuses and Sources
// are required.
type Deps struct {
	Workers  Workers
	Statuses Statuses
	// Sources' pods that are active (Workers.IsPodActive) are stopped.
	Sources Sources
	// Logind connects to systemd-logind (ConnectLogind); nil, or an
	// error on the first try: no logind, only the triggers Run is given.
	Logind func() (Logind, error)
	// NodeChanged is called when the node begins or stops shutting down,
	// so that the Node's Ready condition follows at once (cluster mode:
	// nodestatus.Manager.Trigger). Optional.
	NodeChanged func()
	// Events receives the NodeShutdown node events. Optional.
	Events EventRecorder
	// Registerer gets kubelet_graceful_shutdown_{start,end}_time_seconds;
	// nil: no metrics.
	Registerer prometheus.Registerer
	Clock      clock.WithTicker
	Log        *slog.Logger
}

// Manager is the node shutdown manager.
type Manager struct {
	cfg        Config
	deps       Deps
	log        *slog.Logger
	start, end prometheus.Gauge

	mu           sync.Mutex
	shuttingDown bool
	// logind and lock are the logind connection and the inhibitor lock
	// held (-1: none).
	logind Logind
	lock   Lock
}

// New returns a manager; it starts nothing.
func New(cfg Config, deps Deps) *Manager {
	if deps.Clock == nil {
		deps.Clock = clock.RealClock{}
	}
	if deps.Log == nil {
		deps.Log = slog.New(slog.DiscardHandler)
	}
	return &Manager{cfg: cfg, deps: deps, log: deps.Log.With("component", "shutdown"), lock: -1,
		start: metrics.Register(deps.Registerer, prometheus.NewGauge(prometheus.GaugeOpts{
			Subsystem: "kubelet", Name: "graceful_shutdown_start_time_seconds",
			Help: "Last graceful shutdown start time since unix epoch in seconds"})),
		end: metrics.Register(deps.Registerer, prometheus.NewGauge(prometheus.GaugeOpts{
			Subsystem: "kubelet", Name: "graceful_shutdown_end_time_seconds",
			Help: "Last graceful shutdown end time since unix epoch in seconds"})),
	}
}

// Enabled says whether shutdown handling is on (shutdownGracePeriod set).
func (m *Manager) Enabled() bool { return len(m.cfg.Periods) > 0 }

// ShuttingDown says whether the node is shutting down now: admission
// refuses new pods.
func (m *Manager) ShuttingDown() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.shuttingDown
}

// Status is ErrShuttingDown while the node shuts down, else nil: an
// error of the Node's Ready condition (the kubelet's ShutdownStatus).
func (m *Manager) Status() error {
	if m.ShuttingDown() {
		return ErrShuttingDown
	}
	return nil
}

// Run handles shutdowns until ctx ends: those logind announces (holding
// its delay lock meanwhile) and those triggers sends (true: the node
// shuts down; false: it does not any more). It returns at once when
// shutdown handling is off.
func (m *Manager) Run(ctx context.Context, triggers <-chan bool) {
	if !m.Enabled() {
		return
	}
	m.log.Info("graceful node shutdown on", "groups", fmt.Sprint(m.cfg.Periods))
	m.loadMetrics()
	fromLogind := make(chan bool, 1)
	var wg sync.WaitGroup
	if m.deps.Logind != nil {
		wg.Add(1)
		go func() { defer wg.Done(); m.watchLogind(ctx, fromLogind) }()
	}
	defer wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case active := <-triggers:
			m.handle(ctx, active)
		case active := <-fromLogind:
			m.handle(ctx, active)
		}
	}
}

// handle is one shutdown event: a shutdown begins (stop the pods, then
// let the machine go) or was cancelled (take the lock again).
func (m *Manager) handle(ctx context.Context, active bool) {
	m.mu.Lock()
	m.shuttingDown = active
	m.mu.Unlock()
	msg := "Shutdown manager detected shutdown cancellation"
	if active {
		msg = "Shutdown manager detected shutdown event"
	}
	m.log.Info(msg)
	if m.deps.Events != nil {
		m.deps.Events.NodeEvent(m.cfg.NodeName, v1.EventTypeNormal, eventNodeShutdown, msg)
	}
	if m.deps.NodeChanged != nil {
		m.deps.NodeChanged()
	}
	if !active {
		m.acquireLock()
		return
	}
	m.process(ctx)
}

// process stops the active pods group by group, records the shutdown's
// start and end, and releases the inhibitor lock.
func (m *Manager) process(ctx context.Context) {
	start := m.deps.Clock.Now()
	m.store(state{StartTime: start})
	m.start.Set(timestamp(start))
	m.end.Set(0)
	defer func() {
		end := m.deps.Clock.Now()
		m.store(state{StartTime: start, EndTime: end})
		m.end.Set(timestamp(end))
		m.releaseLock()
		m.log.Info("node shutdown handled, the node will shut down shortly", "took", end.Sub(start))
	}()
	var active []*v1.Pod
	for _, pod := range m.deps.Sources.Pods() {
		if m.deps.Workers.IsPodActive(pod.UID) {
			active = append(active, pod)
		}
	}
	for _, g := range Plan(m.cfg.Periods, active) {
		if ctx.Err() != nil {
			return
		}
		if len(g.Pods) == 0 {
			continue
		}
		m.stopGroup(ctx, g)
	}
}

// stopGroup stops the group's pods and waits until they all finished or
// the group's time ran out.
func (m *Manager) stopGroup(ctx context.Context, g Group) {
	m.log.Info("stopping pods for the node shutdown", "priority", g.Priority, "gracePeriod", g.GracePeriod, "pods", len(g.Pods))
	for _, pod := range g.Pods {
		grace := GraceSeconds(g, pod)
		m.log.Debug("stopping pod for the node shutdown", "pod", pod.Namespace+"/"+pod.Name, "gracePeriod", grace)
		m.deps.Statuses.SetStoppedByNode(pod.UID, ReasonTerminated, MessageTerminated)
		m.deps.Workers.UpdatePod(podworker.UpdatePodOptions{Reason: podupdate.Kill, Pod: pod,
			// As the kubelet's, not an eviction: the pod's content stays
			// until the pod is deleted.
			KillPodOptions: &podworker.KillPodOptions{PodTerminationGracePeriodSecondsOverride: &grace, Reason: "node shutdown"}})
	}
	timer := m.deps.Clock.NewTimer(g.GracePeriod)
	defer timer.Stop()
	tick := m.deps.Clock.NewTicker(pollPeriod)
	defer tick.Stop()
	for !m.finished(g.Pods) {
		select {
		case <-ctx.Done():
			return
		case <-timer.C():
			m.log.Info("node shutdown: the group's time ran out", "priority", g.Priority, "gracePeriod", g.GracePeriod)
			return
		case <-tick.C():
		}
	}
	m.log.Info("node shutdown: the group's pods finished", "priority", g.Priority)
}

func (m *Manager) finished(pods []*v1.Pod) bool {
	for _, p := range pods {
		if !m.deps.Workers.IsPodFinished(p.UID) {
			return false
		}
	}
	return true
}

// watchLogind connects to logind, makes its InhibitDelayMaxSec cover the
// grace periods, takes the delay lock and forwards PrepareForShutdown,
// connecting again when the connection ends. Without logind at the first
// try it returns.
func (m *Manager) watchLogind(ctx context.Context, out chan<- bool) {
	first := true
	for {
		events, err := m.connectLogind()
		if err != nil {
			if first {
				m.log.Info("no graceful node shutdown through systemd-logind; SIGPWR still triggers one", "err", err)
				return
			}
			m.log.Error("cannot watch the node for shutdown events", "err", err)
		}
		first = false
		for events != nil {
			select {
			case <-ctx.Done():
				m.closeLogind()
				return
			case active, ok := <-events:
				if !ok {
					m.log.Error("the watch of logind's shutdown events ended")
					events = nil
					continue
				}
				select {
				case out <- active:
				case <-ctx.Done():
				}
			}
		}
		m.closeLogind()
		select {
		case <-ctx.Done():
			return
		case <-m.deps.Clock.After(reconnectPeriod):
		}
	}
}

// connectLogind is one connection to logind, set up: the delay long
// enough, the lock taken, the signal watched.
func (m *Manager) connectLogind() (<-chan bool, error) {
	l, err := m.deps.Logind()
	if err != nil {
		return nil, err
	}
	fail := func(err error) (<-chan bool, error) {
		_ = l.Close()
		return nil, err
	}
	want := Total(m.cfg.Periods)
	have, err := l.InhibitDelay()
	if err != nil {
		return fail(err)
	}
	if want > have {
		m.log.Info("raising logind's InhibitDelayMaxSec", "from", have, "to", want, "dropIn", DropInPath)
		if err := l.SetInhibitDelay(want); err != nil {
			return fail(err)
		}
		// logind reloads asynchronously: look again, backing off from
		// 100 ms, five times, as the kubelet.
		wait := 100 * time.Millisecond
		for range 5 {
			<-m.deps.Clock.After(wait)
			if have, err = l.InhibitDelay(); err != nil {
				return fail(err)
			}
			if have >= want {
				break
			}
			wait *= 2
		}
		if have < want {
			return fail(fmt.Errorf("logind's InhibitDelayMaxSec is %v after the drop-in, less than the shutdown grace period %v", have, want))
		}
	}
	lock, err := l.Inhibit()
	if err != nil {
		return fail(err)
	}
	events, err := l.PrepareForShutdown(m.log)
	if err != nil {
		_ = l.Release(lock)
		return fail(err)
	}
	m.mu.Lock()
	m.logind, m.lock = l, lock
	m.mu.Unlock()
	return events, nil
}

// acquireLock takes the inhibitor lock again (a shutdown was cancelled),
// releasing the one still held.
func (m *Manager) acquireLock() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.logind == nil {
		return
	}
	lock, err := m.logind.Inhibit()
	if err != nil {
		m.log.Error("cannot take logind's inhibitor lock again", "err", err)
		return
	}
	if m.lock >= 0 {
		_ = m.logind.Release(m.lock)
	}
	m.lock = lock
}

// releaseLock lets the machine shut down.
func (m *Manager) releaseLock() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.logind == nil || m.lock < 0 {
		return
	}
	if err := m.logind.Release(m.lock); err != nil {
		m.log.Error("cannot release logind's inhibitor lock", "err", err)
	}
	m.lock = -1
}

func (m *Manager) closeLogind() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.logind == nil {
		return
	}
	if m.lock >= 0 {
		_ = m.logind.Release(m.lock)
	}
	_ = m.logind.Close()
	m.logind, m.lock = nil, -1
}

// state is the state file's content, as the kubelet's.
type state struct {
	StartTime time.Time `json:"startTime"`
	EndTime   time.Time `json:"endTime"`
}

func (m *Manager) store(s state) {
	if m.cfg.StatePath == "" {
		return
	}
	data, err := json.Marshal(s)
	if err == nil {
		err = atomicfile.Write(m.cfg.StatePath, data, 0o600)
	}
	if err != nil {
		m.log.Error("cannot store the graceful shutdown state", "err", err)
	}
}

// loadMetrics sets the metrics from the last shutdown's state.
func (m *Manager) loadMetrics() {
	s, err := loadState(m.cfg.StatePath)
	if err != nil {
		m.log.Warn("cannot load the graceful shutdown state", "err", err)
		return
	}
	m.start.Set(timestamp(s.StartTime))
	m.end.Set(timestamp(s.EndTime))
}

func loadState(path string) (state, error) {
	var s state
	if path == "" {
		return s, nil
	}
	data, err := bounded.ReadFile(path, maxStateFile)
	if errors.Is(err, os.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return s, err
	}
	if err := json.Unmarshal(data, &s); err != nil {
		return s, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

func timestamp(t time.Time) float64 {
	if t.IsZero() {
		return 0
	}
	return float64(t.Unix())
}
