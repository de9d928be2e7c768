// Package statusmanager is beside the pipeline: the one cache of pod
// status (the kubelet's status manager). The runtime manager sets a pod's
// status after every sync, admission sets it for pods it rejects, the API
// server and the CLI read it, and listeners (the prober, which binds its
// workers to the running containers) hear of every change.
//
// A status lives as long as a source wants its pod or the pod workers
// may still run something of it; housekeeping drops the others
// (RemoveOrphans). In cluster mode one consumer (statussync) takes the
// statuses that changed (Changed, TakeChanged) and sends them to the API
// server.
package statusmanager

import (
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/internal/base/metrics"
	"github.com/nodelet/nodelet/internal/pure/status"
)

// Listener hears of every status set, in the order they are set for one
// pod. It must not block.
type Listener interface {
	PodStatusChanged(pod *v1.Pod, st v1.PodStatus)
}

// Manager is the status cache. The zero value is not usable; call New.
type Manager struct {
	log       *slog.Logger
	listeners []Listener

	mu       sync.Mutex
	statuses map[types.UID]v1.PodStatus
	summary  map[types.UID]string
	// seen is, per pod, the runtime objects (sandbox and container IDs)
	// the status was computed from, and whether each was running.
	seen map[types.UID]map[string]bool
	// changed are the pods whose status was set since the last
	// TakeChanged, with that status; wake signals them. Once a consumer
	// takes them (taken), a pod's last status stays here until taken,
	// even after RemoveOrphans: the API server must hear of a pod's end.
	changed map[types.UID]Entry
	// byNode are the pods the node itself stops for good (evicted, or
	// stopped by a node shutdown), with the reason their status gives.
	byNode map[types.UID]status.Rejection
	taken  bool
	wake   chan struct{}
}

// Entry is a pod and its status.
type Entry struct {
	Pod    *v1.Pod
	Status v1.PodStatus
}

// New returns an empty Manager that logs each change of a pod's status in
// one line and tells listeners.
func New(log *slog.Logger, listeners ...Listener) *Manager {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Manager{log: log, listeners: listeners, statuses: map[types.UID]v1.PodStatus{}, summary: map[types.UID]string{},
		seen: map[types.UID]map[string]bool{}, changed: map[types.UID]Entry{}, byNode: map[types.UID]status.Rejection{}, wake: make(chan struct{}, 1)}
}

// SetSeen records the runtime objects the pod's next status is computed
// from: sandbox and container IDs, and whether each runs (or is ready).
func (m *Manager) SetSeen(uid types.UID, running map[string]bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.seen[uid] = running
}

// Saw reports whether the pod's status was computed from the runtime
// object id, and whether that object was running then: a lifecycle event
// that says no more than that brings nothing new.
func (m *Manager) Saw(uid types.UID, id string) (running, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	running, ok = m.seen[uid][id]
	return running, ok
}

// SetPodStatus records st as the pod's status.
func (m *Manager) SetPodStatus(pod *v1.Pod, st v1.PodStatus) {
	sum := summarize(st)
	m.mu.Lock()
	m.statuses[pod.UID] = st
	changed := m.summary[pod.UID] != sum
	m.summary[pod.UID] = sum
	m.changed[pod.UID] = Entry{Pod: pod, Status: st}
	m.mu.Unlock()
	select {
	case m.wake <- struct{}{}:
	default:
	}
	if changed {
		m.log.Info("pod status", "pod", pod.Namespace+"/"+pod.Name, "phase", st.Phase, "reason", st.Reason,
			"ready", isReady(st), "ip", st.PodIP, "containers", containerSummary(st))
	}
	for _, l := range m.listeners {
		l.PodStatusChanged(pod, st)
	}
}

// Changed signals when a status was set since the last TakeChanged.
func (m *Manager) Changed() <-chan struct{} { return m.wake }

// TakeChanged returns the pods whose status was set since the last call,
// with their latest status, and forgets them.
func (m *Manager) TakeChanged() []Entry {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.taken = true
	out := make([]Entry, 0, len(m.changed))
	for _, e := range m.changed {
		out = append(out, Entry{Pod: e.Pod, Status: *e.Status.DeepCopy()})
	}
	clear(m.changed)
	sort.Slice(out, func(i, j int) bool { return out[i].Pod.UID < out[j].Pod.UID })
	return out
}

