package podruntime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/pipeline/cri"
	"github.com/nodelet/nodelet/internal/pipeline/podworker"
	"github.com/nodelet/nodelet/internal/pipeline/statusmanager"
	"github.com/nodelet/nodelet/internal/pure/podsetup"
	"github.com/nodelet/nodelet/internal/pure/resize"
	"github.com/nodelet/nodelet/internal/pure/status"
)

// journal is the writes of a resize, in order, from the runtime and the
// pod cgroup.
type journal struct {
	mu    sync.Mutex
	lines []string
}

func (j *journal) add(format string, args ...any) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.lines = append(j.lines, fmt.Sprintf(format, args...))
}

func (j *journal) take() string {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := strings.Join(j.lines, "\n")
	j.lines = nil
	return out
}

// updatingRuntime records what UpdateContainerResources is given.
type updatingRuntime struct {
	*cri.Client
	j     *journal
	names func(id string) string
}

func (r updatingRuntime) UpdateContainerResources(ctx context.Context, id string, res *runtimeapi.ContainerResources) error {
	l := res.GetLinux()
	r.j.add("update %s shares=%d quota=%d memory=%d", r.names(id), l.GetCpuShares(), l.GetCpuQuota(), l.GetMemoryLimitInBytes())
	return r.Client.UpdateContainerResources(ctx, id, res)
}

// fakePodCgroup is a pod cgroup whose wanted values the test sets.
type fakePodCgroup struct {
	j         *journal
	now, want resize.PodCgroup
	usage     uint64
	failSet   error
}

func (p *fakePodCgroup) Now() (resize.PodCgroup, error) { return p.now, nil }
func (p *fakePodCgroup) Want() resize.PodCgroup         { return p.want }
func (p *fakePodCgroup) MemoryUsage() (uint64, error)   { return p.usage, nil }
func (p *fakePodCgroup) Set(s resize.Step) error {
	if p.failSet != nil {
		return p.failSet
	}
	switch s.Kind {
	case resize.SetPodMemoryLimit:
		p.now.MemoryLimit = s.Value
		p.j.add("pod memory=%d", s.Value)
	case resize.SetPodCPUQuota:
		p.now.CPUQuota = s.Value
		p.j.add("pod quota=%d", s.Value)
	case resize.SetPodCPUShares:
		p.now.CPUShares = s.Value
		p.j.add("pod shares=%d", s.Value)
	}
	return nil
}

// fakeResizes is allocation.Manager in memory.
type fakeResizes struct {
	mu         sync.Mutex
	actuated   map[string]resize.Resources
	failed     []string
	done       int
	conds      []v1.PodCondition
	actuations []bool
}

func (r *fakeResizes) Status(types.UID) (*status.Resources, []v1.PodCondition) {
	r.mu.Lock()
	defer r.mu.Unlock()
	act := map[string]resize.Resources{}
	for k, v := range r.actuated {
		act[k] = v
	}
	return &status.Resources{Actuated: act}, r.conds
}

func (r *fakeResizes) Actuated(_ types.UID, c string, res resize.Resources) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.actuated[c] = res
	return nil
}

func (r *fakeResizes) Failed(_ *v1.Pod, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed = append(r.failed, err.Error())
}

func (r *fakeResizes) Actuation(_ time.Duration, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.actuations = append(r.actuations, err == nil)
}

func (r *fakeResizes) Done(*v1.Pod) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.done++
}

type resizeFixture struct {
	*fixture
	j       *journal
	cg      *fakePodCgroup
	resizes *fakeResizes
}

func newResizeFixture(t *testing.T) *resizeFixture {
	f := newFixture(t)
	j := &journal{}
	rf := &resizeFixture{fixture: f, j: j, cg: &fakePodCgroup{j: j}, resizes: &fakeResizes{actuated: map[string]resize.Resources{}}}
	log := slog.New(slog.DiscardHandler)
	rt := updatingRuntime{Client: cri.New(f.rs, f.is, "fake", cri.DefaultTimeouts(), log), j: j, names: func(id string) string {
		f.rs.Lock()
		defer f.rs.Unlock()
		if c, ok := f.rs.Containers[id]; ok {
			return c.Metadata.Name
		}
		return id
	}}
	f.m = New(rt, Options{PodLogsDir: "/var/log/pods"}, Deps{Clock: f.clock, Log: log, Status: statusmanager.New(nil), Resizes: rf.resizes})
	return rf
}

