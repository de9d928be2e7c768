package csi

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// Timeouts of the calls to plugins. The kubelet gives the node operations
// of a driver two minutes (csiTimeout); the registration calls are short,
// so that a socket that never answers cannot hold a registration.
const (
	infoTimeout      = 10 * time.Second
	operationTimeout = 2 * time.Minute
	// maxMessage bounds what nodelet reads from a plugin.
	maxMessage = 4 << 20
)

// dial connects to the unix socket at path. Nothing is sent until the first
// call, which then waits at most for its context.
func dial(path string) (*grpc.ClientConn, error) {
	if !filepath.IsAbs(path) {
		return nil, fmt.Errorf("socket %q is not an absolute path", path)
	}
	conn, err := grpc.NewClient("unix://"+path,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessage)),
	)
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", path, err)
	}
	return conn, nil
}

// nodeClient is the Node and Identity services of one driver, a connection
// per use as the kubelet's csiDriverClient makes one per operation.
type nodeClient struct {
	conn *grpc.ClientConn
	node csipb.NodeClient
}

func newNodeClient(endpoint string) (*nodeClient, error) {
	conn, err := dial(endpoint)
	if err != nil {
		return nil, err
	}
	return &nodeClient{conn: conn, node: csipb.NewNodeClient(conn)}, nil
}

func (c *nodeClient) Close() error { return c.conn.Close() }

// nodeCaps are the node service capabilities nodelet acts on.
type nodeCaps struct {
	stageUnstage bool
	volumeStats  bool
	mountGroup   bool
}

func (c *nodeClient) capabilities(ctx context.Context) (nodeCaps, error) {
	ctx, cancel := context.WithTimeout(ctx, infoTimeout)
	defer cancel()
	resp, err := c.node.NodeGetCapabilities(ctx, &csipb.NodeGetCapabilitiesRequest{})
	if err != nil {
		return nodeCaps{}, fmt.Errorf("NodeGetCapabilities: %w", err)
	}
	var caps nodeCaps
	for _, c := range resp.GetCapabilities() {
		switch c.GetRpc().GetType() {
		case csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME:
			caps.stageUnstage = true
		case csipb.NodeServiceCapability_RPC_GET_VOLUME_STATS:
			caps.volumeStats = true
		case csipb.NodeServiceCapability_RPC_VOLUME_MOUNT_GROUP:
			caps.mountGroup = true
		}
	}
	return caps, nil
}

func (c *nodeClient) nodeInfo(ctx context.Context) (*csipb.NodeGetInfoResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, infoTimeout)
	defer cancel()
	resp, err := c.node.NodeGetInfo(ctx, &csipb.NodeGetInfoRequest{})
	if err != nil {
		return nil, fmt.Errorf("NodeGetInfo: %w", err)
	}
	return resp, nil
}

func (c *nodeClient) stage(ctx context.Context, req *csipb.NodeStageVolumeRequest) error {
	ctx, cancel := context.WithTimeout(ctx, operationTimeout)
	defer cancel()
	if _, err := c.node.NodeStageVolume(ctx, req); err != nil {
		return fmt.Errorf("NodeStageVolume: %w", err)
	}
	return nil
}

func (c *nodeClient) unstage(ctx context.Context, volumeID, stagingPath string) error {
	ctx, cancel := context.WithTimeout(ctx, operationTimeout)
	defer cancel()
	_, err := c.node.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: volumeID, StagingTargetPath: stagingPath})
	if err != nil {
		return fmt.Errorf("NodeUnstageVolume: %w", err)
	}
	return nil
}

func (c *nodeClient) publish(ctx context.Context, req *csipb.NodePublishVolumeRequest) error {
	ctx, cancel := context.WithTimeout(ctx, operationTimeout)
	defer cancel()
	if _, err := c.node.NodePublishVolume(ctx, req); err != nil {
		return fmt.Errorf("NodePublishVolume: %w", err)
	}
	return nil
}

func (c *nodeClient) unpublish(ctx context.Context, volumeID, targetPath string) error {
	ctx, cancel := context.WithTimeout(ctx, operationTimeout)
	defer cancel()
	_, err := c.node.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: volumeID, TargetPath: targetPath})
	if err != nil {
		return fmt.Errorf("NodeUnpublishVolume: %w", err)
	}
	return nil
}

func (c *nodeClient) volumeStats(ctx context.Context, volumeID, volumePath, stagingPath string) (*csipb.NodeGetVolumeStatsResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, infoTimeout)
	defer cancel()
	resp, err := c.node.NodeGetVolumeStats(ctx, &csipb.NodeGetVolumeStatsRequest{
		VolumeId: volumeID, VolumePath: volumePath, StagingTargetPath: stagingPath,
	})
	if err != nil {
		return nil, fmt.Errorf("NodeGetVolumeStats: %w", err)
	}
	return resp, nil
}
