package podresources

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/pure/podspec"
)

func swapPod(req, limit string, mutate ...func(*v1.Pod)) (*v1.Pod, *v1.Container) {
	c := v1.Container{Name: "c", Resources: v1.ResourceRequirements{Requests: v1.ResourceList{}, Limits: v1.ResourceList{}}}
	if req != "" {
		c.Resources.Requests[v1.ResourceMemory] = resource.MustParse(req)
	}
	if limit != "" {
		c.Resources.Limits[v1.ResourceMemory] = resource.MustParse(limit)
	}
	pod := &v1.Pod{Spec: v1.PodSpec{Containers: []v1.Container{c}}}
	for _, m := range mutate {
		m(pod)
	}
	return pod, &pod.Spec.Containers[0]
}

func TestContainerSwapBehavior(t *testing.T) {
	limited := Swap{Behavior: LimitedSwap, Controller: true, V2: true, MemoryCapacity: 8 * gi, SwapCapacity: 4 * gi}
	critical := func(p *v1.Pod) { p.Spec.PriorityClassName = podspec.SystemNodeCritical }
	withCPU := func(p *v1.Pod) {
		p.Spec.Containers[0].Resources.Requests[v1.ResourceCPU] = resource.MustParse("1")
		p.Spec.Containers[0].Resources.Limits[v1.ResourceCPU] = resource.MustParse("1")
	}
	for _, tc := range []struct {
		name       string
		swap       Swap
		req, limit string
		mutate     []func(*v1.Pod)
		want       SwapBehavior
	}{
		{name: "burstable, request below limit", swap: limited, req: "1Gi", limit: "2Gi", want: LimitedSwap},
		{name: "burstable, request without limit", swap: limited, req: "1Gi", want: LimitedSwap},
		{name: "NoSwap configured", swap: Swap{Behavior: NoSwap, Controller: true, V2: true}, req: "1Gi", limit: "2Gi", want: NoSwap},
		{name: "cgroup v1", swap: Swap{Behavior: LimitedSwap, Controller: true}, req: "1Gi", limit: "2Gi", want: NoSwap},
		{name: "no swap controller", swap: Swap{Behavior: LimitedSwap, V2: true}, req: "1Gi", limit: "2Gi", want: NoSwap},
		{name: "best effort", swap: limited, want: NoSwap},
		{name: "guaranteed", swap: limited, req: "1Gi", limit: "1Gi", mutate: []func(*v1.Pod){withCPU}, want: NoSwap},
		{name: "burstable, request equals limit", swap: limited, req: "1Gi", limit: "1Gi", want: NoSwap},
		{name: "critical", swap: limited, req: "1Gi", limit: "2Gi", mutate: []func(*v1.Pod){critical}, want: NoSwap},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod, c := swapPod(tc.req, tc.limit, tc.mutate...)
			if got := tc.swap.ContainerSwapBehavior(pod, c); got != tc.want {
				t.Errorf("got %s, want %s", got, tc.want)
			}
		})
	}
}

func TestLimitedSwapBytes(t *testing.T) {
	for _, tc := range []struct {
		req, mem, swap, want int64
		err                  string
	}{
		{req: gi, mem: 8 * gi, swap: 4 * gi, want: gi / 2},
		{req: 0, mem: 8 * gi, swap: 4 * gi, want: 0},
		{req: 8 * gi, mem: 8 * gi, swap: 4 * gi, want: 4 * gi},
		{req: 1000, mem: 3000, swap: 1000, want: 333}, // rounded down
		{req: gi, mem: 8 * gi, swap: 0, want: 0},
		{req: 9 * gi, mem: 8 * gi, swap: 4 * gi, err: "larger than total node memory"},
		{req: gi, mem: 0, swap: 4 * gi, err: "total node memory is 0"},
	} {
		got, err := LimitedSwapBytes(tc.req, tc.mem, tc.swap)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("LimitedSwapBytes(%d, %d, %d): err %v, want %q", tc.req, tc.mem, tc.swap, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("LimitedSwapBytes(%d, %d, %d) = %d, %v; want %d", tc.req, tc.mem, tc.swap, got, err, tc.want)
		}
	}
}