// sync syncs pod with a setup whose container resources are the CPU
// shares and quota and the memory limit of its requests and limits.
func (rf *resizeFixture) sync(t *testing.T, pod *v1.Pod) (v1.PodStatus, error) {
	t.Helper()
	setup := podsetup.Setup{PodCgroup: rf.cg, ContainerResources: func(_ *v1.Pod, c *v1.Container) *runtimeapi.LinuxContainerResources {
		r := resize.ResourcesOf(c.Resources)
		return &runtimeapi.LinuxContainerResources{CpuShares: r.CPURequest * 1024 / 1000, CpuQuota: r.CPULimit * 100, MemoryLimitInBytes: r.MemLimit}
	}}
	return rf.m.syncPod(context.Background(), podworker.SyncRequest{Pod: pod, Setup: setup})
}

// resizePod has one container, app: CPU cpuReq/cpuLim, memory memReq/memLim.
func resizePod(cpuReq, cpuLim, memReq, memLim string, policy ...v1.ContainerResizePolicy) *v1.Pod {
	pod := testPod()
	pod.Spec.Containers = pod.Spec.Containers[:1]
	pod.Spec.Containers[0].ResizePolicy = policy
	pod.Spec.Containers[0].Resources = v1.ResourceRequirements{
		Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpuReq), v1.ResourceMemory: resource.MustParse(memReq)},
		Limits:   v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpuLim), v1.ResourceMemory: resource.MustParse(memLim)},
	}
	return pod
}

// TestResizeInPlace: a running container given more CPU and memory is
// updated in place, not restarted, in the kubelet's order: the memory
// phase (pod cgroup grown first), then the CPU phase (quota, then shares,
// then the container). Each update is recorded, and the resize is done.
// A decrease shrinks the pod cgroup last.
func TestResizeInPlace(t *testing.T) {
	rf := newResizeFixture(t)
	rf.cg.now = resize.PodCgroup{CPUShares: 102, CPUQuota: 20000, MemoryLimit: 128 << 20}
	rf.cg.want = rf.cg.now
	if _, err := rf.sync(t, resizePod("100m", "200m", "64Mi", "128Mi")); err != nil {
		t.Fatal(err)
	}
	created := resize.Resources{CPURequest: 100, CPULimit: 200, MemRequest: 64 << 20, MemLimit: 128 << 20}
	if got := rf.resizes.actuated["app"]; got != created {
		t.Fatalf("created container recorded as %+v, want %+v", got, created)
	}
	rf.mutations()
	if got := rf.j.take(); got != "" {
		t.Fatalf("a new pod resized: %s", got)
	}

	rf.cg.want = resize.PodCgroup{CPUShares: 204, CPUQuota: 40000, MemoryLimit: 256 << 20}
	st, err := rf.sync(t, resizePod("200m", "400m", "128Mi", "256Mi"))
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Join([]string{
		"pod memory=268435456",
		"update app shares=102 quota=20000 memory=268435456",
		"pod quota=40000",
		"pod shares=204",
		"update app shares=204 quota=40000 memory=268435456",
	}, "\n")
	if got := rf.j.take(); got != want {
		t.Errorf("resize writes:\n%s\nwant:\n%s", got, want)
	}
	if got := rf.mutations(); got != "UpdateContainerResources,UpdateContainerResources" {
		t.Errorf("runtime calls = %s, want two updates and no restart", got)
	}
	grown := resize.Resources{CPURequest: 200, CPULimit: 400, MemRequest: 128 << 20, MemLimit: 256 << 20}
	if got := rf.resizes.actuated["app"]; got != grown {
		t.Errorf("recorded %+v, want %+v", got, grown)
	}
	if rf.resizes.done == 0 || len(rf.resizes.failed) > 0 || len(rf.resizes.actuations) != 1 || !rf.resizes.actuations[0] {
		t.Errorf("done %d, failed %v, actuations %v", rf.resizes.done, rf.resizes.failed, rf.resizes.actuations)
	}
	if st.ContainerStatuses[0].Resources == nil || st.ContainerStatuses[0].RestartCount != 0 {
		t.Errorf("status after the resize: %+v", st.ContainerStatuses[0])
	}

	// Nothing left to do: the next sync writes nothing.
	if _, err := rf.sync(t, resizePod("200m", "400m", "128Mi", "256Mi")); err != nil {
		t.Fatal(err)
	}
	if got := rf.j.take(); got != "" {
		t.Errorf("a resized pod resized again: %s", got)
	}

	// Less CPU: the containers first, then the shares, then the quota.
	rf.cg.want = resize.PodCgroup{CPUShares: 102, CPUQuota: 20000, MemoryLimit: 256 << 20}
	if _, err := rf.sync(t, resizePod("100m", "200m", "128Mi", "256Mi")); err != nil {
		t.Fatal(err)
	}
	want = strings.Join([]string{
		"update app shares=102 quota=20000 memory=268435456",
		"pod shares=102",
		"pod quota=20000",
	}, "\n")
	if got := rf.j.take(); got != want {
		t.Errorf("shrinking writes:\n%s\nwant:\n%s", got, want)
	}
}

