package podresources

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

const gi = int64(1) << 30

// rr is requirements from "cpu,memory" request and limit strings; "" leaves
// the resource out.
func rr(reqCPU, reqMem, limCPU, limMem string) v1.ResourceRequirements {
	list := func(cpu, mem string) v1.ResourceList {
		l := v1.ResourceList{}
		if cpu != "" {
			l[v1.ResourceCPU] = resource.MustParse(cpu)
		}
		if mem != "" {
			l[v1.ResourceMemory] = resource.MustParse(mem)
		}
		if len(l) == 0 {
			return nil
		}
		return l
	}
	return v1.ResourceRequirements{Requests: list(reqCPU, reqMem), Limits: list(limCPU, limMem)}
}

func basePod() *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "uid-1"},
		Spec:       v1.PodSpec{Containers: []v1.Container{{Name: "app", Image: "nginx"}}},
	}
}

func TestMilliCPUConversions(t *testing.T) {
	for _, tc := range []struct {
		milli, shares, quota int64
	}{
		{0, 2, 0},
		{1, 2, 1000},
		{2, 2, 1000},
		{9, 9, 1000},
		{10, 10, 1000},
		{100, 102, 10000},
		{250, 256, 25000},
		{1000, 1024, 100000},
		{1500, 1536, 150000},
		{1000000, MaxShares, 100000000},
	} {
		if got := MilliCPUToShares(tc.milli); got != tc.shares {
			t.Errorf("MilliCPUToShares(%d) = %d, want %d", tc.milli, got, tc.shares)
		}
		if got := MilliCPUToQuota(tc.milli); got != tc.quota {
			t.Errorf("MilliCPUToQuota(%d) = %d, want %d", tc.milli, got, tc.quota)
		}
	}
}

