package podspec

import v1 "k8s.io/api/core/v1"

// IsSidecar reports whether the init container c is a sidecar: a
// restartable init container, restartPolicy Always. Only an init container
// can be one: since ContainerRestartRules, an app container may also say
// restartPolicy Always, which only overrides the pod's restart policy.
func IsSidecar(c *v1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == v1.ContainerRestartPolicyAlways
}
