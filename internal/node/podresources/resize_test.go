package podresources

import (
	"errors"
	"path/filepath"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/internal/pure/resize"
)

// resizePod is a Burstable pod: 100m/200m CPU, 64Mi/128Mi memory.
func resizePod() *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "r", Namespace: "ns", UID: "r-1"},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c", Resources: v1.ResourceRequirements{
			Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("100m"), v1.ResourceMemory: resource.MustParse("64Mi")},
			Limits:   v1.ResourceList{v1.ResourceCPU: resource.MustParse("200m"), v1.ResourceMemory: resource.MustParse("128Mi")},
		}}}},
	}
}

func TestManagerResizePodCgroup(t *testing.T) {
	root := fakeTree(t)
	m := NewManager(root, nil, nil)
	pod := resizePod()
	if _, err := m.PodCgroupNow(pod); !errors.Is(err, ErrNoPodCgroup) {
		t.Fatalf("PodCgroupNow before EnsurePod: %v, want ErrNoPodCgroup", err)
	}
	if _, err := m.EnsurePod(pod); err != nil {
		t.Fatal(err)
	}
	got, err := m.PodCgroupNow(pod)
	if err != nil {
		t.Fatal(err)
	}
	if want := (resize.PodCgroup{CPUShares: 102, CPUQuota: 20000, MemoryLimit: 128 << 20}); got != want {
		t.Errorf("PodCgroupNow = %+v, want %+v", got, want)
	}
	for _, s := range []resize.Step{
		{Kind: resize.SetPodMemoryLimit, Value: 256 << 20},
		{Kind: resize.SetPodCPUQuota, Value: 40000},
		{Kind: resize.SetPodCPUShares, Value: 204},
	} {
		if err := m.SetPodCgroup(pod, s); err != nil {
			t.Fatalf("SetPodCgroup %+v: %v", s, err)
		}
	}
	dir := "kubepods/burstable/podr-1"
	for file, want := range map[string]string{
		"memory/" + dir + "/memory.limit_in_bytes": "268435456",
		"cpu/" + dir + "/cpu.cfs_quota_us":         "40000",
		"cpu/" + dir + "/cpu.cfs_period_us":        "100000",
		"cpu/" + dir + "/cpu.shares":               "204",
	} {
		if v := read(t, filepath.Join(root, file)); v != want {
			t.Errorf("%s = %s, want %s", file, v, want)
		}
	}
	// The next sync ensures the pod cgroup again, with the pod as it was:
	// the resized values stay (the allocated resources are the truth,
	// written by SetPodCgroup alone).
	if _, err := m.EnsurePod(pod); err != nil {
		t.Fatal(err)
	}
	if got, _ := m.PodCgroupNow(pod); got != (resize.PodCgroup{CPUShares: 204, CPUQuota: 40000, MemoryLimit: 256 << 20}) {
		t.Errorf("after EnsurePod of the pod as it was: %+v, want the resized values", got)
	}
	if err := m.SetPodCgroup(pod, resize.Step{Kind: resize.SetPodCPUQuota, Value: -1}); err != nil {
		t.Fatal(err)
	}
	got, _ = m.PodCgroupNow(pod)
	if got.CPUQuota != -1 {
		t.Errorf("quota after removing it = %d, want -1", got.CPUQuota)
	}
	write(t, filepath.Join(root, "memory", dir, "memory.usage_in_bytes"), "5242880")
	if u, err := m.PodMemoryUsage(pod); err != nil || u != 5<<20 {
		t.Errorf("PodMemoryUsage = %d, %v, want 5Mi", u, err)
	}
	// No limit reads as 0, as the planner takes it.
	write(t, filepath.Join(root, "memory", dir, "memory.limit_in_bytes"), "9223372036854771712")
	if got, _ = m.PodCgroupNow(pod); got.MemoryLimit != 0 {
		t.Errorf("unlimited memory reads %d, want 0", got.MemoryLimit)
	}
	if err := m.SetPodCgroup(pod, resize.Step{Kind: resize.UpdateContainer}); err == nil {
		t.Error("SetPodCgroup of a container step: nil error")
	}
	other := resizePod()
	other.UID = "r-2"
	if err := m.SetPodCgroup(other, resize.Step{Kind: resize.SetPodCPUShares, Value: 2}); !errors.Is(err, ErrNoPodCgroup) {
		t.Errorf("SetPodCgroup of a pod without a cgroup: %v, want ErrNoPodCgroup (nothing created)", err)
	}
}

