package stats

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodelet/nodelet/internal/base/testutil"
	"github.com/nodelet/nodelet/internal/pipeline/cri"
	"github.com/nodelet/nodelet/internal/pure/podspec"
)

const (
	ready    = runtimeapi.PodSandboxState_SANDBOX_READY
	notReady = runtimeapi.PodSandboxState_SANDBOX_NOTREADY
	running  = runtimeapi.ContainerState_CONTAINER_RUNNING
	exited   = runtimeapi.ContainerState_CONTAINER_EXITED
	mib      = 1 << 20
)

func checkU64(t *testing.T, what string, got *uint64, want uint64) {
	t.Helper()
	if got == nil {
		t.Errorf("%s = nil, want %d", what, want)
		return
	}
	if *got != want {
		t.Errorf("%s = %d, want %d", what, *got, want)
	}
}

func checkNil(t *testing.T, what string, got *uint64) {
	t.Helper()
	if got != nil {
		t.Errorf("%s = %d, want nil", what, *got)
	}
}

func summary(t *testing.T, p *Provider, onlyCPUAndMemory bool) *v1alpha1.Summary {
	t.Helper()
	s, err := p.Summary(context.Background(), onlyCPUAndMemory)
	if err != nil {
		t.Fatalf("Summary: %v", err)
	}
	return s
}

// twoPods adds the pods most tests use, plus objects that must not show.
func twoPods(e *env) {
	at := t0.UnixNano()
	e.rt.addPod(podSpec{ns: "default", name: "web", uid: "uid-a", state: ready, created: t0.Add(-time.Hour), containers: []ctrSpec{
		{name: "sidecar", state: running, cpu: 2e9, ws: 20 * mib, writable: 2 * mib, cpuAt: at},
		{name: "app", state: running, cpu: 10e9, ws: 100 * mib, writable: 1 * mib, cpuAt: at},
		{name: "old", state: exited, cpu: 1e9, ws: 1, cpuAt: at},
		{name: "foreign", state: running, cpu: 1e9, ws: 1, cpuAt: at, noManaged: true},
	}})
	e.rt.addPod(podSpec{ns: "kube-system", name: "dns", uid: "uid-b", state: ready, created: t0.Add(-2 * time.Hour), containers: []ctrSpec{
		{name: "dns", state: running, cpu: 5e9, ws: 50 * mib, writable: 3 * mib, cpuAt: at},
	}})
	// Not nodelet's.
	e.rt.addPod(podSpec{ns: "other", name: "theirs", uid: "uid-c", state: ready, unmanaged: true, created: t0, containers: []ctrSpec{
		{name: "x", state: running, cpu: 1e9, ws: 1, cpuAt: at},
	}})
	// Not ready.
	e.rt.addPod(podSpec{ns: "default", name: "gone", uid: "uid-d", state: notReady, created: t0, containers: []ctrSpec{
		{name: "y", state: running, cpu: 1e9, ws: 1, cpuAt: at},
	}})
	e.machine.setDU("/var/log/pods/default_web_uid-a/app", 8192, 2)
}

