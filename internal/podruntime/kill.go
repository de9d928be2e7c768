package podruntime

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// RunningPods returns the UIDs of the pods nodelet has sandboxes for, with
// the namespace/name they were created as.
func (m *Manager) RunningPods(ctx context.Context) (map[types.UID]string, error) {
	sandboxes, err := m.rt.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{
		LabelSelector: map[string]string{LabelManagedBy: managedByValue},
	})
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	pods := map[types.UID]string{}
	for _, s := range sandboxes {
		pods[types.UID(s.Labels[LabelPodUID])] = s.Labels[LabelPodNamespace] + "/" + s.Labels[LabelPodName]
	}
	return pods, nil
}

// KillPod stops every container of the pod with its grace period (SIGTERM,
// then SIGKILL when it runs out), then stops and removes its sandboxes.
// Only objects nodelet created are touched.
func (m *Manager) KillPod(ctx context.Context, uid types.UID) error {
	selector := map[string]string{LabelPodUID: string(uid), LabelManagedBy: managedByValue}
	containers, err := m.rt.ListContainers(ctx, &runtimeapi.ContainerFilter{LabelSelector: selector})
	if err != nil {
		return fmt.Errorf("list containers of pod %s: %w", uid, err)
	}
	var errs []error
	for _, c := range containers {
		grace := 30 * time.Second
		if s, ok := c.Annotations[AnnotationGracePeriod]; ok {
			if n, err := strconv.ParseInt(s, 10, 64); err == nil {
				grace = time.Duration(n) * time.Second
			}
		}
		if err := m.rt.StopContainer(ctx, c.Id, grace); err != nil {
			errs = append(errs, fmt.Errorf("stop container %s: %w", c.Id, err))
			continue
		}
		if err := m.rt.RemoveContainer(ctx, c.Id); err != nil {
			errs = append(errs, fmt.Errorf("remove container %s: %w", c.Id, err))
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	sandboxes, err := m.rt.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{LabelSelector: selector})
	if err != nil {
		return fmt.Errorf("list sandboxes of pod %s: %w", uid, err)
	}
	for _, s := range sandboxes {
		if err := m.rt.StopPodSandbox(ctx, s.Id); err != nil {
			return fmt.Errorf("stop sandbox %s: %w", s.Id, err)
		}
		if err := m.rt.RemovePodSandbox(ctx, s.Id); err != nil {
			return fmt.Errorf("remove sandbox %s: %w", s.Id, err)
		}
	}
	return nil
}
