package podruntime

import (
	"context"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/internal/pipeline/podworker"
	"github.com/nodelet/nodelet/internal/pure/observed"
	"github.com/nodelet/nodelet/internal/pure/plan"
	"github.com/nodelet/nodelet/internal/pure/podsetup"
)

// SyncTerminatingPod stops every running container of the pod in parallel
// with the grace period (SIGTERM, SIGKILL when it runs out), then its
// sandboxes, and publishes the pod's final status: its containers
// terminated, the phase Succeeded or Failed (a terminal pod keeps its
// phase), as the kubelet's syncTerminatingPod does before the pod is
// deleted from the API; its probes' results (req.Setup) still count.
func (m *Manager) SyncTerminatingPod(ctx context.Context, req podworker.TerminatingRequest) error {
	pod, grace := req.Pod, req.GracePeriod
	return m.killPod(ctx, pod, pod.UID, pod.Name, pod.Namespace, &grace, req.Setup.Probes)
}

// KillPod stops a pod nodelet has no spec for (an orphan found in the
// runtime), giving each container the grace period recorded on it.
func (m *Manager) KillPod(ctx context.Context, uid types.UID, name, namespace string) error {
	// An orphan: no worker will ask about it again.
	defer m.observed.drop(uid)
	return m.killPod(ctx, nil, uid, name, namespace, nil, nil)
}

// killPod stops the pod's running containers (with pod's hooks and order
// when its spec is known), then its sandboxes, and publishes the pod's
// status with its probes' results.
func (m *Manager) killPod(ctx context.Context, pod *v1.Pod, uid types.UID, name, namespace string, grace *time.Duration,
	probes podsetup.ProbeResults) error {
	log := m.log.With("pod", namespace+"/"+name, "podUID", uid)
	obs, err := m.Observe(ctx, uid, name, namespace)
	if err != nil {
		return err
	}
	var kills []plan.Kill
	for _, c := range obs.Running() {
		g := c.GracePeriod
		if grace != nil {
			g = *grace
		}
		kills = append(kills, plan.Kill{ID: c.ID, Name: c.Name, Reason: "Killing", Message: "stopping pod", GracePeriod: g})
	}
	err = m.killContainers(ctx, pod, firstIP(obs), kills, log)
	if err == nil {
		err = m.stopSandboxes(ctx, obs, log)
	}
	if len(kills) > 0 || len(obs.Sandboxes) > 0 {
		m.observed.touch(uid, m.clock.Now())
	}
	if err != nil {
		return err
	}
	if pod == nil {
		return nil
	}
	final := obs
	if len(obs.Sandboxes) == 0 && len(obs.Containers) == 0 {
		// Nothing ran. A rejected pod's status stays as it is; a pod that
		// never got its sandbox (volumes it waited for, say) is terminal
		// now, as the kubelet's TerminatePod makes it.
		if prev, ok := m.status.Get(pod.UID); ok && (prev.Phase == v1.PodFailed || prev.Phase == v1.PodSucceeded) {
			return nil
		}
	} else if final, err = m.Observe(ctx, uid, name, namespace); err != nil {
		return err
	}
	m.publish(ctx, pod, probes, final, nil, nil, true)
	return nil
}

// RunningPods returns the pods nodelet has objects for in the runtime, with
// the namespace/name they were created as.
func (m *Manager) RunningPods(ctx context.Context) (map[types.UID]*observed.PodStatus, error) {
	pods, err := m.ListPods(ctx)
	if err != nil {
		return nil, fmt.Errorf("list pods in the runtime: %w", err)
	}
	return pods, nil
}

func firstIP(obs *observed.PodStatus) string {
	if len(obs.IPs) == 0 {
		return ""
	}
	return obs.IPs[0]
}
