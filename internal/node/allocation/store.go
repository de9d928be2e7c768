// Package allocation is beside the pipeline, with the pod workers: it keeps
// what the node has allocated to each pod and what it has actuated, as the
// kubelet's allocation checkpoints (allocated_pods_state and
// actuated_pods_state under its root directory) keep them, so a restarted
// nodelet neither forgets an accepted resize nor takes a pending one for
// accepted. One file, <root-dir>/allocated_pods_state, written atomically
// (temp file, fsync, rename) on every change but a new pod's admission
// (staged, carried by the next write: Manager.Admitted), and read once,
// bounded, when nodelet starts; a file that fails its checksum or does not
// parse is kept beside it as .corrupt, logged, and nodelet starts from the
// pods' specs, as the kubelet does with a checkpoint it cannot restore.
package allocation

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"sort"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/internal/base/atomicfile"
	"github.com/nodelet/nodelet/internal/base/bounded"
	"github.com/nodelet/nodelet/internal/pure/resize"
)

// FileName is the store's file under the root directory.
const FileName = "allocated_pods_state"

// maxFile bounds the file read at start: a few KiB a pod, for thousands.
const maxFile = 32 << 20

const version = "v1"

// Record is what the node holds for one pod.
type Record struct {
	// Allocated is what the pod was admitted with or last resized to.
	Allocated resize.Allocation `json:"allocated"`
	// Actuated is what each container was last given by the runtime, by
	// container name (the kubelet's actuated state); a container missing
	// here has not been given anything yet.
	Actuated map[string]resize.Resources `json:"actuated,omitempty"`
}

// file is the on-disk form.
type file struct {
	Version  string               `json:"version"`
	Pods     map[types.UID]Record `json:"pods"`
	Checksum string               `json:"checksum"`
}

// Store is the allocation of every pod the node holds. Safe for
// concurrent use.
type Store struct {
	path string
	mu   sync.Mutex
	pods map[types.UID]Record
	// staged: pods holds a change the file does not (Stage).
	staged bool
}

// Open reads the store at path (a missing file is an empty store). A
// corrupt file is renamed to path+".corrupt", logged, and the store starts
// empty; any other read error is returned.
func Open(path string, log *slog.Logger) (*Store, error) {
	s := &Store{path: path, pods: map[types.UID]Record{}}
	data, err := bounded.ReadFile(path, maxFile)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return s, nil
	case errors.Is(err, bounded.ErrTooLarge):
		return s.setAside(log, err)
	case err != nil:
		return nil, fmt.Errorf("read pod allocations: %w", err)
	}
	pods, err := decode(data)
	if err != nil {
		return s.setAside(log, err)
	}
	s.pods = pods
	return s, nil
}

func (s *Store) setAside(log *slog.Logger, cause error) (*Store, error) {
	aside := s.path + ".corrupt"
	if err := os.Rename(s.path, aside); err != nil {
		return nil, fmt.Errorf("set aside corrupt pod allocations (%v): %w", cause, err)
	}
	log.Error("Pod allocations could not be restored; starting from the pods' specs", "path", s.path, "keptAs", aside, "err", cause)
	return s, nil
}

func decode(data []byte) (map[types.UID]Record, error) {
	var f file
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("parse pod allocations: %w", err)
	}
	if f.Version != version {
		return nil, fmt.Errorf("pod allocations: version %q, want %q", f.Version, version)
	}
	if f.Pods == nil {
		f.Pods = map[types.UID]Record{}
	}
	sum, err := checksum(f.Pods)
	if err != nil {
		return nil, err
	}
	if sum != f.Checksum {
		return nil, fmt.Errorf("pod allocations: checksum %q does not match the content (%q)", f.Checksum, sum)
	}
	return f.Pods, nil
}

func checksum(pods map[types.UID]Record) (string, error) {
	b, err := json.Marshal(pods) // map keys are sorted: canonical
	if err != nil {
		return "", fmt.Errorf("encode pod allocations: %w", err)
	}
	h := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(h[:]), nil
}

// Get is pod uid's record (a copy).
func (s *Store) Get(uid types.UID) (Record, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.pods[uid]
	return r.clone(), ok
}

// clone is a deep copy: records leave the store only as copies.
func (r Record) clone() Record {
	out := Record{Allocated: resize.Allocation{Pod: r.Allocated.Pod.DeepCopy()}}
	if r.Allocated.Containers != nil {
		out.Allocated.Containers = make(map[string]v1.ResourceRequirements, len(r.Allocated.Containers))
		for k, v := range r.Allocated.Containers {
			out.Allocated.Containers[k] = *v.DeepCopy()
		}
	}
	if r.Allocated.MemoryVolumes != nil {
		out.Allocated.MemoryVolumes = make(map[string]resource.Quantity, len(r.Allocated.MemoryVolumes))
		for k, v := range r.Allocated.MemoryVolumes {
			out.Allocated.MemoryVolumes[k] = v.DeepCopy()
		}
	}
	if r.Actuated != nil {
		out.Actuated = make(map[string]resize.Resources, len(r.Actuated))
		for k, v := range r.Actuated {
			out.Actuated[k] = v
		}
	}
	return out
}

// UIDs are the pods with a record, sorted.
func (s *Store) UIDs() []types.UID {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]types.UID, 0, len(s.pods))
	for uid := range s.pods {
		out = append(out, uid)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// Update changes uid's record through fn (given the record and whether
// there was one) and writes the store; if fn or the write fails, nothing
// changes.
func (s *Store) Update(uid types.UID, fn func(Record, bool) (Record, error)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	old, ok := s.pods[uid]
	r, err := fn(old.clone(), ok)
	if err != nil {
		return err
	}
	next := make(map[types.UID]Record, len(s.pods)+1)
	for k, v := range s.pods {
		next[k] = v
	}
	next[uid] = r.clone()
	return s.commitLocked(next)
}

// Stage is Update without the write: the change is in the store at once
// and in the file with the next write (Update, or Retain, which writes
// when something is staged even if no record goes).
func (s *Store) Stage(uid types.UID, fn func(Record, bool) Record) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old, ok := s.pods[uid]
	s.pods[uid] = fn(old.clone(), ok).clone()
	s.staged = true
}

// Retain drops the records of pods keep says no to (the kubelet's
// RemoveOrphanedPods and RemovePod); nothing is written when none goes
// and nothing was staged.
func (s *Store) Retain(keep func(types.UID) bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	next := make(map[types.UID]Record, len(s.pods))
	for k, v := range s.pods {
		if keep(k) {
			next[k] = v
		}
	}
	if len(next) == len(s.pods) && !s.staged {
		return nil
	}
	return s.commitLocked(next)
}

func (s *Store) commitLocked(pods map[types.UID]Record) error {
	sum, err := checksum(pods)
	if err != nil {
		return err
	}
	data, err := json.Marshal(file{Version: version, Pods: pods, Checksum: sum})
	if err != nil {
		return fmt.Errorf("encode pod allocations: %w", err)
	}
	if err := atomicfile.Write(s.path, data, 0o600); err != nil {
		return fmt.Errorf("write pod allocations: %w", err)
	}
	s.pods, s.staged = pods, false
	return nil
}