func TestSummaryNode(t *testing.T) {
	e := newEnv(t)
	twoPods(e)
	s := summary(t, e.p, false)
	n := s.Node
	if n.NodeName != "node-1" {
		t.Errorf("NodeName = %q", n.NodeName)
	}
	if !n.StartTime.Time.Equal(e.machine.boot) {
		t.Errorf("StartTime = %v, want %v", n.StartTime, e.machine.boot)
	}
	if n.CPU == nil || n.Memory == nil || n.Fs == nil || n.Runtime == nil {
		t.Fatalf("node stats missing: %+v", n)
	}
	if !n.CPU.Time.Time.Equal(t0) {
		t.Errorf("CPU.Time = %v, want %v", n.CPU.Time, t0)
	}
	checkU64(t, "node cpu usage", n.CPU.UsageCoreNanoSeconds, 100e9)
	checkNil(t, "node nanocores from one sample", n.CPU.UsageNanoCores)
	checkU64(t, "node working set", n.Memory.WorkingSetBytes, 3<<30)
	checkU64(t, "node memory usage", n.Memory.UsageBytes, 4<<30)
	checkU64(t, "node available", n.Memory.AvailableBytes, 5<<30)
	checkU64(t, "node rss", n.Memory.RSSBytes, 2<<30)
	checkU64(t, "node page faults", n.Memory.PageFaults, 1000)
	checkU64(t, "node major page faults", n.Memory.MajorPageFaults, 10)
	checkU64(t, "node fs capacity", n.Fs.CapacityBytes, 100<<30)
	checkU64(t, "node fs available", n.Fs.AvailableBytes, 40<<30)
	checkU64(t, "node fs used", n.Fs.UsedBytes, 60<<30)
	checkU64(t, "node fs inodes used", n.Fs.InodesUsed, 100_000)
	img := n.Runtime.ImageFs
	checkU64(t, "imagefs used", img.UsedBytes, 5<<30)
	checkU64(t, "imagefs inodes used", img.InodesUsed, 50000)
	checkU64(t, "imagefs capacity", img.CapacityBytes, 100<<30)
	if !img.Time.Time.Equal(time.Unix(1000, 0)) {
		t.Errorf("imagefs time = %v", img.Time)
	}
	if n.Runtime.ContainerFs != img {
		t.Errorf("ContainerFs should be the image filesystem")
	}

	cm := summary(t, e.p, true)
	if cm.Node.Fs != nil || cm.Node.Runtime != nil || cm.Node.CPU == nil || cm.Node.Memory == nil {
		t.Errorf("CPU-and-memory node stats: %+v", cm.Node)
	}
}