// TestResizeMemoryBelowUsageRefused: a memory limit at or below what the
// container uses is refused before anything is written, with the
// kubelet's message; the record stays, so the next sync tries again, and
// once usage is below the new limit the resize goes through.
func TestResizeMemoryBelowUsageRefused(t *testing.T) {
	rf := newResizeFixture(t)
	rf.cg.now = resize.PodCgroup{CPUShares: 102, CPUQuota: 20000, MemoryLimit: 256 << 20}
	rf.cg.want = rf.cg.now
	if _, err := rf.sync(t, resizePod("100m", "200m", "64Mi", "256Mi")); err != nil {
		t.Fatal(err)
	}
	app := containerByName(rf.fixture, "app")
	stats := func(used uint64) {
		rf.rs.SetFakeContainerStats([]*runtimeapi.ContainerStats{{
			Attributes: &runtimeapi.ContainerAttributes{Id: app.Id},
			Memory:     &runtimeapi.MemoryUsage{UsageBytes: &runtimeapi.UInt64Value{Value: used}},
		}})
	}
	stats(200 << 20)
	rf.cg.usage = 200 << 20
	rf.cg.want.MemoryLimit = 128 << 20
	if _, err := rf.sync(t, resizePod("100m", "200m", "64Mi", "128Mi")); err != nil {
		t.Fatal(err)
	}
	if got := rf.j.take(); got != "" {
		t.Errorf("writes despite usage above the new limit: %s", got)
	}
	wantErr := "cannot decrease memory limits: [attempting to set pod memory limit (134217728) below current usage (209715200), " +
		"attempting to set container \"app\" memory limit (134217728) below current usage (209715200)]"
	if len(rf.resizes.failed) != 1 || rf.resizes.failed[0] != wantErr {
		t.Errorf("failed = %q, want %q", rf.resizes.failed, wantErr)
	}
	if got := rf.resizes.actuated["app"].MemLimit; got != 256<<20 {
		t.Errorf("recorded memory limit %d, want the old one", got)
	}
	stats(100 << 20)
	rf.cg.usage = 100 << 20
	if _, err := rf.sync(t, resizePod("100m", "200m", "64Mi", "128Mi")); err != nil {
		t.Fatal(err)
	}
	want := "update app shares=102 quota=20000 memory=134217728\npod memory=134217728"
	if got := rf.j.take(); got != want {
		t.Errorf("writes once usage is below:\n%s\nwant:\n%s", got, want)
	}
}

// TestResizeRestartContainer: with resizePolicy RestartContainer for
// memory, a memory resize restarts the container (under restartPolicy
// Never too) with its new resources; the pod cgroup is still resized
// around it, and the new instance is recorded.
func TestResizeRestartContainer(t *testing.T) {
	rf := newResizeFixture(t)
	restart := v1.ContainerResizePolicy{ResourceName: v1.ResourceMemory, RestartPolicy: v1.RestartContainer}
	rf.cg.now = resize.PodCgroup{CPUShares: 102, CPUQuota: 20000, MemoryLimit: 128 << 20}
	rf.cg.want = rf.cg.now
	pod := resizePod("100m", "200m", "64Mi", "128Mi", restart)
	pod.Spec.RestartPolicy = v1.RestartPolicyNever
	if _, err := rf.sync(t, pod); err != nil {
		t.Fatal(err)
	}
	first := containerByName(rf.fixture, "app").Id
	rf.mutations()
	rf.cg.want.MemoryLimit = 256 << 20
	pod = resizePod("100m", "200m", "64Mi", "256Mi", restart)
	pod.Spec.RestartPolicy = v1.RestartPolicyNever
	st, err := rf.sync(t, pod)
	if err != nil {
		t.Fatal(err)
	}
	if got := rf.mutations(); got != "StopContainer,CreateContainer,StartContainer" {
		t.Errorf("runtime calls = %s, want a restart and no update", got)
	}
	if got := rf.j.take(); got != "pod memory=268435456" {
		t.Errorf("writes = %q, want the pod cgroup grown", got)
	}
	if containerByName(rf.fixture, "app").Id == first {
		t.Error("container not restarted")
	}
	if got := rf.resizes.actuated["app"].MemLimit; got != 256<<20 {
		t.Errorf("new instance recorded with memory limit %d", got)
	}
	if rf.resizes.done == 0 || st.ContainerStatuses[0].RestartCount != 1 {
		t.Errorf("done %d, status %+v", rf.resizes.done, st.ContainerStatuses[0])
	}
}

