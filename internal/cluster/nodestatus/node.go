package nodestatus

import (
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletapis "k8s.io/kubelet/pkg/apis"
)

// The Node as a whole, pure: the one nodelet creates, the reconciliation
// of one that already exists, and the status update of each computation.

// Labels and annotations the kubelet sets on its Node.
const (
	labelOSBeta   = kubeletapis.LabelOS
	labelArchBeta = kubeletapis.LabelArch
	// annotationAttachDetach is the kubelet's
	// ControllerManagedAttachAnnotation.
	annotationAttachDetach = "volumes.kubernetes.io/controller-managed-attach-detach"
)

// defaultLabels are the labels the kubelet reconciles on a Node that
// already exists (updateDefaultLabels); nodelet sets the first five.
var defaultLabels = []string{
	v1.LabelHostname,
	v1.LabelOSStable,
	v1.LabelArchStable,
	labelOSBeta,
	labelArchBeta,
	v1.LabelTopologyZone,
	v1.LabelTopologyRegion,
	v1.LabelFailureDomainBetaZone,
	v1.LabelFailureDomainBetaRegion,
	v1.LabelInstanceTypeStable,
	v1.LabelInstanceType,
	v1.LabelWindowsBuild,
}

// initialNode is the Node nodelet registers (the kubelet's initialNode):
// the default labels, then --node-labels over them, the registration
// taints, the attach/detach annotation, the provider ID, and the status
// of f.
func (c *config) initialNode(f *Facts) (*v1.Node, []Event) {
	node := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: c.nodeName,
			Labels: map[string]string{
				v1.LabelHostname:   c.hostname,
				v1.LabelOSStable:   c.goos,
				v1.LabelArchStable: c.goarch,
				labelOSBeta:        c.goos,
				labelArchBeta:      c.goarch,
			},
		},
	}
	if len(c.taints) > 0 {
		node.Spec.Taints = append([]v1.Taint{}, c.taints...)
	}
	if c.attachDetach {
		node.Annotations = map[string]string{annotationAttachDetach: "true"}
	}
	for k, v := range c.labels {
		node.Labels[k] = v
	}
	node.Spec.ProviderID = c.providerID
	evs := c.setStatus(node, f)
	return node, evs
}

// reconcileExisting brings a Node that already existed in line with the
// one nodelet would have created, as far as the kubelet does
// (tryRegisterWithAPIServer): the attach/detach annotation, the default
// labels, empty capacity and allocatable, the huge page sizes. Labels
// from --node-labels and taints are not reconciled: they may have been
// changed on purpose since. It changes existing in place and says whether
// it changed anything.
func reconcileExisting(initial, existing *v1.Node) bool {
	changed := false
	// The attach/detach annotation.
	want, set := initial.Annotations[annotationAttachDetach]
	if got := existing.Annotations[annotationAttachDetach]; got != want {
		if set {
			if existing.Annotations == nil {
				existing.Annotations = map[string]string{}
			}
			existing.Annotations[annotationAttachDetach] = want
		} else {
			delete(existing.Annotations, annotationAttachDetach)
		}
		changed = true
	}
	// The default labels, never set empty.
	if existing.Labels == nil {
		existing.Labels = map[string]string{}
	}
	for _, l := range defaultLabels {
		v, ok := initial.Labels[l]
		if !ok {
			continue
		}
		if existing.Labels[l] != v {
			existing.Labels[l] = v
			changed = true
		}
		if existing.Labels[l] == "" {
			delete(existing.Labels, l)
		}
	}
	// Capacity and allocatable present at all.
	if existing.Status.Capacity == nil {
		existing.Status.Capacity = initial.Status.Capacity.DeepCopy()
		changed = changed || initial.Status.Capacity != nil
		if existing.Status.Capacity == nil {
			existing.Status.Capacity = v1.ResourceList{}
		}
	}
	if existing.Status.Allocatable == nil {
		existing.Status.Allocatable = initial.Status.Allocatable.DeepCopy()
		changed = changed || initial.Status.Allocatable != nil
		if existing.Status.Allocatable == nil {
			existing.Status.Allocatable = v1.ResourceList{}
		}
	}
	// Huge page sizes: as the machine has them now.
	supported := map[v1.ResourceName]bool{}
	for name, capacity := range initial.Status.Capacity {
		if !strings.HasPrefix(string(name), v1.ResourceHugePagesPrefix) {
			continue
		}
		supported[name] = true
		allocatable := initial.Status.Allocatable[name]
		got, ok := existing.Status.Capacity[name]
		gotAlloc := existing.Status.Allocatable[name]
		if !ok || got.Cmp(capacity) != 0 {
			existing.Status.Capacity[name] = capacity.DeepCopy()
			changed = true
		}
		if !ok || gotAlloc.Cmp(allocatable) != 0 {
			existing.Status.Allocatable[name] = allocatable.DeepCopy()
			changed = true
		}
	}
	for name := range existing.Status.Capacity {
		if strings.HasPrefix(string(name), v1.ResourceHugePagesPrefix) && !supported[name] {
			delete(existing.Status.Capacity, name)
			delete(existing.Status.Allocatable, name)
			changed = true
		}
	}
	return changed
}

// updateNode is original with the status of f (the kubelet's
// updateNode): a copy, with the os and arch labels put back if missing.
// changed says whether anything but heartbeat times differs, that is
// whether the status must be patched before the report frequency says
// so.
func (c *config) updateNode(original *v1.Node, f *Facts) (node *v1.Node, changed bool, evs []Event) {
	node = original.DeepCopy()
	for l, v := range map[string]string{v1.LabelOSStable: c.goos, v1.LabelArchStable: c.goarch} {
		if node.Labels[l] != v {
			if node.Labels == nil {
				node.Labels = map[string]string{}
			}
			node.Labels[l] = v
			changed = true
		}
	}
	evs = c.setStatus(node, f)
	return node, changed || statusChanged(&original.Status, &node.Status), evs
}

// statusChanged compares two statuses, the conditions' heartbeat times
// and order aside (the kubelet's nodeStatusHasChanged).
func statusChanged(a, b *v1.NodeStatus) bool {
	if len(a.Conditions) != len(b.Conditions) {
		return true
	}
	ca, cb := heartbeatless(a.Conditions), heartbeatless(b.Conditions)
	for i := range ca {
		if !equality.Semantic.DeepEqual(ca[i], cb[i]) {
			return true
		}
	}
	sa, sb := a.DeepCopy(), b.DeepCopy()
	sa.Conditions, sb.Conditions = nil, nil
	return !equality.Semantic.DeepEqual(sa, sb)
}

// heartbeatless is a copy of conds sorted by type, heartbeat times
// zeroed.
func heartbeatless(conds []v1.NodeCondition) []v1.NodeCondition {
	out := append([]v1.NodeCondition{}, conds...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Type < out[j].Type })
	for i := range out {
		out[i].LastHeartbeatTime = metav1.Time{}
	}
	return out
}
