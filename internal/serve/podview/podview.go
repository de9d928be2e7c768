// Package podview is beside the server: the read side of the pipeline
// that the kubelet API serves. It joins the pods the sources define, their
// status and what the runtime has of them into what /pods, /runningpods/,
// /containerLogs and exec, attach and port-forward need, finding pods and
// containers only among the pods nodelet knows.
package podview

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/base/logs"
	"github.com/nodelet/nodelet/internal/pipeline/cri"
	"github.com/nodelet/nodelet/internal/pure/observed"
	"github.com/nodelet/nodelet/internal/serve/server"
)

// Sources are the pods the sources define.
type Sources interface{ Pods() []*v1.Pod }

// Statuses is the status cache.
type Statuses interface {
	Get(uid types.UID) (v1.PodStatus, bool)
}

// Pods observes pods in the runtime (the runtime manager).
type Pods interface {
	Observe(ctx context.Context, uid types.UID, name, namespace string) (*observed.PodStatus, error)
	ListPods(ctx context.Context) (map[types.UID]*observed.PodStatus, error)
}

// CRI is the runtime calls the view makes itself.
type CRI interface {
	ContainerStatus(ctx context.Context, id string) (*runtimeapi.ContainerStatusResponse, error)
	Exec(ctx context.Context, req *runtimeapi.ExecRequest) (string, error)
	Attach(ctx context.Context, req *runtimeapi.AttachRequest) (string, error)
	PortForward(ctx context.Context, req *runtimeapi.PortForwardRequest) (string, error)
}

// Deps are the view's sources of facts; all are required.
type Deps struct {
	Sources  Sources
	Statuses Statuses
	Pods     Pods
	CRI      CRI
}

// View serves the API's reads. Construct with New.
type View struct{ deps Deps }

// New returns a View.
func New(deps Deps) *View { return &View{deps: deps} }

// Pods is /pods: the pods the sources define, with their status.
func (v *View) Pods() []*v1.Pod {
	pods := v.deps.Sources.Pods()
	for _, pod := range pods {
		if st, ok := v.deps.Statuses.Get(pod.UID); ok {
			pod.Status = st
		}
	}
	return pods
}

// RunningPods is /runningpods/: the pods as the runtime has them.
func (v *View) RunningPods(ctx context.Context) ([]*v1.Pod, error) {
	list, err := v.deps.Pods.ListPods(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]*v1.Pod, 0, len(list))
	for _, st := range list {
		pod := &v1.Pod{}
		pod.Name, pod.Namespace, pod.UID = st.Name, st.Namespace, st.UID
		for _, c := range st.Running() {
			pod.Spec.Containers = append(pod.Spec.Containers, v1.Container{Name: c.Name, Image: c.Image})
			pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, v1.ContainerStatus{
				Name: c.Name, Image: c.Image, ImageID: c.ImageRef, ContainerID: "containerd://" + c.ID,
				State: v1.ContainerState{Running: &v1.ContainerStateRunning{}}})
		}
		if len(pod.Spec.Containers) > 0 {
			out = append(out, pod)
		}
	}
	return out, nil
}

// Logs adapts a logs.Streamer to the server: its errors become the
// server's classes.
type Logs struct{ Streamer *logs.Streamer }

func (l Logs) ContainerLogs(ctx context.Context, namespace, pod, container string, opts logs.Options, w io.Writer) error {
	err := l.Streamer.ContainerLogs(ctx, namespace, pod, container, opts, w)
	switch {
	case errors.Is(err, logs.ErrNotFound):
		return fmt.Errorf("%w: %w", server.ErrNotFound, err)
	case errors.Is(err, logs.ErrTooManyFollows):
		return fmt.Errorf("%w: %w", server.ErrTooManyRequests, err)
	}
	return err
}

