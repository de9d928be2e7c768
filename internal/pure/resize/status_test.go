package resize_test

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodelet/nodelet/internal/pure/observed"
	"github.com/nodelet/nodelet/internal/pure/resize"
)

func TestStatusResources(t *testing.T) {
	alloc := v1.ResourceRequirements{Requests: rl("100m", "64Mi"), Limits: rl("200m", "128Mi")}
	run := func(r *observed.Resources) *observed.Container {
		return &observed.Container{ID: "c1", State: observed.ContainerRunning, Resources: r}
	}
	prevRunning := &v1.ContainerStatus{
		ContainerID: "containerd://c1",
		State:       v1.ContainerState{Running: &v1.ContainerStateRunning{}},
		Resources:   &v1.ResourceRequirements{Requests: rl("150m", "80Mi"), Limits: rl("250m", "160Mi")},
	}
	tests := []struct {
		name      string
		alloc     v1.ResourceRequirements
		c         *observed.Container
		actuated  *resize.Resources
		prev      *v1.ContainerStatus
		wantReq   v1.ResourceList
		wantLimit v1.ResourceList
	}{
		{
			name: "not running: the allocation", alloc: alloc,
			c:       &observed.Container{State: observed.ContainerExited, Resources: &observed.Resources{CPUShares: 512}},
			wantReq: rl("100m", "64Mi"), wantLimit: rl("200m", "128Mi"),
		},
		{
			name: "running: what the runtime enforces; the memory request is the actuated one", alloc: alloc,
			c:        run(&observed.Resources{CPUShares: 256, CPUQuota: 30000, CPUPeriod: 100000, MemoryLimit: 96 << 20}),
			actuated: &resize.Resources{MemRequest: 48 << 20},
			wantReq:  rl("250m", "48Mi"), wantLimit: rl("300m", "96Mi"),
		},
		{
			name: "shares round up as the kubelet's SharesToMilliCPU", alloc: alloc,
			c:       run(&observed.Resources{CPUShares: 102, CPUQuota: 20000, CPUPeriod: 100000, MemoryLimit: 128 << 20}),
			wantReq: rl("100m", "64Mi"), wantLimit: rl("200m", "128Mi"),
		},
		{
			name: "nothing reported, no record: the previous status's values for the same container", alloc: alloc,
			c: run(nil), prev: prevRunning,
			wantReq: rl("150m", "80Mi"), wantLimit: rl("250m", "160Mi"),
		},
		{
			name: "nothing reported: the actuated record", alloc: alloc,
			c: run(nil), actuated: &resize.Resources{CPURequest: 120, CPULimit: 220, MemRequest: 70 << 20, MemLimit: 140 << 20},
			prev:    prevRunning,
			wantReq: rl("120m", "70Mi"), wantLimit: rl("220m", "140Mi"),
		},
		{
			name: "a previous status of another container is not used", alloc: alloc,
			c:       &observed.Container{ID: "c2", State: observed.ContainerRunning},
			prev:    prevRunning,
			wantReq: rl("100m", "64Mi"), wantLimit: rl("200m", "128Mi"),
		},
		{
			name:    "at the kernel's floors the allocated value stays (1m request, 2 shares)",
			alloc:   v1.ResourceRequirements{Requests: rl("1m", "")},
			c:       run(&observed.Resources{CPUShares: 2, CPUQuota: -1, CPUPeriod: 100000}),
			wantReq: rl("1m", ""),
		},
		{
			name: "no quota reported (-1): the allocated limit stays", alloc: alloc,
			c:       run(&observed.Resources{CPUShares: 102, CPUQuota: -1, CPUPeriod: 100000, MemoryLimit: 128 << 20}),
			wantReq: rl("100m", "64Mi"), wantLimit: rl("200m", "128Mi"),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := "containerd://c1"
			if tt.c != nil && tt.c.ID != "" {
				id = "containerd://" + tt.c.ID
			}
			got := resize.StatusResources(tt.alloc, tt.c, tt.actuated, tt.prev, id)
			same := func(what string, got, want v1.ResourceList) {
				if len(got) != len(want) {
					t.Errorf("%s = %v, want %v", what, got, want)
					return
				}
				for k, w := range want {
					if g := got[k]; g.Cmp(w) != 0 {
						t.Errorf("%s[%s] = %s, want %s", what, k, g.String(), w.String())
					}
				}
			}
			same("requests", got.Requests, tt.wantReq)
			same("limits", got.Limits, tt.wantLimit)
		})
	}
	// The allocation given is not modified.
	if q := alloc.Requests[v1.ResourceCPU]; q.Cmp(resource.MustParse("100m")) != 0 {
		t.Errorf("StatusResources modified the allocation: %s", q.String())
	}
}
