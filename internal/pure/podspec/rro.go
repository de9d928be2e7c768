package podspec

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
)

// RecursiveReadOnly is whether a volumeMount is mounted recursively
// read-only, given whether the pod's runtime handler supports that, as the
// kubelet resolves it: Disabled or unset never; IfPossible when supported;
// Enabled when supported, else an error (the container is not created).
// RRO needs a read-only mount without propagation (API validation already
// refuses the rest).
func RecursiveReadOnly(vm *v1.VolumeMount, supported bool) (bool, error) {
	if vm.RecursiveReadOnly == nil || *vm.RecursiveReadOnly == v1.RecursiveReadOnlyDisabled {
		return false, nil
	}
	if !vm.ReadOnly {
		return false, fmt.Errorf("volume %q requested recursive read-only mode, but it is not read-only", vm.Name)
	}
	if p := vm.MountPropagation; p != nil && *p != v1.MountPropagationNone {
		return false, fmt.Errorf("volume %q requested recursive read-only mode, but it is not compatible with propagation %q", vm.Name, *p)
	}
	switch mode := *vm.RecursiveReadOnly; mode {
	case v1.RecursiveReadOnlyIfPossible:
		return supported, nil
	case v1.RecursiveReadOnlyEnabled:
		if !supported {
			return false, fmt.Errorf("volume %q requested recursive read-only mode, but it is not supported by the runtime", vm.Name)
		}
		return true, nil
	default:
		return false, fmt.Errorf("unknown recursive read-only mode %q", mode)
	}
}

// VolumeMountStatuses are a container's status.volumeMounts as the kubelet
// reports them, one per volumeMount in order: readOnly as asked, and for a
// read-only mount recursiveReadOnly Enabled or Disabled as resolved with
// RecursiveReadOnly (Disabled when it cannot be resolved); nil for none.
func VolumeMountStatuses(c *v1.Container, supported bool) []v1.VolumeMountStatus {
	if len(c.VolumeMounts) == 0 {
		return nil
	}
	out := make([]v1.VolumeMountStatus, 0, len(c.VolumeMounts))
	for i := range c.VolumeMounts {
		vm := &c.VolumeMounts[i]
		st := v1.VolumeMountStatus{Name: vm.Name, MountPath: vm.MountPath, ReadOnly: vm.ReadOnly}
		if vm.ReadOnly {
			mode := v1.RecursiveReadOnlyDisabled
			if rro, err := RecursiveReadOnly(vm, supported); err == nil && rro {
				mode = v1.RecursiveReadOnlyEnabled
			}
			st.RecursiveReadOnly = &mode
		}
		out = append(out, st)
	}
	return out
}
