// Package podresourcesapi is beside the pipeline, a node-level reader of
// the pod workers' state: the kubelet's pod-resources API (v1) on
// <root-dir>/pod-resources/kubelet.sock, as monitoring agents use it.
//
// List answers, for every active pod (admitted and not terminated), the
// resources each container holds; Get answers it for one pod by
// namespace and name; GetAllocatableResources answers what the node has.
// Restartable init containers (sidecars) are listed before the app
// containers, as the kubelet lists them. What a container holds comes from
// small providers (devices from the device manager; CPUs, memory and
// dynamic resources from their managers once they exist): a nil provider
// contributes nothing. Calls are rate-limited as the kubelet's (100 per
// second, bursts of 10); the socket is the owner's only.
package podresourcesapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// The kubelet's names and limits.
const (
	// SocketName is the socket in <root-dir>/pod-resources.
	SocketName = "kubelet.sock"
	// DefaultQPS and DefaultBurst are the kubelet's rate limit.
	DefaultQPS   = 100
	DefaultBurst = 10
	// maxMessage bounds what a client may send.
	maxMessage = 1 << 20
)

// Pods are the pods the API reports.
type Pods interface {
	// ActivePods are the admitted pods that have not terminated.
	ActivePods() []*v1.Pod
}

// DevicesProvider is what device plugins gave containers (the device
// manager).
type DevicesProvider interface {
	DevicesFor(podUID, container string) []*podresourcesapi.ContainerDevices
	AllocatableDevices() []*podresourcesapi.ContainerDevices
}

// CPUsProvider is the exclusive CPUs of containers (the CPU manager).
type CPUsProvider interface {
	CPUsFor(podUID, container string) []int64
	AllocatableCPUs() []int64
}

// MemoryProvider is the memory blocks of containers (the memory manager).
type MemoryProvider interface {
	MemoryFor(podUID, container string) []*podresourcesapi.ContainerMemory
	AllocatableMemory() []*podresourcesapi.ContainerMemory
}

// DynamicResourcesProvider is the DRA claims' devices of containers.
type DynamicResourcesProvider interface {
	DynamicResourcesFor(pod *v1.Pod, container *v1.Container) []*podresourcesapi.DynamicResource
}

// Providers are the sources of what containers hold; nil ones give
// nothing.
type Providers struct {
	Devices DevicesProvider
	CPUs    CPUsProvider
	Memory  MemoryProvider
	Dynamic DynamicResourcesProvider
}

// Options configure a Server.
type Options struct {
	// Dir is <root-dir>/pod-resources.
	Dir string
}

// Deps are the Server's collaborators.
type Deps struct {
	Pods      Pods
	Providers Providers
	Log       *slog.Logger
	// Metrics gets the kubelet's pod-resources endpoint counters; nil:
	// none.
	Metrics prometheus.Registerer
}

// Server is the pod-resources API. Construct with New; Run serves it.
type Server struct {
	podresourcesapi.UnimplementedPodResourcesListerServer
	opts    Options
	deps    Deps
	metrics serverMetrics
}

// New returns a Server; it starts nothing.
func New(opts Options, deps Deps) *Server {
	if deps.Log == nil {
		deps.Log = slog.New(slog.DiscardHandler)
	}
	return &Server{opts: opts, deps: deps, metrics: newServerMetrics(deps.Metrics)}
}

