package prober

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/pure/podspec"
)

// ExecRunner runs a command in a container and waits for it; *cri.Client
// implements it. A command that ran and exited non-zero is not an error. A
// command that did not finish within timeout returns an error matching
// context.DeadlineExceeded or cri.ErrDeadlineExceeded.
type ExecRunner interface {
	ExecSync(ctx context.Context, id string, cmd []string, timeout time.Duration) (stdout, stderr []byte, exitCode int32, err error)
}

// GRPCChecker makes one grpc.health.v1.Health/Check call to addr
// ("host:port") for service, within timeout. serving is true when the
// server answered SERVING. An error means the check failed (could not
// connect, the call failed or timed out, or the server answered another
// status); its text becomes the probe's output, so it should read like the
// kubelet's messages. internal/pipeline/cri implements it (it alone may use gRPC).
type GRPCChecker interface {
	Check(ctx context.Context, addr, service string, timeout time.Duration) (serving bool, err error)
}

// EventRecorder records pod events; internal/base/events implements it.
type EventRecorder interface {
	Event(pod *v1.Pod, eventType, reason, message string)
}

// RunningContainer is the running instance of a container.
type RunningContainer struct {
	ID        string
	StartedAt time.Time
}

// Deps are the manager's collaborators. Exec and GRPC may be nil when no
// pod uses such probes (a probe needing one then errors); Recorder and
// Metrics may be nil; Clock and Log default to the real clock and a
// discarding logger.
type Deps struct {
	Exec     ExecRunner
	GRPC     GRPCChecker
	Clock    clock.WithTicker
	Log      *slog.Logger
	Metrics  prometheus.Registerer
	Recorder EventRecorder
}

// Probe names as LivenessFailed reports them (plan.ProbeLiveness and
// plan.ProbeStartup).
const (
	ProbeLiveness = "liveness"
	ProbeStartup  = "startup"
)

// Manager runs the probe workers and keeps their results. It is safe for
// concurrent use.
type Manager struct {
	// start is when the manager was made: a container started before it
	// outlived a nodelet restart.
	start    time.Time
	exec     ExecRunner
	grpc     GRPCChecker
	clock    clock.WithTicker
	log      *slog.Logger
	recorder EventRecorder
	metrics  *probeMetrics

	// updates is unbuffered: changes wait in pending (one entry per pod,
	// FIFO) and Run hands them over one by one. A worker therefore never
	// blocks on the sync loop, nothing is dropped, and a burst of changes
	// of one pod costs one sync. kick (size 1) wakes Run's forwarder;
	// one token is enough as the forwarder drains pending.
	updates chan types.UID
	kick    chan struct{}

	wg sync.WaitGroup // running workers

	mu      sync.Mutex
	ctx     context.Context // Run's; nil before Run
	stopped bool            // Run is returning: no new workers
	pods    map[types.UID]*podProbes
	results map[string]*instance // by container ID
	pending []types.UID
	queued  map[types.UID]bool
	handing types.UID // popped from pending, being handed over (tests look)
}

// podProbes is what the manager keeps of one pod.
type podProbes struct {
	pod        *v1.Pod
	podIP      string
	containers map[string]*containerProbes // every container and init container, by name
}

// containerProbes is one container of a pod spec and its workers.
type containerProbes struct {
	name    string
	workers [numKinds]*worker // by kind; nil: no such probe
	id      string            // the bound instance; "" when not running
}

// instance holds the results for one container instance.
type instance struct {
	hasStartup   bool
	hasReadiness bool
	startupDone  bool
	ready        bool
	failed       bool   // liveness or startup failed: kill
	failedProbe  string // ProbeLiveness or ProbeStartup
	message      string
}