func TestApplySwap(t *testing.T) {
	for _, tc := range []struct {
		name        string
		swap        Swap
		req, limit  string
		wantMemsw   int64
		wantUnified map[string]string
		err         string
	}{
		{name: "no controller: untouched", swap: Swap{Behavior: LimitedSwap, V2: true}, req: "1Gi", limit: "2Gi"},
		{name: "v1: memsw is the memory limit", swap: Swap{Controller: true}, req: "1Gi", limit: "2Gi", wantMemsw: 2 * gi},
		{name: "v1 LimitedSwap is NoSwap", swap: Swap{Behavior: LimitedSwap, Controller: true, MemoryCapacity: 8 * gi, SwapCapacity: 4 * gi}, req: "1Gi", limit: "2Gi", wantMemsw: 2 * gi},
		{name: "v1 unlimited stays unlimited", swap: Swap{Controller: true}, req: "1Gi"},
		{name: "v2 NoSwap", swap: Swap{Controller: true, V2: true}, req: "1Gi", limit: "2Gi", wantUnified: map[string]string{"memory.swap.max": "0"}},
		{name: "v2 LimitedSwap", swap: Swap{Behavior: LimitedSwap, Controller: true, V2: true, MemoryCapacity: 8 * gi, SwapCapacity: 4 * gi}, req: "1Gi", limit: "2Gi",
			wantUnified: map[string]string{"memory.swap.max": "536870912"}},
		{name: "v2 LimitedSwap, guaranteed-like container", swap: Swap{Behavior: LimitedSwap, Controller: true, V2: true, MemoryCapacity: 8 * gi, SwapCapacity: 4 * gi}, req: "2Gi", limit: "2Gi",
			wantUnified: map[string]string{"memory.swap.max": "0"}},
		{name: "v2 LimitedSwap, request above the node", swap: Swap{Behavior: LimitedSwap, Controller: true, V2: true, MemoryCapacity: gi, SwapCapacity: 4 * gi}, req: "2Gi", limit: "3Gi",
			wantUnified: map[string]string{"memory.swap.max": "0"}, err: "disallowing swap"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod, c := swapPod(tc.req, tc.limit)
			res := ContainerResources(pod, c, 8*gi)
			err := tc.swap.ApplySwap(pod, c, res)
			if (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("err %v, want %q", err, tc.err)
			}
			if res.MemorySwapLimitInBytes != tc.wantMemsw {
				t.Errorf("memsw %d, want %d", res.MemorySwapLimitInBytes, tc.wantMemsw)
			}
			if len(res.Unified) != len(tc.wantUnified) || res.Unified["memory.swap.max"] != tc.wantUnified["memory.swap.max"] {
				t.Errorf("unified %v, want %v", res.Unified, tc.wantUnified)
			}
		})
	}
	// An existing Unified map (MemoryQoS) is kept.
	pod, c := swapPod("1Gi", "2Gi")
	res := &runtimeapi.LinuxContainerResources{Unified: map[string]string{"memory.high": "1"}}
	if err := (Swap{Controller: true, V2: true}).ApplySwap(pod, c, res); err != nil || res.Unified["memory.high"] != "1" || res.Unified["memory.swap.max"] != "0" {
		t.Errorf("unified %v, err %v", res.Unified, err)
	}
}

func TestParseSwapsAndFailSwapOn(t *testing.T) {
	header := "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n"
	for _, tc := range []struct {
		name       string
		in         string
		capacity   int64
		failSwapOn bool
		err        string
	}{
		{name: "empty file", in: ""},
		{name: "header only, failSwapOn", in: header, failSwapOn: true},
		{name: "swap, failSwapOn off", in: header + "/dev/dm-1 partition 16760828 0 -2\n", capacity: 16760828 * 1024},
		{name: "swap, failSwapOn", in: header + "/dev/dm-1 partition 16760828 0 -2\n/swapfile file 1024 0 -3\n", capacity: (16760828 + 1024) * 1024,
			failSwapOn: true, err: "running with swap on is not supported, please disable swap or set --fail-swap-on flag to false (failSwapOn: false); /proc/swaps lists /dev/dm-1, /swapfile"},
		{name: "bad size", in: header + "/swapfile file x 0 -2\n", err: `size "x"`},
		{name: "short line", in: header + "/swapfile file\n", err: "has no size"},
		{name: "too long", in: header + strings.Repeat("/s file 1 0 0\n", maxSwapsLines), err: "more than 1024 lines"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := ParseSwaps(strings.NewReader(tc.in))
			if err == nil {
				if s.Capacity != tc.capacity {
					t.Errorf("capacity %d, want %d", s.Capacity, tc.capacity)
				}
				err = CheckFailSwapOn(s, tc.failSwapOn)
			}
			if (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
				t.Errorf("err %v, want %q", err, tc.err)
			}
		})
	}
}

func TestParseSwapBehavior(t *testing.T) {
	for in, want := range map[string]SwapBehavior{"": NoSwap, "NoSwap": NoSwap, "LimitedSwap": LimitedSwap, "UnlimitedSwap": ""} {
		got, err := ParseSwapBehavior(in)
		if got != want || (err != nil) != (want == "") {
			t.Errorf("ParseSwapBehavior(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}
