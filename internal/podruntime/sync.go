package podruntime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/observed"
	"github.com/nodelet/nodelet/internal/plan"
	"github.com/nodelet/nodelet/internal/status"
)

// SyncPod brings one pod's runtime state to its spec:
//
//  1. observe the pod in the runtime (Observe);
//  2. plan (plan.Compute, pure);
//  3. execute the actions in plan.Actions' order (execute);
//  4. observe again and publish the status computed from the facts.
//
// The returned status is terminal (Succeeded/Failed) when the pod will
// never run again. An error means part of the plan failed (a pull, a
// create); the pod worker retries.
func (m *Manager) SyncPod(ctx context.Context, pod *v1.Pod) (v1.PodStatus, error) {
	log := m.log.With("pod", pod.Namespace+"/"+pod.Name, "podUID", pod.UID)
	obs, err := m.Observe(ctx, pod.UID, pod.Name, pod.Namespace)
	if err != nil {
		return v1.PodStatus{}, err
	}
	actions := plan.Compute(plan.Input{
		Pod: pod, Status: obs, Now: m.clock.Now(),
		LivenessFailed: m.livenessFailures(obs), StartupDone: m.startupDone(obs),
	})
	for _, r := range actions.Reasons {
		log.Debug("plan", "reason", r)
	}
	waiting := map[string]plan.Waiting{}
	for name, w := range actions.Waiting {
		waiting[name] = w
	}
	execErr := m.execute(ctx, pod, obs, actions, waiting, log)
	if fresh, err := m.Observe(ctx, pod.UID, pod.Name, pod.Namespace); err == nil {
		obs = fresh
	}
	var failed *status.Rejection
	if actions.PodFailed {
		failed = &status.Rejection{Reason: "InitContainerFailed", Message: "an init container failed and the pod's restartPolicy is Never"}
	}
	st := m.publish(pod, obs, waiting, failed)
	return st, execErr
}

// execute carries out actions; start failures are recorded in waiting with
// the kubelet's reason.
func (m *Manager) execute(ctx context.Context, pod *v1.Pod, obs *observed.PodStatus, actions plan.Actions, waiting map[string]plan.Waiting, log *slog.Logger) error {
	// Step 1-2: kills.
	if err := m.killContainers(ctx, actions.ContainersToKill, log); err != nil {
		return err
	}
	if actions.KillPod {
		if err := m.stopSandboxes(ctx, obs, log); err != nil {
			return err
		}
	}
	if actions.PodFailed {
		return nil
	}
	// Step 3: sandbox.
	sandboxCfg := sandboxConfig(pod, m.opts.PodLogsDir, actions.Attempt)
	sandboxID := actions.SandboxID
	if actions.CreateSandbox {
		id, err := m.rt.RunPodSandbox(ctx, sandboxCfg, "")
		if err != nil {
			return fmt.Errorf("create sandbox of pod %s/%s: %w", pod.Namespace, pod.Name, err)
		}
		sandboxID = id
		log.Info("sandbox created", "sandboxID", id, "attempt", actions.Attempt)
	}
	if sandboxID == "" {
		return nil
	}
	// Step 4: init containers, in order; the first failure stops the rest.
	for _, s := range actions.InitContainersToStart {
		if err := m.startContainer(ctx, pod, &pod.Spec.InitContainers[s.Index], s, sandboxID, sandboxCfg, waiting, log); err != nil {
			return err
		}
	}
	// Step 5: containers; one failing does not hold back the others.
	var errs []error
	for _, s := range actions.ContainersToStart {
		errs = append(errs, m.startContainer(ctx, pod, &pod.Spec.Containers[s.Index], s, sandboxID, sandboxCfg, waiting, log))
	}
	return errors.Join(errs...)
}

