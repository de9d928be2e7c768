// Package cpuset is beside the pipeline: sets of logical CPU IDs in the
// Linux list format ("0-3,6"), as cpuset.cpus, the CRI's cpuset_cpus and
// the kubelet's cpu_manager_state write them. The package is pure.
package cpuset

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// MaxCPU bounds the CPU IDs Parse accepts, so that a hostile "0-2000000000"
// cannot make a huge set.
const MaxCPU = 1 << 14

// Set is a set of CPU IDs; the zero value is empty. Sets are values: no
// operation changes its operands.
type Set struct{ ids []int } // sorted, unique

// New is the set of ids.
func New(ids ...int) Set {
	s := slices.Clone(ids)
	slices.Sort(s)
	return Set{ids: slices.Compact(s)}
}

// Parse reads the list format: comma-separated IDs and inclusive ranges,
// "" the empty set.
func Parse(s string) (Set, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return Set{}, nil
	}
	var ids []int
	for part := range strings.SplitSeq(s, ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(part), "-")
		a, err := parseID(lo)
		if err != nil {
			return Set{}, fmt.Errorf("cpuset %q: %w", s, err)
		}
		b := a
		if isRange {
			if b, err = parseID(hi); err != nil {
				return Set{}, fmt.Errorf("cpuset %q: %w", s, err)
			}
			if b < a {
				return Set{}, fmt.Errorf("cpuset %q: range %d-%d is reversed", s, a, b)
			}
		}
		for id := a; id <= b; id++ {
			ids = append(ids, id)
		}
	}
	return New(ids...), nil
}

func parseID(s string) (int, error) {
	id, err := strconv.Atoi(s)
	if err != nil || id < 0 || id > MaxCPU {
		return 0, fmt.Errorf("CPU %q: want an integer from 0 to %d", s, MaxCPU)
	}
	return id, nil
}

// String is the list format, ranges of three or more IDs collapsed
// ("0-2,5,7-9"); "" for the empty set.
func (s Set) String() string {
	var b strings.Builder
	for i := 0; i < len(s.ids); {
		j := i
		for j+1 < len(s.ids) && s.ids[j+1] == s.ids[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(s.ids[i]))
		if j > i {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(s.ids[j]))
		}
		i = j + 1
	}
	return b.String()
}

// Size is the number of CPUs.
func (s Set) Size() int { return len(s.ids) }

// IsEmpty says whether s has no CPU.
func (s Set) IsEmpty() bool { return len(s.ids) == 0 }

// List is the IDs, ascending.
func (s Set) List() []int { return slices.Clone(s.ids) }

// Contains says whether id is in s.
func (s Set) Contains(id int) bool {
	_, ok := slices.BinarySearch(s.ids, id)
	return ok
}

// Equals says whether s and o hold the same CPUs.
func (s Set) Equals(o Set) bool { return slices.Equal(s.ids, o.ids) }

// IsSubsetOf says whether every CPU of s is in o.
func (s Set) IsSubsetOf(o Set) bool { return s.Difference(o).IsEmpty() }

// Union is the CPUs in s or o.
func (s Set) Union(o Set) Set { return New(append(slices.Clone(s.ids), o.ids...)...) }

// Intersection is the CPUs in both s and o.
func (s Set) Intersection(o Set) Set { return s.filter(o.Contains) }

// Difference is the CPUs of s not in o.
func (s Set) Difference(o Set) Set {
	return s.filter(func(id int) bool { return !o.Contains(id) })
}

func (s Set) filter(keep func(int) bool) Set {
	var out []int
	for _, id := range s.ids {
		if keep(id) {
			out = append(out, id)
		}
	}
	return Set{ids: out}
}
