package cpumanager

import (
	"fmt"
	"slices"

	"github.com/nodelet/nodelet/internal/pure/cpuset"
)

// CPU is one logical CPU and where it is: its physical core, socket and
// NUMA node (/sys/devices/system/cpu/cpuN/topology, node*/cpulist).
type CPU struct {
	ID, Core, Socket, NUMA int
}

// Topology are the machine's online CPUs.
type Topology []CPU

// CPUs is every CPU of t.
func (t Topology) CPUs() cpuset.Set {
	ids := make([]int, len(t))
	for i, c := range t {
		ids[i] = c.ID
	}
	return cpuset.New(ids...)
}

// NUMANodes are the NUMA nodes of t, ascending.
func (t Topology) NUMANodes() []int {
	var out []int
	for _, c := range t {
		if !slices.Contains(out, c.NUMA) {
			out = append(out, c.NUMA)
		}
	}
	slices.Sort(out)
	return out
}

// OnNUMA are the CPUs of t on NUMA node n.
func (t Topology) OnNUMA(n int) cpuset.Set {
	var ids []int
	for _, c := range t {
		if c.NUMA == n {
			ids = append(ids, c.ID)
		}
	}
	return cpuset.New(ids...)
}

// Take chooses n CPUs of free the way the kubelet's packed
// takeByTopology prefers them: whole free sockets, then whole free cores
// of the sockets with the fewest free CPUs, then single CPUs of the cores
// with the fewest free CPUs, lowest IDs first among equals, so that
// siblings stay together, sockets fill up one after the other and whole
// cores stay whole for later requests.
func (t Topology) Take(free cpuset.Set, n int) (cpuset.Set, error) {
	if n > free.Size() {
		return cpuset.Set{}, fmt.Errorf("not enough cpus available to satisfy request: requested=%d, available=%d", n, free.Size())
	}
	var taken cpuset.Set
	left := free
	freeIn := func(ids []int) int { return cpuset.New(ids...).Intersection(left).Size() }
	socketOf := map[int]int{}
	for _, c := range t {
		socketOf[c.ID] = c.Socket
	}
	// Cores packed: those of the sockets with the fewest free CPUs first.
	packed := func() [][]int {
		cores := t.groups(func(c CPU) int { return c.Socket<<20 | c.Core })
		free := map[int]int{}
		for _, id := range left.List() {
			free[socketOf[id]]++
		}
		slices.SortStableFunc(cores, func(a, b []int) int { return free[socketOf[a[0]]] - free[socketOf[b[0]]] })
		return cores
	}
	takeWhole := func(groups [][]int) {
		for _, ids := range groups {
			set := cpuset.New(ids...)
			if set.IsSubsetOf(left) && set.Size() <= n-taken.Size() {
				taken, left = taken.Union(set), left.Difference(set)
			}
		}
	}
	takeWhole(t.groups(func(c CPU) int { return c.Socket }))
	takeWhole(packed())
	// Single CPUs: from the cores with the fewest free CPUs first.
	byCore := packed()
	slices.SortStableFunc(byCore, func(a, b []int) int { return freeIn(a) - freeIn(b) })
	for _, ids := range byCore {
		for _, id := range ids {
			if taken.Size() < n && left.Contains(id) {
				taken, left = taken.Union(cpuset.New(id)), left.Difference(cpuset.New(id))
			}
		}
	}
	return taken, nil
}

// groups are the CPU IDs of t grouped by key, groups in the order of their
// lowest ID.
func (t Topology) groups(key func(CPU) int) [][]int {
	sorted := slices.Clone(t)
	slices.SortFunc(sorted, func(a, b CPU) int { return a.ID - b.ID })
	var keys []int
	byKey := map[int][]int{}
	for _, c := range sorted {
		k := key(c)
		if _, ok := byKey[k]; !ok {
			keys = append(keys, k)
		}
		byKey[k] = append(byKey[k], c.ID)
	}
	out := make([][]int, len(keys))
	for i, k := range keys {
		out[i] = byKey[k]
	}
	return out
}