func TestContainerResources(t *testing.T) {
	const capacity = 10 * gi
	for _, tc := range []struct {
		name     string
		mutate   func(p *v1.Pod)
		capacity int64 // 0: capacity
		// which container: "" the first app container, else an init
		// container by name.
		container                  string
		shares, quota, period, mem int64
		oom                        int64
	}{
		{
			name:   "best effort: no requests",
			mutate: func(p *v1.Pod) {},
			shares: 2, oom: 1000,
		},
		{
			name: "guaranteed",
			mutate: func(p *v1.Pod) {
				p.Spec.Containers[0].Resources = rr("500m", "256Mi", "500m", "256Mi")
			},
			shares: 512, quota: 50000, period: 100000, mem: 256 << 20, oom: -997,
		},
		{
			name: "burstable requests only: oom from the memory request",
			mutate: func(p *v1.Pod) {
				p.Spec.Containers[0].Resources = rr("250m", "1Gi", "", "")
			},
			shares: 256, oom: 900,
		},
		{
			name: "burstable with limits above requests",
			mutate: func(p *v1.Pod) {
				p.Spec.Containers[0].Resources = rr("100m", "512Mi", "2", "2Gi")
			},
			shares: 102, quota: 200000, period: 100000, mem: 2 * gi, oom: 950,
		},
		{
			name: "limits only: shares from the CPU limit",
			mutate: func(p *v1.Pod) {
				p.Spec.Containers[0].Resources = rr("", "", "1", "128Mi")
			},
			shares: 1024, quota: 100000, period: 100000, mem: 128 << 20, oom: 999,
		},
		{
			name: "explicit zero CPU request with a limit: minimum shares",
			mutate: func(p *v1.Pod) {
				p.Spec.Containers[0].Resources = rr("0", "", "2", "")
			},
			shares: 2, quota: 200000, period: 100000, oom: 999,
		},
		{
			name: "tiny CPU: minimum shares and quota",
			mutate: func(p *v1.Pod) {
				p.Spec.Containers[0].Resources = rr("1m", "", "1m", "")
			},
			shares: 2, quota: 1000, period: 100000, oom: 999,
		},
		{
			name: "huge CPU: maximum shares",
			mutate: func(p *v1.Pod) {
				p.Spec.Containers[0].Resources = rr("1000", "", "", "")
			},
			shares: MaxShares, oom: 999,
		},
		{
			name: "burstable requesting nearly all memory: oom floor 3",
			mutate: func(p *v1.Pod) {
				p.Spec.Containers[0].Resources = rr("", "10220Mi", "", "")
			},
			shares: 2, oom: 3,
		},
		{
			name: "burstable requesting more than the node: oom floor 3",
			mutate: func(p *v1.Pod) {
				p.Spec.Containers[0].Resources = rr("", "20Gi", "", "30Gi")
			},
			shares: 2, mem: 30 * gi, oom: 3,
		},
		{
			name: "burstable with a tiny memory request: 999, below best effort",
			mutate: func(p *v1.Pod) {
				p.Spec.Containers[0].Resources = rr("", "1Mi", "", "")
			},
			shares: 2, oom: 999,
		},
		{
			name: "unknown node capacity: 999",
			mutate: func(p *v1.Pod) {
				p.Spec.Containers[0].Resources = rr("", "1Gi", "", "")
			},
			capacity: -1,
			shares:   2, oom: 999,
		},
		{
			name: "burstable container of a pod with a best-effort sibling",
			mutate: func(p *v1.Pod) {
				p.Spec.Containers = append(p.Spec.Containers, v1.Container{Name: "side"})
				p.Spec.Containers[0].Resources = rr("1", "2Gi", "1", "2Gi")
			},
			shares: 1024, quota: 100000, period: 100000, mem: 2 * gi, oom: 800,
		},
		{
			name: "best-effort container of a burstable pod: 999",
			mutate: func(p *v1.Pod) {
				p.Spec.Containers = append([]v1.Container{{Name: "first"}}, p.Spec.Containers...)
				p.Spec.Containers[1].Resources = rr("1", "2Gi", "1", "2Gi")
			},
			shares: 2, oom: 999,
		},
		{
			name: "node-critical static pod: guaranteed score",
			mutate: func(p *v1.Pod) {
				p.Annotations = map[string]string{"kubernetes.io/config.source": "file"}
				p.Spec.PriorityClassName = "system-node-critical"
				p.Spec.Containers[0].Resources = rr("100m", "", "", "")
			},
			shares: 102, oom: -997,
		},
		{
			name: "node-critical by priority",
			mutate: func(p *v1.Pod) {
				p.Spec.PriorityClassName = "system-node-critical"
				p.Spec.Priority = ptr.To[int32](2000001000)
			},
			shares: 2, oom: -997,
		},
		{
			name: "system-node-critical name alone from the API is not enough",
			mutate: func(p *v1.Pod) {
				p.Annotations = map[string]string{"kubernetes.io/config.source": "api"}
				p.Spec.PriorityClassName = "system-node-critical"
			},
			shares: 2, oom: 1000,
		},
		{
			name: "hugepages are ignored",
			mutate: func(p *v1.Pod) {
				r := rr("1", "1Gi", "1", "1Gi")
				r.Requests["hugepages-2Mi"] = resource.MustParse("100Mi")
				r.Limits["hugepages-2Mi"] = resource.MustParse("100Mi")
				p.Spec.Containers[0].Resources = r
			},
			shares: 1024, quota: 100000, period: 100000, mem: gi, oom: -997,
		},
		{
			name: "sidecar scores no higher than the smallest regular container",
			mutate: func(p *v1.Pod) {
				p.Spec.InitContainers = []v1.Container{{
					Name: "proxy", RestartPolicy: ptr.To(v1.ContainerRestartPolicyAlways),
					Resources: rr("", "1Mi", "", ""),
				}}
				p.Spec.Containers[0].Resources = rr("", "5Gi", "", "")
			},
			container: "proxy",
			shares:    2, oom: 500,
		},
		{
			name: "a plain init container keeps its own score",
			mutate: func(p *v1.Pod) {
				p.Spec.InitContainers = []v1.Container{{Name: "setup", Resources: rr("", "1Mi", "", "")}}
				p.Spec.Containers[0].Resources = rr("", "5Gi", "", "")
			},
			container: "setup",
			shares:    2, oom: 999,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := basePod()
			tc.mutate(p)
			c := &p.Spec.Containers[0]
			if tc.container != "" {
				for i := range p.Spec.InitContainers {
					if p.Spec.InitContainers[i].Name == tc.container {
						c = &p.Spec.InitContainers[i]
					}
				}
			}
			capacityBytes := capacity
			if tc.capacity != 0 {
				capacityBytes = tc.capacity
			}
			got := ContainerResources(p, c, capacityBytes)
			if got.CpuShares != tc.shares || got.CpuQuota != tc.quota || got.CpuPeriod != tc.period ||
				got.MemoryLimitInBytes != tc.mem || got.OomScoreAdj != tc.oom {
				t.Errorf("got shares=%d quota=%d period=%d mem=%d oom=%d\nwant shares=%d quota=%d period=%d mem=%d oom=%d",
					got.CpuShares, got.CpuQuota, got.CpuPeriod, got.MemoryLimitInBytes, got.OomScoreAdj,
					tc.shares, tc.quota, tc.period, tc.mem, tc.oom)
			}
			if got.HugepageLimits != nil || got.Unified != nil || got.MemorySwapLimitInBytes != 0 {
				t.Errorf("unexpected hugepages/unified/swap: %v", got)
			}
		})
	}
}

