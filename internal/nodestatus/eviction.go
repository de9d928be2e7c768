package nodestatus

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// The kubelet's eviction signals, as far as node conditions and
// allocatable need them. nodelet evicts nothing; it reports pressure
// truthfully, from the same signals and thresholds as the kubelet's
// eviction manager.
const (
	signalMemoryAvailable = "memory.available"
	signalNodeFsAvailable = "nodefs.available"
	signalNodeFsInodes    = "nodefs.inodesFree"
	signalImageFsAvail    = "imagefs.available"
	signalImageFsInodes   = "imagefs.inodesFree"
	signalPIDAvailable    = "pid.available"
)

// signalConditions are the condition each signal sets. The kubelet's
// allocatableMemory.available and containerfs.* signals are accepted in
// thresholds but never observed: nodelet reads neither the pods' cgroup
// memory nor a split container filesystem.
var signalConditions = map[string]v1.NodeConditionType{
	signalMemoryAvailable:         v1.NodeMemoryPressure,
	"allocatableMemory.available": v1.NodeMemoryPressure,
	signalNodeFsAvailable:         v1.NodeDiskPressure,
	signalNodeFsInodes:            v1.NodeDiskPressure,
	signalImageFsAvail:            v1.NodeDiskPressure,
	signalImageFsInodes:           v1.NodeDiskPressure,
	"containerfs.available":       v1.NodeDiskPressure,
	"containerfs.inodesFree":      v1.NodeDiskPressure,
	signalPIDAvailable:            v1.NodePIDPressure,
}

// threshold is one "signal<value" statement: a quantity, or a fraction of
// the signal's capacity.
type threshold struct {
	signal     string
	quantity   *resource.Quantity
	percentage float32
}

// parseThresholds reads evictionHard/evictionSoft statements as the
// kubelet does: "0%" and "100%" are ignored, a quantity must be positive.
// The result is sorted by signal.
func parseThresholds(statements map[string]string) ([]threshold, error) {
	var out []threshold
	for signal, val := range statements {
		if _, ok := signalConditions[signal]; !ok {
			return nil, fmt.Errorf("unsupported eviction signal %v", signal)
		}
		if strings.HasSuffix(val, "%") {
			if val == "0%" || val == "100%" {
				continue
			}
			// The kubelet parses percentages as float32: the same rounding
			// gives the same allocatable to the byte.
			f, err := strconv.ParseFloat(strings.TrimRight(val, "%"), 32)
			if err != nil {
				return nil, fmt.Errorf("eviction threshold %v: %w", signal, err)
			}
			p := float32(f) / 100
			if p < 0 || p > 1 {
				return nil, fmt.Errorf("eviction percentage threshold %v must be between 0%% and 100%%: %s", signal, val)
			}
			out = append(out, threshold{signal: signal, percentage: p})
			continue
		}
		q, err := resource.ParseQuantity(val)
		if err != nil {
			return nil, fmt.Errorf("eviction threshold %v: %w", signal, err)
		}
		if q.Sign() <= 0 {
			return nil, fmt.Errorf("eviction threshold %v must be positive: %s", signal, &q)
		}
		out = append(out, threshold{signal: signal, quantity: &q})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].signal < out[j].signal })
	return out, nil
}

// value is the threshold as a quantity for a signal of the given
// capacity (the kubelet's GetThresholdQuantity).
func (t threshold) value(capacity int64) resource.Quantity {
	if t.quantity != nil {
		return t.quantity.DeepCopy()
	}
	return *resource.NewQuantity(int64(float64(capacity)*float64(t.percentage)), resource.BinarySI)
}

// evictionReservation is what the hard thresholds take from allocatable:
// memory.available from memory, nodefs.available from ephemeral-storage
// (the kubelet's hardEvictionReservation).
func evictionReservation(hard []threshold, capacity v1.ResourceList) v1.ResourceList {
	out := v1.ResourceList{}
	for _, t := range hard {
		var name v1.ResourceName
		switch t.signal {
		case signalMemoryAvailable:
			name = v1.ResourceMemory
		case signalNodeFsAvailable:
			name = v1.ResourceEphemeralStorage
		default:
			continue
		}
		c := capacity[name]
		out[name] = t.value(c.Value())
	}
	return out
}

// observation is one signal's reading: what is available of how much.
type observation struct {
	available, capacity int64
}

// conditionsMet are the pressure conditions whose thresholds the
// observations meet, grace periods ignored, as the kubelet's node
// conditions. A signal without an observation meets nothing.
func conditionsMet(thresholds []threshold, obs map[string]observation) map[v1.NodeConditionType]bool {
	met := map[v1.NodeConditionType]bool{}
	for _, t := range thresholds {
		o, ok := obs[t.signal]
		if !ok {
			continue
		}
		v := t.value(o.capacity)
		if v.Cmp(*resource.NewQuantity(o.available, resource.BinarySI)) > 0 {
			met[signalConditions[t.signal]] = true
		}
	}
	return met
}

// pressure keeps a condition true for the transition period after its
// thresholds were last met (the kubelet's
// evictionPressureTransitionPeriod), so that it does not flap around a
// threshold.
type pressure struct {
	period       time.Duration
	lastObserved map[v1.NodeConditionType]time.Time
}

func newPressure(period time.Duration) *pressure {
	return &pressure{period: period, lastObserved: map[v1.NodeConditionType]time.Time{}}
}

// update records what is met now and says which conditions are true.
func (p *pressure) update(met map[v1.NodeConditionType]bool, now time.Time) (memory, disk, pid bool) {
	for c := range met {
		p.lastObserved[c] = now
	}
	on := func(c v1.NodeConditionType) bool {
		at, ok := p.lastObserved[c]
		return ok && now.Sub(at) < p.period
	}
	return on(v1.NodeMemoryPressure), on(v1.NodeDiskPressure), on(v1.NodePIDPressure)
}
