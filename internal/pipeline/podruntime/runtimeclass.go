package podruntime

import (
	"errors"
	"fmt"

	v1 "k8s.io/api/core/v1"
)

// RuntimeClasses resolves a pod's runtimeClassName to the CRI runtime
// handler its sandbox runs with, as the kubelet's runtimeclass.Manager
// (LookupRuntimeHandler): cluster mode reads the node.k8s.io/v1
// RuntimeClasses through an informer (objects.RuntimeClasses).
type RuntimeClasses interface {
	// LookupRuntimeHandler returns the handler of the RuntimeClass named
	// name; an error when there is no such RuntimeClass (the API's
	// NotFound, as the kubelet's) or it cannot be read yet.
	LookupRuntimeHandler(name string) (string, error)
}

// ErrNoRuntimeClasses is why a pod naming a RuntimeClass does not run
// without an API server: nodelet has nowhere to read the class from, and
// running the pod on the runtime's default handler instead (as a kubelet
// without an API server does) would silently drop the isolation it asks
// for.
var ErrNoRuntimeClasses = errors.New("RuntimeClasses are read from the API server, and nodelet runs without one (standalone)")

// runtimeHandler is the CRI runtime handler of pod's sandbox: "" (the
// runtime's default) for a pod naming no RuntimeClass, else its class's
// handler. A class that cannot be resolved is an error, never the default
// handler.
func (m *Manager) runtimeHandler(pod *v1.Pod) (string, error) {
	name := pod.Spec.RuntimeClassName
	if name == nil || *name == "" {
		return "", nil
	}
	if m.runtimeClasses == nil {
		return "", fmt.Errorf("RuntimeClass %q: %w", *name, ErrNoRuntimeClasses)
	}
	// The lookup's error names the class (the API's NotFound, as the
	// kubelet's event shows it).
	return m.runtimeClasses.LookupRuntimeHandler(*name)
}
