// Package cpumanager is beside the pod workers (stage 4): the kubelet's
// CPU manager with its static policy (cpuManagerPolicy: static). A
// container of a Guaranteed pod that requests a whole number of CPUs gets
// CPUs of its own, taken from the shared pool; every other container runs
// on the shared pool, which always keeps the reserved CPUs
// (reservedSystemCPUs, or as many as kubeReserved plus systemReserved
// cpu). The decisions (static.go, topology.go) are pure functions of a
// State; the State is checkpointed under the root directory
// (cpu_manager_state, checkpoint.go) so that assignments survive a
// restart.
package cpumanager

import (
	"fmt"
	"maps"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/internal/pure/cpuset"
	"github.com/nodelet/nodelet/internal/pure/podspec"
)

// Policy names (cpuManagerPolicy).
const (
	PolicyNone   = "none"
	PolicyStatic = "static"
)

// State is what the static policy keeps: the shared pool and the
// exclusive CPUs of each container, by pod UID and container name.
type State struct {
	// Default is the shared pool: every CPU not assigned, the reserved
	// ones included.
	Default     cpuset.Set
	Assignments map[types.UID]map[string]cpuset.Set
}

// clone is a deep copy of s, so that a decision never changes its input.
func (s State) clone() State {
	out := State{Default: s.Default, Assignments: make(map[types.UID]map[string]cpuset.Set, len(s.Assignments))}
	for uid, byName := range s.Assignments {
		out.Assignments[uid] = maps.Clone(byName)
	}
	return out
}

// Static is the static policy on one machine.
type Static struct {
	Topology Topology
	// Reserved are the CPUs never given exclusively (NewStatic).
	Reserved cpuset.Set
	// SingleNUMANode is topologyManagerPolicy single-numa-node: a
	// container's exclusive CPUs all come from one NUMA node, or the pod
	// is refused (TopologyAffinityError).
	SingleNUMANode bool
}

// The topology manager's policies (topologyManagerPolicy) nodelet has.
const (
	TopologyPolicyNone           = "none"
	TopologyPolicySingleNUMANode = "single-numa-node"
)

// The kubelet's admission reasons of resource allocation.
const (
	// ReasonTopologyAffinity refuses a pod whose resources cannot be
	// aligned as topologyManagerPolicy asks.
	ReasonTopologyAffinity = "TopologyAffinityError"
	// ReasonUnexpectedAdmission refuses a pod whose resources cannot be
	// allocated (not enough CPUs).
	ReasonUnexpectedAdmission = "UnexpectedAdmissionError"
)

// AdmissionError is an allocation refused with one of the kubelet's
// admission reasons.
type AdmissionError struct {
	Reason, Message string
}

func (e *AdmissionError) Error() string { return e.Message }

// errTopologyAffinity is the topology manager's refusal.
var errTopologyAffinity = &AdmissionError{Reason: ReasonTopologyAffinity, Message: "Resources cannot be allocated with Topology locality"}

// NewStatic is the static policy of topo with the reserved CPUs: the
// explicit reservedSystemCPUs when set, else reservedMilliCPU (kubeReserved
// plus systemReserved cpu) rounded up to whole CPUs, taken as the
// kubelet takes them (whole cores first, lowest IDs). The static policy
// needs at least one reserved CPU.
func NewStatic(topo Topology, reservedSystemCPUs cpuset.Set, reservedMilliCPU int64) (Static, error) {
	all := topo.CPUs()
	if !reservedSystemCPUs.IsEmpty() {
		if !reservedSystemCPUs.IsSubsetOf(all) {
			return Static{}, fmt.Errorf("reservedSystemCPUs %s: not all of them are online CPUs (%s)", reservedSystemCPUs, all)
		}
		return Static{Topology: topo, Reserved: reservedSystemCPUs}, nil
	}
	n := int((reservedMilliCPU + 999) / 1000)
	if n == 0 {
		return Static{}, fmt.Errorf("the static policy requires systemreserved.cpu + kubereserved.cpu to be greater than zero")
	}
	reserved, err := topo.Take(all, n)
	if err != nil {
		return Static{}, fmt.Errorf("reserve %d CPUs: %w", n, err)
	}
	return Static{Topology: topo, Reserved: reserved}, nil
}

// Initial is the state of a node without assignments: every CPU shared.
func (p Static) Initial() State {
	return State{Default: p.Topology.CPUs(), Assignments: map[types.UID]map[string]cpuset.Set{}}
}

// Validate checks a restored state against the machine, as the kubelet's
// validateState: the shared pool holds the reserved CPUs, no CPU is both
// shared and assigned, and together they are the machine's CPUs (a state
// written on a machine with other CPUs is refused: drain the node and
// remove the file).
func (p Static) Validate(s State) error {
	if !p.Reserved.IsSubsetOf(s.Default) {
		return fmt.Errorf("not all reserved cpus: %q are present in defaultCpuSet: %q", p.Reserved, s.Default)
	}
	all := s.Default
	for uid, byName := range s.Assignments {
		for name, cpus := range byName {
			if !cpus.Intersection(s.Default).IsEmpty() {
				return fmt.Errorf("pod: %s, container: %s cpuset: %q overlaps with default cpuset %q", uid, name, cpus, s.Default)
			}
			all = all.Union(cpus)
		}
	}
	if !all.Equals(p.Topology.CPUs()) {
		return fmt.Errorf("current set of available CPUs %q doesn't match with CPUs in state %q", p.Topology.CPUs(), all)
	}
	return nil
}

