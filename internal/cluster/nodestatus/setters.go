package nodestatus

import (
	"fmt"
	"k8s.io/utils/ptr"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"

	"github.com/nodelet/nodelet/internal/node/eviction"
	"github.com/nodelet/nodelet/internal/pure/podspec"
)

// The setters: pure functions that fill a Node's status from Facts and
// the node's settings, in the kubelet's order (defaultNodeStatusFuncs)
// and with its semantics (pkg/kubelet/nodestatus). They read nothing but
// their arguments; what the kubelet records as events they return.

// maxNamesPerImage caps the names listed per image
// (MaxNamesPerImageInNodeStatus).
const maxNamesPerImage = 5

// Event is an event about the node a setter asks for, with the kubelet's
// type, reason and message.
type Event struct {
	Type, Reason, Message string
}

// setStatus runs every setter on node, in the kubelet's order. The
// pressure conditions come before Ready, which the kubelet keeps last.
func (c *config) setStatus(node *v1.Node, f *Facts) []Event {
	var evs []Event
	c.setAddresses(node)
	evs = append(evs, c.setMachineInfo(node, f)...)
	c.setVersionInfo(node, f)
	node.Status.DaemonEndpoints = v1.NodeDaemonEndpoints{KubeletEndpoint: v1.DaemonEndpoint{Port: c.port}}
	c.setImages(node, f)
	node.Status.NodeInfo.OperatingSystem = c.goos
	node.Status.NodeInfo.Architecture = c.goarch
	node.Status.RuntimeHandlers = f.RuntimeHandlers
	if f.RuntimeFeatures != nil {
		node.Status.Features = f.RuntimeFeatures.DeepCopy()
	}
	if f.VolumesInUse != nil {
		// The kubelet's VolumesInUse setter.
		node.Status.VolumesInUse = f.VolumesInUse
	}
	evs = append(evs, c.setPressure(node, f)...)
	evs = append(evs, c.setReady(node, f)...)
	// Always set: a kubelet this nodelet replaced may have declared
	// features nodelet does not implement.
	node.Status.DeclaredFeatures = c.declaredFeatures
	return evs
}

// setAddresses: the node IPs as InternalIP, then the hostname (the
// kubelet's NodeAddress with a node IP given and no cloud provider).
func (c *config) setAddresses(node *v1.Node) {
	var addrs []v1.NodeAddress
	for _, ip := range c.nodeIPs {
		if ip.IsUnspecified() {
			continue
		}
		addrs = append(addrs, v1.NodeAddress{Type: v1.NodeInternalIP, Address: ip.String()})
	}
	node.Status.Addresses = append(addrs, v1.NodeAddress{Type: v1.NodeHostName, Address: c.hostname})
}

