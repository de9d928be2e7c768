package csi

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// fakeDriver is a CSI node plugin and its registration service on one
// socket. It records the calls it gets and keeps its "mounts" in memory:
// the mounter under test asks it (mounted) instead of the mount table.
type fakeDriver struct {
	csipb.UnimplementedNodeServer
	registerapi.UnimplementedRegistrationServer

	name     string
	socket   string
	pluginTy string
	versions []string
	stage    bool

	mu       sync.Mutex
	calls    []string
	mounts   map[string]bool
	notified []*registerapi.RegistrationStatus
	lastPub  *csipb.NodePublishVolumeRequest
	lastStg  *csipb.NodeStageVolumeRequest
}

// startFake serves a fake driver on dir/<name>.sock until the test ends.
func startFake(t *testing.T, dir, name string, mutate ...func(*fakeDriver)) *fakeDriver {
	t.Helper()
	f := &fakeDriver{name: name, socket: filepath.Join(dir, name+".sock"), pluginTy: registerapi.CSIPlugin,
		versions: []string{"1.0.0"}, stage: true, mounts: map[string]bool{}}
	for _, m := range mutate {
		m(f)
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", f.socket)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	csipb.RegisterNodeServer(srv, f)
	registerapi.RegisterRegistrationServer(srv, f)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	return f
}

func (f *fakeDriver) record(call string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call)
}

// takeCalls returns the calls so far and forgets them.
func (f *fakeDriver) takeCalls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.calls
	f.calls = nil
	return out
}

func (f *fakeDriver) mounted(path string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mounts[path], nil
}

func (f *fakeDriver) setMount(path string, on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mounts[path] = on
}

func (f *fakeDriver) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	f.record("GetInfo")
	return &registerapi.PluginInfo{Type: f.pluginTy, Name: f.name, SupportedVersions: f.versions}, nil
}

func (f *fakeDriver) NotifyRegistrationStatus(_ context.Context, st *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.notified = append(f.notified, st)
	return &registerapi.RegistrationStatusResponse{}, nil
}

func (f *fakeDriver) NodeGetInfo(context.Context, *csipb.NodeGetInfoRequest) (*csipb.NodeGetInfoResponse, error) {
	f.record("NodeGetInfo")
	return &csipb.NodeGetInfoResponse{NodeId: "node-" + f.name, MaxVolumesPerNode: 7,
		AccessibleTopology: &csipb.Topology{Segments: map[string]string{"topology.fake/node": "n1"}}}, nil
}

func (f *fakeDriver) NodeGetCapabilities(context.Context, *csipb.NodeGetCapabilitiesRequest) (*csipb.NodeGetCapabilitiesResponse, error) {
	var caps []*csipb.NodeServiceCapability
	rpc := func(t csipb.NodeServiceCapability_RPC_Type) *csipb.NodeServiceCapability {
		return &csipb.NodeServiceCapability{Type: &csipb.NodeServiceCapability_Rpc{Rpc: &csipb.NodeServiceCapability_RPC{Type: t}}}
	}
	if f.stage {
		caps = append(caps, rpc(csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME))
	}
	caps = append(caps, rpc(csipb.NodeServiceCapability_RPC_GET_VOLUME_STATS))
	return &csipb.NodeGetCapabilitiesResponse{Capabilities: caps}, nil
}

func (f *fakeDriver) NodeStageVolume(_ context.Context, req *csipb.NodeStageVolumeRequest) (*csipb.NodeStageVolumeResponse, error) {
	f.record("NodeStageVolume " + req.VolumeId)
	if _, err := os.Stat(req.StagingTargetPath); err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "staging path: %v", err)
	}
	f.setMount(req.StagingTargetPath, true)
	f.mu.Lock()
	f.lastStg = req
	f.mu.Unlock()
	return &csipb.NodeStageVolumeResponse{}, nil
}

func (f *fakeDriver) NodeUnstageVolume(_ context.Context, req *csipb.NodeUnstageVolumeRequest) (*csipb.NodeUnstageVolumeResponse, error) {
	f.record("NodeUnstageVolume " + req.VolumeId)
	f.setMount(req.StagingTargetPath, false)
	return &csipb.NodeUnstageVolumeResponse{}, nil
}

func (f *fakeDriver) NodePublishVolume(_ context.Context, req *csipb.NodePublishVolumeRequest) (*csipb.NodePublishVolumeResponse, error) {
	f.record("NodePublishVolume " + req.VolumeId)
	if f.stage && req.StagingTargetPath != "" {
		if ok, _ := f.mounted(req.StagingTargetPath); !ok {
			return nil, status.Error(codes.FailedPrecondition, "not staged")
		}
	}
	if err := os.MkdirAll(req.TargetPath, 0o750); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	f.setMount(req.TargetPath, true)
	f.mu.Lock()
	f.lastPub = req
	f.mu.Unlock()
	return &csipb.NodePublishVolumeResponse{}, nil
}

func (f *fakeDriver) NodeUnpublishVolume(_ context.Context, req *csipb.NodeUnpublishVolumeRequest) (*csipb.NodeUnpublishVolumeResponse, error) {
	f.record("NodeUnpublishVolume " + req.VolumeId)
	f.setMount(req.TargetPath, false)
	if err := os.Remove(req.TargetPath); err != nil && !os.IsNotExist(err) {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csipb.NodeUnpublishVolumeResponse{}, nil
}

func (f *fakeDriver) NodeGetVolumeStats(_ context.Context, req *csipb.NodeGetVolumeStatsRequest) (*csipb.NodeGetVolumeStatsResponse, error) {
	f.record("NodeGetVolumeStats " + req.VolumeId)
	return &csipb.NodeGetVolumeStatsResponse{Usage: []*csipb.VolumeUsage{
		{Unit: csipb.VolumeUsage_BYTES, Total: 1000, Available: 600, Used: 400},
		{Unit: csipb.VolumeUsage_INODES, Total: 100, Available: 90, Used: 10},
	}}, nil
}

// listener records what a Watcher tells it.
type listener struct {
	mu     sync.Mutex
	events []string
	infos  map[string]NodeInfo
}

func (l *listener) DriverRegistered(_ context.Context, name string, info NodeInfo) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, "registered "+name)
	if l.infos == nil {
		l.infos = map[string]NodeInfo{}
	}
	l.infos[name] = info
	return nil
}

func (l *listener) DriverDeregistered(_ context.Context, name string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, "deregistered "+name)
	return nil
}

func (l *listener) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := slices.Clone(l.events)
	l.events = nil
	return out
}
