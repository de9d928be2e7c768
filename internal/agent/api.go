package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/internal/cri"
	"github.com/nodelet/nodelet/internal/logs"
	"github.com/nodelet/nodelet/internal/observed"
	"github.com/nodelet/nodelet/internal/server"
)

// PKIDir holds the serving certificate and the local admin credentials.
func PKIDir(rootDir string) string { return filepath.Join(rootDir, "pki") }

// secureAPI builds the kubelet API handler and its TLS settings.
func (p *pipeline) secureAPI() (server.Config, server.Deps, error) {
	cfg := p.cfg
	dir := PKIDir(cfg.RootDir)
	hosts := []string{cfg.NodeName}
	if cfg.NodeIP != "" {
		hosts = append(hosts, cfg.NodeIP)
	}
	cert, err := server.LoadOrCreateServingCert(dir, cfg.TLSCertFile, cfg.TLSPrivateKeyFile, hosts, p.clock)
	if err != nil {
		return server.Config{}, server.Deps{}, fmt.Errorf("serving certificate: %w", err)
	}
	creds, err := server.EnsureAdminCredentials(dir, p.clock)
	if err != nil {
		return server.Config{}, server.Deps{}, fmt.Errorf("admin credentials: %w", err)
	}
	pool, err := server.LoadCertPool(cfg.ClientCAFile, creds.CACert)
	if err != nil {
		return server.Config{}, server.Deps{}, fmt.Errorf("client CA: %w", err)
	}
	var tokens map[string]server.UserInfo
	if cfg.TokenAuthFile != "" {
		if tokens, err = server.LoadTokenFile(cfg.TokenAuthFile); err != nil {
			return server.Config{}, server.Deps{}, err
		}
	}
	if cfg.AuthorizationMode == server.AuthorizationWebhook {
		return server.Config{}, server.Deps{}, errors.New("--authorization-mode=Webhook needs an API server (cluster mode); use NodeletGroups standalone")
	}
	scfg := server.Config{
		Addr: net.JoinHostPort(cfg.Address, strconv.Itoa(cfg.Port)), TLS: cert, ClientCA: pool,
		AnonymousAuth: cfg.AnonymousAuth, Tokens: tokens, AuthorizationMode: cfg.AuthorizationMode, ReadGroup: cfg.AuthorizationReadGroup,
		NodeName: cfg.NodeName,
	}
	deps := server.Deps{
		Pods:        podsWithStatus{p},
		RunningPods: runningPods{p},
		Logs:        logStreamer{logs.NewStreamer(logResolver{p}, cfg.PodLogsDir, p.clock, p.log)},
		Events:      p.events,
		Streaming:   streamingRuntime{p},
		Stats:       p.stats,
		Metrics:     server.Metrics{Kubelet: p.registry, Probes: p.probeRegistry, Resource: p.resourceRegistry},
		Configz:     configz(cfg),
		Log:         p.log,
		Clock:       p.clock,
	}
	return scfg, deps, nil
}

// configz is /configz: the settings the kubelet has too, by its names;
// nothing of the environment, and the server redacts the manifest URL's
// credentials and headers.
func configz(cfg Config) *server.KubeletConfiguration {
	c := server.NewKubeletConfiguration()
	c.StaticPodPath, c.StaticPodURL, c.StaticPodURLHeader = cfg.PodManifestPath, cfg.ManifestURL, cfg.ManifestURLHeader
	c.SyncFrequency = metav1.Duration{Duration: cfg.SyncFrequency}
	c.FileCheckFrequency = metav1.Duration{Duration: cfg.FileCheckFrequency}
	c.HTTPCheckFrequency = metav1.Duration{Duration: cfg.HTTPCheckFrequency}
	c.Address, c.Port, c.ReadOnlyPort = cfg.Address, int32(cfg.Port), int32(cfg.ReadOnlyPort)
	c.HealthzPort, c.HealthzBindAddress = ptr.To(int32(cfg.HealthzPort)), cfg.HealthzBindAddress
	c.TLSCertFile, c.TLSPrivateKeyFile = cfg.TLSCertFile, cfg.TLSPrivateKeyFile
	c.Authentication.X509.ClientCAFile = cfg.ClientCAFile
	c.Authentication.Anonymous.Enabled = ptr.To(cfg.AnonymousAuth)
	c.Authorization.Mode = cfg.AuthorizationMode
	c.MaxPods, c.PodCIDR, c.CgroupRoot, c.PodLogsDir = int32(cfg.MaxPods), cfg.Managed.Containerd.PodCIDR, cfg.CgroupRoot, cfg.PodLogsDir
	c.ContainerLogMaxSize = resource.NewQuantity(cfg.ContainerLogMaxSize, resource.BinarySI).String()
	c.ContainerLogMaxFiles = ptr.To(int32(cfg.ContainerLogMaxFiles))
	c.ContainerLogMonitorInterval = &metav1.Duration{Duration: cfg.ContainerLogMonitorInterval}
	c.ContainerRuntimeEndpoint = cfg.RuntimeEndpoint
	if c.ContainerRuntimeEndpoint == "" {
		c.ContainerRuntimeEndpoint = cfg.Managed.Containerd.Endpoint()
	}
	return c
}

