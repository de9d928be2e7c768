package nodestatus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/base/notify"
	"github.com/nodelet/nodelet/internal/pipeline/cri"
)

const (
	// jitterFactor spreads the periodic status computations and lease
	// renewals of many nodes, as the kubelet's wait.JitterUntil(…, 0.04).
	jitterFactor = 0.04
	// runtimeSyncThreshold is how long a runtime not seen ready is still
	// believed up (the kubelet's maxWaitForContainerRuntime).
	runtimeSyncThreshold = 30 * time.Second
	// nodeReadyGracePeriod bounds the fast status checks after start (the
	// kubelet's nodeReadyGracePeriod).
	nodeReadyGracePeriod = 2 * time.Minute
	// fastStatusPeriod is how often the status is computed, locally, while
	// the Node is not yet Ready in the API after start (the kubelet uses
	// 100 ms; PLEG relists every second, so sooner tells nothing new).
	fastStatusPeriod = time.Second
	// directAfterOutage is how long after a lease renewal failed the
	// status syncs read the Node from the API server rather than the
	// informer: the controller's grace for the lease has passed by then,
	// and the informer has caught up.
	directAfterOutage = time.Minute
	// minBackoff and maxBackoff bound the waits between failed API calls
	// (the kubelet's registration and lease back-off: 100 ms doubling to
	// 7 s).
	minBackoff = 100 * time.Millisecond
	maxBackoff = 7 * time.Second
	// nodeLeaseNamespace holds the node leases.
	nodeLeaseNamespace = v1.NamespaceNodeLease
)

// Manager registers the Node, keeps its status and renews its lease. Its
// methods are safe for concurrent use; Run runs it.
type Manager struct {
	// client registers and watches the Node; heartbeat patches its status
	// and renews the lease.
	client      kubernetes.Interface
	heartbeat   kubernetes.Interface
	cfg         *config
	runtime     Runtime
	machine     Machine
	plegHealthy func() (bool, error)
	pressureOf  func() (memory, disk, pid bool)
	// volumesInUse lists the attachable volumes in use; nil: none told.
	volumesInUse func() []v1.UniqueVolumeName
	devices      func() (capacity, allocatable v1.ResourceList)
	shutdown     func() error
	events       EventRecorder
	podCIDRs     PodCIDRs
	onFailure    func()
	onLease      func()
	clk          clock.Clock
	log          *slog.Logger
	rand         func() float64

	// store and informer watch this Node.
	store    cache.Store
	informer cache.Controller

	// trigger asks the status goroutine to compute and report now; one
	// pending request stands for any number (Deps.Changed, or its own).
	trigger *notify.Kick
	// leaseWake tells the lease goroutine the Node's UID is known (size
	// 1), so that a lease waiting for its owner is created at once.
	leaseWake chan struct{}
	// leaseWakes counts the wake-ups sent on leaseWake that the lease
	// goroutine has not yet taken and stopped its timer for. Nothing acts
	// on it: a test that steps the clock settles on it, since between its
	// receive and its timer's Stop the goroutine looks exactly like one
	// still waiting.
	leaseWakes atomic.Int32

	mu sync.Mutex
	// registered: the Node exists, with UID uid, as far as nodelet knows.
	registered bool
	uid        types.UID
	// known is the Node as the API last returned it to nodelet (create,
	// get, patch); local the last Node computed before registration.
	known, local *v1.Node

	// apiUnreachable is set when a lease renewal failed: while the API
	// server was away the node lifecycle controller may have marked the
	// Node Unknown, and the informer's copy (which reconnects with
	// back-off) may not show it yet; the next status is computed over
	// the API server's own Node, so that a Node marked Unknown is
	// reported Ready again at once, as the kubelet's GET each update does.
	apiUnreachable atomic.Bool

	// Owned by the status goroutine.
	rt          runtimeState
	started     time.Time
	nextSync    time.Time
	lastReport  time.Time
	reportDelay time.Duration
	fastDone    bool
	refetch     bool
	// directUntil: until then every status sync reads the Node from the
	// API server, not the informer's copy (see original).
	directUntil time.Time
	backoff     backoff
	failures    int
	rebootSeen  bool
	unschedul   bool

	// Owned by the lease goroutine.
	lease         *coordinationv1.Lease
	leaseBackoff  backoff
	leaseFailures int
}