// setMachineInfo: capacity (cpu, memory, huge pages, pods,
// ephemeral-storage), the machine and boot IDs, and allocatable. Capacity
// entries others put there (extended resources) are kept.
func (c *config) setMachineInfo(node *v1.Node, f *Facts) []Event {
	var evs []Event
	st := &node.Status
	if st.Capacity == nil {
		st.Capacity = v1.ResourceList{}
	}
	if f.MachineErr != nil {
		st.Capacity[v1.ResourceCPU] = *resource.NewMilliQuantity(0, resource.DecimalSI)
		st.Capacity[v1.ResourceMemory] = resource.MustParse("0Gi")
		st.Capacity[v1.ResourcePods] = *resource.NewQuantity(int64(c.maxPods), resource.DecimalSI)
	} else {
		st.NodeInfo.MachineID = c.host.MachineID
		st.NodeInfo.SystemUUID = c.host.SystemUUID
		if c.swapCapacity != nil && *c.swapCapacity != 0 {
			// The kubelet's NodeSwap (GA): the swap the machine has, when
			// it has some (the API server refuses a capacity of 0).
			st.NodeInfo.Swap = &v1.NodeSwapStatus{Capacity: ptr.To(*c.swapCapacity)}
		}
		st.Capacity[v1.ResourceCPU] = *resource.NewMilliQuantity(int64(f.CPUs)*1000, resource.DecimalSI)
		st.Capacity[v1.ResourceMemory] = *resource.NewQuantity(int64(f.MemoryBytes), resource.BinarySI)
		for size, pages := range f.HugePages {
			st.Capacity[hugePageResource(size)] = *resource.NewQuantity(int64(size*pages), resource.BinarySI)
		}
		pods := c.maxPods
		if c.podsPerCore > 0 {
			pods = min(f.CPUs*c.podsPerCore, c.maxPods)
		}
		st.Capacity[v1.ResourcePods] = *resource.NewQuantity(int64(pods), resource.DecimalSI)
		if st.NodeInfo.BootID != "" && st.NodeInfo.BootID != c.host.BootID {
			evs = append(evs, Event{v1.EventTypeWarning, "Rebooted",
				fmt.Sprintf("Node %s has been rebooted, boot id: %s", c.nodeName, c.host.BootID)})
		}
		st.NodeInfo.BootID = c.host.BootID
		if f.RootFsBytes > 0 && c.localStorage {
			st.Capacity[v1.ResourceEphemeralStorage] = *resource.NewQuantity(int64(f.RootFsBytes), resource.BinarySI)
		}
	}
	for k, v := range f.DeviceCapacity {
		st.Capacity[k] = v.DeepCopy()
	}

	if st.Allocatable == nil {
		st.Allocatable = v1.ResourceList{}
	}
	for k := range st.Allocatable {
		if _, ok := st.Capacity[k]; !ok && podspec.IsExtendedResourceName(k) {
			delete(st.Allocatable, k)
		}
	}
	reservation := eviction.Reservation(c.hard, st.Capacity)
	for k, v := range st.Capacity {
		value := v.DeepCopy()
		if r, ok := c.reserved[k]; ok {
			value.Sub(r)
		}
		if r, ok := reservation[k]; ok {
			value.Sub(r)
		}
		if value.Sign() < 0 {
			value.Set(0)
		}
		st.Allocatable[k] = value
	}
	// A device plugin resource's allocatable is its healthy devices.
	for k, v := range f.DeviceAllocatable {
		st.Allocatable[k] = v.DeepCopy()
	}
	// Huge pages are memory nobody else can have.
	for k, v := range st.Capacity {
		if strings.HasPrefix(string(k), v1.ResourceHugePagesPrefix) {
			mem := st.Allocatable[v1.ResourceMemory]
			mem.Sub(v)
			if mem.Sign() < 0 {
				mem.Set(0)
			}
			st.Allocatable[v1.ResourceMemory] = mem
		}
	}
	return evs
}

// hugePageResource is hugepages-<size> with the size in its canonical
// form (hugepages-2Mi, hugepages-1Gi).
func hugePageResource(sizeBytes uint64) v1.ResourceName {
	return v1.ResourceName(v1.ResourceHugePagesPrefix + resource.NewQuantity(int64(sizeBytes), resource.BinarySI).String())
}

// setVersionInfo: kernel, OS image, runtime and kubelet versions. The
// kube-proxy version is cleared (DisableNodeKubeProxyVersion is locked on
// in v1.37).
func (c *config) setVersionInfo(node *v1.Node, f *Facts) {
	info := &node.Status.NodeInfo
	info.KernelVersion = c.host.KernelVersion
	info.OSImage = c.host.OSImage
	info.ContainerRuntimeVersion = f.RuntimeVersion
	info.KubeletVersion = c.version
	//lint:ignore SA1019 cleared as the kubelet does: a Node an older kubelet registered may still carry it
	info.KubeProxyVersion = ""
}

// setImages: the largest images first, at most maxImages (-1: all), with
// at most five names each, digests before tags.
func (c *config) setImages(node *v1.Node, f *Facts) {
	images := f.Images
	if c.maxImages > -1 && int(c.maxImages) < len(images) {
		images = images[:c.maxImages]
	}
	var out []v1.ContainerImage
	for _, img := range images {
		names := append(append([]string{}, img.RepoDigests...), img.RepoTags...)
		if len(names) > maxNamesPerImage {
			names = names[:maxNamesPerImage]
		}
		out = append(out, v1.ContainerImage{Names: names, SizeBytes: int64(img.Size)})
	}
	node.Status.Images = out
}

// pressureCondition is how one pressure condition reads, true and false.
type pressureCondition struct {
	typ                              v1.NodeConditionType
	trueReason, trueMessage          string
	falseReason, falseMessage        string
	trueEventReason, falseEventReson string
}