// ExclusiveCPUs is how many CPUs of its own container c of pod gets: its
// CPU request when the pod is Guaranteed and the request a whole number,
// else 0 (the shared pool).
func ExclusiveCPUs(pod *v1.Pod, c *v1.Container) int {
	if podspec.QOSClass(pod) != v1.PodQOSGuaranteed {
		return 0
	}
	milli := c.Resources.Requests.Cpu().MilliValue()
	if milli <= 0 || milli%1000 != 0 {
		return 0
	}
	return int(milli / 1000)
}

// Allocate is the state after container c of pod is given its CPUs, and
// those CPUs: exclusive ones for a container that gets some (the ones it
// has if it has them already), else none (it runs on the shared pool).
// CPUs of the pod's init containers (not sidecars) are free to its later
// containers, as init containers have finished before they start. Not
// enough free CPUs is an error, as the kubelet's.
func (p Static) Allocate(s State, pod *v1.Pod, c *v1.Container) (State, cpuset.Set, error) {
	n := ExclusiveCPUs(pod, c)
	if n == 0 {
		return s, cpuset.Set{}, nil
	}
	if cpus, ok := s.Assignments[pod.UID][c.Name]; ok {
		return s, cpus, nil
	}
	reusable := p.reusable(s, pod, c)
	free := s.Default.Difference(p.Reserved).Union(reusable)
	// The topology manager asks first: without a NUMA node that has
	// enough free CPUs there is no preferred hint.
	if p.SingleNUMANode {
		node, ok := p.numaNodeFor(free, n)
		if !ok {
			return s, cpuset.Set{}, errTopologyAffinity
		}
		free, reusable = free.Intersection(p.Topology.OnNUMA(node)), reusable.Intersection(p.Topology.OnNUMA(node))
	}
	if n > free.Size() {
		return s, cpuset.Set{}, fmt.Errorf("not enough cpus available to satisfy request: requested=%d, available=%d", n, free.Size())
	}
	// Reused CPUs first, so that the shared pool shrinks the least.
	cpus, err := p.Topology.Take(reusable, min(n, reusable.Size()))
	if err == nil && cpus.Size() < n {
		var more cpuset.Set
		more, err = p.Topology.Take(free.Difference(cpus), n-cpus.Size())
		cpus = cpus.Union(more)
	}
	if err != nil {
		return s, cpuset.Set{}, err
	}
	out := s.clone()
	out.Default = out.Default.Difference(cpus)
	if out.Assignments[pod.UID] == nil {
		out.Assignments[pod.UID] = map[string]cpuset.Set{}
	}
	out.Assignments[pod.UID][c.Name] = cpus
	return out, cpus, nil
}

// numaNodeFor is the NUMA node n CPUs of free are taken from under
// single-numa-node: the lowest with enough free CPUs, as the topology
// manager merges the CPU manager's hints (every single-node hint is
// equally narrow; the lowest wins). None: the request cannot be aligned.
func (p Static) numaNodeFor(free cpuset.Set, n int) (int, bool) {
	for _, node := range p.Topology.NUMANodes() {
		if free.Intersection(p.Topology.OnNUMA(node)).Size() >= n {
			return node, true
		}
	}
	return 0, false
}

// reusable are the CPUs of pod's init containers (not sidecars) before
// c in the pod that no later container of the pod holds.
func (p Static) reusable(s State, pod *v1.Pod, c *v1.Container) cpuset.Set {
	var out, held cpuset.Set
	for i := range pod.Spec.InitContainers {
		ic := &pod.Spec.InitContainers[i]
		if ic.Name == c.Name {
			break
		}
		cpus := s.Assignments[pod.UID][ic.Name]
		if podspec.IsSidecar(ic) {
			held = held.Union(cpus)
		} else {
			out = out.Union(cpus)
		}
	}
	for name, cpus := range s.Assignments[pod.UID] {
		if !isInitContainer(pod, name) {
			held = held.Union(cpus)
		}
	}
	return out.Difference(held)
}

func isInitContainer(pod *v1.Pod, name string) bool {
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == name && !podspec.IsSidecar(&pod.Spec.InitContainers[i]) {
			return true
		}
	}
	return false
}

// Remove is the state after container name of pod uid no longer holds its
// CPUs: those no other container of the pod holds go back to the shared
// pool.
func (p Static) Remove(s State, uid types.UID, name string) State {
	cpus, ok := s.Assignments[uid][name]
	if !ok {
		return s
	}
	out := s.clone()
	delete(out.Assignments[uid], name)
	for _, other := range out.Assignments[uid] {
		cpus = cpus.Difference(other)
	}
	if len(out.Assignments[uid]) == 0 {
		delete(out.Assignments, uid)
	}
	out.Default = out.Default.Union(cpus)
	return out
}

// ContainerCPUs is the cpuset container name of pod uid runs on: its own
// CPUs, else the shared pool.
func (s State) ContainerCPUs(uid types.UID, name string) cpuset.Set {
	if cpus, ok := s.Assignments[uid][name]; ok {
		return cpus
	}
	return s.Default
}
