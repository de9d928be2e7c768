package admission

import (
	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"
	corev1 "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"

	"github.com/nodelet/nodelet/internal/pure/podspec"
)

// The kubelet's predicate names (the Reason) and descriptions (in the
// Message: "Predicate <name> failed: <description>").
const (
	ReasonNodeAffinity    = "NodeAffinity"
	ReasonNodeName        = "NodeName"
	ReasonTaintToleration = "TaintToleration"

	descNodeAffinity = "node(s) didn't match Pod's node affinity/selector"
	descNodeName     = "node(s) didn't match the requested node name"
	descTaints       = "node(s) had taints that the pod didn't tolerate"
)

// checkNode re-checks, as the kubelet does on admission, what the
// scheduler checked against the Node: the node name, nodeSelector and
// required node affinity, and NoExecute taints (not for static pods: a
// node's own pods run whatever its taints).
func checkNode(pod *v1.Pod, node *v1.Node) Result {
	if node == nil {
		return Result{Admit: true}
	}
	if match, err := nodeaffinity.GetRequiredNodeAffinity(pod).Match(node); err != nil || !match {
		return predicateFailed(ReasonNodeAffinity, descNodeAffinity)
	}
	if pod.Spec.NodeName != "" && pod.Spec.NodeName != node.Name {
		return predicateFailed(ReasonNodeName, descNodeName)
	}
	if !podspec.IsStatic(pod) {
		noExecute := func(t *v1.Taint) bool { return t.Effect == v1.TaintEffectNoExecute }
		if _, untolerated := corev1.FindMatchingUntoleratedTaint(logr.Discard(), node.Spec.Taints, pod.Spec.Tolerations, noExecute, false); untolerated {
			return predicateFailed(ReasonTaintToleration, descTaints)
		}
	}
	return Result{Admit: true}
}

func predicateFailed(name, desc string) Result {
	return Result{Reason: name, Message: "Predicate " + name + " failed: " + desc}
}
