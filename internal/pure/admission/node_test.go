package admission

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/internal/pure/podspec"
)

// What the scheduler checked is checked again against the Node, with the
// kubelet's reasons and messages.
func TestAdmitAgainstTheNode(t *testing.T) {
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a", Labels: map[string]string{"disk": "ssd", "kubernetes.io/os": "linux"}},
		Spec: v1.NodeSpec{Taints: []v1.Taint{
			{Key: "dedicated", Value: "db", Effect: v1.TaintEffectNoExecute},
			{Key: "gpu", Effect: v1.TaintEffectNoSchedule}, // not the node's business
		}}}
	tolerating := func(p *v1.Pod) *v1.Pod {
		p.Spec.Tolerations = []v1.Toleration{{Key: "dedicated", Operator: v1.TolerationOpEqual, Value: "db", Effect: v1.TaintEffectNoExecute}}
		return p
	}
	for _, tc := range []struct {
		name   string
		pod    func() *v1.Pod
		reason string
		msg    string
	}{
		{"fits", func() *v1.Pod {
			p := tolerating(pod("a", "", "", 0))
			p.Spec.NodeName, p.Spec.NodeSelector = "node-a", map[string]string{"disk": "ssd"}
			return p
		}, "", ""},
		{"nodeSelector", func() *v1.Pod {
			p := tolerating(pod("a", "", "", 0))
			p.Spec.NodeSelector = map[string]string{"disk": "hdd"}
			return p
		}, "NodeAffinity", "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector"},
		{"required affinity", func() *v1.Pod {
			p := tolerating(pod("a", "", "", 0))
			p.Spec.Affinity = &v1.Affinity{NodeAffinity: &v1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &v1.NodeSelector{
				NodeSelectorTerms: []v1.NodeSelectorTerm{{MatchExpressions: []v1.NodeSelectorRequirement{
					{Key: "disk", Operator: v1.NodeSelectorOpNotIn, Values: []string{"ssd"}}}}}}}}
			return p
		}, "NodeAffinity", "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector"},
		{"node name", func() *v1.Pod {
			p := tolerating(pod("a", "", "", 0))
			p.Spec.NodeName = "node-b"
			return p
		}, "NodeName", "Predicate NodeName failed: node(s) didn't match the requested node name"},
		{"NoExecute taint", func() *v1.Pod { return pod("a", "", "", 0) },
			"TaintToleration", "Predicate TaintToleration failed: node(s) had taints that the pod didn't tolerate"},
		{"static pods ignore taints", func() *v1.Pod {
			p := pod("a", "", "", 0)
			p.Annotations = map[string]string{podspec.AnnotationConfigSource: "file"}
			return p
		}, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Admit(tc.pod(), nil, Node{Object: node})
			if r.Admit != (tc.reason == "") || r.Reason != tc.reason || r.Message != tc.msg {
				t.Errorf("Admit = %+v, want reason %q message %q", r, tc.reason, tc.msg)
			}
			// Standalone: no Node object, nothing of this is checked.
			if r := Admit(tc.pod(), nil, Node{}); !r.Admit {
				t.Errorf("standalone: %+v", r)
			}
		})
	}
}
