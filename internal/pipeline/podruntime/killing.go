package podruntime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/internal/pure/plan"
	"github.com/nodelet/nodelet/internal/pure/podspec"
)

// minGracePeriod is the least a container gets after its preStop hook, as
// the kubelet's minimumGracePeriodInSeconds.
const minGracePeriod = 2 * time.Second

// killContainers stops containers as the kubelet does: every container's
// preStop hook starts at once, and the hook's time counts against its grace
// period; regular containers are then stopped as their hooks finish,
// sidecars (init containers with restartPolicy Always) only once every
// regular container and every later sidecar has stopped, so that they
// outlive what they serve, or once their grace period is spent. pod may be
// nil for pods nodelet no longer has a spec for.
func (m *Manager) killContainers(ctx context.Context, pod *v1.Pod, podIP string, kills []plan.Kill, log *slog.Logger) error {
	regular, sidecars := splitKills(pod, kills)
	all := append(append([]plan.Kill{}, regular...), sidecars...)
	done := make([]chan struct{}, len(all))
	for i := range done {
		done[i] = make(chan struct{})
	}
	errs := make([]error, len(all))
	var wg sync.WaitGroup
	for i, k := range all {
		// Sidecar i (in reverse spec order) waits for the regular
		// containers and the sidecars stopped before it.
		var after []chan struct{}
		if i >= len(regular) {
			after = done[:i]
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(done[i])
			errs[i] = m.killContainer(ctx, pod, podIP, k, after, log)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// splitKills separates sidecar kills (in reverse spec order) from the rest.
func splitKills(pod *v1.Pod, kills []plan.Kill) (regular, sidecars []plan.Kill) {
	order := map[string]int{}
	if pod != nil {
		for i, c := range pod.Spec.InitContainers {
			if podspec.IsSidecar(&c) {
				order[c.Name] = i + 1
			}
		}
	}
	for _, k := range kills {
		if order[k.Name] > 0 {
			sidecars = append(sidecars, k)
		} else {
			regular = append(regular, k)
		}
	}
	sortByOrder(sidecars, order)
	return regular, sidecars
}

// sortByOrder sorts kills by descending spec position: the last sidecar
// started is the first stopped.
func sortByOrder(kills []plan.Kill, order map[string]int) {
	for i := 1; i < len(kills); i++ {
		for j := i; j > 0 && order[kills[j].Name] > order[kills[j-1].Name]; j-- {
			kills[j], kills[j-1] = kills[j-1], kills[j]
		}
	}
}

// killContainer runs the container's preStop hook, waits for the
// containers in after to stop (for at most what is left of its grace
// period), then stops it with what is left of its grace period, at least
// minGracePeriod.
func (m *Manager) killContainer(ctx context.Context, pod *v1.Pod, podIP string, k plan.Kill, after []chan struct{}, log *slog.Logger) error {
	spec := specContainer(pod, k.Name)
	if pod != nil {
		m.recorder.Event(pod, v1.EventTypeNormal, "Killing", killMessage(k))
	}
	start := m.clock.Now()
	if spec != nil && spec.Lifecycle != nil && spec.Lifecycle.PreStop != nil {
		// The stop waits for the hook for at most the grace period; a
		// hook still running then goes on until the container is killed
		// (as the kubelet's), bounded a little past that.
		hookCtx, cancel := context.WithTimeout(ctx, k.GracePeriod+minGracePeriod+5*time.Second)
		hookDone := make(chan struct{})
		go func() {
			defer cancel()
			defer close(hookDone)
			if err := m.runHook(hookCtx, spec.Lifecycle.PreStop, k.ID, spec, podIP); err != nil && hookCtx.Err() == nil {
				msg := fmt.Sprintf("PreStopHook failed: %v", err)
				m.recorder.Event(pod, v1.EventTypeWarning, "FailedPreStopHook", msg)
				log.Warn("preStop hook failed", "container", k.Name, "err", err)
			}
		}()
		wait := m.clock.NewTimer(k.GracePeriod)
		select {
		case <-hookDone:
		case <-wait.C():
		case <-ctx.Done():
		}
		wait.Stop()
	}
	if len(after) > 0 {
		turn := m.clock.NewTimer(max(k.GracePeriod-m.clock.Since(start), 0))
	wait:
		for _, ch := range after {
			select {
			case <-ch:
			case <-turn.C():
				break wait
			case <-ctx.Done():
				break wait
			}
		}
		turn.Stop()
	}
	grace := max(k.GracePeriod-m.clock.Since(start), minGracePeriod)
	log.Info("killing container", "container", k.Name, "containerID", k.ID, "reason", k.Reason, "message", k.Message, "gracePeriod", grace)
	if err := m.rt.StopContainer(ctx, k.ID, grace); err != nil {
		return fmt.Errorf("stop container %q (%s): %w", k.Name, k.ID, err)
	}
	return nil
}

// specContainer finds a container of the pod's spec by name.
func specContainer(pod *v1.Pod, name string) *v1.Container {
	if pod == nil {
		return nil
	}
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == name {
			return &pod.Spec.InitContainers[i]
		}
	}
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == name {
			return &pod.Spec.Containers[i]
		}
	}
	return nil
}

// killMessage is the kubelet's Killing event message for a kill reason.
func killMessage(k plan.Kill) string {
	switch k.Reason {
	case plan.ReasonLivenessProbe:
		return fmt.Sprintf("Container %s failed liveness probe, will be restarted", k.Name)
	case plan.ReasonStartupProbe:
		return fmt.Sprintf("Container %s failed startup probe, will be restarted", k.Name)
	case plan.ReasonSpecChanged:
		return fmt.Sprintf("Container %s definition changed, will be restarted", k.Name)
	}
	return "Stopping container " + k.Name
}
