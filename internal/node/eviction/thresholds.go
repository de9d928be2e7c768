package eviction

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Signal is an eviction signal, by the kubelet's name.
type Signal string

// The signals. allocatableMemory.available and the containerfs ones are
// accepted in thresholds, as the kubelet accepts them, but nodelet
// observes neither the pods' cgroup memory nor a split container
// filesystem, so they are never met.
const (
	SignalMemoryAvailable            Signal = "memory.available"
	SignalAllocatableMemoryAvailable Signal = "allocatableMemory.available"
	SignalNodeFsAvailable            Signal = "nodefs.available"
	SignalNodeFsInodesFree           Signal = "nodefs.inodesFree"
	SignalImageFsAvailable           Signal = "imagefs.available"
	SignalImageFsInodesFree          Signal = "imagefs.inodesFree"
	SignalContainerFsAvailable       Signal = "containerfs.available"
	SignalContainerFsInodesFree      Signal = "containerfs.inodesFree"
	SignalPIDAvailable               Signal = "pid.available"
)

// signalInfo is what a signal stands for: the node condition it sets and
// the resource it reclaims.
var signalInfo = map[Signal]struct {
	condition v1.NodeConditionType
	resource  v1.ResourceName
}{
	SignalMemoryAvailable:            {v1.NodeMemoryPressure, v1.ResourceMemory},
	SignalAllocatableMemoryAvailable: {v1.NodeMemoryPressure, v1.ResourceMemory},
	SignalNodeFsAvailable:            {v1.NodeDiskPressure, v1.ResourceEphemeralStorage},
	SignalNodeFsInodesFree:           {v1.NodeDiskPressure, resourceInodes},
	SignalImageFsAvailable:           {v1.NodeDiskPressure, v1.ResourceEphemeralStorage},
	SignalImageFsInodesFree:          {v1.NodeDiskPressure, resourceInodes},
	SignalContainerFsAvailable:       {v1.NodeDiskPressure, v1.ResourceEphemeralStorage},
	SignalContainerFsInodesFree:      {v1.NodeDiskPressure, resourceInodes},
	SignalPIDAvailable:               {v1.NodePIDPressure, resourcePIDs},
}

// The kubelet's names for the resources that are not API resources.
const (
	resourceInodes v1.ResourceName = "inodes"
	resourcePIDs   v1.ResourceName = "pids"
)

// Value is a threshold's or a minimum reclaim's amount: a quantity, or a
// fraction of the signal's capacity.
type Value struct {
	Quantity   *resource.Quantity
	Percentage float32
}

// Of is the value for a signal of the given capacity (the kubelet's
// GetThresholdQuantity).
func (v Value) Of(capacity int64) int64 {
	if v.Quantity != nil {
		return v.Quantity.Value()
	}
	return int64(float64(capacity) * float64(v.Percentage))
}

func (v Value) String() string {
	if v.Quantity != nil {
		return v.Quantity.String()
	}
	return strconv.FormatFloat(float64(v.Percentage)*100, 'f', -1, 32) + "%"
}

// Threshold is one "signal<value" statement.
type Threshold struct {
	Signal Signal
	Value  Value
	// GracePeriod is how long a soft threshold must be met before it
	// evicts; 0 for a hard one.
	GracePeriod time.Duration
	// MinReclaim is what must be reclaimed beyond the threshold once it
	// was met (evictionMinimumReclaim); nil for none.
	MinReclaim *Value
}

// Hard reports whether t evicts as soon as it is met.
func (t Threshold) Hard() bool { return t.GracePeriod == 0 }

// Config are the eviction settings, by the kubelet's
// KubeletConfiguration names.
type Config struct {
	// EvictionHard, EvictionSoft: signal to quantity or percentage.
	EvictionHard, EvictionSoft map[string]string
	// EvictionSoftGracePeriod: signal to duration, one per soft threshold.
	EvictionSoftGracePeriod map[string]string
	// EvictionMinimumReclaim: signal to quantity or percentage.
	EvictionMinimumReclaim map[string]string
}