// LogPath finds a container's log only through known pods and the
// runtime's LogPath (a logs.Resolver).
func (v *View) LogPath(ctx context.Context, namespace, name, container string, previous bool) (string, string, error) {
	var pod *v1.Pod
	for _, candidate := range v.deps.Sources.Pods() {
		if candidate.Namespace == namespace && candidate.Name == name {
			pod = candidate
		}
	}
	if pod == nil {
		return "", "", fmt.Errorf("pod %s/%s: %w", namespace, name, logs.ErrNotFound)
	}
	obs, err := v.deps.Pods.Observe(ctx, pod.UID, pod.Name, pod.Namespace)
	if err != nil {
		return "", "", err
	}
	inst := instance(obs, container, previous)
	if inst == nil {
		which := "current"
		if previous {
			which = "previous"
		}
		return "", "", fmt.Errorf("%s instance of container %q in pod %s/%s: %w", which, container, namespace, name, logs.ErrNotFound)
	}
	st, err := v.deps.CRI.ContainerStatus(ctx, inst.ID)
	if err != nil {
		if cri.IsNotFound(err) {
			return "", "", fmt.Errorf("container %q: %w", container, logs.ErrNotFound)
		}
		return "", "", err
	}
	path := st.GetStatus().GetLogPath()
	if path == "" {
		return "", "", fmt.Errorf("container %q has no log: %w", container, logs.ErrNotFound)
	}
	if _, err := os.Stat(path); err != nil {
		return "", "", fmt.Errorf("log of container %q: %w", container, logs.ErrNotFound)
	}
	return path, inst.ID, nil
}

// instance is the newest instance of the named container, or the one
// before it.
func instance(obs *observed.PodStatus, name string, previous bool) *observed.Container {
	seen := 0
	for i := range obs.Containers {
		if obs.Containers[i].Name != name {
			continue
		}
		if seen == 0 && !previous || seen == 1 && previous {
			return &obs.Containers[i]
		}
		seen++
	}
	return nil
}

// Running reports whether the container runs (a logs.Resolver).
func (v *View) Running(ctx context.Context, id string) (bool, error) {
	st, err := v.deps.CRI.ContainerStatus(ctx, id)
	if cri.IsNotFound(err) {
		return false, fmt.Errorf("container %s: %w", id, logs.ErrNotFound)
	}
	if err != nil {
		return false, err
	}
	return st.GetStatus().GetState() == runtimeapi.ContainerState_CONTAINER_RUNNING, nil
}

// Exec, attach and port-forward: pods and containers are found among the
// pods the sources define, then the runtime's streaming server is asked for
// a URL that the API proxies to (a server.StreamingRuntime).

func (v *View) pod(namespace, name, uid string) (*v1.Pod, error) {
	for _, pod := range v.deps.Sources.Pods() {
		if pod.Namespace == namespace && pod.Name == name && (uid == "" || string(pod.UID) == uid) {
			return pod, nil
		}
	}
	return nil, fmt.Errorf("pod %s/%s: %w", namespace, name, server.ErrNotFound)
}

// observe finds a known pod and observes it in the runtime.
func (v *View) observe(ctx context.Context, namespace, name, uid string) (*observed.PodStatus, error) {
	pod, err := v.pod(namespace, name, uid)
	if err != nil {
		return nil, err
	}
	return v.deps.Pods.Observe(ctx, pod.UID, pod.Name, pod.Namespace)
}

// ContainerID is the ID of the named running container of the pod.
func (v *View) ContainerID(ctx context.Context, namespace, name, uid, container string) (string, error) {
	obs, err := v.observe(ctx, namespace, name, uid)
	if err != nil {
		return "", err
	}
	for _, c := range obs.Running() {
		if c.Name == container {
			return c.ID, nil
		}
	}
	return "", fmt.Errorf("running container %q in pod %s/%s: %w", container, namespace, name, server.ErrNotFound)
}

// SandboxID is the ID of the pod's ready sandbox.
func (v *View) SandboxID(ctx context.Context, namespace, name, uid string) (string, error) {
	obs, err := v.observe(ctx, namespace, name, uid)
	if err != nil {
		return "", err
	}
	for _, sb := range obs.Sandboxes {
		if sb.State == observed.SandboxReady {
			return sb.ID, nil
		}
	}
	return "", fmt.Errorf("ready sandbox of pod %s/%s: %w", namespace, name, server.ErrNotFound)
}

func (v *View) Exec(ctx context.Context, req *runtimeapi.ExecRequest) (string, error) {
	return v.deps.CRI.Exec(ctx, req)
}

func (v *View) Attach(ctx context.Context, req *runtimeapi.AttachRequest) (string, error) {
	return v.deps.CRI.Attach(ctx, req)
}

func (v *View) PortForward(ctx context.Context, req *runtimeapi.PortForwardRequest) (string, error) {
	return v.deps.CRI.PortForward(ctx, req)
}