// Reject records an admission rejection: the pod is Failed with the
// kubelet's reason and nothing of it runs.
func (m *Manager) Reject(pod *v1.Pod, reason, message string) {
	m.SetPodStatus(pod, status.Generate(status.Facts{Pod: pod, Rejected: &status.Rejection{Reason: reason, Message: message}}))
}

// SetStoppedByNode records that the node stops the pod for good (the
// eviction manager, a node shutdown): every status computed for it from
// now on is Failed with this reason and message, and has a
// DisruptionTarget condition (status.Facts.ByNode). The first reason
// given stays.
func (m *Manager) SetStoppedByNode(uid types.UID, reason, message string) {
	m.StopByNode(uid, status.Rejection{Reason: reason, Message: message})
}

// StopByNode is SetStoppedByNode with the whole rejection: with
// NoDisruptionTarget, the statuses get no DisruptionTarget condition.
func (m *Manager) StopByNode(uid types.UID, r status.Rejection) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.byNode[uid]; !ok {
		m.byNode[uid] = r
	}
}

// StoppedByNode returns why the node stops the pod, nil if it does not.
func (m *Manager) StoppedByNode(uid types.UID) *status.Rejection {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.byNode[uid]
	if !ok {
		return nil
	}
	return &r
}

// Get returns the latest status of a pod.
func (m *Manager) Get(uid types.UID) (v1.PodStatus, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	st, ok := m.statuses[uid]
	return st, ok
}

// RemoveOrphans drops the status of every pod keep does not keep. keep is
// asked without the lock held.
func (m *Manager) RemoveOrphans(keep func(types.UID) bool) {
	m.mu.Lock()
	uids := make([]types.UID, 0, len(m.statuses))
	for uid := range m.statuses {
		uids = append(uids, uid)
	}
	m.mu.Unlock()
	for _, uid := range uids {
		if !keep(uid) {
			m.mu.Lock()
			delete(m.statuses, uid)
			delete(m.summary, uid)
			delete(m.seen, uid)
			delete(m.byNode, uid)
			if !m.taken {
				delete(m.changed, uid)
			}
			m.mu.Unlock()
		}
	}
}

// Running counts pods and containers by state for kubelet_running_pods
// and kubelet_running_containers.
func (m *Manager) Running() (pods int, containers map[string]int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	containers = map[string]int{}
	for _, st := range m.statuses {
		if st.Phase == v1.PodRunning {
			pods++
		}
		for _, list := range [][]v1.ContainerStatus{st.InitContainerStatuses, st.ContainerStatuses, st.EphemeralContainerStatuses} {
			for _, c := range list {
				switch {
				case c.State.Running != nil:
					containers[metrics.ContainerStateRunning]++
				case c.State.Terminated != nil:
					containers[metrics.ContainerStateExited]++
				case c.State.Waiting != nil && c.ContainerID != "":
					containers[metrics.ContainerStateCreated]++
				}
			}
		}
	}
	return pods, containers
}

func isReady(st v1.PodStatus) bool {
	for _, c := range st.Conditions {
		if c.Type == v1.PodReady {
			return c.Status == v1.ConditionTrue
		}
	}
	return false
}

func summarize(st v1.PodStatus) string {
	return fmt.Sprintf("%s|%s|%v|%s|%s", st.Phase, st.Reason, isReady(st), st.PodIP, containerSummary(st))
}

// containerSummary is "name=state(reason)/restarts" per container.
func containerSummary(st v1.PodStatus) string {
	var parts []string
	for _, list := range [][]v1.ContainerStatus{st.InitContainerStatuses, st.ContainerStatuses, st.EphemeralContainerStatuses} {
		for _, c := range list {
			state := "unknown"
			switch {
			case c.State.Running != nil:
				state = "running"
			case c.State.Terminated != nil:
				state = "terminated(" + c.State.Terminated.Reason + ")"
			case c.State.Waiting != nil:
				state = "waiting(" + c.State.Waiting.Reason + ")"
			}
			parts = append(parts, fmt.Sprintf("%s=%s/%d", c.Name, state, c.RestartCount))
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}