// TestResizeUnrecordedContainerKept: a running container with no record
// of what it was given (started before allocations were recorded) is
// taken to have its allocation: recorded so, neither updated nor
// restarted.
func TestResizeUnrecordedContainerKept(t *testing.T) {
	rf := newResizeFixture(t)
	restart := v1.ContainerResizePolicy{ResourceName: v1.ResourceCPU, RestartPolicy: v1.RestartContainer}
	pod := resizePod("100m", "200m", "64Mi", "128Mi", restart)
	if _, err := rf.sync(t, pod); err != nil {
		t.Fatal(err)
	}
	rf.mutations()
	rf.resizes.actuated = map[string]resize.Resources{}
	if _, err := rf.sync(t, pod); err != nil {
		t.Fatal(err)
	}
	if got := rf.mutations(); got != "" {
		t.Errorf("runtime calls = %s, want none", got)
	}
	if got := rf.resizes.actuated["app"]; got != resize.ResourcesOf(pod.Spec.Containers[0].Resources) {
		t.Errorf("recorded %+v", got)
	}
}

// TestResizeFailureRecorded: a pod cgroup write that fails ends the
// resize with its error; nothing after it runs, and the sync itself goes
// on (the pod is not failed).
func TestResizeFailureRecorded(t *testing.T) {
	rf := newResizeFixture(t)
	rf.cg.now = resize.PodCgroup{CPUShares: 102, CPUQuota: 20000, MemoryLimit: 128 << 20}
	rf.cg.want = rf.cg.now
	if _, err := rf.sync(t, resizePod("100m", "200m", "64Mi", "128Mi")); err != nil {
		t.Fatal(err)
	}
	rf.cg.failSet = errors.New("write memory.limit_in_bytes: device or resource busy")
	rf.cg.want.MemoryLimit = 256 << 20
	if _, err := rf.sync(t, resizePod("100m", "200m", "64Mi", "256Mi")); err != nil {
		t.Fatal(err)
	}
	if got := rf.j.take(); got != "" {
		t.Errorf("writes after a failed one: %s", got)
	}
	if len(rf.resizes.failed) != 1 || !strings.Contains(rf.resizes.failed[0], "device or resource busy") {
		t.Errorf("failed = %q", rf.resizes.failed)
	}
}

// recordCheckingRuntime journals, at each CreateContainer, whether the
// container's resources were recorded before it (the kubelet's
// SetActuatedResources before its creation).
type recordCheckingRuntime struct {
	*cri.Client
	j       *journal
	resizes *fakeResizes
}

func (r recordCheckingRuntime) CreateContainer(ctx context.Context, sandboxID string, cfg *runtimeapi.ContainerConfig, sandboxCfg *runtimeapi.PodSandboxConfig) (string, error) {
	name := cfg.GetMetadata().GetName()
	r.resizes.mu.Lock()
	got, ok := r.resizes.actuated[name]
	r.resizes.mu.Unlock()
	r.j.add("create %s: recorded %v %+v", name, ok, got)
	return r.Client.CreateContainer(ctx, sandboxID, cfg, sandboxCfg)
}

// TestResourcesRecordedBeforeCreate: a container's resources are
// recorded before the runtime creates it, on the pod's first start (where
// the record is written while the sandbox is made) as on a restart in the
// same sandbox.
func TestResourcesRecordedBeforeCreate(t *testing.T) {
	f := newFixture(t)
	j := &journal{}
	resizes := &fakeResizes{actuated: map[string]resize.Resources{}}
	log := slog.New(slog.DiscardHandler)
	rt := recordCheckingRuntime{Client: cri.New(f.rs, f.is, "fake", cri.DefaultTimeouts(), log), j: j, resizes: resizes}
	f.m = New(rt, Options{PodLogsDir: "/var/log/pods"}, Deps{Clock: f.clock, Log: log, Status: statusmanager.New(nil), Resizes: resizes})
	pod := resizePod("100m", "200m", "64Mi", "128Mi")
	ctx := context.Background()
	if _, err := f.m.syncPod(ctx, podworker.SyncRequest{Pod: pod}); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("create app: recorded true %+v", resize.ResourcesOf(pod.Spec.Containers[0].Resources))
	if got := j.take(); got != want {
		t.Errorf("first start:\n%s\nwant:\n%s", got, want)
	}
	// A restart of the container with other resources (its pod's
	// allocation changed while it was down) records them first too.
	c := containerByName(f, "app")
	f.rs.Lock()
	c.State = runtimeapi.ContainerState_CONTAINER_EXITED
	c.StartedAt, c.FinishedAt, c.ExitCode = f.clock.Now().Add(-time.Second).UnixNano(), f.clock.Now().UnixNano(), 0
	f.rs.Unlock()
	pod = resizePod("300m", "400m", "64Mi", "128Mi")
	f.clock.Step(time.Minute)
	if _, err := f.m.syncPod(ctx, podworker.SyncRequest{Pod: pod}); err != nil {
		t.Fatal(err)
	}
	want = fmt.Sprintf("create app: recorded true %+v", resize.ResourcesOf(pod.Spec.Containers[0].Resources))
	if got := j.take(); got != want {
		t.Errorf("restart:\n%s\nwant:\n%s", got, want)
	}
}
