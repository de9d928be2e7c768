package allocation

import (
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/pipeline/syncloop"
	"github.com/nodelet/nodelet/internal/pure/resize"
	"github.com/nodelet/nodelet/internal/pure/status"
)

// Recorder records an event about a pod (events.Recorder).
type Recorder interface {
	Event(pod *v1.Pod, eventType, reason, message string)
}

// Manager is the kubelet's allocation manager over a Store: it records
// what an admitted pod is allocated, decides each resize asked for
// (resize.Admit), keeps the pod's resize conditions and records the
// kubelet's resize events. Every stage after the sync loop sees a pod
// with its allocated resources (Allocated), never the desired ones.
type Manager struct {
	store   *Store
	clock   clock.PassiveClock
	events  Recorder
	metrics *resizeMetrics

	mu         sync.Mutex
	conditions map[types.UID]resize.Conditions
	// desired is what each pod last asked for (its source's resources),
	// what the next request's kubelet_container_requested_resizes_total
	// operations are counted from.
	desired map[types.UID]resize.Allocation
}

// NewManager manages allocations in store; the kubelet's resize metrics
// go to reg (nil: none).
func NewManager(store *Store, clk clock.PassiveClock, events Recorder, reg prometheus.Registerer) *Manager {
	m := &Manager{store: store, clock: clk, events: events,
		conditions: map[types.UID]resize.Conditions{}, desired: map[types.UID]resize.Allocation{}}
	m.metrics = newResizeMetrics(reg, m.counts)
	return m
}

// Admitted records the allocation of a pod admission let in: its spec as
// it stands, unless the pod already has one (a restarted nodelet keeps
// what it had allocated, and a resize pending then stays pending).
//
// The record is staged (Store.Stage), not written: admission runs on the
// sync loop, and a write there (two fsyncs, 1.5-3 ms on this project's
// test machine) delayed every new pod's start, one pod after the other in
// a batch. The file has the record with the store's next write: at the
// latest the pod's actuated resources, written before its first container
// is created (while its sandbox is made), or housekeeping's next Forget.
// So no container runs with an allocation the file lacks; a nodelet that
// stops before the write admits the pod again from its spec, with which
// nothing has run yet. (The kubelet writes its checkpoint at admission.)
func (m *Manager) Admitted(pod *v1.Pod) {
	if _, ok := m.store.Get(pod.UID); ok {
		return // nothing to stage, and so nothing for the next write
	}
	m.store.Stage(pod.UID, func(r Record, ok bool) Record {
		if ok {
			return r
		}
		return Record{Allocated: resize.AllocationOf(pod)}
	})
}

// Allocated is pod with its allocated resources (pod itself without an
// allocation).
func (m *Manager) Allocated(pod *v1.Pod) *v1.Pod {
	r, ok := m.store.Get(pod.UID)
	if !ok {
		return pod
	}
	out, _ := resize.Allocate(pod, r.Allocated)
	return out
}

// Resize decides the resize pod asks for against others (the other active
// pods, as their sources have them) and node, as the kubelet's
// handlePodResourcesResize: an accepted resize becomes the allocation
// (PodResizePending goes, PodResizeInProgress starts at the pod's
// generation, a ResizeStarted event), a pending one sets PodResizePending
// (an event when its reason or generation changed), none clears it. It
// returns the pod as allocated after the decision.
//
// trigger is what made the decision come now (syncloop.Retry*): a
// deferred resize accepted counts under it in
// kubelet_pod_deferred_accepted_resizes_total. A pod's own update
// (pod_updated) counts the changes it asks for in
// kubelet_container_requested_resizes_total.
func (m *Manager) Resize(pod *v1.Pod, others []*v1.Pod, node resize.Node, trigger string) (*v1.Pod, error) {
	r, ok := m.store.Get(pod.UID)
	if !ok {
		return pod, nil
	}
	if trigger == syncloop.RetryPodUpdated {
		m.requested(pod, r.Allocated)
	}
	allocated := make([]*v1.Pod, 0, len(others))
	for _, o := range others {
		if o.UID != pod.UID {
			allocated = append(allocated, m.Allocated(o))
		}
	}
	d := resize.Admit(pod, r.Allocated, allocated, node)
	now := metav1.NewTime(m.clock.Now())
	switch d.Verdict {
	case resize.Unchanged:
		m.update(pod.UID, func(c resize.Conditions) resize.Conditions { return c.ClearPending() })
		return m.Allocated(pod), nil
	case resize.Accepted:
		err := m.store.Update(pod.UID, func(r Record, _ bool) (Record, error) {
			r.Allocated = resize.AllocationOf(pod)
			return r, nil
		})
		if err != nil {
			return m.Allocated(pod), fmt.Errorf("record the resize of %s/%s: %w", pod.Namespace, pod.Name, err)
		}
		var wasDeferred bool
		m.update(pod.UID, func(c resize.Conditions) resize.Conditions {
			wasDeferred = c.Pending != nil && c.Pending.Reason == v1.PodReasonDeferred
			return c.Start(pod.Generation, now)
		})
		if wasDeferred {
			m.metrics.deferredAccepted.WithLabelValues(trigger).Inc()
		}
		m.events.Event(pod, v1.EventTypeNormal, resize.EventResizeStarted, resize.StartedMessage(pod))
		return pod, nil
	}
	var changed bool
	m.update(pod.UID, func(c resize.Conditions) resize.Conditions {
		c, changed = c.SetPending(d.Verdict.String(), d.Message, pod.Generation, now)
		return c
	})
	if changed {
		reason := resize.EventResizeDeferred
		if d.Verdict == resize.Infeasible {
			reason = resize.EventResizeInfeasible
			m.metrics.infeasible.WithLabelValues(d.Detail).Inc()
		}
		m.events.Event(pod, v1.EventTypeWarning, reason, resize.PendingMessage(pod, d.Verdict.String(), d.Message))
	}
	return m.Allocated(pod), nil
}