// startContainer pulls, creates and starts one container.
func (m *Manager) startContainer(ctx context.Context, pod *v1.Pod, c *v1.Container, s plan.Start, sandboxID string,
	sandboxCfg *runtimeapi.PodSandboxConfig, waiting map[string]plan.Waiting, log *slog.Logger) error {
	imageRef, err := m.pulls.ensure(ctx, c, sandboxCfg)
	var pe *pullError
	if errors.As(err, &pe) {
		waiting[c.Name] = pe.waiting
		log.Warn("image not available", "container", c.Name, "reason", pe.waiting.Reason, "message", pe.waiting.Message)
		return fmt.Errorf("container %q: %w", c.Name, err)
	}
	if err != nil {
		return fmt.Errorf("container %q: %w", c.Name, err)
	}
	cfg := containerConfig(pod, c, imageRef, s.RestartCount, s.BackoffStep)
	id, err := m.rt.CreateContainer(ctx, sandboxID, cfg, sandboxCfg)
	if err != nil {
		waiting[c.Name] = plan.Waiting{Reason: "CreateContainerError", Message: err.Error()}
		return fmt.Errorf("create container %q: %w", c.Name, err)
	}
	if err := m.rt.StartContainer(ctx, id); err != nil {
		waiting[c.Name] = plan.Waiting{Reason: "RunContainerError", Message: err.Error()}
		return fmt.Errorf("start container %q: %w", c.Name, err)
	}
	log.Info("container started", "container", c.Name, "containerID", id, "restartCount", s.RestartCount, "reason", s.Reason)
	return nil
}

// killContainers stops containers in parallel, each with its grace period.
func (m *Manager) killContainers(ctx context.Context, kills []plan.Kill, log *slog.Logger) error {
	errs := make([]error, len(kills))
	var wg sync.WaitGroup
	for i, k := range kills {
		wg.Add(1)
		go func() {
			defer wg.Done()
			log.Info("killing container", "container", k.Name, "containerID", k.ID, "reason", k.Reason, "message", k.Message, "gracePeriod", k.GracePeriod)
			if err := m.rt.StopContainer(ctx, k.ID, k.GracePeriod); err != nil {
				errs[i] = fmt.Errorf("stop container %q (%s): %w", k.Name, k.ID, err)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// stopSandboxes stops every ready sandbox of the pod.
func (m *Manager) stopSandboxes(ctx context.Context, obs *observed.PodStatus, log *slog.Logger) error {
	for _, s := range obs.Sandboxes {
		if s.State != observed.SandboxReady {
			continue
		}
		if err := m.rt.StopPodSandbox(ctx, s.ID); err != nil {
			return fmt.Errorf("stop sandbox %s: %w", s.ID, err)
		}
		log.Info("sandbox stopped", "sandboxID", s.ID)
	}
	return nil
}

func (m *Manager) livenessFailures(obs *observed.PodStatus) map[string]plan.ProbeFailure {
	if m.probes == nil {
		return nil
	}
	out := map[string]plan.ProbeFailure{}
	for _, c := range obs.Running() {
		if failed, probe, msg := m.probes.LivenessFailed(c.ID); failed {
			out[c.ID] = plan.ProbeFailure{Probe: probe, Message: msg}
		}
	}
	return out
}

func (m *Manager) startupDone(obs *observed.PodStatus) map[string]bool {
	out := map[string]bool{}
	for _, c := range obs.Running() {
		out[c.ID] = m.probes == nil || m.probes.StartupDone(c.ID)
	}
	return out
}

// publish computes the pod's status from the facts and hands it on.
func (m *Manager) publish(pod *v1.Pod, obs *observed.PodStatus, waiting map[string]plan.Waiting, failed *status.Rejection) v1.PodStatus {
	ready, started := map[string]bool{}, map[string]bool{}
	for _, c := range obs.Running() {
		started[c.ID] = m.probes == nil || m.probes.StartupDone(c.ID)
		ready[c.ID] = true
		if m.probes != nil {
			if r, known := m.probes.Ready(c.ID); known {
				ready[c.ID] = r
			}
		}
	}
	m.mu.Lock()
	prev := m.previous[pod.UID]
	m.mu.Unlock()
	st := status.Generate(status.Facts{
		Pod: pod, Observed: obs, Waiting: waiting, Ready: ready, Started: started,
		HostIP: m.opts.HostIP, Now: m.clock.Now(), Previous: prev, Failed: failed,
		RuntimeName: m.opts.RuntimeName,
	})
	m.mu.Lock()
	m.previous[pod.UID] = &st
	m.mu.Unlock()
	if m.status != nil {
		m.status.SetPodStatus(pod, st)
	}
	return st
}

// Forget drops what the manager remembers of a pod that is gone.
func (m *Manager) Forget(pod *v1.Pod) {
	m.mu.Lock()
	delete(m.previous, pod.UID)
	m.mu.Unlock()
}