// New returns a Manager. It starts nothing: see Run.
func New(deps Deps) *Manager {
	clk, log := deps.Clock, deps.Log
	if clk == nil {
		clk = clock.RealClock{}
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	rec := deps.Recorder
	if rec == nil {
		rec = nopRecorder{}
	}
	return &Manager{
		start: clk.Now(),
		exec:  deps.Exec, grpc: deps.GRPC, clock: clk, log: log, recorder: rec,
		metrics: newMetrics(deps.Metrics),
		updates: make(chan types.UID),
		kick:    make(chan struct{}, 1),
		pods:    map[types.UID]*podProbes{},
		results: map[string]*instance{},
		queued:  map[types.UID]bool{},
	}
}

type nopRecorder struct{}

func (nopRecorder) Event(*v1.Pod, string, string, string) {}

// Run starts the workers of the pods added so far (later ones start as
// they are added), hands result changes to Updates, and returns when ctx
// ends and every worker has stopped. Call it once.
func (m *Manager) Run(ctx context.Context) {
	m.mu.Lock()
	if m.ctx != nil {
		m.mu.Unlock()
		panic("prober: Run called twice")
	}
	m.ctx = ctx
	for _, p := range m.pods {
		for _, c := range p.containers {
			for _, w := range c.workers {
				if w != nil {
					m.startLocked(w)
				}
			}
		}
	}
	m.mu.Unlock()

	m.forward(ctx)

	m.mu.Lock()
	m.stopped = true // every wg.Add happened under mu before this
	m.mu.Unlock()
	m.wg.Wait()
}

// Updates delivers the UID of a pod whenever a probe result of one of its
// containers changes (and when a new instance is first seen), so that the
// sync loop syncs it at once. Only fed while Run runs.
func (m *Manager) Updates() <-chan types.UID { return m.updates }

// forward hands pending changes to the updates channel until ctx ends.
func (m *Manager) forward(ctx context.Context) {
	for {
		m.mu.Lock()
		var uid types.UID
		ok := len(m.pending) > 0
		if ok {
			uid = m.pending[0]
			m.pending = m.pending[1:]
			delete(m.queued, uid)
			m.handing = uid
		}
		m.mu.Unlock()
		if !ok {
			select {
			case <-ctx.Done():
				return
			case <-m.kick:
				continue
			}
		}
		select {
		case m.updates <- uid:
		case <-ctx.Done():
			return
		}
		m.mu.Lock()
		m.handing = ""
		m.mu.Unlock()
	}
}

// notifyLocked queues a change of pod uid for Updates.
func (m *Manager) notifyLocked(uid types.UID) {
	if m.queued[uid] {
		return
	}
	m.queued[uid] = true
	m.pending = append(m.pending, uid)
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// AddPod creates the workers of pod's probes. Adding a pod again only
// replaces the pod object kept (its deletion timestamp matters; probes
// cannot change in a pod spec).
func (m *Manager) AddPod(pod *v1.Pod) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if p := m.pods[pod.UID]; p != nil {
		m.setPodLocked(p, pod)
		return
	}
	p := &podProbes{pod: pod, containers: map[string]*containerProbes{}}
	add := func(c *v1.Container, probed bool) {
		cp := &containerProbes{name: c.Name}
		p.containers[c.Name] = cp
		if !probed {
			return
		}
		for k := range numKinds {
			if spec := k.spec(c); spec != nil {
				cp.workers[k] = m.newWorker(p, cp, c, k, spec)
			}
		}
	}
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		add(c, podspec.IsSidecar(c))
	}
	for i := range pod.Spec.Containers {
		add(&pod.Spec.Containers[i], true)
	}
	m.pods[pod.UID] = p
	if m.ctx != nil && !m.stopped {
		for _, cp := range p.containers {
			for _, w := range cp.workers {
				if w != nil {
					m.startLocked(w)
				}
			}
		}
	}
}

// startLocked starts w's goroutine under Run's context.
func (m *Manager) startLocked(w *worker) {
	ctx, cancel := context.WithCancel(m.ctx)
	w.cancel = cancel
	m.wg.Add(1)
	go w.run(ctx)
}

// setPodLocked keeps the newest pod object; a deletion that just began
// wakes the workers (liveness and startup stop on deletion).
func (m *Manager) setPodLocked(p *podProbes, pod *v1.Pod) {
	deleting := p.pod.DeletionTimestamp == nil && pod.DeletionTimestamp != nil
	p.pod = pod
	if !deleting {
		return
	}
	for _, c := range p.containers {
		for _, w := range c.workers {
			if w != nil {
				w.pokeLocked()
			}
		}
	}
}

// RemovePod stops the workers of pod and forgets its results. It does not
// wait for them to finish.
func (m *Manager) RemovePod(pod *v1.Pod) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.pods[pod.UID]
	if p == nil {
		return
	}
	for _, c := range p.containers {
		m.unbindLocked(c)
		for _, w := range c.workers {
			if w != nil && w.cancel != nil {
				w.cancel()
			}
		}
	}
	delete(m.pods, pod.UID)
	if m.queued[pod.UID] {
		delete(m.queued, pod.UID)
		kept := m.pending[:0]
		for _, uid := range m.pending {
			if uid != pod.UID {
				kept = append(kept, uid)
			}
		}
		m.pending = kept
	}
}

// PodStatusChanged binds the pod's probe workers to the container
// instances st shows running (a statusmanager.Listener): each
// ContainerStatus with a running state and a "<runtime>://<id>" ID, and
// st.PodIP (for a host-network pod, the node's IP) as the probes' host.
// As the kubelet's prober, it counts initialDelaySeconds from the status's
// startedAt.
func (m *Manager) PodStatusChanged(pod *v1.Pod, st v1.PodStatus) {
	running := map[string]RunningContainer{}
	for _, list := range [][]v1.ContainerStatus{st.InitContainerStatuses, st.ContainerStatuses} {
		for _, c := range list {
			if c.State.Running == nil {
				continue
			}
			if _, id, ok := strings.Cut(c.ContainerID, "://"); ok && id != "" {
				running[c.Name] = RunningContainer{ID: id, StartedAt: c.State.Running.StartedAt.Time}
			}
		}
	}
	m.SetContainers(pod, st.PodIP, running)
}