// New checks the options and builds a Manager over client. It starts
// nothing.
func New(client kubernetes.Interface, o Options, d Deps) (*Manager, error) {
	cfg, err := newConfig(o)
	if err != nil {
		return nil, err
	}
	if client == nil || d.Runtime == nil || d.Machine == nil || d.Clock == nil {
		return nil, errors.New("node status: client, runtime, machine and clock are required")
	}
	log := d.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m := &Manager{
		client:       client,
		heartbeat:    d.HeartbeatClient,
		cfg:          cfg,
		runtime:      d.Runtime,
		machine:      d.Machine,
		plegHealthy:  d.PLEGHealthy,
		pressureOf:   d.Pressure,
		volumesInUse: d.VolumesInUse,
		devices:      d.Devices,
		shutdown:     d.ShutdownStatus,
		events:       d.Events,
		podCIDRs:     d.PodCIDRs,
		onFailure:    d.OnRepeatedHeartbeatFailure,
		onLease:      d.OnLeaseFailure,
		clk:          d.Clock,
		log:          log.With("node", cfg.nodeName),
		rand:         d.Rand,
		trigger:      d.Changed,
		leaseWake:    make(chan struct{}, 1),
		rt:           runtimeState{networkErr: cri.ErrNetworkUnknown},
	}
	if m.trigger == nil {
		m.trigger = notify.NewKick()
	}
	if m.rand == nil {
		m.rand = rand.Float64
	}
	if m.heartbeat == nil {
		m.heartbeat = client
	}
	m.store, m.informer = m.newInformer()
	registerMetrics(d.Registerer, cfg.nodeName)
	return m, nil
}

// newInformer watches this Node only (a field selector on its name, as
// the kubelet's node informer): deletion is noticed at once, and Node()
// sees what others change (labels, taints) without a GET.
func (m *Manager) newInformer() (cache.Store, cache.Controller) {
	sel := fields.OneTermEqualSelector("metadata.name", m.cfg.nodeName).String()
	nodes := m.client.CoreV1().Nodes()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = sel
			return nodes.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = sel
			return nodes.Watch(ctx, o)
		},
	}
	logger := logr.FromSlogHandler(m.log.Handler())
	return cache.NewInformerWithOptions(cache.InformerOptions{
		Logger: &logger,
		// The client says whether it streams lists (the API server does,
		// the fake clientset does not).
		ListerWatcher: cache.ToListWatcherWithWatchListSemantics(lw, m.client),
		ObjectType:    &v1.Node{},
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { m.observed(obj) },
			UpdateFunc: func(_, obj any) { m.observed(obj) },
			DeleteFunc: m.deleted,
		},
	})
}

// Run registers the Node and keeps its status and lease until ctx ends.
// It never blocks anything else: a missing API server is retried with
// back-off while pods run.
func (m *Manager) Run(ctx context.Context) {
	m.started = m.clk.Now()
	m.log.Info("node status: starting", "updateFrequency", m.cfg.updateFrequency,
		"reportFrequency", m.cfg.reportFrequency, "leaseDuration", time.Duration(m.cfg.leaseDuration)*time.Second)
	var wg sync.WaitGroup
	wg.Go(func() { m.informer.RunWithContext(klog.NewContext(ctx, logr.FromSlogHandler(m.log.Handler()))) })
	wg.Go(func() { m.runLease(ctx) })
	m.runStatus(ctx)
	wg.Wait()
}

// Trigger asks for the status to be computed and reported now, if it
// changed: the runtime became ready, a pressure was relieved. It never
// blocks.
func (m *Manager) Trigger() { m.trigger.Kick() }

// Node is the Node as nodelet last saw it: the API's (labels, taints and
// allocatable as admission needs them), or before registration the one
// nodelet would register; nil before the first computation. It is shared
// and must not be modified.
func (m *Manager) Node() *v1.Node {
	m.mu.Lock()
	defer m.mu.Unlock()
	if n := m.apiNodeLocked(); n != nil {
		return n
	}
	return m.local
}

// apiNodeLocked is the registered Node: the informer's copy when it is
// of the Node nodelet registered, else the one the API last returned.
func (m *Manager) apiNodeLocked() *v1.Node {
	if !m.registered {
		return nil
	}
	if obj, ok, err := m.store.GetByKey(m.cfg.nodeName); err == nil && ok {
		if n, ok := obj.(*v1.Node); ok && n.UID == m.uid {
			return n
		}
	}
	return m.known
}