// NodeSummary reads the node's stats alone, the same as a full summary's,
// with one ImageFsInfo call and no list call; it is cached like the other
// slots, and a fresh full summary serves it.
func TestNodeSummary(t *testing.T) {
	e, other := newEnv(t), newEnv(t)
	twoPods(e)
	twoPods(other)
	n, err := e.p.NodeSummary(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if got := e.rt.totalCalls(); got != 1 || e.rt.count("ImageFsInfo") != 1 {
		t.Errorf("runtime calls %v, want ImageFsInfo alone", e.rt.calls)
	}
	if len(n.Pods) != 0 {
		t.Errorf("%d pods in the node's summary", len(n.Pods))
	}
	full := summary(t, other.p, false)
	if !reflect.DeepEqual(n.Node, full.Node) {
		t.Errorf("node stats\n%+v\nwant a full summary's\n%+v", n.Node, full.Node)
	}

	e.clk.Step(999 * time.Millisecond)
	if again, _ := e.p.NodeSummary(t.Context()); again != n || e.rt.totalCalls() != 1 {
		t.Errorf("within a second: not served from the cache (calls %v)", e.rt.calls)
	}
	e.clk.Step(time.Millisecond)
	full = summary(t, e.p, false)
	calls := e.rt.totalCalls()
	if got, _ := e.p.NodeSummary(t.Context()); got != full || e.rt.totalCalls() != calls {
		t.Errorf("a fresh full summary does not serve the node's (calls %v)", e.rt.calls)
	}
	e.clk.Step(time.Second)
	if got, _ := e.p.NodeSummary(t.Context()); got == full || e.rt.totalCalls() != calls+1 {
		t.Errorf("expired: calls %v, want one ImageFsInfo more", e.rt.calls)
	}
}

func TestSummaryPods(t *testing.T) {
	e := newEnv(t)
	twoPods(e)
	s := summary(t, e.p, false)
	if len(s.Pods) != 2 {
		t.Fatalf("got %d pods, want 2: %+v", len(s.Pods), s.Pods)
	}
	web, dns := s.Pods[0], s.Pods[1]
	if want := (v1alpha1.PodReference{Name: "web", Namespace: "default", UID: "uid-a"}); web.PodRef != want {
		t.Errorf("PodRef = %+v, want %+v", web.PodRef, want)
	}
	if want := (v1alpha1.PodReference{Name: "dns", Namespace: "kube-system", UID: "uid-b"}); dns.PodRef != want {
		t.Errorf("PodRef = %+v, want %+v", dns.PodRef, want)
	}
	if !web.StartTime.Time.Equal(t0.Add(-time.Hour)) {
		t.Errorf("pod StartTime = %v", web.StartTime)
	}
	if len(web.Containers) != 2 || web.Containers[0].Name != "app" || web.Containers[1].Name != "sidecar" {
		t.Fatalf("web containers = %+v, want app and sidecar", web.Containers)
	}
	app := web.Containers[0]
	if !app.StartTime.Time.Equal(t0.Add(-time.Hour + 2*time.Second)) {
		t.Errorf("container StartTime = %v", app.StartTime)
	}
	checkU64(t, "app cpu", app.CPU.UsageCoreNanoSeconds, 10e9)
	checkNil(t, "app nanocores from one sample", app.CPU.UsageNanoCores)
	checkU64(t, "app working set", app.Memory.WorkingSetBytes, 100*mib)
	checkU64(t, "app usage", app.Memory.UsageBytes, 100*mib+100)
	checkU64(t, "app rss", app.Memory.RSSBytes, 50*mib)
	checkU64(t, "app rootfs used", app.Rootfs.UsedBytes, 1*mib)
	checkU64(t, "app rootfs inodes used", app.Rootfs.InodesUsed, 7)
	checkU64(t, "app rootfs capacity", app.Rootfs.CapacityBytes, 100<<30)
	checkU64(t, "app logs used", app.Logs.UsedBytes, 8192)
	checkU64(t, "app logs inodes used", app.Logs.InodesUsed, 2)
	checkU64(t, "app logs capacity", app.Logs.CapacityBytes, 100<<30)
	checkNil(t, "sidecar logs used (no log dir)", web.Containers[1].Logs.UsedBytes)

	// Pod CPU and memory are the sums (ListPodSandboxStats is
	// Unimplemented).
	checkU64(t, "web cpu", web.CPU.UsageCoreNanoSeconds, 12e9)
	checkU64(t, "web nanocores", web.CPU.UsageNanoCores, 0)
	checkU64(t, "web working set", web.Memory.WorkingSetBytes, 120*mib)
	checkU64(t, "web rss", web.Memory.RSSBytes, 60*mib)
	checkU64(t, "dns cpu", dns.CPU.UsageCoreNanoSeconds, 5e9)
	if web.EphemeralStorage == nil {
		t.Fatal("no ephemeral storage")
	}
	checkU64(t, "web ephemeral used", web.EphemeralStorage.UsedBytes, 3*mib+8192)
	checkU64(t, "web ephemeral inodes", web.EphemeralStorage.InodesUsed, 7+7+2)
	checkU64(t, "web ephemeral capacity", web.EphemeralStorage.CapacityBytes, 100<<30)

	cm := summary(t, e.p, true)
	if len(cm.Pods) != 2 || len(cm.Pods[0].Containers) != 2 {
		t.Fatalf("CPU-and-memory pods = %+v", cm.Pods)
	}
	c := cm.Pods[0].Containers[0]
	if c.CPU == nil || c.Memory == nil || c.Rootfs != nil || c.Logs != nil || cm.Pods[0].EphemeralStorage != nil {
		t.Errorf("CPU-and-memory container = %+v", c)
	}
}

func TestSummaryOnlyManagedReadyRunning(t *testing.T) {
	e := newEnv(t)
	twoPods(e)
	for _, only := range []bool{false, true} {
		s := summary(t, e.p, only)
		for _, p := range s.Pods {
			switch p.PodRef.Name {
			case "theirs", "gone":
				t.Errorf("onlyCPUAndMemory=%v: pod %s reported", only, p.PodRef.Name)
			}
			for _, c := range p.Containers {
				if c.Name == "old" || c.Name == "foreign" {
					t.Errorf("onlyCPUAndMemory=%v: container %s reported", only, c.Name)
				}
			}
		}
	}
	// The filters ask the runtime for the same.
	f := e.rt.sandboxFilter
	if f.GetState().GetState() != ready || f.GetLabelSelector()[podspec.LabelManagedBy] != podspec.ManagedByValue {
		t.Errorf("sandbox filter = %v", f)
	}
	cf := e.rt.ctrFilter
	if cf.GetState().GetState() != running || cf.GetLabelSelector()[podspec.LabelManagedBy] != podspec.ManagedByValue {
		t.Errorf("container filter = %v", cf)
	}
}

func TestSummaryPodWithoutRunningContainers(t *testing.T) {
	e := newEnv(t)
	e.rt.addPod(podSpec{ns: "default", name: "done", uid: "uid-e", state: ready, created: t0, containers: []ctrSpec{
		{name: "job", state: exited, cpu: 1e9},
	}})
	s := summary(t, e.p, false)
	if len(s.Pods) != 1 || len(s.Pods[0].Containers) != 0 || s.Pods[0].CPU != nil {
		t.Errorf("pods = %+v, want the pod without containers or CPU", s.Pods)
	}
}

func TestNanoCoresFromTwoSamples(t *testing.T) {
	e := newEnv(t)
	five := uint64(5e8)
	e.rt.addPod(podSpec{ns: "default", name: "web", uid: "uid-a", state: ready, created: t0, containers: []ctrSpec{
		{name: "app", state: running, cpu: 10e9, ws: 1, cpuAt: t0.UnixNano()},
		{name: "given", state: running, cpu: 1e9, ws: 1, cpuAt: t0.UnixNano(), nanoCores: &five},
	}})
	const app = "c-uid-a-app"

	s := summary(t, e.p, true)
	checkNil(t, "first app nanocores", s.Pods[0].Containers[0].CPU.UsageNanoCores)
	checkU64(t, "runtime-given nanocores", s.Pods[0].Containers[1].CPU.UsageNanoCores, 5e8)
	checkNil(t, "first node nanocores", s.Node.CPU.UsageNanoCores)

	// 1 core-second over 2 s: half a core; the node used 4 cores-seconds.
	e.clk.Step(2 * time.Second)
	e.rt.setCPU(app, 11e9, t0.Add(2*time.Second))
	e.machine.setCPU(104e9)
	s = summary(t, e.p, true)
	checkU64(t, "app nanocores", s.Pods[0].Containers[0].CPU.UsageNanoCores, 5e8)
	checkU64(t, "pod nanocores (sum)", s.Pods[0].CPU.UsageNanoCores, 5e8+5e8)
	checkU64(t, "node nanocores", s.Node.CPU.UsageNanoCores, 2e9)

	// A sample only 0.5 s newer keeps the last rate and the old sample.
	e.clk.Step(time.Second)
	e.rt.setCPU(app, 13e9, t0.Add(2500*time.Millisecond))
	s = summary(t, e.p, false)
	checkU64(t, "app nanocores within the window", s.Pods[0].Containers[0].CPU.UsageNanoCores, 5e8)
	checkU64(t, "idle node nanocores", s.Node.CPU.UsageNanoCores, 0)

	// 1 s after the kept sample: (12-11)e9 over 1 s.
	e.clk.Step(time.Second)
	e.rt.setCPU(app, 12e9, t0.Add(3*time.Second))
	s = summary(t, e.p, true)
	checkU64(t, "app nanocores", s.Pods[0].Containers[0].CPU.UsageNanoCores, 1e9)

	// A counter going backwards starts over.
	e.clk.Step(time.Second)
	e.rt.setCPU(app, 1e9, t0.Add(4*time.Second))
	s = summary(t, e.p, true)
	checkNil(t, "app nanocores after reset", s.Pods[0].Containers[0].CPU.UsageNanoCores)
}

func TestEmptyDirVolumeStats(t *testing.T) {
	e := newEnv(t)
	e.rt.addPod(podSpec{ns: "default", name: "web", uid: "uid-a", state: ready, created: t0, containers: []ctrSpec{
		{name: "app", state: running, cpu: 1, ws: 1, writable: 1000},
	}})
	e.rt.addPod(podSpec{ns: "default", name: "plain", uid: "uid-b", state: ready, created: t0, containers: []ctrSpec{
		{name: "app", state: running, cpu: 1, ws: 1},
	}})
	dir := filepath.Join(e.rootDir, "pods", "uid-a", "volumes", "kubernetes.io~empty-dir")
	cache, shm := filepath.Join(dir, "cache"), filepath.Join(dir, "shm")
	for _, d := range []string{cache, shm} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "stray-file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	e.machine.tmpfs[shm] = true
	e.machine.setDU(cache, 3*4096, 3)

	s := summary(t, e.p, false)
	web, plain := s.Pods[1], s.Pods[0]
	if web.PodRef.Name != "web" {
		web, plain = plain, web
	}
	if plain.VolumeStats != nil {
		t.Errorf("pod without volumes: %+v", plain.VolumeStats)
	}
	if len(web.VolumeStats) != 2 || web.VolumeStats[0].Name != "cache" || web.VolumeStats[1].Name != "shm" {
		t.Fatalf("volume stats = %+v, want cache and shm", web.VolumeStats)
	}
	c, m := web.VolumeStats[0], web.VolumeStats[1]
	checkU64(t, "cache used", c.UsedBytes, 3*4096)
	checkU64(t, "cache inodes used", c.InodesUsed, 3)
	checkU64(t, "cache capacity", c.CapacityBytes, 100<<30)
	checkU64(t, "cache available", c.AvailableBytes, 40<<30)
	checkU64(t, "tmpfs used", m.UsedBytes, 4<<20)
	checkU64(t, "tmpfs inodes used", m.InodesUsed, 10)
	checkU64(t, "tmpfs capacity", m.CapacityBytes, 64<<20)
	if e.machine.duCount(shm) != 0 {
		t.Error("a tmpfs volume was walked")
	}
	// The tmpfs is memory, not ephemeral storage.
	checkU64(t, "ephemeral used", web.EphemeralStorage.UsedBytes, 1000+3*4096)

	// Within the disk usage TTL the walk is not repeated.
	e.machine.setDU(cache, 2*4096, 2)
	e.clk.Step(time.Second)
	s = summary(t, e.p, false)
	checkU64(t, "cached cache used", findPod(s, "web").VolumeStats[0].UsedBytes, 3*4096)
	if n := e.machine.duCount(cache); n != 1 {
		t.Errorf("cache walked %d times, want 1", n)
	}

	// Expired: the stale value is served and the walk runs behind.
	e.clk.Step(DefaultDiskUsageTTL)
	s = summary(t, e.p, false)
	checkU64(t, "stale cache used", findPod(s, "web").VolumeStats[0].UsedBytes, 3*4096)
	testutil.Eventually(t, "the second disk usage walk", func() bool { return e.machine.duCount(cache) == 2 })
	testutil.Eventually(t, "the walk to finish", func() bool {
		e.p.du.mu.Lock()
		defer e.p.du.mu.Unlock()
		return !e.p.du.entries[cache].refreshing
	})
	e.clk.Step(time.Second)
	s = summary(t, e.p, false)
	checkU64(t, "refreshed cache used", findPod(s, "web").VolumeStats[0].UsedBytes, 2*4096)

	if v := summary(t, e.p, true).Pods[1].VolumeStats; v != nil {
		t.Errorf("CPU-and-memory summary has volume stats %+v", v)
	}
}

func findPod(s *v1alpha1.Summary, name string) *v1alpha1.PodStats {
	for i := range s.Pods {
		if s.Pods[i].PodRef.Name == name {
			return &s.Pods[i]
		}
	}
	return nil
}

func TestCaching(t *testing.T) {
	e := newEnv(t)
	twoPods(e)
	want := map[string]int{"ListPodSandbox": 1, "ListContainers": 1, "ListPodSandboxStats": 1, "ListContainerStats": 1, "ImageFsInfo": 1}
	check := func(when string) {
		t.Helper()
		for name, n := range want {
			if got := e.rt.count(name); got != n {
				t.Errorf("%s: %s called %d times, want %d", when, name, got, n)
			}
		}
	}
	first := summary(t, e.p, false)
	check("first call")

	// Within a second, both kinds come from the cache.
	e.clk.Step(999 * time.Millisecond)
	if s := summary(t, e.p, false); s != first {
		t.Error("full summary not served from the cache")
	}
	summary(t, e.p, true)
	check("cached calls")

	// Expired: three list calls, ListPodSandboxStats is not retried, no
	// ImageFsInfo for CPU and memory.
	e.clk.Step(time.Millisecond)
	summary(t, e.p, true)
	want["ListPodSandbox"], want["ListContainers"], want["ListContainerStats"] = 2, 2, 2
	check("CPU-and-memory refresh")
	summary(t, e.p, true)
	check("cached CPU-and-memory")
	summary(t, e.p, false)
	want["ListPodSandbox"], want["ListContainers"], want["ListContainerStats"], want["ImageFsInfo"] = 3, 3, 3, 2
	check("full refresh")

	// ListPodSandboxStats is asked again after a while.
	e.clk.Step(sandboxStatsRetry)
	summary(t, e.p, true)
	want["ListPodSandbox"], want["ListContainers"], want["ListContainerStats"], want["ListPodSandboxStats"] = 4, 4, 4, 2
	check("after the retry period")
}

func TestSandboxStatsWhenImplemented(t *testing.T) {
	e := newEnv(t)
	twoPods(e)
	e.rt.sandboxStatsOK = true
	var web []*runtimeapi.ContainerStats
	for _, s := range e.rt.stats {
		if s.Attributes.Labels[podspec.LabelPodUID] == "uid-a" {
			web = append(web, s)
		}
	}
	e.rt.sandboxStats = []*runtimeapi.PodSandboxStats{{
		Attributes: &runtimeapi.PodSandboxAttributes{Id: "sb-uid-a"},
		Linux: &runtimeapi.LinuxPodSandboxStats{
			Cpu:    &runtimeapi.CpuUsage{Timestamp: t0.UnixNano(), UsageCoreNanoSeconds: &runtimeapi.UInt64Value{Value: 50e9}},
			Memory: &runtimeapi.MemoryUsage{Timestamp: t0.UnixNano(), WorkingSetBytes: &runtimeapi.UInt64Value{Value: 999}},
			Network: &runtimeapi.NetworkUsage{Timestamp: t0.UnixNano(), DefaultInterface: &runtimeapi.NetworkInterfaceUsage{
				Name: "eth0", RxBytes: &runtimeapi.UInt64Value{Value: 10},
			}},
			Containers: web,
		},
	}}
	s := summary(t, e.p, false)
	if n := e.rt.count("ListContainerStats"); n != 0 {
		t.Errorf("ListContainerStats called %d times with sandbox stats", n)
	}
	// The second pod has no sandbox stats: it is reported without
	// containers.
	if len(s.Pods) != 2 {
		t.Fatalf("pods = %+v", s.Pods)
	}
	p := findPod(s, "web")
	checkU64(t, "pod cpu from the sandbox", p.CPU.UsageCoreNanoSeconds, 50e9)
	checkU64(t, "pod working set from the sandbox", p.Memory.WorkingSetBytes, 999)
	if p.Network == nil || p.Network.Name != "eth0" {
		t.Errorf("network = %+v", p.Network)
	} else {
		checkU64(t, "rx bytes", p.Network.RxBytes, 10)
	}
	if len(p.Containers) != 2 {
		t.Errorf("containers = %+v", p.Containers)
	}

	e.clk.Step(2 * time.Second)
	e.rt.mu.Lock()
	e.rt.sandboxStats[0].Linux.Cpu = &runtimeapi.CpuUsage{Timestamp: t0.Add(2 * time.Second).UnixNano(), UsageCoreNanoSeconds: &runtimeapi.UInt64Value{Value: 52e9}}
	e.rt.mu.Unlock()
	s = summary(t, e.p, true)
	checkU64(t, "pod nanocores from sandbox samples", findPod(s, "web").CPU.UsageNanoCores, 1e9)
}

func TestSummaryErrors(t *testing.T) {
	e := newEnv(t)
	twoPods(e)
	e.rt.err = fmt.Errorf("list pod sandboxes: %w: connection refused", cri.ErrUnavailable)
	_, err := e.p.Summary(context.Background(), false)
	if !errors.Is(err, cri.ErrUnavailable) {
		t.Fatalf("err = %v, want ErrUnavailable", err)
	}
	// Errors are not cached.
	e.rt.mu.Lock()
	e.rt.err = nil
	e.rt.mu.Unlock()
	summary(t, e.p, false)

	// A ListPodSandboxStats failure other than Unimplemented is an error,
	// as in the kubelet.
	e2 := newEnv(t)
	e2.rt.sandboxErr = fmt.Errorf("list pod sandbox stats: %w", cri.ErrDeadlineExceeded)
	if _, err := e2.p.Summary(context.Background(), true); !errors.Is(err, cri.ErrDeadlineExceeded) {
		t.Fatalf("err = %v, want ErrDeadlineExceeded", err)
	}

	// Node facts that cannot be read are left out.
	e3 := newEnv(t)
	e3.machine.fsErr = errors.New("boom")
	s := summary(t, e3.p, false)
	if s.Node.Fs != nil {
		t.Errorf("node fs = %+v, want nil", s.Node.Fs)
	}
}

func TestConcurrentCallersShareOneRefresh(t *testing.T) {
	e := newEnv(t)
	twoPods(e)
	e.rt.delay = 50 * time.Millisecond
	var wg sync.WaitGroup
	results := make([]*v1alpha1.Summary, 20)
	for i := range results {
		wg.Go(func() {
			s, err := e.p.Summary(context.Background(), false)
			if err != nil {
				t.Error(err)
			}
			results[i] = s
		})
	}
	wg.Wait()
	if n := e.rt.count("ListPodSandbox"); n != 1 {
		t.Errorf("ListPodSandbox called %d times by 20 concurrent callers, want 1", n)
	}
	for _, r := range results {
		if r != results[0] {
			t.Fatal("callers got different summaries")
		}
	}
}

func TestConcurrentCallersRace(t *testing.T) {
	e := newEnv(t)
	twoPods(e)
	stop := make(chan struct{})
	var ticker sync.WaitGroup
	ticker.Go(func() {
		cpu := uint64(100e9)
		for {
			select {
			case <-stop:
				return
			default:
			}
			e.clk.Step(300 * time.Millisecond)
			cpu += 1e9
			e.machine.setCPU(cpu)
			time.Sleep(100 * time.Microsecond)
		}
	})
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			for j := range 50 {
				s, err := e.p.Summary(context.Background(), (i+j)%3 == 0)
				if err != nil {
					t.Error(err)
					return
				}
				if len(s.Pods) != 2 {
					t.Errorf("got %d pods", len(s.Pods))
					return
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	ticker.Wait()
}

func TestCallerCancelDoesNotFailOthers(t *testing.T) {
	e := newEnv(t)
	twoPods(e)
	e.rt.delay = 100 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := e.p.Summary(ctx, false)
		errc <- err
	}()
	testutil.Eventually(t, "the first sandbox listing", func() bool { return e.rt.count("ListPodSandbox") == 1 })
	other := make(chan error, 1)
	go func() {
		_, err := e.p.Summary(context.Background(), false)
		other <- err
	}()
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("canceled caller: err = %v", err)
	}
	if err := <-other; err != nil {
		t.Errorf("other caller: %v", err)
	}
	if n := e.rt.count("ListPodSandbox"); n != 1 {
		t.Errorf("ListPodSandbox called %d times, want 1", n)
	}
}

// With WithServeStale, a call after the cache period answers at once from
// the last snapshot and refreshes in the background.
func TestServeStaleWhileRefreshing(t *testing.T) {
	e := newEnv(t, WithServeStale(10*time.Second))
	hundredPods(t, e)
	first, err := e.p.Summary(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	e.clk.Step(2 * time.Second)
	second, err := e.p.Summary(context.Background(), false)
	if err != nil || second != first {
		t.Fatalf("stale call: %v, same snapshot %v", err, second == first)
	}
	// The background refresh lands; a later call sees it.
	testutil.Eventually(t, "the background refresh to land", func() bool {
		third, err := e.p.Summary(context.Background(), false)
		if err != nil {
			t.Fatal(err)
		}
		return third != first
	})
}

// The runtime's own rates are taken as they are, never derived, and the
// sandbox stats are asked for nodelet's pods only.
func TestRuntimeProvidedRates(t *testing.T) {
	e := newEnv(t)
	twoPods(e)
	e.rt.sandboxStatsOK = true
	var web []*runtimeapi.ContainerStats
	for _, s := range e.rt.stats {
		if s.Attributes.Labels[podspec.LabelPodUID] == "uid-a" {
			s.Cpu.UsageNanoCores = &runtimeapi.UInt64Value{Value: 7e6}
			web = append(web, s)
		}
	}
	e.rt.sandboxStats = []*runtimeapi.PodSandboxStats{{
		Attributes: &runtimeapi.PodSandboxAttributes{Id: "sb-uid-a"},
		Linux: &runtimeapi.LinuxPodSandboxStats{
			Cpu: &runtimeapi.CpuUsage{Timestamp: t0.UnixNano(), UsageCoreNanoSeconds: &runtimeapi.UInt64Value{Value: 50e9},
				UsageNanoCores: &runtimeapi.UInt64Value{Value: 25e6}},
			Memory:     &runtimeapi.MemoryUsage{Timestamp: t0.UnixNano(), WorkingSetBytes: &runtimeapi.UInt64Value{Value: 999}, UsageBytes: &runtimeapi.UInt64Value{Value: 5000}},
			Containers: web,
		},
	}}
	// The first sample: nothing to derive a rate from, yet the
	// runtime's rates are there.
	s := summary(t, e.p, false)
	p := findPod(s, "web")
	checkU64(t, "pod nanocores from the runtime", p.CPU.UsageNanoCores, 25e6)
	checkU64(t, "pod working set from the runtime", p.Memory.WorkingSetBytes, 999)
	for _, c := range p.Containers {
		checkU64(t, c.Name+" nanocores from the runtime", c.CPU.UsageNanoCores, 7e6)
	}
	e.rt.mu.Lock()
	f := e.rt.sbStatsFilter
	e.rt.mu.Unlock()
	if f == nil || f.GetLabelSelector()[podspec.LabelManagedBy] != podspec.ManagedByValue || len(f.GetLabelSelector()) != 1 {
		t.Errorf("ListPodSandboxStats filter = %v, want nodelet's label only", f)
	}
}

// A pod's ephemeral storage counts what the kubelet's does beside the
// writable layers, logs and disk emptyDirs: its configMap volumes (with
// their volume stats) and its /etc/hosts file; a volume directory that is
// not a directory, or a pod without either, adds nothing.
func TestEphemeralStorageCountsConfigMapsAndEtcHosts(t *testing.T) {
	e := newEnv(t)
	e.rt.addPod(podSpec{ns: "default", name: "web", uid: "uid-a", state: ready, created: t0, containers: []ctrSpec{
		{name: "app", state: running, cpu: 1, ws: 1, writable: 1000},
	}})
	podDir := filepath.Join(e.rootDir, "pods", "uid-a")
	config := filepath.Join(podDir, "volumes", "kubernetes.io~configmap", "settings")
	scratch := filepath.Join(podDir, "volumes", "kubernetes.io~empty-dir", "scratch")
	for _, d := range []string{config, scratch} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	hosts := filepath.Join(podDir, "etc-hosts")
	if err := os.WriteFile(hosts, []byte("127.0.0.1 localhost\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.machine.setDU(config, 2*4096, 4)
	e.machine.setDU(scratch, 5*4096, 2)
	e.machine.setDU(hosts, 4096, 1)

	web := findPod(summary(t, e.p, false), "web")
	var names []string
	for _, v := range web.VolumeStats {
		names = append(names, v.Name)
	}
	if strings.Join(names, ",") != "scratch,settings" {
		t.Fatalf("volume stats of %v, want scratch,settings", names)
	}
	checkU64(t, "configMap used", web.VolumeStats[1].UsedBytes, 2*4096)
	checkU64(t, "ephemeral used", web.EphemeralStorage.UsedBytes, 1000+5*4096+2*4096+4096)
	checkU64(t, "ephemeral inodes", web.EphemeralStorage.InodesUsed, 7+2+4+1) // the writable layer's 7
}
