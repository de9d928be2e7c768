package cpumanager

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/pure/cpuset"
	"github.com/nodelet/nodelet/internal/pure/podspec"
)

// Options configure the CPU manager by the kubelet's names.
type Options struct {
	// Policy is cpuManagerPolicy: none (the default, "") or static.
	Policy string
	// TopologyPolicy is topologyManagerPolicy: none (the default, "") or
	// single-numa-node.
	TopologyPolicy string
	// ReconcilePeriod is cpuManagerReconcilePeriod (10s): how often the
	// cpusets of running containers are brought in line.
	ReconcilePeriod time.Duration
	// RootDir holds the checkpoint (StateFileName).
	RootDir  string
	Topology Topology
	// ReservedSystemCPUs is reservedSystemCPUs; empty: ReservedMilliCPU
	// (kubeReserved plus systemReserved cpu) rounded up.
	ReservedSystemCPUs cpuset.Set
	ReservedMilliCPU   int64
	Clock              clock.WithTicker
	Log                *slog.Logger
}

// Runtime is what reconciling needs of the runtime (cri.Client).
type Runtime interface {
	ListContainers(ctx context.Context, filter *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error)
	UpdateContainerResources(ctx context.Context, id string, res *runtimeapi.ContainerResources) error
}

// Manager is the CPU manager: the policy's state, kept in its checkpoint.
// Construct with New; Run reconciles.
type Manager struct {
	opts   Options
	static bool
	policy Static
	path   string
	log    *slog.Logger

	mu    sync.Mutex
	state State
	// applied is the cpuset last given to each running container by
	// reconciling.
	applied map[string]string
}

// New is the CPU manager of opts, its state restored from the
// checkpoint, which it writes if there was none. A checkpoint of another
// policy, or one that does not fit this machine, refuses to start, as the
// kubelet does: drain the node and remove the file.
func New(opts Options) (*Manager, error) {
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.ReconcilePeriod <= 0 {
		opts.ReconcilePeriod = 10 * time.Second
	}
	m := &Manager{opts: opts, path: filepath.Join(opts.RootDir, StateFileName), log: opts.Log, applied: map[string]string{}}
	switch opts.Policy {
	case "", PolicyNone:
		opts.Policy = PolicyNone
		if opts.TopologyPolicy == TopologyPolicySingleNUMANode {
			// The topology manager has no hint provider to ask: every
			// pod is admitted, as the kubelet's with the none policy.
			m.log.Info("topologyManagerPolicy single-numa-node has nothing to align without cpuManagerPolicy static")
		}
	case PolicyStatic:
		m.static = true
		var err error
		if m.policy, err = NewStatic(opts.Topology, opts.ReservedSystemCPUs, opts.ReservedMilliCPU); err != nil {
			return nil, fmt.Errorf("cpuManagerPolicy static: %w", err)
		}
	default:
		return nil, fmt.Errorf("cpuManagerPolicy %q: want none or static", opts.Policy)
	}
	switch opts.TopologyPolicy {
	case "", TopologyPolicyNone:
	case TopologyPolicySingleNUMANode:
		m.policy.SingleNUMANode = true
	default:
		return nil, fmt.Errorf("topologyManagerPolicy %q: nodelet has none and single-numa-node", opts.TopologyPolicy)
	}
	m.opts = opts
	if err := m.restore(); err != nil {
		return nil, err
	}
	return m, nil
}

// restore reads the checkpoint, or starts from the initial state.
func (m *Manager) restore() error {
	s, ok, err := readState(m.path, m.opts.Policy)
	if err != nil {
		return err
	}
	if !ok {
		s = State{Assignments: map[types.UID]map[string]cpuset.Set{}}
		if m.static {
			s = m.policy.Initial()
		}
	}
	if m.static {
		if err := m.policy.Validate(s); err != nil {
			return fmt.Errorf("could not restore state from checkpoint %s: %w; please drain this node and delete the CPU manager checkpoint file before restarting nodelet", m.path, err)
		}
		m.log.Info("CPU manager: static policy", "reserved", m.policy.Reserved.String(), "shared", s.Default.String(), "topologyManagerPolicy", m.opts.TopologyPolicy)
	}
	m.state = s
	if err := os.MkdirAll(m.opts.RootDir, 0o700); err != nil { // only when missing: the root's own mode is not ours to change
		return fmt.Errorf("CPU manager state: %w", err)
	}
	return writeState(m.path, m.opts.Policy, s)
}