// observed follows the informer: a Node of another UID while nodelet
// thinks it registered one was recreated by someone else, and is now
// nodelet's.
func (m *Manager) observed(obj any) {
	n, ok := obj.(*v1.Node)
	if !ok {
		return
	}
	m.mu.Lock()
	changedOwner := m.registered && n.UID != m.uid
	if changedOwner {
		m.uid, m.known = n.UID, n
	}
	m.mu.Unlock()
	if changedOwner {
		m.wakeLease()
	}
}

// deleted: the Node nodelet registered is gone. nodelet registers it
// again at once (the kubelet does not: kubernetes#71398).
func (m *Manager) deleted(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	n, ok := obj.(*v1.Node)
	if !ok {
		return
	}
	if m.forget(n.UID) {
		m.log.Warn("node status: the Node was deleted; registering it again")
		m.Trigger()
	}
}

// forget marks the Node of UID uid gone (any Node when uid is empty) and
// says whether it was the registered one.
func (m *Manager) forget(uid types.UID) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.registered || uid != "" && uid != m.uid {
		return false
	}
	m.registered, m.uid, m.known = false, "", nil
	return true
}

// setRegistered records the Node the API returned at registration.
func (m *Manager) setRegistered(n *v1.Node) {
	m.mu.Lock()
	m.registered, m.uid, m.known = true, n.UID, n
	m.mu.Unlock()
	m.wakeLease()
}

func (m *Manager) setKnown(n *v1.Node) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.registered && n.UID == m.uid {
		m.known = n
	}
}

func (m *Manager) isRegistered() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.registered
}

func (m *Manager) nodeUID() types.UID {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.uid
}

func (m *Manager) wakeLease() {
	m.leaseWakes.Add(1) // before the send: the receiver may take it at once
	select {
	case m.leaseWake <- struct{}{}:
	default:
		m.leaseWakes.Add(-1) // one is pending already, and counted
	}
}

// runStatus is the status goroutine: register, then compute every update
// period and patch when something changed or a report is due. Until the
// Node is first seen Ready it also computes every second, locally, and
// patches as soon as the node is ready (the kubelet's fast status
// update).
func (m *Manager) runStatus(ctx context.Context) {
	forced := false
	for {
		d := m.step(ctx, forced)
		forced = false
		if d <= 0 {
			if ctx.Err() != nil {
				return
			}
			continue
		}
		t := m.clk.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		case <-m.trigger.C():
			t.Stop()
			forced = true
		}
	}
}

// step does what is due now and says how long to wait for the next.
func (m *Manager) step(ctx context.Context, forced bool) time.Duration {
	if !m.isRegistered() {
		if err := m.register(ctx); err != nil {
			if ctx.Err() == nil {
				m.log.Warn("node status: cannot register the Node; retrying", "err", err)
			}
			return m.backoff.next()
		}
		m.backoff.reset()
		// The next sync a period after registration: the status was
		// just computed, and a nodelet that restarts does not report
		// NotReady before PLEG's first relist (the fast update reports
		// Ready sooner when the Node is not).
		m.nextSync = m.clk.Now().Add(m.cfg.updateFrequency)
		forced = false
	}
	now := m.clk.Now()
	switch {
	case forced || !now.Before(m.nextSync):
		if err := m.syncStatus(ctx); err != nil {
			if ctx.Err() == nil {
				m.log.Warn("node status: cannot update the Node's status; retrying", "err", err)
			}
			m.nextSync = now
			return m.backoff.next()
		}
		m.backoff.reset()
		if !m.isRegistered() {
			return 0 // the Node is gone: register it again now
		}
		m.nextSync = now.Add(m.jitter(m.cfg.updateFrequency))
	case m.fast(now):
		m.fastSync(ctx)
	}
	wait := m.nextSync.Sub(now)
	if m.fast(now) {
		wait = min(wait, fastStatusPeriod)
	}
	return wait
}

// fast: the fast status update is on, from start until the Node is seen
// Ready or nodeReadyGracePeriod passed.
func (m *Manager) fast(now time.Time) bool {
	return !m.fastDone && now.Sub(m.started) < nodeReadyGracePeriod
}