var pressureConditions = []pressureCondition{
	{v1.NodeMemoryPressure,
		"KubeletHasInsufficientMemory", "kubelet has insufficient memory available",
		"KubeletHasSufficientMemory", "kubelet has sufficient memory available",
		"NodeHasInsufficientMemory", "NodeHasSufficientMemory"},
	{v1.NodeDiskPressure,
		"KubeletHasDiskPressure", "kubelet has disk pressure",
		"KubeletHasNoDiskPressure", "kubelet has no disk pressure",
		"NodeHasDiskPressure", "NodeHasNoDiskPressure"},
	{v1.NodePIDPressure,
		"KubeletHasInsufficientPID", "kubelet has insufficient PID available",
		"KubeletHasSufficientPID", "kubelet has sufficient PID available",
		"NodeHasInsufficientPID", "NodeHasSufficientPID"},
}

// setPressure: MemoryPressure, DiskPressure and PIDPressure. A condition
// new to the node starts Unknown, so its first value is a transition
// (with its event), as in the kubelet.
func (c *config) setPressure(node *v1.Node, f *Facts) []Event {
	var evs []Event
	now := metav1.NewTime(f.Now)
	for _, pc := range pressureConditions {
		on := map[v1.NodeConditionType]bool{
			v1.NodeMemoryPressure: f.MemoryPressure,
			v1.NodeDiskPressure:   f.DiskPressure,
			v1.NodePIDPressure:    f.PIDPressure,
		}[pc.typ]
		cond, isNew := findCondition(node, pc.typ)
		cond.LastHeartbeatTime = now
		status, reason, message, event := v1.ConditionFalse, pc.falseReason, pc.falseMessage, pc.falseEventReson
		if on {
			status, reason, message, event = v1.ConditionTrue, pc.trueReason, pc.trueMessage, pc.trueEventReason
		}
		if cond.Status != status {
			cond.Status, cond.Reason, cond.Message, cond.LastTransitionTime = status, reason, message, now
			evs = append(evs, c.statusEvent(event))
		}
		if isNew {
			node.Status.Conditions = append(node.Status.Conditions, *cond)
		}
	}
	return evs
}

// findCondition is the node's condition of type t, or a new Unknown one
// (isNew) for the caller to append.
func findCondition(node *v1.Node, t v1.NodeConditionType) (cond *v1.NodeCondition, isNew bool) {
	for i := range node.Status.Conditions {
		if node.Status.Conditions[i].Type == t {
			return &node.Status.Conditions[i], false
		}
	}
	return &v1.NodeCondition{Type: t, Status: v1.ConditionUnknown}, true
}

// setReady: Ready is true unless the runtime, its network or a required
// capacity is missing, or the node shuts down; then false with the reasons as the message, in
// the kubelet's words. The transition time moves only when the status
// does.
func (c *config) setReady(node *v1.Node, f *Facts) []Event {
	now := metav1.NewTime(f.Now)
	ready := v1.NodeCondition{
		Type:              v1.NodeReady,
		Status:            v1.ConditionTrue,
		Reason:            "KubeletReady",
		Message:           "kubelet is posting ready status",
		LastHeartbeatTime: now,
	}
	errs := []error{f.RuntimeErr, f.NetworkErr, f.ShutdownErr}
	var missing []string
	required := []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory, v1.ResourcePods}
	if c.localStorage {
		required = append(required, v1.ResourceEphemeralStorage)
	}
	for _, r := range required {
		if _, ok := node.Status.Capacity[r]; !ok {
			missing = append(missing, string(r))
		}
	}
	if len(missing) > 0 {
		errs = append(errs, fmt.Errorf("missing node capacity for resources: %s", strings.Join(missing, ", ")))
	}
	if agg := utilerrors.NewAggregate(errs); agg != nil {
		ready.Status, ready.Reason, ready.Message = v1.ConditionFalse, "KubeletNotReady", agg.Error()
	}

	cond, isNew := findCondition(node, v1.NodeReady)
	var evs []Event
	if isNew || cond.Status != ready.Status {
		ready.LastTransitionTime = now
		if !isNew {
			reason := "NodeNotReady"
			if ready.Status == v1.ConditionTrue {
				reason = "NodeReady"
			}
			evs = append(evs, c.statusEvent(reason))
		}
	} else {
		ready.LastTransitionTime = cond.LastTransitionTime
	}
	*cond = ready
	if isNew {
		node.Status.Conditions = append(node.Status.Conditions, ready)
	}
	return evs
}

// statusEvent is the kubelet's "Node <name> status is now: <reason>".
func (c *config) statusEvent(reason string) Event {
	return Event{v1.EventTypeNormal, reason, fmt.Sprintf("Node %s status is now: %s", c.nodeName, reason)}
}
