package eviction

import (
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// Observation is one signal's reading: what is available of how much,
// and when it was read.
type Observation struct {
	Available, Capacity int64
	Time                time.Time
}

// Observations are the signals read at once.
type Observations map[Signal]Observation

// Observe reads the signals from a stats summary, as the kubelet's
// makeSignalObservations. A signal whose stats are missing is not
// observed, and no threshold of it is met.
func Observe(s *statsapi.Summary) Observations {
	obs := Observations{}
	if s == nil {
		return obs
	}
	n := s.Node
	if m := n.Memory; m != nil && m.AvailableBytes != nil && m.WorkingSetBytes != nil {
		obs[SignalMemoryAvailable] = Observation{
			Available: int64(*m.AvailableBytes),
			Capacity:  int64(*m.AvailableBytes + *m.WorkingSetBytes),
			Time:      m.Time.Time,
		}
	}
	fsObserve := func(fs *statsapi.FsStats, bytes, inodes Signal) {
		if fs == nil {
			return
		}
		if fs.AvailableBytes != nil && fs.CapacityBytes != nil {
			obs[bytes] = Observation{Available: int64(*fs.AvailableBytes), Capacity: int64(*fs.CapacityBytes), Time: fs.Time.Time}
		}
		if fs.InodesFree != nil && fs.Inodes != nil {
			obs[inodes] = Observation{Available: int64(*fs.InodesFree), Capacity: int64(*fs.Inodes), Time: fs.Time.Time}
		}
	}
	fsObserve(n.Fs, SignalNodeFsAvailable, SignalNodeFsInodesFree)
	if n.Runtime != nil {
		fsObserve(n.Runtime.ImageFs, SignalImageFsAvailable, SignalImageFsInodesFree)
	}
	if r := n.Rlimit; r != nil && r.MaxPID != nil && r.NumOfRunningProcesses != nil {
		obs[SignalPIDAvailable] = Observation{
			Available: *r.MaxPID - *r.NumOfRunningProcesses,
			Capacity:  *r.MaxPID,
			Time:      r.Time.Time,
		}
	}
	return obs
}

// met reports whether t is met by obs; with minReclaim, whether it is
// still met once its minimum reclaim is added (it was met, and not enough
// has been reclaimed yet).
func met(t Threshold, obs Observations, minReclaim bool) bool {
	o, ok := obs[t.Signal]
	if !ok {
		return false
	}
	want := t.Value.Of(o.Capacity)
	if minReclaim && t.MinReclaim != nil {
		want += t.MinReclaim.Of(o.Capacity)
	}
	return want > o.Available
}

// State is what the eviction manager remembers between two decisions.
// The zero value is ready to use.
type State struct {
	// firstObserved is, per threshold (by index), since when it has been
	// met, grace periods ignored.
	firstObserved map[int]time.Time
	// conditionSeen is when each node condition was last observed.
	conditionSeen map[v1.NodeConditionType]time.Time
	// met are the thresholds met with their grace periods at the last
	// decision: they stay met until their minimum reclaim is reclaimed.
	met []int
	// last are the observations of the last decision.
	last Observations
}

// Decision is what one look at the signals decided.
type Decision struct {
	// Conditions are the node's pressure conditions, sorted: those
	// observed within the transition period.
	Conditions []v1.NodeConditionType
	// Met are the thresholds met with their grace periods.
	Met []Threshold
	// Reclaim is the threshold to reclaim for now, nil for none: met,
	// its grace period over, and observed anew since the last decision.
	Reclaim *Threshold
	// Resource is what Reclaim reclaims.
	Resource v1.ResourceName
}

// Decide is one step of the kubelet's synchronize, without the I/O: from
// the thresholds, what was remembered and the signals now, the node's
// conditions and what to reclaim. It updates st.
func Decide(thresholds []Threshold, st *State, obs Observations, transition time.Duration, now time.Time) Decision {
	metNow := map[int]bool{}
	for i, t := range thresholds {
		if met(t, obs, false) {
			metNow[i] = true
		}
	}
	for _, i := range st.met {
		if i < len(thresholds) && met(thresholds[i], obs, true) {
			metNow[i] = true
		}
	}

	first := map[int]time.Time{}
	for i := range metNow {
		if at, ok := st.firstObserved[i]; ok {
			first[i] = at
		} else {
			first[i] = now
		}
	}
	st.firstObserved = first

	if st.conditionSeen == nil {
		st.conditionSeen = map[v1.NodeConditionType]time.Time{}
	}
	for i := range metNow {
		st.conditionSeen[signalInfo[thresholds[i].Signal].condition] = now
	}
	var d Decision
	for c, at := range st.conditionSeen {
		if now.Sub(at) < transition {
			d.Conditions = append(d.Conditions, c)
		}
	}
	slices.Sort(d.Conditions)

	var graceMet []int
	for i := range metNow {
		if now.Sub(first[i]) >= thresholds[i].GracePeriod {
			graceMet = append(graceMet, i)
		}
	}
	slices.Sort(graceMet)
	st.met = graceMet

	var fresh []Threshold
	for _, i := range graceMet {
		t := thresholds[i]
		d.Met = append(d.Met, t)
		prev, seen := st.last[t.Signal]
		if !seen || obs[t.Signal].Time.After(prev.Time) {
			fresh = append(fresh, t)
		}
	}
	st.last = obs
	if len(fresh) == 0 {
		return d
	}
	// Memory first, as the kubelet's byEvictionPriority; then by signal.
	slices.SortStableFunc(fresh, func(a, b Threshold) int {
		am, bm := signalInfo[a.Signal].resource == v1.ResourceMemory, signalInfo[b.Signal].resource == v1.ResourceMemory
		switch {
		case am && !bm:
			return -1
		case bm && !am:
			return 1
		}
		return 0
	})
	d.Reclaim = &fresh[0]
	d.Resource = signalInfo[fresh[0].Signal].resource
	return d
}

// StillMet are the thresholds met by obs with their minimum reclaim, grace
// periods ignored: after the node reclaimed what it holds, any left means
// a pod must go (the kubelet's reclaimNodeLevelResources).
func StillMet(thresholds []Threshold, obs Observations) []Threshold {
	var out []Threshold
	for _, t := range thresholds {
		if met(t, obs, true) {
			out = append(out, t)
		}
	}
	return out
}

// Condition returns the node condition a signal sets.
func Condition(s Signal) v1.NodeConditionType { return signalInfo[s].condition }