// Actuated records what container of pod uid was given (at its creation,
// or by UpdateContainerResources).
func (m *Manager) Actuated(uid types.UID, container string, res resize.Resources) error {
	if r, ok := m.store.Get(uid); ok {
		if cur, ok := r.Actuated[container]; ok && cur == res {
			return nil // a container started again as it was: nothing to write
		}
	}
	return m.store.Update(uid, func(r Record, _ bool) (Record, error) {
		if r.Actuated == nil {
			r.Actuated = map[string]resize.Resources{}
		}
		r.Actuated[container] = res
		return r, nil
	})
}

// Failed records an actuation error on PodResizeInProgress and a
// ResizeError event.
func (m *Manager) Failed(pod *v1.Pod, err error) {
	now := metav1.NewTime(m.clock.Now())
	m.update(pod.UID, func(c resize.Conditions) resize.Conditions { return c.Failed(err.Error(), pod.Generation, now) })
	m.events.Event(pod, v1.EventTypeWarning, resize.EventResizeError, resize.ErrorMessage(pod, err.Error()))
}

// Done records that everything allocated is actuated: PodResizeInProgress
// goes, with a ResizeCompleted event if it was there.
func (m *Manager) Done(pod *v1.Pod) {
	var was bool
	m.update(pod.UID, func(c resize.Conditions) resize.Conditions {
		was = c.InProgress != nil
		return c.Done()
	})
	if was {
		m.events.Event(pod, v1.EventTypeNormal, resize.EventResizeCompleted, resize.CompletedMessage(pod))
	}
}

// Status is what the pod's status reports of its allocation (nil without
// one) and its resize conditions.
func (m *Manager) Status(uid types.UID) (*status.Resources, []v1.PodCondition) {
	m.mu.Lock()
	conds := m.conditions[uid].List()
	m.mu.Unlock()
	r, ok := m.store.Get(uid)
	if !ok {
		return nil, conds
	}
	return &status.Resources{Allocation: r.Allocated, Actuated: r.Actuated}, conds
}

// Forget drops everything of pods keep says no to (terminated, or no
// longer known): the kubelet's RemovePod and RemoveOrphanedPods.
func (m *Manager) Forget(keep func(types.UID) bool) error {
	m.mu.Lock()
	for uid := range m.conditions {
		if !keep(uid) {
			delete(m.conditions, uid)
		}
	}
	for uid := range m.desired {
		if !keep(uid) {
			delete(m.desired, uid)
		}
	}
	m.mu.Unlock()
	return m.store.Retain(keep)
}

// Deferred are the pods whose resize is pending as Deferred, sorted: the
// ones a retry may now accept (syncloop.Allocator).
func (m *Manager) Deferred() []types.UID {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []types.UID
	for uid, c := range m.conditions {
		if c.Pending != nil && c.Pending.Reason == v1.PodReasonDeferred {
			out = append(out, uid)
		}
	}
	slices.Sort(out)
	return out
}

// Actuation observes one actuation of a resize, as the kubelet's
// kubelet_pod_resize_duration_milliseconds{success} does.
func (m *Manager) Actuation(took time.Duration, err error) {
	m.metrics.duration.WithLabelValues(strconv.FormatBool(err == nil)).Observe(float64(took) / float64(time.Millisecond))
}

// requested counts the changes pod asks for, container by container,
// against what it asked for last (after a restart: its allocation).
func (m *Manager) requested(pod *v1.Pod, allocated resize.Allocation) {
	want := resize.AllocationOf(pod)
	m.mu.Lock()
	prev, ok := m.desired[pod.UID]
	m.desired[pod.UID] = want
	m.mu.Unlock()
	if !ok {
		prev = allocated
	}
	for _, op := range resize.Operations(prev, want) {
		m.metrics.requested.WithLabelValues(op.Resource, op.Requirement, op.Operation).Inc()
	}
}

// counts are the pods with a pending resize by reason (deferred,
// infeasible) and those with one in progress.
func (m *Manager) counts() (deferred, infeasible, inProgress int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, c := range m.conditions {
		switch {
		case c.Pending == nil:
		case c.Pending.Reason == v1.PodReasonInfeasible:
			infeasible++
		default:
			deferred++
		}
		if c.InProgress != nil {
			inProgress++
		}
	}
	return deferred, infeasible, inProgress
}

func (m *Manager) update(uid types.UID, fn func(resize.Conditions) resize.Conditions) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := fn(m.conditions[uid])
	if c.Pending == nil && c.InProgress == nil {
		delete(m.conditions, uid)
		return
	}
	m.conditions[uid] = c
}
