package podspec

import (
	"testing"

	v1 "k8s.io/api/core/v1"
)

func TestPriorityAndCritical(t *testing.T) {
	p := func(v int32) *int32 { return &v }
	for _, tc := range []struct {
		name     string
		spec     v1.PodSpec
		priority int32
		critical bool
	}{
		{"none", v1.PodSpec{}, 0, false},
		{"node critical class", v1.PodSpec{PriorityClassName: SystemNodeCritical}, 2000001000, true},
		{"cluster critical class", v1.PodSpec{PriorityClassName: SystemClusterCritical}, 2000000000, true},
		{"other class", v1.PodSpec{PriorityClassName: "high"}, 0, false},
		{"spec wins", v1.PodSpec{PriorityClassName: SystemNodeCritical, Priority: p(5)}, 5, false},
		{"high value", v1.PodSpec{Priority: p(2000000000)}, 2000000000, true},
		{"just below", v1.PodSpec{Priority: p(1999999999)}, 1999999999, false},
		{"negative", v1.PodSpec{Priority: p(-3)}, -3, false},
	} {
		pod := &v1.Pod{Spec: tc.spec}
		if got := Priority(pod); got != tc.priority {
			t.Errorf("%s: Priority = %d, want %d", tc.name, got, tc.priority)
		}
		if got := IsCritical(pod); got != tc.critical {
			t.Errorf("%s: IsCritical = %v, want %v", tc.name, got, tc.critical)
		}
	}
}
