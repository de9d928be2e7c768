package podspec

import (
	"testing"

	v1 "k8s.io/api/core/v1"
)

func TestPriorityAndCritical(t *testing.T) {
	p := func(v int32) *int32 { return &v }
	const static, api = "file", ConfigSourceAPI
	for _, tc := range []struct {
		name                   string
		source                 string
		spec                   v1.PodSpec
		priority               int32
		critical, nodeCritical bool
	}{
		{"none", static, v1.PodSpec{}, 0, false, false},
		{"node critical class", static, v1.PodSpec{PriorityClassName: SystemNodeCritical}, 2000001000, true, true},
		{"cluster critical class", static, v1.PodSpec{PriorityClassName: SystemClusterCritical}, 2000000000, true, false},
		{"other class", static, v1.PodSpec{PriorityClassName: "high"}, 0, false, false},
		{"spec wins", static, v1.PodSpec{PriorityClassName: SystemNodeCritical, Priority: p(5)}, 5, false, false},
		{"high value", static, v1.PodSpec{Priority: p(2000000000)}, 2000000000, true, false},
		{"just below", static, v1.PodSpec{Priority: p(1999999999)}, 1999999999, false, false},
		{"negative", static, v1.PodSpec{Priority: p(-3)}, -3, false, false},
		// From the API server, the class is what admission made of it.
		{"API, node critical", api, v1.PodSpec{PriorityClassName: SystemNodeCritical, Priority: p(2000001000)}, 2000001000, true, true},
		{"API, class name alone", api, v1.PodSpec{PriorityClassName: SystemNodeCritical}, 0, false, false},
		{"API, critical value of another class", api, v1.PodSpec{PriorityClassName: "mine", Priority: p(2000000000)}, 2000000000, true, false},
	} {
		pod := &v1.Pod{Spec: tc.spec}
		pod.Annotations = map[string]string{AnnotationConfigSource: tc.source}
		if got := Priority(pod); got != tc.priority {
			t.Errorf("%s: Priority = %d, want %d", tc.name, got, tc.priority)
		}
		if got := IsCritical(pod); got != tc.critical {
			t.Errorf("%s: IsCritical = %v, want %v", tc.name, got, tc.critical)
		}
		if got := IsNodeCritical(pod); got != tc.nodeCritical {
			t.Errorf("%s: IsNodeCritical = %v, want %v", tc.name, got, tc.nodeCritical)
		}
	}
}

func TestGracePeriodSeconds(t *testing.T) {
	five := int64(5)
	if got := GracePeriodSeconds(&v1.Pod{}); got != 30 {
		t.Errorf("no spec grace: %d, want 30", got)
	}
	if got := GracePeriodSeconds(&v1.Pod{Spec: v1.PodSpec{TerminationGracePeriodSeconds: &five}}); got != 5 {
		t.Errorf("spec grace 5: %d", got)
	}
}
