package dra

import (
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"google.golang.org/grpc"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	drapbv1beta1 "k8s.io/kubelet/pkg/apis/dra/v1beta1"
)

// fakeDriver is a DRA driver on a unix socket: it prepares each claim
// as one device per request of devices, and records the calls.
type fakeDriver struct {
	drapb.UnimplementedDRAPluginServer
	name   string
	socket string

	mu         sync.Mutex
	prepared   []string // claim names, in call order
	unprepared []string
	claimErr   map[string]string // claim name → error to answer
	// stop ends the server and removes its socket, as a driver that
	// crashed without deregistering.
	stop func()
	// devices are what a prepared claim gets, by claim name; default one
	// device "dev-<claim>" with CDI ID "vendor.com/dev=<claim>".
	devices map[string][]*drapb.Device
}

func startFakeDriver(t testing.TB, dir, name string) *fakeDriver {
	t.Helper()
	return startFakeDriverServing(t, dir, name, true)
}

// startFakeDriverServing is startFakeDriver, serving v1 only when v1.
func startFakeDriverServing(t testing.TB, dir, name string, v1 bool) *fakeDriver {
	t.Helper()
	f := &fakeDriver{name: name, socket: filepath.Join(dir, name+".sock"), claimErr: map[string]string{}, devices: map[string][]*drapb.Device{}}
	l, err := net.Listen("unix", f.socket)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	// Both services, as upstream's kubeletplugin helper serves them (or
	// v1beta1 only, as an older driver); the v1beta1 one converts to the
	// same methods.
	if v1 {
		drapb.RegisterDRAPluginServer(srv, f)
	}
	drapbv1beta1.RegisterDRAPluginServer(srv, drapbv1beta1.V1ServerWrapper{DRAPluginServer: f})
	go func() { _ = srv.Serve(l) }()
	f.stop = srv.Stop
	t.Cleanup(srv.Stop)
	return f
}

func (f *fakeDriver) NodePrepareResources(_ context.Context, req *drapb.NodePrepareResourcesRequest) (*drapb.NodePrepareResourcesResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	resp := &drapb.NodePrepareResourcesResponse{Claims: map[string]*drapb.NodePrepareResourceResponse{}}
	for _, c := range req.Claims {
		f.prepared = append(f.prepared, c.Name)
		if e := f.claimErr[c.Name]; e != "" {
			resp.Claims[c.Uid] = &drapb.NodePrepareResourceResponse{Error: e}
			continue
		}
		devs, ok := f.devices[c.Name]
		if !ok {
			devs = []*drapb.Device{{PoolName: "pool", DeviceName: "dev-" + c.Name, CdiDeviceIds: []string{"vendor.com/dev=" + c.Name}}}
		}
		resp.Claims[c.Uid] = &drapb.NodePrepareResourceResponse{Devices: devs}
	}
	return resp, nil
}

func (f *fakeDriver) NodeUnprepareResources(_ context.Context, req *drapb.NodeUnprepareResourcesRequest) (*drapb.NodeUnprepareResourcesResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	resp := &drapb.NodeUnprepareResourcesResponse{Claims: map[string]*drapb.NodeUnprepareResourceResponse{}}
	for _, c := range req.Claims {
		f.unprepared = append(f.unprepared, c.Name)
		resp.Claims[c.Uid] = &drapb.NodeUnprepareResourceResponse{Error: f.claimErr[c.Name]}
	}
	return resp, nil
}

func (f *fakeDriver) calls() (prepared, unprepared []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.prepared...), append([]string(nil), f.unprepared...)
}

// fakeClaims is the API server's ResourceClaims.
type fakeClaims struct {
	mu     sync.Mutex
	claims map[string]*resourceapi.ResourceClaim
	gets   int
}

func (f *fakeClaims) ResourceClaim(_ context.Context, namespace, name string) (*resourceapi.ResourceClaim, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gets++
	c, ok := f.claims[key(namespace, name)]
	if !ok {
		return nil, apierrors.NewNotFound(schema.GroupResource{Group: "resource.k8s.io", Resource: "resourceclaims"}, name)
	}
	return c.DeepCopy(), nil
}

func (f *fakeClaims) add(c *resourceapi.ResourceClaim) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.claims[key(c.Namespace, c.Name)] = c
}

type event struct{ Type, Reason, Message string }

type fakeRecorder struct {
	mu     sync.Mutex
	events []event
}

func (r *fakeRecorder) Event(_ *v1.Pod, typ, reason, msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, event{typ, reason, msg})
}

// shortDir is a temporary directory short enough for unix sockets.
func shortDir(t testing.TB) string {
	t.Helper()
	d, err := os.MkdirTemp("", "dra")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

func testLog(t *testing.T) *slog.Logger { return slog.New(slog.NewTextHandler(t.Output(), nil)) }

// allocated is a claim allocated to driver's devices, reserved for pods.
func allocated(name, driver string, pods ...*v1.Pod) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
			Results: []resourceapi.DeviceRequestAllocationResult{{Request: "req", Driver: driver, Pool: "pool", Device: "dev-" + name}},
		}}},
	}
	for _, p := range pods {
		c.Status.ReservedFor = append(c.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: p.Name, UID: p.UID})
	}
	return c
}

// podUsing is a pod whose container "app" uses the named claims, each
// entry "gpu" referring to ResourceClaim name.
func podUsing(name string, claims ...string) *v1.Pod {
	p := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("pod-" + name)},
		Spec:       v1.PodSpec{Containers: []v1.Container{{Name: "app"}, {Name: "side"}}},
	}
	for _, c := range claims {
		p.Spec.ResourceClaims = append(p.Spec.ResourceClaims, v1.PodResourceClaim{Name: "rc-" + c, ResourceClaimName: &c})
		p.Spec.Containers[0].Resources.Claims = append(p.Spec.Containers[0].Resources.Claims, v1.ResourceClaim{Name: "rc-" + c})
	}
	return p
}