// ParseThresholds reads the settings as the kubelet's ParseThresholdConfig:
// every signal must be known, a soft threshold needs a positive grace
// period, "0%" and "100%" thresholds are ignored, quantities are positive.
// The result is sorted by signal, hard before soft.
func ParseThresholds(c Config) ([]Threshold, error) {
	var out []Threshold
	minReclaim := map[Signal]*Value{}
	for name, s := range c.EvictionMinimumReclaim {
		sig, err := signal(name)
		if err != nil {
			return nil, fmt.Errorf("evictionMinimumReclaim: %w", err)
		}
		v, skip, err := parseValue(s)
		if err != nil {
			return nil, fmt.Errorf("evictionMinimumReclaim %s: %w", name, err)
		}
		if !skip {
			minReclaim[sig] = &v
		}
	}
	for name, s := range c.EvictionHard {
		sig, err := signal(name)
		if err != nil {
			return nil, fmt.Errorf("evictionHard: %w", err)
		}
		v, skip, err := parseValue(s)
		if err != nil {
			return nil, fmt.Errorf("evictionHard %s: %w", name, err)
		}
		if !skip {
			out = append(out, Threshold{Signal: sig, Value: v, MinReclaim: minReclaim[sig]})
		}
	}
	for name := range c.EvictionSoftGracePeriod {
		if _, ok := c.EvictionSoft[name]; !ok {
			if _, err := signal(name); err != nil {
				return nil, fmt.Errorf("evictionSoftGracePeriod: %w", err)
			}
		}
	}
	for name, s := range c.EvictionSoft {
		sig, err := signal(name)
		if err != nil {
			return nil, fmt.Errorf("evictionSoft: %w", err)
		}
		v, skip, err := parseValue(s)
		if err != nil {
			return nil, fmt.Errorf("evictionSoft %s: %w", name, err)
		}
		g, ok := c.EvictionSoftGracePeriod[name]
		if !ok {
			return nil, fmt.Errorf("evictionSoft %s: a soft threshold needs a grace period in evictionSoftGracePeriod", name)
		}
		d, err := time.ParseDuration(g)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("evictionSoftGracePeriod %s: want a positive duration, got %q", name, g)
		}
		if !skip {
			out = append(out, Threshold{Signal: sig, Value: v, GracePeriod: d, MinReclaim: minReclaim[sig]})
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Signal != out[j].Signal {
			return out[i].Signal < out[j].Signal
		}
		return out[i].GracePeriod < out[j].GracePeriod
	})
	return out, nil
}

func signal(name string) (Signal, error) {
	s := Signal(name)
	if _, ok := signalInfo[s]; !ok {
		known := make([]string, 0, len(signalInfo))
		for k := range signalInfo {
			known = append(known, string(k))
		}
		sort.Strings(known)
		return "", fmt.Errorf("unknown signal %q (want one of %s)", name, strings.Join(known, ", "))
	}
	return s, nil
}

// parseValue reads a quantity or a percentage; skip says the value means
// nothing ("0%" or "100%", which the kubelet ignores).
func parseValue(s string) (v Value, skip bool, err error) {
	if p, ok := strings.CutSuffix(s, "%"); ok {
		if s == "0%" || s == "100%" {
			return Value{}, true, nil
		}
		// float32, as the kubelet: the same rounding to the byte.
		f, err := strconv.ParseFloat(p, 32)
		if err != nil || f < 0 || f > 100 {
			return Value{}, false, fmt.Errorf("want a percentage from 0%% to 100%%, got %q", s)
		}
		return Value{Percentage: float32(f) / 100}, false, nil
	}
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return Value{}, false, fmt.Errorf("want a quantity or a percentage, got %q: %w", s, err)
	}
	if q.Sign() <= 0 {
		return Value{}, false, fmt.Errorf("want a positive quantity, got %q", s)
	}
	return Value{Quantity: &q}, false, nil
}

// Reservation is what the hard thresholds keep from allocatable:
// memory.available of memory, nodefs.available of ephemeral storage (the
// kubelet's hardEvictionReservation). Soft thresholds in thresholds are
// skipped.
func Reservation(thresholds []Threshold, capacity v1.ResourceList) v1.ResourceList {
	out := v1.ResourceList{}
	for _, t := range thresholds {
		var name v1.ResourceName
		switch {
		case !t.Hard():
			continue
		case t.Signal == SignalMemoryAvailable:
			name = v1.ResourceMemory
		case t.Signal == SignalNodeFsAvailable:
			name = v1.ResourceEphemeralStorage
		default:
			continue
		}
		if t.Value.Quantity != nil {
			out[name] = t.Value.Quantity.DeepCopy()
			continue
		}
		c := capacity[name]
		out[name] = *resource.NewQuantity(t.Value.Of(c.Value()), resource.BinarySI)
	}
	return out
}
