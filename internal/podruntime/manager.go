// Package podruntime is the fifth stage of the pipeline: the runtime
// manager. For one pod it observes what the runtime has (through CRI), works
// out what is missing, and makes it so: sandbox, image pulls, containers.
//
// This is the minimal path from a manifest to running containers; the pure
// planner (restart policies, init containers, back-off, spec changes) grows
// here as plan.Compute.
package podruntime

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Runtime is what the manager needs of the CRI client.
type Runtime interface {
	RunPodSandbox(ctx context.Context, cfg *runtimeapi.PodSandboxConfig, handler string) (string, error)
	StopPodSandbox(ctx context.Context, id string) error
	RemovePodSandbox(ctx context.Context, id string) error
	ListPodSandbox(ctx context.Context, filter *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error)
	CreateContainer(ctx context.Context, sandboxID string, cfg *runtimeapi.ContainerConfig, sandboxCfg *runtimeapi.PodSandboxConfig) (string, error)
	StartContainer(ctx context.Context, id string) error
	StopContainer(ctx context.Context, id string, grace time.Duration) error
	RemoveContainer(ctx context.Context, id string) error
	ListContainers(ctx context.Context, filter *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error)
	ImageStatus(ctx context.Context, image *runtimeapi.ImageSpec) (*runtimeapi.ImageStatusResponse, error)
	PullImage(ctx context.Context, image *runtimeapi.ImageSpec, auth *runtimeapi.AuthConfig, sandboxCfg *runtimeapi.PodSandboxConfig) (string, error)
}

// Manager creates and removes pods in the runtime.
type Manager struct {
	rt      Runtime
	logsDir string
	log     *slog.Logger
}

// New returns a Manager that writes container logs under podLogsDir
// (normally /var/log/pods).
func New(rt Runtime, podLogsDir string, log *slog.Logger) *Manager {
	return &Manager{rt: rt, logsDir: podLogsDir, log: log}
}

// SyncPod makes sure pod has a ready sandbox and that each of its containers
// exists, pulling images as needed. Containers that already exist are left
// alone, so calling it again (or after a nodelet restart) changes nothing.
func (m *Manager) SyncPod(ctx context.Context, pod *v1.Pod) error {
	log := m.log.With("pod", pod.Namespace+"/"+pod.Name, "podUID", pod.UID)
	sandboxCfg := sandboxConfig(pod, m.logsDir)
	sandboxID, err := m.ensureSandbox(ctx, pod, sandboxCfg, log)
	if err != nil {
		return err
	}
	existing, err := m.rt.ListContainers(ctx, &runtimeapi.ContainerFilter{PodSandboxId: sandboxID})
	if err != nil {
		return fmt.Errorf("list containers of pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	have := map[string]bool{}
	for _, c := range existing {
		have[c.GetMetadata().GetName()] = true
	}
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		if have[c.Name] {
			continue
		}
		if err := m.startContainer(ctx, pod, c, sandboxID, sandboxCfg, log); err != nil {
			return err
		}
	}
	return nil
}

// ensureSandbox returns the pod's ready sandbox, creating one if it has none.
func (m *Manager) ensureSandbox(ctx context.Context, pod *v1.Pod, cfg *runtimeapi.PodSandboxConfig, log *slog.Logger) (string, error) {
	sandboxes, err := m.rt.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{
		State:         &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY},
		LabelSelector: map[string]string{LabelPodUID: string(pod.UID), LabelManagedBy: managedByValue},
	})
	if err != nil {
		return "", fmt.Errorf("list sandboxes of pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	if len(sandboxes) > 0 {
		return newest(sandboxes).Id, nil
	}
	id, err := m.rt.RunPodSandbox(ctx, cfg, "")
	if err != nil {
		return "", fmt.Errorf("run sandbox of pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	log.Info("sandbox created", "sandboxID", id)
	return id, nil
}

func newest(sandboxes []*runtimeapi.PodSandbox) *runtimeapi.PodSandbox {
	best := sandboxes[0]
	for _, s := range sandboxes[1:] {
		if s.CreatedAt > best.CreatedAt {
			best = s
		}
	}
	return best
}

// startContainer pulls the image when the pull policy asks for it, then
// creates and starts the container.
func (m *Manager) startContainer(ctx context.Context, pod *v1.Pod, c *v1.Container, sandboxID string, sandboxCfg *runtimeapi.PodSandboxConfig, log *slog.Logger) error {
	imageRef, err := m.ensureImage(ctx, c, sandboxCfg)
	if err != nil {
		return fmt.Errorf("container %q of pod %s/%s: %w", c.Name, pod.Namespace, pod.Name, err)
	}
	id, err := m.rt.CreateContainer(ctx, sandboxID, containerConfig(pod, c, imageRef), sandboxCfg)
	if err != nil {
		return fmt.Errorf("create container %q of pod %s/%s: %w", c.Name, pod.Namespace, pod.Name, err)
	}
	if err := m.rt.StartContainer(ctx, id); err != nil {
		return fmt.Errorf("start container %q of pod %s/%s: %w", c.Name, pod.Namespace, pod.Name, err)
	}
	log.Info("container started", "container", c.Name, "containerID", id, "image", c.Image)
	return nil
}

func (m *Manager) ensureImage(ctx context.Context, c *v1.Container, sandboxCfg *runtimeapi.PodSandboxConfig) (string, error) {
	spec := &runtimeapi.ImageSpec{Image: c.Image}
	if c.ImagePullPolicy != v1.PullAlways {
		st, err := m.rt.ImageStatus(ctx, spec)
		if err != nil {
			return "", fmt.Errorf("look up image %q: %w", c.Image, err)
		}
		if st.GetImage() != nil {
			return st.GetImage().GetId(), nil
		}
		if c.ImagePullPolicy == v1.PullNever {
			return "", fmt.Errorf("image %q is not present and imagePullPolicy is Never", c.Image)
		}
	}
	ref, err := m.rt.PullImage(ctx, spec, nil, sandboxCfg)
	if err != nil {
		return "", fmt.Errorf("pull image %q: %w", c.Image, err)
	}
	return ref, nil
}
