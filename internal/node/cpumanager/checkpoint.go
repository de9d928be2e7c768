package cpumanager

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"maps"
	"slices"

	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/internal/base/atomicfile"
	"github.com/nodelet/nodelet/internal/base/bounded"
	"github.com/nodelet/nodelet/internal/pure/cpuset"
)

// StateFileName is the checkpoint's name in the root directory, the
// kubelet's.
const StateFileName = "cpu_manager_state"

// maxStateFile bounds what is read of the checkpoint (the kubelet's
// checkpoints are at most a few hundred KiB on large nodes).
const maxStateFile = 4 << 20

// checkpoint is the file's JSON, in the kubelet's layout (v2: per pod
// UID, per container name). Checksum is nodelet's own (FNV-32a of the
// file's JSON with checksum 0): a file the kubelet wrote is refused as
// corrupt rather than trusted.
type checkpoint struct {
	PolicyName    string                       `json:"policyName"`
	DefaultCPUSet string                       `json:"defaultCpuSet"`
	Entries       map[string]map[string]string `json:"entries,omitempty"`
	Checksum      uint32                       `json:"checksum"`
}

// encodeState is the checkpoint of s under policy.
func encodeState(policy string, s State) ([]byte, error) {
	cp := checkpoint{PolicyName: policy, DefaultCPUSet: s.Default.String()}
	for uid, byName := range s.Assignments {
		if cp.Entries == nil {
			cp.Entries = map[string]map[string]string{}
		}
		cp.Entries[string(uid)] = map[string]string{}
		for name, cpus := range byName {
			cp.Entries[string(uid)][name] = cpus.String()
		}
	}
	sum, err := cp.sum()
	if err != nil {
		return nil, err
	}
	cp.Checksum = sum
	return json.Marshal(cp)
}

func (cp checkpoint) sum() (uint32, error) {
	cp.Checksum = 0
	b, err := json.Marshal(cp) // maps are written sorted
	if err != nil {
		return 0, err
	}
	h := fnv.New32a()
	h.Write(b)
	return h.Sum32(), nil
}

// decodeState reads a checkpoint written under policy. A different
// policy is refused as the kubelet refuses it.
func decodeState(policy string, b []byte) (State, error) {
	var cp checkpoint
	if err := json.Unmarshal(b, &cp); err != nil {
		return State{}, fmt.Errorf("corrupt checkpoint: %w", err)
	}
	if sum, err := cp.sum(); err != nil || sum != cp.Checksum {
		return State{}, errors.New("corrupt checkpoint: checksum mismatch")
	}
	if cp.PolicyName != policy {
		return State{}, fmt.Errorf("configured policy %q differs from state checkpoint policy %q", policy, cp.PolicyName)
	}
	def, err := cpuset.Parse(cp.DefaultCPUSet)
	if err != nil {
		return State{}, fmt.Errorf("defaultCpuSet: %w", err)
	}
	s := State{Default: def, Assignments: map[types.UID]map[string]cpuset.Set{}}
	for _, uid := range slices.Sorted(maps.Keys(cp.Entries)) {
		s.Assignments[types.UID(uid)] = map[string]cpuset.Set{}
		for name, list := range cp.Entries[uid] {
			cpus, err := cpuset.Parse(list)
			if err != nil {
				return State{}, fmt.Errorf("pod %s container %s: %w", uid, name, err)
			}
			s.Assignments[types.UID(uid)][name] = cpus
		}
	}
	return s, nil
}

// readState reads the checkpoint at path; ok false when there is none.
func readState(path, policy string) (s State, ok bool, err error) {
	b, err := bounded.ReadFile(path, maxStateFile)
	if errors.Is(err, fs.ErrNotExist) {
		return State{}, false, nil
	}
	if err != nil {
		return State{}, false, fmt.Errorf("read %s: %w", path, err)
	}
	s, err = decodeState(policy, b)
	if err != nil {
		return State{}, false, fmt.Errorf("could not restore state from checkpoint %s: %w; please drain this node and delete the CPU manager checkpoint file before restarting nodelet", path, err)
	}
	return s, true, nil
}

// writeState replaces the checkpoint at path atomically, readable by its
// owner only.
func writeState(path, policy string, s State) error {
	b, err := encodeState(policy, s)
	if err != nil {
		return fmt.Errorf("encode CPU manager state: %w", err)
	}
	if err := atomicfile.Write(path, b, 0o600); err != nil {
		return fmt.Errorf("write CPU manager state: %w", err)
	}
	return nil
}
