package resize_test

import (
	"testing"

	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/internal/pure/resize"
)

func TestCheckMemoryDecrease(t *testing.T) {
	tests := []struct {
		name     string
		plan     resize.Plan
		podLimit int64
		usage    resize.Usage
		want     string
	}{
		{name: "nothing decreasing", plan: resize.Plan{}, want: ""},
		{
			name:  "container above its new limit",
			plan:  resize.Plan{DecreasingMemory: map[string]int64{"c1": 10240}},
			usage: resize.Usage{Containers: map[string]uint64{"c1": 2 << 20}},
			want:  `cannot decrease memory limits: attempting to set container "c1" memory limit (10240) below current usage (2097152)`,
		},
		{
			name:  "container below its new limit",
			plan:  resize.Plan{DecreasingMemory: map[string]int64{"c1": 40 << 20}},
			usage: resize.Usage{Containers: map[string]uint64{"c1": 2 << 20}},
			want:  "",
		},
		{
			name:  "usage equal to the limit is refused",
			plan:  resize.Plan{DecreasingMemory: map[string]int64{"c1": 1 << 20}},
			usage: resize.Usage{Containers: map[string]uint64{"c1": 1 << 20}},
			want:  `cannot decrease memory limits: attempting to set container "c1" memory limit (1048576) below current usage (1048576)`,
		},
		{
			name:     "pod and container, both refused, in the kubelet's bracketed form",
			plan:     resize.Plan{PodMemoryDecreasing: true, DecreasingMemory: map[string]int64{"c1": 10240}},
			podLimit: 20480,
			usage:    resize.Usage{Pod: ptr.To[uint64](3 << 20), Containers: map[string]uint64{"c1": 2 << 20}},
			want:     `cannot decrease memory limits: [attempting to set pod memory limit (20480) below current usage (3145728), attempting to set container "c1" memory limit (10240) below current usage (2097152)]`,
		},
		{
			name:     "no usage known: refused, not guessed",
			plan:     resize.Plan{PodMemoryDecreasing: true, DecreasingMemory: map[string]int64{"c1": 10240}},
			podLimit: 20480,
			want:     `cannot decrease memory limits: [missing pod memory usage, missing container "c1" memory usage]`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := resize.CheckMemoryDecrease(tt.plan, tt.podLimit, tt.usage)
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tt.want {
				t.Errorf("CheckMemoryDecrease =\n  %q\nwant\n  %q", got, tt.want)
			}
		})
	}
}
