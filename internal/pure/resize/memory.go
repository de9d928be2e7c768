package resize

import (
	"errors"
	"fmt"
	"sort"
)

// Usage is the memory in use now, in bytes: the pod cgroup's and each
// container's by name. A missing entry is unknown.
type Usage struct {
	Pod        *uint64
	Containers map[string]uint64
}

// CheckMemoryDecrease refuses a plan that sets a memory limit at or below
// what is in use, as the kubelet's validateMemoryResizeAction does before
// it writes anything: the error is the PodResizeInProgress condition's
// message (reason Error), and the resize is retried on a later sync.
func CheckMemoryDecrease(p Plan, podLimit int64, u Usage) error {
	var errs []error
	if p.PodMemoryDecreasing {
		switch {
		case u.Pod == nil:
			errs = append(errs, errors.New("missing pod memory usage"))
		case *u.Pod >= uint64(podLimit):
			errs = append(errs, fmt.Errorf("attempting to set pod memory limit (%d) below current usage (%d)", podLimit, *u.Pod))
		}
	}
	names := make([]string, 0, len(p.DecreasingMemory))
	for n := range p.DecreasingMemory {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		limit := p.DecreasingMemory[n]
		used, ok := u.Containers[n]
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("missing container %q memory usage", n))
		case used >= uint64(limit):
			errs = append(errs, fmt.Errorf("attempting to set container %q memory limit (%d) below current usage (%d)", n, limit, used))
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("cannot decrease memory limits: %w", aggregate(errs))
}

// aggregate joins errs as apimachinery's NewAggregate prints them: one
// error alone, several in brackets.
func aggregate(errs []error) error {
	if len(errs) == 1 {
		return errs[0]
	}
	msg := "["
	for i, e := range errs {
		if i > 0 {
			msg += ", "
		}
		msg += e.Error()
	}
	return errors.New(msg + "]")
}