// register creates the Node, or reconciles the one that exists (the
// kubelet's tryRegisterWithAPIServer). With registerNode false it only
// looks the Node up.
func (m *Manager) register(ctx context.Context) error {
	f := m.gather(ctx)
	initial, evs := m.cfg.initialNode(f)
	m.mu.Lock()
	m.local = initial
	m.mu.Unlock()
	nodes := m.client.CoreV1().Nodes()
	if !m.cfg.register {
		existing, err := nodes.Get(ctx, m.cfg.nodeName, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("get Node (registerNode is false): %w", err)
		}
		m.setRegistered(existing)
		m.lastReport = time.Time{}
		return nil
	}
	created, err := nodes.Create(ctx, initial, metav1.CreateOptions{})
	if err == nil {
		m.log.Info("node status: registered the Node", "uid", created.UID)
		m.setRegistered(created)
		// The Node was created with its status: that is a report.
		m.lastReport, m.reportDelay = f.Now, m.calculateDelay()
		m.record(evs)
		return nil
	}
	if !apierrors.IsAlreadyExists(err) && !apierrors.IsForbidden(err) {
		return fmt.Errorf("create Node: %w", err)
	}
	existing, getErr := nodes.Get(ctx, m.cfg.nodeName, metav1.GetOptions{})
	if getErr != nil {
		return fmt.Errorf("create Node: %w; get it: %w", err, getErr)
	}
	original := existing.DeepCopy()
	if reconcileExisting(initial, existing) {
		if existing, err = m.patch(ctx, original, existing); err != nil {
			return fmt.Errorf("reconcile the existing Node: %w", err)
		}
	}
	m.log.Info("node status: the Node was already registered", "uid", existing.UID)
	m.setRegistered(existing)
	// Its status is as old as its last report: report at the next sync.
	m.lastReport = time.Time{}
	return nil
}

// original is the Node the next status is computed over: the informer's
// (or the last returned), or after a failed patch the API's own.
func (m *Manager) original(ctx context.Context) (*v1.Node, error) {
	m.mu.Lock()
	n := m.apiNodeLocked()
	m.mu.Unlock()
	unreachable := m.apiUnreachable.Load()
	if n != nil && !m.refetch && !unreachable && !m.clk.Now().Before(m.directUntil) {
		return n, nil
	}
	n, err := m.heartbeat.CoreV1().Nodes().Get(ctx, m.cfg.nodeName, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get Node: %w", err)
	}
	if unreachable {
		// Back after the API server was away: the node lifecycle
		// controller may mark the Node Unknown only at its next pass,
		// after this read, while the informer still reconnects. Read
		// the Node from the API server for a while, as the kubelet
		// does at every update, so that such a mark is answered at the
		// next sync, not at the next report.
		m.directUntil = m.clk.Now().Add(directAfterOutage)
	}
	m.refetch = false
	m.apiUnreachable.Store(false)
	m.setKnown(n)
	return n, nil
}

// syncStatus computes the status and patches it when it changed or a
// report is due (the kubelet's tryUpdateNodeStatus). A patch that finds
// no Node forgets it: the next step registers it again.
func (m *Manager) syncStatus(ctx context.Context) error {
	uid := m.nodeUID()
	original, err := m.original(ctx)
	if apierrors.IsNotFound(err) {
		m.forget(uid)
		return nil
	}
	if err != nil {
		return err
	}
	m.applyPodCIDRs(ctx, original)
	f := m.gather(ctx)
	node, changed, evs := m.cfg.updateNode(original, f)
	// Someone (un)cordoned the node: an event whether or not a report
	// follows.
	m.record(m.schedulableEvent(node))
	if !changed && f.Now.Sub(m.lastReport) < m.cfg.reportFrequency+m.reportDelay {
		return nil
	}
	// A change (or the first report) starts a randomly shifted report
	// period, so that nodes do not report in step; a due report keeps
	// the plain period (the kubelet's calculateDelay).
	if changed || m.lastReport.IsZero() {
		m.reportDelay = m.calculateDelay()
	} else {
		m.reportDelay = 0
	}
	updated, err := m.patch(ctx, original, node)
	if apierrors.IsNotFound(err) {
		m.forget(uid)
		return nil
	}
	if err != nil {
		m.refetch = true
		m.heartbeatFailed(&m.failures)
		return err
	}
	m.failures = 0
	m.lastReport = f.Now
	m.setKnown(updated)
	m.record(evs)
	if isReady(updated) {
		m.fastDone = true
	}
	return nil
}

