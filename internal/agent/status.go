package agent

import (
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/metrics"
	"github.com/nodelet/nodelet/internal/podsource"
	"github.com/nodelet/nodelet/internal/status"
)

// statusStore keeps the latest status of every pod and logs each change
// in one line, so that a user (and the e2e tests) can follow pods until
// the HTTP API serves them.
type statusStore struct {
	log *slog.Logger
	// metrics and clock, when set, observe kubelet_pod_start_duration_seconds.
	metrics *metrics.Metrics
	clock   clock.PassiveClock

	mu       sync.Mutex
	statuses map[types.UID]v1.PodStatus
	summary  map[types.UID]string
}

func newStatusStore(log *slog.Logger) *statusStore {
	return &statusStore{log: log, statuses: map[types.UID]v1.PodStatus{}, summary: map[types.UID]string{}}
}

// SetPodStatus records st and logs it when its summary changed.
func (s *statusStore) SetPodStatus(pod *v1.Pod, st v1.PodStatus) {
	sum := summarize(st)
	s.mu.Lock()
	prev, had := s.statuses[pod.UID]
	s.statuses[pod.UID] = st
	changed := s.summary[pod.UID] != sum
	s.summary[pod.UID] = sum
	s.mu.Unlock()
	if st.Phase == v1.PodRunning && (!had || prev.Phase != v1.PodRunning) {
		s.observeStart(pod)
	}
	if changed {
		s.log.Info("pod status", "pod", pod.Namespace+"/"+pod.Name, "phase", st.Phase, "reason", st.Reason,
			"ready", isReady(st), "ip", st.PodIP, "containers", containerSummary(st))
	}
}

// observeStart records how long the pod took from first seen (its
// config.seen annotation) to running.
func (s *statusStore) observeStart(pod *v1.Pod) {
	if s.metrics == nil || s.clock == nil {
		return
	}
	seen, err := time.Parse(time.RFC3339Nano, pod.Annotations[podsource.AnnotationConfigSeen])
	if err != nil {
		return
	}
	s.metrics.PodStartDuration.Observe(s.clock.Since(seen).Seconds())
}

// running counts pods and containers by state for kubelet_running_*.
func (s *statusStore) running() (int, map[string]int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	pods, containers := 0, map[string]int{}
	for _, st := range s.statuses {
		if st.Phase == v1.PodRunning {
			pods++
		}
		for _, list := range [][]v1.ContainerStatus{st.InitContainerStatuses, st.ContainerStatuses} {
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

// Reject records an admission rejection: the pod is Failed with the
// kubelet's reason and nothing of it runs.
func (s *statusStore) Reject(pod *v1.Pod, reason, message string) {
	s.SetPodStatus(pod, status.Generate(status.Facts{Pod: pod, Rejected: &status.Rejection{Reason: reason, Message: message}}))
}

// Get returns the latest status of a pod.
func (s *statusStore) Get(uid types.UID) (v1.PodStatus, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.statuses[uid]
	return st, ok
}

// Forget drops a pod that is gone.
func (s *statusStore) Forget(uid types.UID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.statuses, uid)
	delete(s.summary, uid)
}

// ForgetGone drops the status of every pod keep does not keep. Nothing
// else drops the status of a pod removed from its source, so without this
// a removed pod would go on being served, and counted as running, with its
// last status.
func (s *statusStore) ForgetGone(keep func(types.UID) bool) {
	s.mu.Lock()
	uids := make([]types.UID, 0, len(s.statuses))
	for uid := range s.statuses {
		uids = append(uids, uid)
	}
	s.mu.Unlock()
	for _, uid := range uids { // keep is asked without holding s.mu
		if !keep(uid) {
			s.Forget(uid)
		}
	}
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

// containerSummary is "name=state(reason) restarts=N" per container.
func containerSummary(st v1.PodStatus) string {
	var parts []string
	for _, list := range [][]v1.ContainerStatus{st.InitContainerStatuses, st.ContainerStatuses} {
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
