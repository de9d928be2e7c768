package agent

import (
	"context"
	"log/slog"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/metrics"
	"github.com/nodelet/nodelet/internal/podruntime"
	"github.com/nodelet/nodelet/internal/podworker"
	"github.com/nodelet/nodelet/internal/prober"
	"github.com/nodelet/nodelet/internal/syncloop"
	"github.com/nodelet/nodelet/internal/volume"
)

// podSyncer adapts the runtime manager to the pod workers' Syncer.
type podSyncer struct {
	rt    *podruntime.Manager
	clock clock.PassiveClock
	// requeue asks the pod workers to sync a pod again after a delay.
	requeue func(uid types.UID, after time.Duration)
	prober  *prober.Manager
	volumes *volume.Manager
	log     *slog.Logger
	metrics *metrics.Metrics
}

func (s *podSyncer) SyncPod(ctx context.Context, t podworker.UpdateType, pod *v1.Pod) (bool, error) {
	start := s.clock.Now()
	st, err := s.rt.SyncPod(ctx, pod)
	s.metrics.PodWorkerDuration.WithLabelValues(workerOp(t)).Observe(s.clock.Since(start).Seconds())
	terminal := st.Phase == v1.PodSucceeded || st.Phase == v1.PodFailed
	if terminal {
		s.prober.RemovePod(pod)
		return true, nil
	}
	// Sync again when activeDeadlineSeconds runs out, not at the next resync.
	if left, ok := podruntime.DeadlineRemaining(pod, st, s.clock.Now()); ok && s.requeue != nil {
		s.requeue(pod.UID, max(left, 0)+time.Second)
	}
	return false, err
}

func (s *podSyncer) SyncTerminatingPod(ctx context.Context, pod *v1.Pod, grace time.Duration) error {
	return s.rt.SyncTerminatingPod(ctx, pod, grace)
}

func (s *podSyncer) SyncTerminatedPod(ctx context.Context, pod *v1.Pod) error {
	s.prober.RemovePod(pod)
	s.rt.Forget(pod)
	if err := s.volumes.TearDown(ctx, pod.UID); err != nil {
		// Housekeeping retries with the orphans.
		s.log.Warn("tear down volumes", "pod", pod.Namespace+"/"+pod.Name, "err", err)
	}
	return nil
}

// dispatcher adapts the pod workers to the sync loop's Dispatcher; the
// prober learns of every pod the workers get.
type dispatcher struct {
	workers *podworker.Workers
	prober  *prober.Manager
}

func (d dispatcher) Sync(pod *v1.Pod, kind syncloop.SyncKind) {
	if kind == syncloop.SyncCreate || kind == syncloop.SyncUpdate {
		d.prober.AddPod(pod)
	}
	t := podworker.SyncPodSync
	switch kind {
	case syncloop.SyncCreate:
		t = podworker.SyncPodCreate
	case syncloop.SyncUpdate:
		t = podworker.SyncPodUpdate
	}
	d.workers.UpdatePod(podworker.UpdatePodOptions{UpdateType: t, Pod: pod})
}

func (d dispatcher) Kill(pod *v1.Pod) {
	d.workers.UpdatePod(podworker.UpdatePodOptions{UpdateType: podworker.SyncPodKill, Pod: pod,
		KillPodOptions: &podworker.KillPodOptions{Reason: "removed from its source"}})
}

func (d dispatcher) Active(uid types.UID) bool {
	info, ok := d.workers.Info(uid)
	return ok && info.State != podworker.Finished && info.State != podworker.Terminated
}

// workerOp is kubelet_pod_worker_duration_seconds' operation_type.
func workerOp(t podworker.UpdateType) string {
	switch t {
	case podworker.SyncPodCreate:
		return metrics.PodWorkerCreate
	case podworker.SyncPodUpdate:
		return metrics.PodWorkerUpdate
	case podworker.SyncPodKill:
		return metrics.PodWorkerKill
	}
	return metrics.PodWorkerSync
}
