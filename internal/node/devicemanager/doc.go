// Package devicemanager is beside the pipeline, for the pod workers' setup
// stage: the kubelet's device plugin manager (v1beta1).
//
// Registration. Manager serves the Registration service on
// <root-dir>/device-plugins/kubelet.sock. A plugin registers its resource
// (an extended resource name such as example.com/gpu) and the name of its
// own socket in the same directory; the manager dials that socket and
// follows the plugin's ListAndWatch stream, which tells it the resource's
// devices and their health. A second registration of a resource replaces
// the first plugin. When the stream ends (the plugin died), every device of
// the resource becomes unhealthy at once: allocatable drops to zero while
// capacity stays, and after the kubelet's grace period of five minutes
// without a new registration the resource is gone from the node.
//
// Allocation. Prepare (the manager is a podworker.Hook) allocates, for
// every container of a pod as the kubelet does at admission, as many
// healthy free devices of each device plugin resource as the container's
// limit asks: the devices its earlier init containers held first, then
// those the plugin prefers (GetPreferredAllocation, when it offers it),
// then the rest in order; then the plugin's Allocate. The answers (devices,
// mounts, env, annotations, CDI devices) go to the runtime through the
// setup's Contributor, after the plugin's PreStartContainer when it asks
// for one. What a container holds is checkpointed (atomically, bounded) in
// <root-dir>/device-plugins/kubelet_internal_checkpoint, so a restarted
// nodelet keeps the allocations of running pods and neither hands their
// devices to another pod nor asks the plugins again. Cleanup frees a pod's
// devices.
//
// Capacity is what the node reports for each resource (capacity: every
// device, allocatable: the healthy ones) and what admission checks; the
// pod-resources API reads allocations through DevicesFor and Allocatable.
package devicemanager