// The cgroup v2 manager, through the fake cgroup2 file system (this
// machine runs cgroup v1).
func TestUnifiedResizePodCgroup(t *testing.T) {
	f := newFakeCgroup2(allControllers...)
	m, err := NewUnified(f, UnifiedOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod := resizePod()
	if _, err := m.PodCgroupNow(pod); !errors.Is(err, ErrNoPodCgroup) {
		t.Fatalf("PodCgroupNow before EnsurePod: %v, want ErrNoPodCgroup", err)
	}
	if _, err := m.EnsurePod(pod); err != nil {
		t.Fatal(err)
	}
	got, err := m.PodCgroupNow(pod)
	if err != nil {
		t.Fatal(err)
	}
	// 102 shares are weight 4, which reads back as 80 shares: the
	// conversion loses precision, as the kubelet's does.
	if want := (resize.PodCgroup{CPUShares: WeightToShares(SharesToWeight(102)), CPUQuota: 20000, MemoryLimit: 128 << 20}); got != want {
		t.Errorf("PodCgroupNow = %+v, want %+v", got, want)
	}
	for _, s := range []resize.Step{
		{Kind: resize.SetPodMemoryLimit, Value: 256 << 20},
		{Kind: resize.SetPodCPUQuota, Value: 40000},
		{Kind: resize.SetPodCPUShares, Value: 2048},
	} {
		if err := m.SetPodCgroup(pod, s); err != nil {
			t.Fatalf("SetPodCgroup %+v: %v", s, err)
		}
	}
	dir := "kubepods/burstable/podr-1"
	for file, want := range map[string]string{
		dir + "/memory.max": "268435456",
		dir + "/cpu.max":    "40000 100000",
		dir + "/cpu.weight": "79",
	} {
		if v := read2(t, f, file); v != want {
			t.Errorf("%s = %s, want %s", file, v, want)
		}
	}
	if _, err := m.EnsurePod(pod); err != nil {
		t.Fatal(err)
	}
	if got, _ := m.PodCgroupNow(pod); got != (resize.PodCgroup{CPUShares: WeightToShares(79), CPUQuota: 40000, MemoryLimit: 256 << 20}) {
		t.Errorf("after EnsurePod of the pod as it was: %+v, want the resized values", got)
	}
	must(t, m.SetPodCgroup(pod, resize.Step{Kind: resize.SetPodCPUQuota, Value: -1}))
	must(t, m.SetPodCgroup(pod, resize.Step{Kind: resize.SetPodMemoryLimit, Value: 0}))
	got, _ = m.PodCgroupNow(pod)
	if got.CPUQuota != -1 || got.MemoryLimit != 0 {
		t.Errorf("after removing the limits: %+v, want quota -1 and memory 0", got)
	}
	f.mu.Lock()
	f.nodes[dir].values["memory.current"] = "4096" // the kernel's to write
	f.mu.Unlock()
	if u, err := m.PodMemoryUsage(pod); err != nil || u != 4096 {
		t.Errorf("PodMemoryUsage = %d, %v, want 4096", u, err)
	}
	if v := read2(t, f, dir+"/cpu.max"); v != "max 100000" {
		t.Errorf("cpu.max = %s, want max 100000", v)
	}
}

func TestWeightToShares(t *testing.T) {
	for _, shares := range []int64{MinShares, 1024, 2048, MaxShares} {
		if got := WeightToShares(SharesToWeight(shares)); got > shares || shares-got > 27 {
			t.Errorf("WeightToShares(SharesToWeight(%d)) = %d: off by more than one weight step", shares, got)
		}
	}
	if WeightToShares(0) != 0 {
		t.Error("WeightToShares(0) != 0")
	}
}