// SetContainers tells the manager, after a sync of pod, which instance of
// each container (by spec name) is running, and the pod's IP (the default
// host of httpGet and tcpSocket probes and the host of gRPC probes; for a
// host-network pod, the node's IP). Containers absent from running are not
// running. Pods not added with AddPod are ignored.
func (m *Manager) SetContainers(pod *v1.Pod, podIP string, running map[string]RunningContainer) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.pods[pod.UID]
	if p == nil {
		return
	}
	m.setPodLocked(p, pod)
	p.podIP = podIP
	changed := false
	for name, c := range p.containers {
		rc, ok := running[name]
		switch {
		case ok && rc.ID != "" && rc.ID != c.id:
			m.unbindLocked(c)
			m.bindLocked(c, rc, pod)
			changed = true
		case (!ok || rc.ID == "") && c.id != "":
			m.unbindLocked(c)
		}
	}
	if changed {
		m.notifyLocked(pod.UID)
	}
}

// bindLocked binds c's workers to a new instance with fresh results. An
// instance that outlived a nodelet restart starts with the readiness the
// pod last had (ReadyUnbound) rather than not ready, so a restart does not
// make ready pods flap NotReady before their first probe.
func (m *Manager) bindLocked(c *containerProbes, rc RunningContainer, pod *v1.Pod) {
	c.id = rc.ID
	in := &instance{
		hasStartup:   c.workers[startup] != nil,
		hasReadiness: c.workers[readiness] != nil,
	}
	if m.outlivedRestart(rc.StartedAt) {
		in.ready = podReady(pod)
	}
	m.results[rc.ID] = in
	for _, w := range c.workers {
		if w != nil {
			w.bindLocked(rc)
		}
	}
}

// unbindLocked forgets c's instance and idles its workers.
func (m *Manager) unbindLocked(c *containerProbes) {
	if c.id == "" {
		return
	}
	delete(m.results, c.id)
	c.id = ""
	for _, w := range c.workers {
		if w != nil {
			w.bindLocked(RunningContainer{})
		}
	}
}

// LivenessFailed reports whether the container's liveness probe, or its
// startup probe, failed (failureThreshold times in a row): the container
// must be killed. probe is ProbeLiveness or ProbeStartup, message the
// probe's output.
func (m *Manager) LivenessFailed(containerID string) (failed bool, probe, message string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	in := m.results[containerID]
	if in == nil || !in.failed {
		return false, "", ""
	}
	return true, in.failedProbe, in.message
}

// StartupDone reports whether the container has started: it has no startup
// probe, or that probe succeeded. False for unknown container IDs.
func (m *Manager) StartupDone(containerID string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	in := m.results[containerID]
	return in != nil && (!in.hasStartup || in.startupDone)
}

// outlivedRestart tells whether a container started before this prober
// was made: by an earlier nodelet. (The kubelet asks for 10 s before its
// start, so that containers started in the last 10 s before a restart
// flap NotReady; the runtime's clock is this machine's, and nodelet
// starts no container before its prober exists.)
func (m *Manager) outlivedRestart(startedAt time.Time) bool {
	return !startedAt.IsZero() && startedAt.Before(m.start)
}

// Bound reports whether the probe workers are bound to the container
// instance (after the first status that shows it running).
func (m *Manager) Bound(containerID string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.results[containerID] != nil
}

// ReadyUnbound is the readiness of a running container not yet Bound, as
// the kubelet decides it: one that outlived a nodelet restart is ready if
// it has no readiness probe, or if the pod was Ready as its status (from
// the API server) last said; a new one is not ready until bound.
func (m *Manager) ReadyUnbound(pod *v1.Pod, container string, startedAt time.Time) bool {
	if !m.outlivedRestart(startedAt) {
		return false
	}
	for _, list := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range list {
			if c.Name == container && c.ReadinessProbe != nil {
				return podReady(pod)
			}
		}
	}
	return true
}

func podReady(pod *v1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == v1.PodReady {
			return c.Status == v1.ConditionTrue
		}
	}
	return false
}

// Ready reports the container's readiness probe result. known is false
// when the container has no readiness probe (readiness then follows the
// container's state). An unknown container ID is not ready.
func (m *Manager) Ready(containerID string) (ready, known bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	in := m.results[containerID]
	switch {
	case in == nil:
		return false, true
	case !in.hasReadiness:
		return false, false
	}
	return in.ready, true
}