func TestCgroupParent(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(p *v1.Pod)
		want   string
	}{
		{"guaranteed", func(p *v1.Pod) { p.Spec.Containers[0].Resources = rr("1", "1Gi", "1", "1Gi") }, "/kubepods/poduid-1"},
		{"burstable", func(p *v1.Pod) { p.Spec.Containers[0].Resources = rr("1", "", "", "") }, "/kubepods/burstable/poduid-1"},
		{"best effort", func(p *v1.Pod) {}, "/kubepods/besteffort/poduid-1"},
		{"class from status wins", func(p *v1.Pod) { p.Status.QOSClass = v1.PodQOSBurstable }, "/kubepods/burstable/poduid-1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := basePod()
			tc.mutate(p)
			if got := CgroupParent(p); got != tc.want {
				t.Errorf("CgroupParent = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestPodConfig(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(p *v1.Pod)
		want   PodCgroupConfig
	}{
		{
			name:   "best effort: minimum shares only",
			mutate: func(p *v1.Pod) {},
			want:   PodCgroupConfig{CPUShares: 2},
		},
		{
			name: "guaranteed: shares, quota and memory from the sums",
			mutate: func(p *v1.Pod) {
				p.Spec.Containers[0].Resources = rr("500m", "128Mi", "500m", "128Mi")
				p.Spec.Containers = append(p.Spec.Containers, v1.Container{Name: "b", Resources: rr("250m", "64Mi", "250m", "64Mi")})
			},
			want: PodCgroupConfig{CPUShares: 768, CPUQuota: 75000, CPUPeriod: 100000, MemoryLimit: 192 << 20},
		},
		{
			name: "burstable with every limit declared",
			mutate: func(p *v1.Pod) {
				p.Spec.Containers[0].Resources = rr("100m", "64Mi", "200m", "128Mi")
				p.Spec.Containers = append(p.Spec.Containers, v1.Container{Name: "b", Resources: rr("100m", "64Mi", "300m", "128Mi")})
			},
			want: PodCgroupConfig{CPUShares: 204, CPUQuota: 50000, CPUPeriod: 100000, MemoryLimit: 256 << 20},
		},
		{
			name: "burstable with a container missing the CPU limit: no quota",
			mutate: func(p *v1.Pod) {
				p.Spec.Containers[0].Resources = rr("100m", "64Mi", "200m", "128Mi")
				p.Spec.Containers = append(p.Spec.Containers, v1.Container{Name: "b", Resources: rr("100m", "64Mi", "", "128Mi")})
			},
			want: PodCgroupConfig{CPUShares: 204, MemoryLimit: 256 << 20},
		},
		{
			name: "burstable with a container missing the memory limit: no memory limit",
			mutate: func(p *v1.Pod) {
				p.Spec.Containers[0].Resources = rr("100m", "64Mi", "200m", "128Mi")
				p.Spec.Containers = append(p.Spec.Containers, v1.Container{Name: "b", Resources: rr("100m", "", "100m", "")})
			},
			want: PodCgroupConfig{CPUShares: 204, CPUQuota: 30000, CPUPeriod: 100000},
		},
		{
			name: "limits only: requests default to the limits",
			mutate: func(p *v1.Pod) {
				p.Spec.Containers[0].Resources = rr("", "", "1", "")
			},
			want: PodCgroupConfig{CPUShares: 1024, CPUQuota: 100000, CPUPeriod: 100000},
		},
		{
			name: "an init container larger than the app containers",
			mutate: func(p *v1.Pod) {
				p.Spec.InitContainers = []v1.Container{{Name: "init", Resources: rr("2", "1Gi", "2", "1Gi")}}
				p.Spec.Containers[0].Resources = rr("500m", "128Mi", "500m", "128Mi")
			},
			want: PodCgroupConfig{CPUShares: 2048, CPUQuota: 200000, CPUPeriod: 100000, MemoryLimit: gi},
		},
		{
			name: "a sidecar adds to the app containers",
			mutate: func(p *v1.Pod) {
				p.Spec.InitContainers = []v1.Container{{
					Name: "proxy", RestartPolicy: ptr.To(v1.ContainerRestartPolicyAlways),
					Resources: rr("100m", "32Mi", "100m", "32Mi"),
				}}
				p.Spec.Containers[0].Resources = rr("500m", "128Mi", "500m", "128Mi")
			},
			want: PodCgroupConfig{CPUShares: 614, CPUQuota: 60000, CPUPeriod: 100000, MemoryLimit: 160 << 20},
		},
		{
			name: "overhead is added",
			mutate: func(p *v1.Pod) {
				p.Spec.Overhead = v1.ResourceList{v1.ResourceCPU: resource.MustParse("250m"), v1.ResourceMemory: resource.MustParse("64Mi")}
				p.Spec.Containers[0].Resources = rr("1", "1Gi", "1", "1Gi")
			},
			want: PodCgroupConfig{CPUShares: 1280, CPUQuota: 125000, CPUPeriod: 100000, MemoryLimit: gi + 64<<20},
		},
		{
			name: "overhead with pod-level resources: added to both, after them",
			mutate: func(p *v1.Pod) {
				r := rr("1", "1Gi", "2", "2Gi")
				p.Spec.Resources = &r
				p.Spec.Overhead = v1.ResourceList{v1.ResourceCPU: resource.MustParse("250m"), v1.ResourceMemory: resource.MustParse("64Mi")}
				p.Spec.Containers[0].Resources = rr("100m", "", "", "")
			},
			want: PodCgroupConfig{CPUShares: 1280, CPUQuota: 225000, CPUPeriod: 100000, MemoryLimit: 2*gi + 64<<20},
		},
		{
			name: "overhead of a burstable pod: only to the limits every container declares",
			mutate: func(p *v1.Pod) {
				p.Spec.Overhead = v1.ResourceList{v1.ResourceCPU: resource.MustParse("250m"), v1.ResourceMemory: resource.MustParse("64Mi")}
				p.Spec.Containers[0].Resources = rr("100m", "64Mi", "", "128Mi")
			},
			want: PodCgroupConfig{CPUShares: 358, MemoryLimit: 192 << 20},
		},
		{
			name: "overhead of a best-effort pod: no limits to add it to",
			mutate: func(p *v1.Pod) {
				p.Spec.Overhead = v1.ResourceList{v1.ResourceCPU: resource.MustParse("250m"), v1.ResourceMemory: resource.MustParse("64Mi")}
			},
			want: PodCgroupConfig{CPUShares: 2},
		},
		{
			name: "pod-level resources win",
			mutate: func(p *v1.Pod) {
				r := rr("1", "1Gi", "2", "2Gi")
				p.Spec.Resources = &r
				p.Spec.Containers[0].Resources = rr("100m", "", "", "")
			},
			want: PodCgroupConfig{CPUShares: 1024, CPUQuota: 200000, CPUPeriod: 100000, MemoryLimit: 2 * gi},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := basePod()
			tc.mutate(p)
			if got := PodConfig(p); got != tc.want {
				t.Errorf("PodConfig = %+v, want %+v", got, tc.want)
			}
		})
	}
}