// fastSync computes the status locally and patches only a Node that
// became ready; it stops once the Node is Ready in the API.
func (m *Manager) fastSync(ctx context.Context) {
	m.mu.Lock()
	original := m.apiNodeLocked()
	m.mu.Unlock()
	if original == nil {
		return
	}
	if isReady(original) {
		m.fastDone = true
		return
	}
	m.applyPodCIDRs(ctx, original)
	f := m.gather(ctx)
	node, changed, evs := m.cfg.updateNode(original, f)
	if !changed || !isReady(node) {
		return
	}
	m.log.Info("node status: fast update: the node became ready")
	updated, err := m.patch(ctx, original, node)
	if err != nil {
		// The regular sync retries with the API's copy.
		m.log.Warn("node status: fast update failed", "err", err)
		return
	}
	m.fastDone = true
	m.lastReport, m.reportDelay = f.Now, m.calculateDelay()
	m.setKnown(updated)
	m.record(evs)
}

// applyPodCIDRs hands the Node's pod CIDRs to the runtime (the kubelet's
// updatePodCIDR from updateNode and fastStatusUpdateOnce): before the
// status is computed, so that the runtime's network readiness it reads
// follows them. Failures are the pod CIDR manager's to log; the next
// computation tries again.
func (m *Manager) applyPodCIDRs(ctx context.Context, node *v1.Node) {
	if m.podCIDRs == nil || len(node.Spec.PodCIDRs) == 0 {
		return
	}
	if err := m.podCIDRs.Apply(ctx, node.Spec.PodCIDRs); err != nil {
		m.log.Debug("node status: pod CIDRs not applied", "err", err)
	}
}

// patch sends the status patch from original to node.
func (m *Manager) patch(ctx context.Context, original, node *v1.Node) (*v1.Node, error) {
	data, err := statusPatch(original, node)
	if err != nil {
		return nil, err
	}
	updated, err := m.heartbeat.CoreV1().Nodes().Patch(ctx, m.cfg.nodeName, types.StrategicMergePatchType, data, metav1.PatchOptions{}, "status")
	if err != nil {
		return nil, fmt.Errorf("patch Node status: %w", err)
	}
	return updated, nil
}

// schedulableEvent is NodeSchedulable or NodeNotSchedulable when
// spec.unschedulable changed since the last computation (the kubelet's
// recordNodeSchedulableEvent).
func (m *Manager) schedulableEvent(node *v1.Node) []Event {
	if node.Spec.Unschedulable == m.unschedul {
		return nil
	}
	m.unschedul = node.Spec.Unschedulable
	reason := "NodeSchedulable"
	if m.unschedul {
		reason = "NodeNotSchedulable"
	}
	return []Event{m.cfg.statusEvent(reason)}
}

// record sends the events of a reported status; the reboot event once.
func (m *Manager) record(evs []Event) {
	if m.events == nil {
		return
	}
	for _, e := range evs {
		if e.Reason == "Rebooted" {
			if m.rebootSeen {
				continue
			}
			m.rebootSeen = true
		}
		m.events.NodeEvent(m.cfg.nodeName, e.Type, e.Reason, e.Message)
	}
}

// heartbeatFailed counts a failed heartbeat (status patch or lease
// renewal); from the second in a row on, the API client's connections
// are dropped, as the kubelet does.
func (m *Manager) heartbeatFailed(n *int) {
	*n++
	if *n > 1 && m.onFailure != nil {
		m.onFailure()
	}
}

// jitter is d plus up to 4% (the kubelet's wait.JitterUntil factor).
func (m *Manager) jitter(d time.Duration) time.Duration {
	return d + time.Duration(m.rand()*jitterFactor*float64(d))
}

// calculateDelay shifts the next report by up to half the report period
// either way.
func (m *Manager) calculateDelay() time.Duration {
	return time.Duration(float64(m.cfg.reportFrequency) * (m.rand() - 0.5))
}

// backoff is the wait between failed attempts: 100 ms doubling to 7 s.
type backoff struct{ d time.Duration }

func (b *backoff) next() time.Duration {
	if b.d == 0 {
		b.d = minBackoff
	} else {
		b.d = min(2*b.d, maxBackoff)
	}
	return b.d
}

func (b *backoff) reset() { b.d = 0 }

// condition is the node's condition of type t, nil when it has none.
func condition(node *v1.Node, t v1.NodeConditionType) *v1.NodeCondition {
	if node == nil {
		return nil
	}
	for i := range node.Status.Conditions {
		if node.Status.Conditions[i].Type == t {
			return &node.Status.Conditions[i]
		}
	}
	return nil
}

// isReady: the node's Ready condition is True.
func isReady(node *v1.Node) bool {
	c := condition(node, v1.NodeReady)
	return c != nil && c.Status == v1.ConditionTrue
}
