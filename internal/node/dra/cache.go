package dra

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"maps"
	"slices"

	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/internal/base/atomicfile"
	"github.com/nodelet/nodelet/internal/base/bounded"
)

// StateFile is the checkpoint's name in the root directory, the kubelet's.
const StateFile = "dra_manager_state"

// maxStateFile bounds the checkpoint nodelet reads back.
const maxStateFile = 16 << 20

// checkpointKind and checkpointAPIVersion are the kubelet's, so that the
// file reads the same to both.
const (
	checkpointKind       = "DRACheckpoint"
	checkpointAPIVersion = "checkpoint.dra.kubelet.k8s.io/v1"
)

// Device is one device a driver prepared for a claim.
type Device struct {
	PoolName   string
	DeviceName string
	ShareID    *types.UID `json:",omitempty"`
	// RequestNames are the claim's requests the device serves; none: all.
	RequestNames []string
	// CDIDeviceIDs are the fully qualified CDI device names the runtime
	// injects into the containers that use the device.
	CDIDeviceIDs []string
}

// DriverState is what one driver prepared for a claim.
type DriverState struct {
	Devices []Device
}

// ClaimInfo is one ResourceClaim as prepared on this node, with the pods
// that use it. The field names are the kubelet's ClaimInfoState.
type ClaimInfo struct {
	ClaimUID  types.UID
	ClaimName string
	Namespace string
	// PodUIDs are the pods that use the claim (a set, as JSON an object of
	// UID to empty object, as the kubelet's sets.Set).
	PodUIDs map[string]struct{}
	// DriverState is, per driver of the claim's allocation, what it
	// prepared: empty until its NodePrepareResources answered.
	DriverState map[string]DriverState
	// Prepared is not written: it is read back as whether every driver
	// had answered (its Devices are not null), so that a restarted nodelet
	// neither asks the API server and the drivers again for pods that
	// run (the kubelet prepares only before a new sandbox) nor trusts a
	// claim whose preparation a crash interrupted.
	Prepared bool `json:"-"`
}

func (c ClaimInfo) clone() ClaimInfo {
	c.PodUIDs = maps.Clone(c.PodUIDs)
	c.DriverState = maps.Clone(c.DriverState)
	return c
}

type checkpointData struct {
	Kind               string `json:"kind,omitempty"`
	APIVersion         string `json:"apiVersion,omitempty"`
	ClaimInfoStateList []ClaimInfo
}

type checkpointFile struct {
	Data     string
	Checksum uint32
}

func key(namespace, name string) string { return namespace + "/" + name }

// encodeState is the checkpoint of claims: their JSON, in claim order,
// with its CRC32 (IEEE), as the kubelet's DRA checkpoint.
func encodeState(claims map[string]ClaimInfo) ([]byte, error) {
	list := make([]ClaimInfo, 0, len(claims))
	for _, k := range slices.Sorted(maps.Keys(claims)) {
		list = append(list, claims[k])
	}
	data, err := json.Marshal(checkpointData{Kind: checkpointKind, APIVersion: checkpointAPIVersion, ClaimInfoStateList: list})
	if err != nil {
		return nil, err
	}
	return json.Marshal(checkpointFile{Data: string(data), Checksum: crc32.ChecksumIEEE(data)})
}

// decodeState reads a checkpoint back; a wrong checksum or kind is an
// error, never an empty state.
func decodeState(b []byte) (map[string]ClaimInfo, error) {
	var f checkpointFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	if crc32.ChecksumIEEE([]byte(f.Data)) != f.Checksum {
		return nil, errors.New("checksum mismatch: the file is corrupt")
	}
	var d checkpointData
	if err := json.Unmarshal([]byte(f.Data), &d); err != nil {
		return nil, fmt.Errorf("decode data: %w", err)
	}
	if d.Kind != checkpointKind || d.APIVersion != checkpointAPIVersion {
		return nil, fmt.Errorf("unknown checkpoint kind %q, version %q", d.Kind, d.APIVersion)
	}
	out := make(map[string]ClaimInfo, len(d.ClaimInfoStateList))
	for _, c := range d.ClaimInfoStateList {
		if c.ClaimName == "" || c.Namespace == "" || c.ClaimUID == "" {
			return nil, fmt.Errorf("a claim without name, namespace or UID: %q/%q (%q)", c.Namespace, c.ClaimName, c.ClaimUID)
		}
		if c.PodUIDs == nil {
			c.PodUIDs = map[string]struct{}{}
		}
		if c.DriverState == nil {
			c.DriverState = map[string]DriverState{}
		}
		c.Prepared = answered(c)
		out[key(c.Namespace, c.ClaimName)] = c
	}
	return out, nil
}

// readState reads the checkpoint at path: none is an empty state.
func readState(path string) (map[string]ClaimInfo, error) {
	b, err := bounded.ReadFile(path, maxStateFile)
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]ClaimInfo{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read DRA state %s: %w", path, err)
	}
	out, err := decodeState(b)
	if err != nil {
		return nil, fmt.Errorf("DRA state %s (drain the node and remove the file): %w", path, err)
	}
	return out, nil
}

// writeState replaces the checkpoint at path atomically (0600).
func writeState(path string, claims map[string]ClaimInfo) error {
	b, err := encodeState(claims)
	if err != nil {
		return fmt.Errorf("encode DRA state: %w", err)
	}
	if err := atomicfile.Write(path, b, 0o600); err != nil {
		return fmt.Errorf("write DRA state: %w", err)
	}
	return nil
}

// answered: every driver of the claim recorded its answer.
func answered(c ClaimInfo) bool {
	if len(c.DriverState) == 0 {
		return false
	}
	for _, d := range c.DriverState {
		if d.Devices == nil {
			return false
		}
	}
	return true
}
