package podspec

// Labels and annotations nodelet puts on CRI sandboxes and containers. The
// pod and container keys are the kubelet's, so tools that know the kubelet
// (crictl, ctr) show nodelet's pods the same way. Everything nodelet needs
// to re-adopt a running pod after a restart is stored here, not in memory:
// a restarted nodelet rebuilds restart counts, back-off and spec
// fingerprints from these and leaves running containers alone.
const (
	LabelPodName       = "io.kubernetes.pod.name"
	LabelPodNamespace  = "io.kubernetes.pod.namespace"
	LabelPodUID        = "io.kubernetes.pod.uid"
	LabelContainerName = "io.kubernetes.container.name"
	// LabelManagedBy, with the value ManagedByValue, marks the objects
	// nodelet owns; nodelet never stops or removes a sandbox or container
	// without it, so a runtime shared with other clients is safe.
	LabelManagedBy = "nodelet.io/managed-by"
	ManagedByValue = "nodelet"
	// LabelContainerKind says which list of the pod spec a container was
	// created from when it is not a regular or init container: the value
	// KindEphemeral marks an ephemeral container, so that a restarted
	// nodelet knows it for one (never restarted, no probes, reported in
	// ephemeralContainerStatuses). Containers without it are regular or
	// init containers.
	LabelContainerKind = "nodelet.io/container-kind"
	KindEphemeral      = "ephemeral"

	AnnotationRestartCount = "io.kubernetes.container.restartCount"
	AnnotationGracePeriod  = "io.kubernetes.pod.terminationGracePeriod"
	// AnnotationContainerHash is plan.ContainerHash of the spec the
	// container was created from.
	AnnotationContainerHash = "nodelet.io/container-hash"
	// AnnotationBackoffStep is plan.Start.BackoffStep of the instance.
	AnnotationBackoffStep = "nodelet.io/backoff-step"
	// AnnotationSandboxHash is plan.SandboxHash of the pod at creation.
	AnnotationSandboxHash = "nodelet.io/sandbox-hash"
	// AnnotationHostNetwork records on a sandbox whether it was created in
	// the node's network namespace ("true" or "false").
	AnnotationHostNetwork = "nodelet.io/host-network"
	// AnnotationTerminationMessagePath and
	// AnnotationTerminationMessagePolicy record a container's
	// terminationMessagePath and terminationMessagePolicy (the kubelet's
	// keys): the status of an exited container reads its message from the
	// mount at that path, with that policy.
	AnnotationTerminationMessagePath   = "io.kubernetes.container.terminationMessagePath"
	AnnotationTerminationMessagePolicy = "io.kubernetes.container.terminationMessagePolicy"
	// AnnotationImageVolumes lists, comma-separated, the images a
	// container mounts as image volumes (the Image of its CRI mounts):
	// image garbage collection keeps them as it keeps the container's own
	// image, reading ListContainers alone.
	AnnotationImageVolumes = "nodelet.io/image-volumes"
)

// ManagedSelector is the CRI label selector of every object nodelet owns.
// Each call returns a new map: CRI filters may be modified by the callee.
func ManagedSelector() map[string]string {
	return map[string]string{LabelManagedBy: ManagedByValue}
}

// IsManaged reports whether labels mark an object nodelet owns.
func IsManaged(labels map[string]string) bool {
	return labels[LabelManagedBy] == ManagedByValue
}

// Pod annotations the kubelet puts on static pods (config.*), and nodelet's
// own: the manifest file or URL a pod came from.
const (
	AnnotationConfigSource = "kubernetes.io/config.source"
	AnnotationConfigHash   = "kubernetes.io/config.hash"
	// AnnotationConfigSeen is when the merge first saw the pod (RFC 3339
	// with nanoseconds): where pod start-up is measured from.
	AnnotationConfigSeen = "kubernetes.io/config.seen"
	// AnnotationConfigMirror marks a mirror pod.
	AnnotationConfigMirror = "kubernetes.io/config.mirror"
	AnnotationConfigFile   = "nodelet.io/config.file"
)
