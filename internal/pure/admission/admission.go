// Package admission is beside the pipeline, between the merge and the pod
// workers: it decides, as the kubelet's admit handlers do, whether a new
// pod may run on this node (pod count, host ports, CPU, memory and
// ephemeral-storage requests against allocatable, safe sysctls). A
// rejected pod is Failed with the kubelet's reason and nothing of it is
// started. Pure: no I/O.
package admission

import (
	"fmt"
	"runtime"
	"slices"
	"strings"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodelet/nodelet/internal/pure/podspec"
	"github.com/nodelet/nodelet/internal/pure/securitycontext"
)

// Node is what admission knows of the node.
type Node struct {
	// MaxPods is --max-pods (110).
	MaxPods int
	// Allocatable CPU, memory, ephemeral storage and extended resources
	// (the device plugins'). A resource missing here is not checked
	// (ephemeral storage when the root directory's filesystem could not
	// be read; an extended resource no plugin serves, which the kubelet
	// removes from the pod's requests before its check).
	Allocatable v1.ResourceList
	// AppArmor: the host enforces AppArmor profiles.
	AppArmor bool
	// Pressure are the node's pressure conditions now (the eviction
	// manager's), sorted.
	Pressure []v1.NodeConditionType
	// ShuttingDown: the node is shutting down (graceful node shutdown);
	// every new pod is refused.
	ShuttingDown bool
	// Object is the Node as the API server has it (cluster mode; nil
	// standalone): its name, labels and taints are checked too.
	Object *v1.Node
}

// The kubelet's refusal while the node shuts down.
const (
	ReasonNodeShutdown  = "NodeShutdown"
	messageNodeShutdown = "Pod was rejected as the node is shutting down."
)

// Result is the decision for one pod.
type Result struct {
	Admit   bool
	Reason  string // the kubelet's: NodeShutdown, OutOfpods, OutOfcpu, OutOfmemory, OutOfephemeral-storage, NodePorts, NodeAffinity, NodeName, TaintToleration
	Message string
}

// Admit decides whether pod may join active, the pods already admitted and
// not terminated: BeforeAllocation, then AfterAllocation, with nothing
// allocated between them.
func Admit(pod *v1.Pod, active []*v1.Pod, node Node) Result {
	if r := BeforeAllocation(pod, node); !r.Admit {
		return r
	}
	return AfterAllocation(pod, active, node)
}

// BeforeAllocation are the checks the kubelet makes before its resource
// allocation (the topology and CPU managers' admit handler): the node
// shutting down, its pressure conditions, forbidden sysctls.
func BeforeAllocation(pod *v1.Pod, node Node) Result {
	if node.ShuttingDown {
		return Result{Reason: ReasonNodeShutdown, Message: messageNodeShutdown}
	}
	if r := checkPressure(pod, node.Pressure); !r.Admit {
		return r
	}
	if _, err := securitycontext.Sysctls(pod); err != nil {
		return Result{Reason: securitycontext.ReasonSysctlForbidden, Message: err.Error()}
	}
	return Result{Admit: true}
}

// AfterAllocation are the checks after it, the kubelet's predicates: the
// OS, the pod count, the Node's name, labels and taints, host ports,
// AppArmor, and the requests against allocatable.
func AfterAllocation(pod *v1.Pod, active []*v1.Pod, node Node) Result {
	if r := checkOS(pod); !r.Admit {
		return r
	}
	if node.MaxPods > 0 && len(active)+1 > node.MaxPods {
		return insufficient("pods", 1, int64(len(active)), int64(node.MaxPods))
	}
	if r := checkNode(pod, node.Object); !r.Admit {
		return r
	}
	if r := checkHostPorts(pod, active); !r.Admit {
		return r
	}
	if r := checkAppArmor(pod, node.AppArmor); !r.Admit {
		return r
	}
	// The scheduler's order, whose first shortfall the kubelet reports:
	// CPU, memory, ephemeral storage, then the scalar resources.
	for _, name := range append([]v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory, v1.ResourceEphemeralStorage}, extendedRequests(pod)...) {
		capacity, ok := node.Allocatable[name]
		if !ok {
			continue
		}
		want := PodRequest(pod, name)
		if want.IsZero() {
			continue
		}
		used := resource.Quantity{}
		for _, p := range active {
			q := PodRequest(p, name)
			used.Add(q)
		}
		total := used.DeepCopy()
		total.Add(want)
		if total.Cmp(capacity) > 0 {
			return insufficientQ(string(name), want, used, capacity)
		}
	}
	return Result{Admit: true}
}

