// Command csihostpath is a test CSI node plugin (tests only, beside the
// volumes stage): the Identity and Node services on a unix socket that
// bind-mount one directory per volume handle from a state directory, with
// STAGE_UNSTAGE_VOLUME and GET_VOLUME_STATS, and the plugin registration
// service on <root-dir>/plugins_registry/<name>-reg.sock: it does the
// node-driver-registrar's job itself. Every call is appended to -call-log,
// one line each ("NodeStageVolume <volume id>"), for the tests to count.
//
// It runs as root on the node (not in a pod), like a node plugin with
// hostPath mounts of the kubelet's directory and Bidirectional
// propagation would.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// topologyKey is the topology segment the driver reports.
const topologyKey = "topology.hostpath.csi.nodelet.test/node"

func main() {
	name := flag.String("name", "hostpath.csi.nodelet.test", "driver name")
	rootDir := flag.String("root-dir", "/var/lib/kubelet", "the node agent's root directory")
	stateDir := flag.String("state-dir", "", "where volumes live, one directory per volume handle (required)")
	nodeID := flag.String("node-id", "", "node ID (required)")
	callLog := flag.String("call-log", "", "file every call is appended to")
	flag.Parse()
	if *stateDir == "" || *nodeID == "" {
		log.Fatal("csihostpath: -state-dir and -node-id are required")
	}
	d := &driver{name: *name, nodeID: *nodeID, state: *stateDir, callLog: *callLog}
	d.endpoint = filepath.Join(*rootDir, "plugins", *name, "csi.sock")
	regSocket := filepath.Join(*rootDir, "plugins_registry", *name+"-reg.sock")
	if err := run(d, regSocket); err != nil {
		log.Fatalf("csihostpath: %v", err)
	}
}

func run(d *driver, regSocket string) error {
	if err := os.MkdirAll(d.state, 0o700); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	srv := grpc.NewServer()
	csipb.RegisterIdentityServer(srv, d)
	csipb.RegisterNodeServer(srv, d)
	l, err := listen(d.endpoint)
	if err != nil {
		return err
	}
	reg := grpc.NewServer()
	registerapi.RegisterRegistrationServer(reg, d)
	// The registration socket comes last: the node agent may call the
	// driver as soon as it sees it.
	rl, err := listen(regSocket)
	if err != nil {
		return err
	}
	go func() { _ = srv.Serve(l) }()
	go func() { _ = reg.Serve(rl) }()
	log.Printf("csihostpath: %s serving on %s, registering through %s", d.name, d.endpoint, regSocket)
	<-ctx.Done()
	reg.Stop()
	srv.Stop()
	os.Remove(regSocket)
	os.Remove(d.endpoint)
	return nil
}

func listen(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	return net.Listen("unix", path)
}

type driver struct {
	csipb.UnimplementedIdentityServer
	csipb.UnimplementedNodeServer
	registerapi.UnimplementedRegistrationServer

	name, nodeID, state, endpoint, callLog string

	mu sync.Mutex // serializes the calls and the call log
}

// logCall appends one line to the call log.
func (d *driver) logCall(method string, args ...string) {
	line := strings.Join(append([]string{method}, args...), " ")
	log.Print("csihostpath: ", line)
	if d.callLog == "" {
		return
	}
	f, err := os.OpenFile(d.callLog, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		log.Printf("csihostpath: call log: %v", err)
		return
	}
	defer f.Close()
	fmt.Fprintln(f, line)
}

func (d *driver) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	d.logCall("GetInfo")
	return &registerapi.PluginInfo{Type: registerapi.CSIPlugin, Name: d.name, Endpoint: d.endpoint,
		SupportedVersions: []string{"1.0.0"}}, nil
}

func (d *driver) NotifyRegistrationStatus(_ context.Context, st *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	d.logCall("NotifyRegistrationStatus", fmt.Sprint(st.PluginRegistered), st.Error)
	return &registerapi.RegistrationStatusResponse{}, nil
}

func (d *driver) GetPluginInfo(context.Context, *csipb.GetPluginInfoRequest) (*csipb.GetPluginInfoResponse, error) {
	return &csipb.GetPluginInfoResponse{Name: d.name, VendorVersion: "0.1.0"}, nil
}

func (d *driver) GetPluginCapabilities(context.Context, *csipb.GetPluginCapabilitiesRequest) (*csipb.GetPluginCapabilitiesResponse, error) {
	return &csipb.GetPluginCapabilitiesResponse{}, nil
}

func (d *driver) Probe(context.Context, *csipb.ProbeRequest) (*csipb.ProbeResponse, error) {
	return &csipb.ProbeResponse{}, nil
}

func (d *driver) NodeGetInfo(context.Context, *csipb.NodeGetInfoRequest) (*csipb.NodeGetInfoResponse, error) {
	d.logCall("NodeGetInfo")
	return &csipb.NodeGetInfoResponse{NodeId: d.nodeID, MaxVolumesPerNode: 10,
		AccessibleTopology: &csipb.Topology{Segments: map[string]string{topologyKey: d.nodeID}}}, nil
}

func (d *driver) NodeGetCapabilities(context.Context, *csipb.NodeGetCapabilitiesRequest) (*csipb.NodeGetCapabilitiesResponse, error) {
	rpc := func(t csipb.NodeServiceCapability_RPC_Type) *csipb.NodeServiceCapability {
		return &csipb.NodeServiceCapability{Type: &csipb.NodeServiceCapability_Rpc{Rpc: &csipb.NodeServiceCapability_RPC{Type: t}}}
	}
	return &csipb.NodeGetCapabilitiesResponse{Capabilities: []*csipb.NodeServiceCapability{
		rpc(csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME),
		rpc(csipb.NodeServiceCapability_RPC_GET_VOLUME_STATS),
	}}, nil
}

