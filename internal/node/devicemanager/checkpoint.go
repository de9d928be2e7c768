package devicemanager

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"slices"

	"google.golang.org/protobuf/proto"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/nodelet/nodelet/internal/base/atomicfile"
	"github.com/nodelet/nodelet/internal/base/bounded"
)

// CheckpointFile is the kubelet's name of the allocation checkpoint, in
// the device plugin directory.
const CheckpointFile = "kubelet_internal_checkpoint"

// maxCheckpoint bounds the checkpoint nodelet reads back.
const maxCheckpoint = 16 << 20

// checkpoint is the file's content: the kubelet's shape (Data with the
// pod device entries and the registered devices, and a checksum of it),
// with nodelet's checksum, a SHA-256 of Data as JSON.
type checkpoint struct {
	Data     checkpointData
	Checksum string
}

type checkpointData struct {
	PodDeviceEntries []podDeviceEntry
	// RegisteredDevices are the devices of every resource, so that a
	// restarted nodelet reports them (unhealthy) until their plugin is
	// back.
	RegisteredDevices map[string][]string
}

// podDeviceEntry is what one container holds of one resource.
type podDeviceEntry struct {
	PodUID        string
	ContainerName string
	ResourceName  string
	DeviceIDs     []string
	// AllocResp is the plugin's ContainerAllocateResponse, as protobuf.
	AllocResp []byte
}

func sum(d checkpointData) (string, error) {
	b, err := json.Marshal(d)
	if err != nil {
		return "", fmt.Errorf("encode checkpoint: %w", err)
	}
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:]), nil
}

// writeCheckpoint replaces the checkpoint at path with the allocations
// and registered devices given, atomically.
func writeCheckpoint(path string, allocs allocations, registered map[string][]string) error {
	d := checkpointData{RegisteredDevices: registered}
	for _, a := range allocs.sorted() {
		resp, err := proto.Marshal(a.resp)
		if err != nil {
			return fmt.Errorf("encode allocation of %s/%s: %w", a.podUID, a.container, err)
		}
		d.PodDeviceEntries = append(d.PodDeviceEntries, podDeviceEntry{
			PodUID: a.podUID, ContainerName: a.container, ResourceName: a.resource, DeviceIDs: a.devices, AllocResp: resp,
		})
	}
	s, err := sum(d)
	if err != nil {
		return err
	}
	b, err := json.Marshal(checkpoint{Data: d, Checksum: s})
	if err != nil {
		return fmt.Errorf("encode checkpoint: %w", err)
	}
	if err := atomicfile.Write(path, b, 0o600); err != nil {
		return fmt.Errorf("write device checkpoint: %w", err)
	}
	return nil
}

// readCheckpoint reads the checkpoint at path back; a missing file is an
// empty one. A file that is corrupt (or written by another program) is an
// error: the caller decides what to keep.
func readCheckpoint(path string) (allocations, map[string][]string, error) {
	b, err := bounded.ReadFile(path, maxCheckpoint)
	if errors.Is(err, fs.ErrNotExist) {
		return allocations{}, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("read device checkpoint: %w", err)
	}
	var c checkpoint
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, nil, fmt.Errorf("device checkpoint %s: %w", path, err)
	}
	want, err := sum(c.Data)
	if err != nil {
		return nil, nil, err
	}
	if c.Checksum != want {
		return nil, nil, fmt.Errorf("device checkpoint %s: checksum mismatch", path)
	}
	out := allocations{}
	for _, e := range c.Data.PodDeviceEntries {
		resp := &pluginapi.ContainerAllocateResponse{}
		if err := proto.Unmarshal(e.AllocResp, resp); err != nil {
			return nil, nil, fmt.Errorf("device checkpoint %s: allocation of %s/%s: %w", path, e.PodUID, e.ContainerName, err)
		}
		out.set(allocation{podUID: e.PodUID, container: e.ContainerName, resource: e.ResourceName,
			devices: slices.Clone(e.DeviceIDs), resp: resp})
	}
	return out, c.Data.RegisteredDevices, nil
}
