package podruntime

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/internal/observed"
	"github.com/nodelet/nodelet/internal/plan"
	"github.com/nodelet/nodelet/internal/status"
)

// DeadlineRemaining is how long the pod may still run under
// activeDeadlineSeconds, counted from its status startTime; ok is false
// when the pod has no deadline or has not started.
func DeadlineRemaining(pod *v1.Pod, st v1.PodStatus, now time.Time) (remaining time.Duration, ok bool) {
	if pod.Spec.ActiveDeadlineSeconds == nil || st.StartTime == nil {
		return 0, false
	}
	deadline := st.StartTime.Add(time.Duration(*pod.Spec.ActiveDeadlineSeconds) * time.Second)
	return deadline.Sub(now), true
}

// deadlineExceeded says why the pod must fail when it ran past its
// activeDeadlineSeconds, as the kubelet's active deadline handler does.
func (m *Manager) deadlineExceeded(pod *v1.Pod) *status.Rejection {
	prev, ok := m.status.Get(pod.UID)
	if !ok || prev.Phase == v1.PodSucceeded || prev.Phase == v1.PodFailed {
		return nil
	}
	if left, ok := DeadlineRemaining(pod, prev, m.clock.Now()); !ok || left > 0 {
		return nil
	}
	return &status.Rejection{Reason: "DeadlineExceeded", Message: "Pod was active on the node longer than the specified deadline"}
}

// failPod stops everything of the pod and publishes it Failed with why.
func (m *Manager) failPod(ctx context.Context, pod *v1.Pod, obs *observed.PodStatus, why *status.Rejection, log *slog.Logger) (v1.PodStatus, error) {
	m.recorder.Event(pod, v1.EventTypeWarning, why.Reason, why.Message)
	log.Warn("pod failed", "reason", why.Reason, "message", why.Message)
	var kills []plan.Kill
	for _, c := range obs.Running() {
		kills = append(kills, plan.Kill{ID: c.ID, Name: c.Name, Reason: why.Reason, Message: why.Message, GracePeriod: gracePeriod(pod)})
	}
	err := m.killContainers(ctx, pod, firstIP(obs), kills, log)
	if err == nil {
		err = m.stopSandboxes(ctx, obs, log)
	}
	if fresh, oerr := m.Observe(ctx, pod.UID, pod.Name, pod.Namespace); oerr == nil {
		obs = fresh
	}
	st := m.publish(pod, obs, nil, why)
	if err != nil {
		return st, fmt.Errorf("stop pod %s/%s after %s: %w", pod.Namespace, pod.Name, why.Reason, err)
	}
	return st, nil
}
