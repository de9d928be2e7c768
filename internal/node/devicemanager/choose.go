package devicemanager

import (
	"fmt"
	"slices"
)

// choice is what a container is given of one resource: the pure part of
// the kubelet's devicesToAllocate.
type choice struct {
	// need is how many devices the container asks for.
	need int
	// available are the healthy devices no other container holds, in the
	// plugin's order.
	available []string
	// reusable are the devices of the pod's earlier init containers,
	// which this container takes first.
	reusable []string
	// preferred is the plugin's GetPreferredAllocation answer, if any.
	preferred []string
}

// choose picks c.need devices: reusable ones first, then preferred ones,
// then the rest of available in order. Only available or reusable devices
// are taken, each once; an answer of the plugin naming others is ignored
// for those. Fewer than need is the kubelet's error.
func choose(resource string, c choice) ([]string, error) {
	pool := make(map[string]bool, len(c.available)+len(c.reusable))
	for _, d := range slices.Concat(c.available, c.reusable) {
		pool[d] = true
	}
	if free := len(pool); free < c.need {
		return nil, fmt.Errorf("requested number of devices unavailable for %s. Requested: %d, Available: %d", resource, c.need, len(pool))
	}
	out := make([]string, 0, c.need)
	take := func(list []string) {
		for _, d := range list {
			if len(out) == c.need {
				return
			}
			if pool[d] && !slices.Contains(out, d) {
				out = append(out, d)
			}
		}
	}
	take(c.reusable)
	take(c.preferred)
	take(c.available)
	return out, nil
}