// Run serves the socket until ctx ends.
func (s *Server) Run(ctx context.Context) error {
	if err := os.MkdirAll(s.opts.Dir, 0o750); err != nil {
		return fmt.Errorf("pod-resources directory: %w", err)
	}
	sock := filepath.Join(s.opts.Dir, SocketName)
	if err := os.Remove(sock); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove stale pod-resources socket: %w", err)
	}
	lis, err := net.Listen("unix", sock)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", sock, err)
	}
	if err := os.Chmod(sock, 0o600); err != nil {
		_ = lis.Close()
		return fmt.Errorf("pod-resources socket: %w", err)
	}
	limiter := rate.NewLimiter(DefaultQPS, DefaultBurst)
	srv := grpc.NewServer(grpc.MaxRecvMsgSize(maxMessage), grpc.UnaryInterceptor(
		func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if !limiter.Allow() {
				return nil, status.Error(codes.ResourceExhausted, "rejected by rate limit")
			}
			return h(ctx, req)
		}))
	podresourcesapi.RegisterPodResourcesListerServer(srv, s)
	errc := make(chan error, 1) // Serve's one result
	go func() { errc <- srv.Serve(lis) }()
	s.deps.Log.Info("pod-resources API serving", "socket", sock)
	select {
	case <-ctx.Done():
		srv.Stop()
		<-errc
		return nil
	case err := <-errc:
		return fmt.Errorf("serve %s: %w", sock, err)
	}
}

// List is the resources of every active pod.
func (s *Server) List(context.Context, *podresourcesapi.ListPodResourcesRequest) (*podresourcesapi.ListPodResourcesResponse, error) {
	s.metrics.total.Inc()
	s.metrics.list.Inc()
	pods := s.deps.Pods.ActivePods()
	out := &podresourcesapi.ListPodResourcesResponse{PodResources: make([]*podresourcesapi.PodResources, 0, len(pods))}
	for _, pod := range pods {
		out.PodResources = append(out.PodResources, s.podResources(pod))
	}
	return out, nil
}

// Get is the resources of one active pod.
func (s *Server) Get(_ context.Context, req *podresourcesapi.GetPodResourcesRequest) (*podresourcesapi.GetPodResourcesResponse, error) {
	s.metrics.total.Inc()
	s.metrics.get.Inc()
	for _, pod := range s.deps.Pods.ActivePods() {
		if pod.Namespace == req.GetPodNamespace() && pod.Name == req.GetPodName() {
			return &podresourcesapi.GetPodResourcesResponse{PodResources: s.podResources(pod)}, nil
		}
	}
	s.metrics.getErrors.Inc()
	return nil, fmt.Errorf("pod %s in namespace %s not found", req.GetPodName(), req.GetPodNamespace())
}

// GetAllocatableResources is what the node has, free or not.
func (s *Server) GetAllocatableResources(context.Context, *podresourcesapi.AllocatableResourcesRequest) (*podresourcesapi.AllocatableResourcesResponse, error) {
	s.metrics.total.Inc()
	s.metrics.allocatable.Inc()
	p := s.deps.Providers
	out := &podresourcesapi.AllocatableResourcesResponse{}
	if p.Devices != nil {
		out.Devices = p.Devices.AllocatableDevices()
	}
	if p.CPUs != nil {
		out.CpuIds = p.CPUs.AllocatableCPUs()
	}
	if p.Memory != nil {
		out.Memory = p.Memory.AllocatableMemory()
	}
	return out, nil
}

func (s *Server) podResources(pod *v1.Pod) *podresourcesapi.PodResources {
	out := &podresourcesapi.PodResources{Name: pod.Name, Namespace: pod.Namespace}
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		if c.RestartPolicy != nil && *c.RestartPolicy == v1.ContainerRestartPolicyAlways {
			out.Containers = append(out.Containers, s.containerResources(pod, c))
		}
	}
	for i := range pod.Spec.Containers {
		out.Containers = append(out.Containers, s.containerResources(pod, &pod.Spec.Containers[i]))
	}
	return out
}

func (s *Server) containerResources(pod *v1.Pod, c *v1.Container) *podresourcesapi.ContainerResources {
	p, uid := s.deps.Providers, string(pod.UID)
	out := &podresourcesapi.ContainerResources{Name: c.Name}
	if p.Devices != nil {
		out.Devices = p.Devices.DevicesFor(uid, c.Name)
	}
	if p.CPUs != nil {
		out.CpuIds = p.CPUs.CPUsFor(uid, c.Name)
	}
	if p.Memory != nil {
		out.Memory = p.Memory.MemoryFor(uid, c.Name)
	}
	if p.Dynamic != nil {
		out.DynamicResources = p.Dynamic.DynamicResourcesFor(pod, c)
	}
	return out
}
