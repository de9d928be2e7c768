package nodestatus

import (
	"time"

	v1 "k8s.io/api/core/v1"
)

// Facts are what one computation of the node's status is made of. The
// Manager reads them from the runtime and the machine (gather.go); the
// setters turn them into the Node without reading anything else, so a
// test can give fixed ones.
type Facts struct {
	// Now is when they were read: the conditions' heartbeat and
	// transition times.
	Now time.Time

	// CPUs, MemoryBytes and HugePages (page size in bytes to pages) are
	// the machine's size. With MachineErr set they are unknown, and the
	// Node reports 0 CPU and 0 memory, as the kubelet does without
	// machine info.
	CPUs        int
	MemoryBytes uint64
	HugePages   map[uint64]uint64
	MachineErr  error
	// RootFsBytes is the size of the root directory's filesystem, the
	// ephemeral-storage capacity; 0 means unknown (the capacity is then
	// missing and the node not ready, as the kubelet's).
	RootFsBytes uint64

	// RuntimeVersion is "<runtime>://<version>" (containerd://1.6.20),
	// "<runtime>://Unknown" when the runtime did not say.
	RuntimeVersion string
	// Images are the runtime's images, largest first.
	Images []Image
	// RuntimeHandlers and RuntimeFeatures are what the runtime's last
	// status reported (none for containerd 1.6).
	RuntimeHandlers []v1.NodeRuntimeHandler
	RuntimeFeatures *v1.NodeFeatures

	// RuntimeErr and NetworkErr are why the runtime and its network are
	// not ready (the kubelet's runtimeErrors and networkErrors, PLEG
	// health included); both nil: the node is ready as far as they go.
	RuntimeErr, NetworkErr error
	// ShutdownErr is why the node is not ready because it shuts down
	// ("node is shutting down"); nil while it does not.
	ShutdownErr error

	// MemoryPressure, DiskPressure and PIDPressure: an eviction threshold
	// of the kind was met within the pressure transition period.
	MemoryPressure, DiskPressure, PIDPressure bool

	// VolumesInUse are the attachable volumes mounted on the node,
	// sorted; nil when nobody reports them (the field is left alone).
	VolumesInUse []v1.UniqueVolumeName

	// DeviceCapacity and DeviceAllocatable are the device plugins'
	// resources: every device, and the healthy ones (zero for a resource
	// whose plugin has been gone past the grace period, so the Node
	// still shows it was one).
	DeviceCapacity, DeviceAllocatable v1.ResourceList
}

// Image is one image of the runtime.
type Image struct {
	ID          string
	RepoTags    []string
	RepoDigests []string
	Size        uint64
}
