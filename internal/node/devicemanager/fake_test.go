package devicemanager

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	clocktesting "k8s.io/utils/clock/testing"
)

// failsafe bounds every wait of these tests; no assertion is on time.
const failsafe = 10 * time.Second

// fakePlugin is a device plugin serving on a real unix socket.
type fakePlugin struct {
	pluginapi.UnimplementedDevicePluginServer
	resource string
	devices  chan []*pluginapi.Device
	prefer   []string
	// opts are what GetDevicePluginOptions answers; optsErr fails it.
	opts    *pluginapi.DevicePluginOptions
	optsErr error
	// listed counts the ListAndWatch calls; srvErr fails them.
	listed int
	srvErr error

	mu        sync.Mutex
	allocated [][]string
	preStarts [][]string

	srv *grpc.Server
}

func (p *fakePlugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	if p.optsErr != nil {
		return nil, p.optsErr
	}
	if p.opts == nil {
		return &pluginapi.DevicePluginOptions{}, nil
	}
	return p.opts, nil
}

func (p *fakePlugin) ListAndWatch(_ *pluginapi.Empty, s grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	p.mu.Lock()
	p.listed++
	p.mu.Unlock()
	if p.srvErr != nil {
		return p.srvErr
	}
	for {
		select {
		case ds := <-p.devices:
			if err := s.Send(&pluginapi.ListAndWatchResponse{Devices: ds}); err != nil {
				return err
			}
		case <-s.Context().Done():
			return nil
		}
	}
}

func (p *fakePlugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	ids := req.GetContainerRequests()[0].GetDevicesIds()
	p.mu.Lock()
	p.allocated = append(p.allocated, ids)
	p.mu.Unlock()
	r := &pluginapi.ContainerAllocateResponse{
		Envs:        map[string]string{"FAKE_DEVICES": ids[0]},
		Annotations: map[string]string{"fake.example.com/devices": ids[0]},
		Mounts:      []*pluginapi.Mount{{ContainerPath: "/run/fake", HostPath: "/tmp/fake-" + ids[0], ReadOnly: true}},
		CdiDevices:  []*pluginapi.CDIDevice{{Name: "example.com/fake=" + ids[0]}},
	}
	for _, id := range ids {
		r.Devices = append(r.Devices, &pluginapi.DeviceSpec{ContainerPath: "/dev/" + id, HostPath: "/dev/null", Permissions: "rw"})
	}
	return &pluginapi.AllocateResponse{ContainerResponses: []*pluginapi.ContainerAllocateResponse{r}}, nil
}

func (p *fakePlugin) GetPreferredAllocation(context.Context, *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	return &pluginapi.PreferredAllocationResponse{ContainerResponses: []*pluginapi.ContainerPreferredAllocationResponse{{DeviceIDs: p.prefer}}}, nil
}

func (p *fakePlugin) PreStartContainer(_ context.Context, req *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	p.mu.Lock()
	p.preStarts = append(p.preStarts, req.GetDevicesIds())
	p.mu.Unlock()
	return &pluginapi.PreStartContainerResponse{}, nil
}

func (p *fakePlugin) calls() (allocated, preStarts [][]string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([][]string(nil), p.allocated...), append([][]string(nil), p.preStarts...)
}

// servePlugin serves a fake plugin for resource on endpoint in dir.
func servePlugin(t testing.TB, dir, resource, endpoint string) *fakePlugin {
	t.Helper()
	lis, err := listenIn(dir, endpoint)
	if err != nil {
		t.Fatal(err)
	}
	p := &fakePlugin{resource: resource, devices: make(chan []*pluginapi.Device, 4), srv: grpc.NewServer()}
	pluginapi.RegisterDevicePluginServer(p.srv, p)
	go func() { _ = p.srv.Serve(lis) }()
	t.Cleanup(p.srv.Stop)
	return p
}

// listenIn listens on the unix socket name in dir, as a plugin does
// (through dir's descriptor when the path is too long for a socket
// address; the socket is then not unlinked by a path that names another
// file once the descriptor is closed).
func listenIn(dir, name string) (net.Listener, error) {
	if path := filepath.Join(dir, name); len(path) <= maxSocketPath {
		return net.Listen("unix", path)
	}
	d, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	lis, err := net.Listen("unix", fmt.Sprintf("/proc/self/fd/%d/%s", d.Fd(), name))
	if err != nil {
		return nil, err
	}
	lis.(*net.UnixListener).SetUnlinkOnClose(false)
	return lis, nil
}

// register registers with the manager's socket in dir as a plugin does.
func register(dir string, req *pluginapi.RegisterRequest) error {
	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, SocketName), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), failsafe)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, req, grpc.WaitForReady(true))
	return err
}

// harness is a running Manager on a temporary directory.
type harness struct {
	dir     string
	m       *Manager
	clk     *clocktesting.FakeClock
	changed chan struct{}
	stop    func()
	reg     *prometheus.Registry
}

func startManager(t testing.TB, dir string, clk *clocktesting.FakeClock) *harness {
	t.Helper()
	h := &harness{dir: dir, clk: clk, changed: make(chan struct{}, 1), reg: prometheus.NewRegistry()}
	h.m = New(Options{Dir: dir}, Deps{Clock: clk, Metrics: h.reg, Changed: func() {
		select {
		case h.changed <- struct{}{}:
		default:
		}
	}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.m.Run(ctx) }()
	h.stop = func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
	t.Cleanup(func() {
		if ctx.Err() == nil {
			h.stop()
		}
	})
	return h
}

// waitFor waits until the manager's allocatable of resource is want
// (and capacity wantCap).
func (h *harness) waitFor(t *testing.T, resource string, wantCap, wantAlloc int64) {
	t.Helper()
	deadline := time.After(failsafe)
	for {
		c, a := h.m.Capacity()
		gotC, gotA := c[v1.ResourceName(resource)], a[v1.ResourceName(resource)]
		if gotC.Value() == wantCap && gotA.Value() == wantAlloc {
			return
		}
		select {
		case <-h.changed:
		case <-deadline:
			t.Fatalf("%s: capacity %s allocatable %s, want %d and %d", resource, gotC.String(), gotA.String(), wantCap, wantAlloc)
		}
	}
}

func devices(health map[string]string) []*pluginapi.Device {
	var out []*pluginapi.Device
	for _, id := range []string{"d0", "d1", "d2", "d3"} {
		if h, ok := health[id]; ok {
			out = append(out, &pluginapi.Device{ID: id, Health: h})
		}
	}
	return out
}

func podWith(uid string, limits map[string]int64, initLimits ...map[string]int64) *v1.Pod {
	list := func(l map[string]int64) v1.ResourceList {
		out := v1.ResourceList{}
		for k, v := range l {
			out[v1.ResourceName(k)] = *resource.NewQuantity(v, resource.DecimalSI)
		}
		return out
	}
	pod := &v1.Pod{}
	pod.UID, pod.Name, pod.Namespace = types.UID(uid), "pod-"+uid, "default"
	for i, l := range initLimits {
		pod.Spec.InitContainers = append(pod.Spec.InitContainers, v1.Container{Name: "init" + string(rune('0'+i)), Resources: v1.ResourceRequirements{Limits: list(l)}})
	}
	pod.Spec.Containers = []v1.Container{{Name: "app", Resources: v1.ResourceRequirements{Limits: list(limits)}}}
	return pod
}