// volumeDir is the state directory of a volume handle.
func (d *driver) volumeDir(id string) (string, error) {
	if id == "" || id == "." || id == ".." || strings.ContainsAny(id, "/\x00") {
		return "", status.Errorf(codes.InvalidArgument, "volume id %q cannot be a directory name", id)
	}
	return filepath.Join(d.state, id), nil
}

func (d *driver) NodeStageVolume(_ context.Context, req *csipb.NodeStageVolumeRequest) (*csipb.NodeStageVolumeResponse, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.logCall("NodeStageVolume", req.VolumeId, req.StagingTargetPath)
	src, err := d.volumeDir(req.VolumeId)
	if err != nil {
		return nil, err
	}
	if req.StagingTargetPath == "" || req.VolumeCapability == nil {
		return nil, status.Error(codes.InvalidArgument, "staging target path and volume capability are required")
	}
	if err := os.MkdirAll(src, 0o750); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if err := bind(src, req.StagingTargetPath, false); err != nil {
		return nil, err
	}
	return &csipb.NodeStageVolumeResponse{}, nil
}

func (d *driver) NodeUnstageVolume(_ context.Context, req *csipb.NodeUnstageVolumeRequest) (*csipb.NodeUnstageVolumeResponse, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.logCall("NodeUnstageVolume", req.VolumeId, req.StagingTargetPath)
	if err := unbind(req.StagingTargetPath); err != nil {
		return nil, err
	}
	return &csipb.NodeUnstageVolumeResponse{}, nil
}

func (d *driver) NodePublishVolume(_ context.Context, req *csipb.NodePublishVolumeRequest) (*csipb.NodePublishVolumeResponse, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.logCall("NodePublishVolume", req.VolumeId, req.TargetPath)
	if req.TargetPath == "" || req.VolumeCapability == nil {
		return nil, status.Error(codes.InvalidArgument, "target path and volume capability are required")
	}
	src := req.StagingTargetPath
	if src == "" {
		// An inline (ephemeral) volume: straight from the state directory.
		dir, err := d.volumeDir(req.VolumeId)
		if err != nil {
			return nil, err
		}
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
		src = dir
	} else if ok, err := mountPoint(src); err != nil || !ok {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %s is not staged at %s", req.VolumeId, src)
	}
	if err := os.MkdirAll(req.TargetPath, 0o750); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if err := bind(src, req.TargetPath, req.Readonly); err != nil {
		return nil, err
	}
	return &csipb.NodePublishVolumeResponse{}, nil
}

func (d *driver) NodeUnpublishVolume(_ context.Context, req *csipb.NodeUnpublishVolumeRequest) (*csipb.NodeUnpublishVolumeResponse, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.logCall("NodeUnpublishVolume", req.VolumeId, req.TargetPath)
	if err := unbind(req.TargetPath); err != nil {
		return nil, err
	}
	if err := os.Remove(req.TargetPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csipb.NodeUnpublishVolumeResponse{}, nil
}

func (d *driver) NodeGetVolumeStats(_ context.Context, req *csipb.NodeGetVolumeStatsRequest) (*csipb.NodeGetVolumeStatsResponse, error) {
	d.logCall("NodeGetVolumeStats", req.VolumeId, req.VolumePath)
	var st unix.Statfs_t
	if err := unix.Statfs(req.VolumePath, &st); err != nil {
		return nil, status.Errorf(codes.NotFound, "statfs %s: %v", req.VolumePath, err)
	}
	bs := int64(st.Bsize)
	return &csipb.NodeGetVolumeStatsResponse{Usage: []*csipb.VolumeUsage{
		{Unit: csipb.VolumeUsage_BYTES, Total: int64(st.Blocks) * bs, Available: int64(st.Bavail) * bs, Used: int64(st.Blocks-st.Bfree) * bs},
		{Unit: csipb.VolumeUsage_INODES, Total: int64(st.Files), Available: int64(st.Ffree), Used: int64(st.Files - st.Ffree)},
	}}, nil
}

// bind bind-mounts src onto target unless target already is a mount point
// (the calls are idempotent), read-only on request.
func bind(src, target string, readOnly bool) error {
	if ok, err := mountPoint(target); err != nil {
		return status.Error(codes.Internal, err.Error())
	} else if ok {
		return nil
	}
	if err := unix.Mount(src, target, "", unix.MS_BIND, ""); err != nil {
		return status.Errorf(codes.Internal, "bind-mounting %s on %s: %v", src, target, err)
	}
	if readOnly {
		if err := unix.Mount("", target, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
			_ = unix.Unmount(target, 0)
			return status.Errorf(codes.Internal, "remounting %s read-only: %v", target, err)
		}
	}
	return nil
}

// unbind unmounts target if it is a mount point.
func unbind(target string) error {
	ok, err := mountPoint(target)
	if err != nil || !ok {
		return nil // gone or never mounted: done
	}
	if err := unix.Unmount(target, 0); err != nil {
		return status.Errorf(codes.Internal, "unmounting %s: %v", target, err)
	}
	return nil
}

// mountPoint tells whether path is the root of a mount (statx, Linux 5.8+).
func mountPoint(path string) (bool, error) {
	var stx unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, path, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_TYPE, &stx); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return false, nil
		}
		return false, err
	}
	return stx.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0, nil
}