// extendedRequests are the extended resources the pod's containers
// request, sorted.
func extendedRequests(pod *v1.Pod) []v1.ResourceName {
	var out []v1.ResourceName
	for _, cs := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			for name := range cs[i].Resources.Requests {
				if podspec.IsExtendedResourceName(name) && !slices.Contains(out, name) {
					out = append(out, name)
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

func insufficient(res string, requested, used, capacity int64) Result {
	return Result{Reason: "OutOf" + res, Message: fmt.Sprintf(
		"Node didn't have enough resource: %s, requested: %d, used: %d, capacity: %d", res, requested, used, capacity)}
}

func insufficientQ(res string, requested, used, capacity resource.Quantity) Result {
	if res == string(v1.ResourceCPU) {
		return insufficient(res, requested.MilliValue(), used.MilliValue(), capacity.MilliValue())
	}
	return insufficient(res, requested.Value(), used.Value(), capacity.Value())
}

// PodRequest is the pod's effective request of a resource, as the
// scheduler computes it: the larger of the sum over containers and the
// largest init container (plus sidecars, which run alongside), or the
// pod-level request, plus the overhead of the pod's RuntimeClass
// (spec.overhead, set by the API server's RuntimeClass admission).
func PodRequest(pod *v1.Pod, name v1.ResourceName) resource.Quantity {
	sum, _ := aggregate(pod, name, func(c *v1.Container) v1.ResourceList { return c.Resources.Requests })
	// Pod-level resources replace the containers' sum (a pod-level limit
	// without a request is its request, as the API defaults it); only
	// CPU, memory and huge pages are pod-level resources.
	if r := pod.Spec.Resources; r != nil && podLevel(name) {
		if q, ok := r.Requests[name]; ok {
			sum = q.DeepCopy()
		} else if q, ok := r.Limits[name]; ok {
			sum = q.DeepCopy()
		}
	}
	// The RuntimeClass's overhead comes on top of either, as in
	// component-helpers' PodRequests.
	if q, ok := pod.Spec.Overhead[name]; ok {
		sum.Add(q)
	}
	return sum
}

// PodLimit is the pod's effective limit of a resource, as the kubelet's
// PodLimits computes it: the containers' limits aggregated as requests
// are (sidecars alongside, the largest init container), or the pod-level
// limit, plus the RuntimeClass's overhead when the limit is not zero. ok
// is false when no container and no pod-level limit sets it: the pod is
// not limited.
func PodLimit(pod *v1.Pod, name v1.ResourceName) (q resource.Quantity, ok bool) {
	sum, ok := aggregate(pod, name, func(c *v1.Container) v1.ResourceList { return c.Resources.Limits })
	if r := pod.Spec.Resources; r != nil && podLevel(name) {
		if l, set := r.Limits[name]; set {
			sum, ok = l.DeepCopy(), true
		}
	}
	if o, set := pod.Spec.Overhead[name]; set && ok && !sum.IsZero() {
		sum.Add(o)
	}
	return sum, ok
}

// aggregate is the KEP-753 formula over one list of each container (its
// requests or its limits): the sum over containers and sidecars, or the
// largest init container with the sidecars started before it, whichever
// is larger. set reports whether any container names the resource.
func aggregate(pod *v1.Pod, name v1.ResourceName, list func(*v1.Container) v1.ResourceList) (sum resource.Quantity, set bool) {
	for i := range pod.Spec.Containers {
		if q, ok := list(&pod.Spec.Containers[i])[name]; ok {
			sum.Add(q)
			set = true
		}
	}
	sidecars := resource.Quantity{}
	maxInit := resource.Quantity{}
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		q, ok := list(c)[name]
		set = set || ok
		if podspec.IsSidecar(c) {
			sidecars.Add(q)
			continue
		}
		// A regular init container runs next to the sidecars started before it.
		q.Add(sidecars)
		if q.Cmp(maxInit) > 0 {
			maxInit = q
		}
	}
	sum.Add(sidecars)
	if maxInit.Cmp(sum) > 0 {
		sum = maxInit
	}
	return sum, set
}

// podLevel reports whether name may be set in the pod's spec.resources
// (component-helpers' IsSupportedPodLevelResource).
func podLevel(name v1.ResourceName) bool {
	return name == v1.ResourceCPU || name == v1.ResourceMemory || strings.HasPrefix(string(name), v1.ResourceHugePagesPrefix)
}

type hostPort struct {
	ip       string
	protocol v1.Protocol
	port     int32
}

func hostPorts(pod *v1.Pod) []hostPort {
	var out []hostPort
	for _, list := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range list {
			for _, p := range c.Ports {
				if p.HostPort <= 0 {
					continue
				}
				ip, proto := p.HostIP, p.Protocol
				if ip == "" {
					ip = "0.0.0.0"
				}
				if proto == "" {
					proto = v1.ProtocolTCP
				}
				out = append(out, hostPort{ip, proto, p.HostPort})
			}
		}
	}
	return out
}

func (a hostPort) conflicts(b hostPort) bool {
	return a.port == b.port && a.protocol == b.protocol && (a.ip == b.ip || a.ip == "0.0.0.0" || b.ip == "0.0.0.0")
}

func checkHostPorts(pod *v1.Pod, active []*v1.Pod) Result {
	want := hostPorts(pod)
	if len(want) == 0 {
		return Result{Admit: true}
	}
	for _, p := range active {
		for _, used := range hostPorts(p) {
			for _, w := range want {
				if w.conflicts(used) {
					return Result{Reason: "NodePorts", Message: fmt.Sprintf(
						"Node didn't have free ports for the requested pod ports: %s/%d is used by pod %s/%s",
						w.protocol, w.port, p.Namespace, p.Name)}
				}
			}
		}
	}
	return Result{Admit: true}
}

// The kubelet's reasons for a pod of another operating system.
const (
	ReasonPodOSSelectorNodeLabelDoesNotMatch = "PodOSSelectorNodeLabelDoesNotMatch"
	ReasonPodOSNotSupported                  = "PodOSNotSupported"
)

// checkOS refuses a pod meant for another operating system than the node's
// (runtime.GOOS), as the kubelet does before its other predicates: by the
// pod's kubernetes.io/os label (the kubelet reads the pod's labels there,
// not its node selector), then by spec.os.
func checkOS(pod *v1.Pod) Result {
	if os, ok := pod.Labels[v1.LabelOSStable]; ok && os != runtime.GOOS {
		return Result{Reason: ReasonPodOSSelectorNodeLabelDoesNotMatch,
			Message: "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label"}
	}
	if pod.Spec.OS != nil && string(pod.Spec.OS.Name) != runtime.GOOS {
		return Result{Reason: ReasonPodOSNotSupported, Message: "Failed to admit pod as the OS field doesn't match node OS"}
	}
	return Result{Admit: true}
}

// ReasonAppArmor is the kubelet's reason for a pod whose AppArmor profile
// the host cannot enforce.
const ReasonAppArmor = "AppArmor"

// checkAppArmor refuses a pod that asks for an AppArmor profile (runtime
// default or localhost, by field or by the deprecated annotation) on a host
// without AppArmor: running it unconfined would drop the confinement it
// asked for.
func checkAppArmor(pod *v1.Pod, enabled bool) Result {
	if enabled || !wantsAppArmor(pod) {
		return Result{Admit: true}
	}
	return Result{Reason: ReasonAppArmor, Message: "Cannot enforce AppArmor: AppArmor is not enabled on the host"}
}

func wantsAppArmor(pod *v1.Pod) bool {
	confined := func(p *v1.AppArmorProfile) bool {
		return p != nil && p.Type != v1.AppArmorProfileTypeUnconfined
	}
	if pod.Spec.SecurityContext != nil && confined(pod.Spec.SecurityContext.AppArmorProfile) {
		return true
	}
	for k, v := range pod.Annotations {
		if strings.HasPrefix(k, v1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix) && v != v1.DeprecatedAppArmorBetaProfileNameUnconfined {
			return true
		}
	}
	for _, list := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			if sc := list[i].SecurityContext; sc != nil && confined(sc.AppArmorProfile) {
				return true
			}
		}
	}
	for i := range pod.Spec.EphemeralContainers {
		if sc := pod.Spec.EphemeralContainers[i].SecurityContext; sc != nil && confined(sc.AppArmorProfile) {
			return true
		}
	}
	return false
}

// ReasonEvicted is the reason of a pod refused under node pressure, as the
// kubelet's eviction admit handler gives it.
const ReasonEvicted = "Evicted"

// checkPressure is the kubelet's eviction admit handler: under memory
// pressure alone, only BestEffort pods that do not tolerate the
// memory-pressure taint are refused; under disk or PID pressure, every
// pod. Critical pods are always admitted.
func checkPressure(pod *v1.Pod, pressure []v1.NodeConditionType) Result {
	if len(pressure) == 0 || podspec.IsCritical(pod) {
		return Result{Admit: true}
	}
	if len(pressure) == 1 && pressure[0] == v1.NodeMemoryPressure {
		if podspec.QOSClass(pod) != v1.PodQOSBestEffort {
			return Result{Admit: true}
		}
		taint := v1.Taint{Key: v1.TaintNodeMemoryPressure, Effect: v1.TaintEffectNoSchedule}
		for i := range pod.Spec.Tolerations {
			if pod.Spec.Tolerations[i].ToleratesTaint(logr.Discard(), &taint, false) {
				return Result{Admit: true}
			}
		}
	}
	return Result{Reason: ReasonEvicted, Message: fmt.Sprintf("The node had condition: %v. ", pressure)}
}