// Admit allocates the CPUs of every container of a new pod (init
// containers first), as the kubelet's resource-allocating admit handler:
// a pod that cannot have them is refused with the kubelet's reason
// (TopologyAffinityError, UnexpectedAdmissionError) and holds nothing.
// It calls nobody: ctx is the admission's, which the device manager needs.
func (m *Manager) Admit(_ context.Context, pod *v1.Pod) (ok bool, reason, message string) {
	err := m.Allocate(pod)
	if err == nil {
		return true, "", ""
	}
	var ae *AdmissionError
	if errors.As(err, &ae) {
		return false, ae.Reason, ae.Message
	}
	return false, ReasonUnexpectedAdmission, fmt.Sprintf("Allocate failed due to %v, which is unexpected", err)
}

// Allocate gives every container of pod its CPUs (those it has already
// are kept) and writes the checkpoint; on an error nothing changes.
func (m *Manager) Allocate(pod *v1.Pod) error {
	if !m.static {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	s, changed := m.state, false
	for _, list := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			_, had := s.Assignments[pod.UID][list[i].Name]
			next, cpus, err := m.policy.Allocate(s, pod, &list[i])
			if err != nil {
				return err
			}
			s, changed = next, changed || !had && !cpus.IsEmpty()
		}
	}
	if !changed { // every sync asks again: no write then
		return nil
	}
	return m.commit(s)
}

// commit makes s the state once it is on disk.
func (m *Manager) commit(s State) error {
	if err := writeState(m.path, m.opts.Policy, s); err != nil {
		return err
	}
	m.state = s
	return nil
}

// RemovePod gives the CPUs of pod uid's containers back to the shared
// pool.
func (m *Manager) RemovePod(uid types.UID) error {
	if !m.static {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.state
	if _, ok := s.Assignments[uid]; !ok {
		return nil
	}
	for _, name := range slices.Sorted(maps.Keys(s.Assignments[uid])) {
		s = m.policy.Remove(s, uid, name)
	}
	return m.commit(s)
}

// Pods are the pods holding CPUs of their own.
func (m *Manager) Pods() []types.UID {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Sorted(maps.Keys(m.state.Assignments))
}

// ContainerCPUs is the cpuset container name of pod uid runs on under the
// static policy (its own CPUs or the shared pool); "" under none (the
// runtime's default, every CPU).
func (m *Manager) ContainerCPUs(uid types.UID, name string) string {
	if !m.static {
		return ""
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.state.ContainerCPUs(uid, name).String()
}

// CPUsFor are the CPUs container of pod podUID has of its own (none
// under the none policy), for the pod-resources API's List and Get
// (podresourcesapi.CPUsProvider).
func (m *Manager) CPUsFor(podUID, container string) []int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return ids(m.state.Assignments[types.UID(podUID)][container])
}

// AllocatableCPUs are the CPUs that can be given exclusively (all but the
// reserved ones; none under the none policy), for the pod-resources
// API's GetAllocatableResources.
func (m *Manager) AllocatableCPUs() []int64 {
	if !m.static {
		return nil
	}
	return ids(m.policy.Topology.CPUs().Difference(m.policy.Reserved))
}

func ids(s cpuset.Set) []int64 {
	var out []int64
	for _, id := range s.List() {
		out = append(out, int64(id))
	}
	return out
}

// Run reconciles every ReconcilePeriod until ctx ends (static policy
// only).
func (m *Manager) Run(ctx context.Context, rt Runtime) {
	if !m.static {
		return
	}
	t := m.opts.Clock.NewTicker(m.opts.ReconcilePeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			m.Reconcile(ctx, rt)
		}
	}
}

// Reconcile gives every running container the cpuset it should have, as
// the kubelet's reconcileState: containers on the shared pool follow it
// as exclusive CPUs are taken from it and given back. A container whose
// update fails is tried again next time.
func (m *Manager) Reconcile(ctx context.Context, rt Runtime) {
	list, err := rt.ListContainers(ctx, &runtimeapi.ContainerFilter{State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING}})
	if err != nil {
		m.log.Warn("CPU manager: cannot list running containers", "err", err)
		return
	}
	seen := map[string]bool{}
	for _, c := range list {
		uid, name := c.GetLabels()[podspec.LabelPodUID], c.GetLabels()[podspec.LabelContainerName]
		if uid == "" || name == "" {
			continue
		}
		seen[c.Id] = true
		want := m.ContainerCPUs(types.UID(uid), name)
		if want == "" || m.applied[c.Id] == want {
			continue
		}
		res := &runtimeapi.ContainerResources{Linux: &runtimeapi.LinuxContainerResources{CpusetCpus: want}}
		if err := rt.UpdateContainerResources(ctx, c.Id, res); err != nil {
			m.log.Warn("CPU manager: cannot update the container's cpuset", "podUID", uid, "container", name, "containerID", c.Id, "cpuset", want, "err", err)
			continue
		}
		m.applied[c.Id] = want
	}
	for id := range m.applied {
		if !seen[id] {
			delete(m.applied, id)
		}
	}
}
