package resize

import (
	"sort"

	v1 "k8s.io/api/core/v1"
)

// Operation is one change a resize asks of one container: the labels of
// the kubelet's kubelet_container_requested_resizes_total.
type Operation struct {
	// Resource is cpu or memory; Requirement requests or limits.
	Resource, Requirement string
	// Operation is add, remove, increase or decrease.
	Operation string
}

// Operations are the changes from one request to the next, container by
// container (sorted by name), CPU before memory, requests before limits.
// A container in only one of them is no resize.
func Operations(from, to Allocation) []Operation {
	names := make([]string, 0, len(to.Containers))
	for n := range to.Containers {
		if _, ok := from.Containers[n]; ok {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	var out []Operation
	for _, n := range names {
		a, b := from.Containers[n], to.Containers[n]
		for _, r := range []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory} {
			for _, req := range []struct {
				name     string
				old, new v1.ResourceList
			}{{"requests", a.Requests, b.Requests}, {"limits", a.Limits, b.Limits}} {
				if op := operation(req.old, req.new, r); op != "" {
					out = append(out, Operation{Resource: string(r), Requirement: req.name, Operation: op})
				}
			}
		}
	}
	return out
}

func operation(from, to v1.ResourceList, name v1.ResourceName) string {
	a, hadA := from[name]
	b, hasB := to[name]
	switch {
	case !hadA && !hasB:
		return ""
	case !hadA:
		return "add"
	case !hasB:
		return "remove"
	}
	switch a.Cmp(b) {
	case -1:
		return "increase"
	case 1:
		return "decrease"
	}
	return ""
}