// podsWithStatus is /pods: the pods the sources define, with their status.
type podsWithStatus struct{ p *pipeline }

func (s podsWithStatus) Pods() []*v1.Pod {
	pods := s.p.config.Pods()
	for _, pod := range pods {
		if st, ok := s.p.status.Get(pod.UID); ok {
			pod.Status = st
		}
	}
	return pods
}

// runningPods is /runningpods/: the pods as the runtime has them.
type runningPods struct{ p *pipeline }

func (r runningPods) RunningPods(ctx context.Context) ([]*v1.Pod, error) {
	list, err := r.p.runtime.ListPods(ctx)
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

// logStreamer adapts internal/logs to the server's interface.
type logStreamer struct{ s *logs.Streamer }

func (l logStreamer) ContainerLogs(ctx context.Context, namespace, pod, container string, opts logs.Options, w io.Writer) error {
	err := l.s.ContainerLogs(ctx, namespace, pod, container, opts, w)
	switch {
	case errors.Is(err, logs.ErrNotFound):
		return fmt.Errorf("%w: %w", server.ErrNotFound, err)
	case errors.Is(err, logs.ErrTooManyFollows):
		return fmt.Errorf("%w: %w", server.ErrTooManyRequests, err)
	}
	return err
}

// logResolver finds a container's log only through known pods and the
// runtime's LogPath.
type logResolver struct{ p *pipeline }

func (r logResolver) LogPath(ctx context.Context, namespace, name, container string, previous bool) (string, string, error) {
	var pod *v1.Pod
	for _, candidate := range r.p.config.Pods() {
		if candidate.Namespace == namespace && candidate.Name == name {
			pod = candidate
		}
	}
	if pod == nil {
		return "", "", fmt.Errorf("pod %s/%s: %w", namespace, name, logs.ErrNotFound)
	}
	obs, err := r.p.runtime.Observe(ctx, pod.UID, pod.Name, pod.Namespace)
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
	st, err := r.p.rt.ContainerStatus(ctx, inst.ID)
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

func (r logResolver) Running(ctx context.Context, id string) (bool, error) {
	st, err := r.p.rt.ContainerStatus(ctx, id)
	if cri.IsNotFound(err) {
		return false, fmt.Errorf("container %s: %w", id, logs.ErrNotFound)
	}
	if err != nil {
		return false, err
	}
	return st.GetStatus().GetState() == runtimeapi.ContainerState_CONTAINER_RUNNING, nil
}

// streamingRuntime is exec, attach and port-forward: pods and containers
// are found among the pods the sources define, then the runtime's
// streaming server is asked for a URL that the API proxies to.
type streamingRuntime struct{ p *pipeline }

func (s streamingRuntime) pod(namespace, name, uid string) (*v1.Pod, error) {
	for _, pod := range s.p.config.Pods() {
		if pod.Namespace == namespace && pod.Name == name && (uid == "" || string(pod.UID) == uid) {
			return pod, nil
		}
	}
	return nil, fmt.Errorf("pod %s/%s: %w", namespace, name, server.ErrNotFound)
}

func (s streamingRuntime) ContainerID(ctx context.Context, namespace, name, uid, container string) (string, error) {
	pod, err := s.pod(namespace, name, uid)
	if err != nil {
		return "", err
	}
	obs, err := s.p.runtime.Observe(ctx, pod.UID, pod.Name, pod.Namespace)
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

func (s streamingRuntime) SandboxID(ctx context.Context, namespace, name, uid string) (string, error) {
	pod, err := s.pod(namespace, name, uid)
	if err != nil {
		return "", err
	}
	obs, err := s.p.runtime.Observe(ctx, pod.UID, pod.Name, pod.Namespace)
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

func (s streamingRuntime) Exec(ctx context.Context, req *runtimeapi.ExecRequest) (string, error) {
	return s.p.rt.Exec(ctx, req)
}

func (s streamingRuntime) Attach(ctx context.Context, req *runtimeapi.AttachRequest) (string, error) {
	return s.p.rt.Attach(ctx, req)
}

func (s streamingRuntime) PortForward(ctx context.Context, req *runtimeapi.PortForwardRequest) (string, error) {
	return s.p.rt.PortForward(ctx, req)
}
