package stats

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"sync"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/pipeline/cri"
	"github.com/nodelet/nodelet/internal/pure/podspec"
)

// fakeRuntime answers the list calls from its fields and counts the calls.
// It ignores the filters (the provider filters again), but records them.
type fakeRuntime struct {
	mu             sync.Mutex
	sandboxes      []*runtimeapi.PodSandbox
	containers     []*runtimeapi.Container
	stats          []*runtimeapi.ContainerStats
	sandboxStats   []*runtimeapi.PodSandboxStats
	sandboxStatsOK bool  // ListPodSandboxStats is implemented
	err            error // every list call fails with it
	sandboxErr     error // ListPodSandboxStats fails with it
	imageFs        *runtimeapi.ImageFsInfoResponse
	delay          time.Duration
	onCall         func(name string) // called with each call, outside mu
	calls          map[string]int
	sandboxFilter  *runtimeapi.PodSandboxFilter
	ctrFilter      *runtimeapi.ContainerFilter
	sbStatsFilter  *runtimeapi.PodSandboxStatsFilter
}

func newFakeRuntime() *fakeRuntime {
	return &fakeRuntime{
		calls: map[string]int{},
		imageFs: &runtimeapi.ImageFsInfoResponse{ImageFilesystems: []*runtimeapi.FilesystemUsage{{
			Timestamp:  time.Unix(1000, 0).UnixNano(),
			FsId:       &runtimeapi.FilesystemIdentifier{Mountpoint: "/var/lib/containerd/snapshots"},
			UsedBytes:  &runtimeapi.UInt64Value{Value: 5 << 30},
			InodesUsed: &runtimeapi.UInt64Value{Value: 50000},
		}}},
	}
}

func (f *fakeRuntime) call(ctx context.Context, name string) error {
	f.mu.Lock()
	f.calls[name]++
	d, err, hook := f.delay, f.err, f.onCall
	f.mu.Unlock()
	if hook != nil {
		hook(name)
	}
	if d > 0 {
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return err
}

func (f *fakeRuntime) count(name string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[name]
}

func (f *fakeRuntime) totalCalls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.calls {
		n += c
	}
	return n
}

func (f *fakeRuntime) ListPodSandbox(ctx context.Context, filter *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error) {
	if err := f.call(ctx, "ListPodSandbox"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sandboxFilter = filter
	return f.sandboxes, nil
}

func (f *fakeRuntime) ListContainers(ctx context.Context, filter *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error) {
	if err := f.call(ctx, "ListContainers"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ctrFilter = filter
	return f.containers, nil
}

func (f *fakeRuntime) ListContainerStats(ctx context.Context, _ *runtimeapi.ContainerStatsFilter) ([]*runtimeapi.ContainerStats, error) {
	if err := f.call(ctx, "ListContainerStats"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stats, nil
}

func (f *fakeRuntime) ListPodSandboxStats(ctx context.Context, filter *runtimeapi.PodSandboxStatsFilter) ([]*runtimeapi.PodSandboxStats, error) {
	if err := f.call(ctx, "ListPodSandboxStats"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sbStatsFilter = filter
	if f.sandboxErr != nil {
		return nil, f.sandboxErr
	}
	if !f.sandboxStatsOK {
		// What cri.Client returns for containerd 1.6.
		return nil, fmt.Errorf("list pod sandbox stats: %w: not implemented", cri.ErrUnimplemented)
	}
	return f.sandboxStats, nil
}

func (f *fakeRuntime) ImageFsInfo(ctx context.Context) (*runtimeapi.ImageFsInfoResponse, error) {
	if err := f.call(ctx, "ImageFsInfo"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.imageFs, nil
}

// ctrSpec describes a container of a fake pod.
type ctrSpec struct {
	name        string
	state       runtimeapi.ContainerState
	cpu         uint64 // cumulative core-nanoseconds
	ws          uint64 // working set bytes
	writable    uint64 // writable layer bytes
	cpuAt       int64  // sample time; 0: now of the fake clock at addPod
	nanoCores   *uint64
	noManaged   bool
	statsAbsent bool
}

// podSpec describes a fake pod.
type podSpec struct {
	ns, name, uid string
	state         runtimeapi.PodSandboxState
	unmanaged     bool
	created       time.Time
	containers    []ctrSpec
}

// addPod adds a sandbox, its containers and their stats to the runtime.
func (f *fakeRuntime) addPod(p podSpec) {
	f.mu.Lock()
	defer f.mu.Unlock()
	sbID := "sb-" + p.uid
	labels := map[string]string{
		podspec.LabelPodName: p.name, podspec.LabelPodNamespace: p.ns, podspec.LabelPodUID: p.uid,
	}
	if !p.unmanaged {
		labels[podspec.LabelManagedBy] = podspec.ManagedByValue
	}
	f.sandboxes = append(f.sandboxes, &runtimeapi.PodSandbox{
		Id:        sbID,
		Metadata:  &runtimeapi.PodSandboxMetadata{Name: p.name, Namespace: p.ns, Uid: p.uid},
		State:     p.state,
		CreatedAt: p.created.UnixNano(),
		Labels:    labels,
	})
	for i, c := range p.containers {
		id := fmt.Sprintf("c-%s-%s", p.uid, c.name)
		cl := map[string]string{
			podspec.LabelPodName: p.name, podspec.LabelPodNamespace: p.ns, podspec.LabelPodUID: p.uid, podspec.LabelContainerName: c.name,
		}
		if !p.unmanaged && !c.noManaged {
			cl[podspec.LabelManagedBy] = podspec.ManagedByValue
		}
		f.containers = append(f.containers, &runtimeapi.Container{
			Id:           id,
			PodSandboxId: sbID,
			Metadata:     &runtimeapi.ContainerMetadata{Name: c.name},
			State:        c.state,
			CreatedAt:    p.created.Add(time.Duration(i+1) * time.Second).UnixNano(),
			Labels:       cl,
		})
		if c.statsAbsent {
			continue
		}
		cs := &runtimeapi.ContainerStats{
			Attributes: &runtimeapi.ContainerAttributes{Id: id, Metadata: &runtimeapi.ContainerMetadata{Name: c.name}, Labels: cl},
			Cpu:        &runtimeapi.CpuUsage{Timestamp: c.cpuAt, UsageCoreNanoSeconds: &runtimeapi.UInt64Value{Value: c.cpu}},
			Memory: &runtimeapi.MemoryUsage{
				Timestamp:       c.cpuAt,
				WorkingSetBytes: &runtimeapi.UInt64Value{Value: c.ws},
				UsageBytes:      &runtimeapi.UInt64Value{Value: c.ws + 100},
				RssBytes:        &runtimeapi.UInt64Value{Value: c.ws / 2},
			},
			WritableLayer: &runtimeapi.FilesystemUsage{
				Timestamp:  c.cpuAt,
				FsId:       &runtimeapi.FilesystemIdentifier{Mountpoint: "/var/lib/containerd/snapshots"},
				UsedBytes:  &runtimeapi.UInt64Value{Value: c.writable},
				InodesUsed: &runtimeapi.UInt64Value{Value: 7},
			},
		}
		if c.nanoCores != nil {
			cs.Cpu.UsageNanoCores = &runtimeapi.UInt64Value{Value: *c.nanoCores}
		}
		f.stats = append(f.stats, cs)
	}
}

// setCPU sets the cumulative CPU of a container's stats at time at.
func (f *fakeRuntime) setCPU(id string, usage uint64, at time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range f.stats {
		if s.Attributes.Id == id {
			s.Cpu = &runtimeapi.CpuUsage{Timestamp: at.UnixNano(), UsageCoreNanoSeconds: &runtimeapi.UInt64Value{Value: usage}}
			return
		}
	}
	panic("no container " + id)
}

// fakeMachine returns fixed node facts; DiskUsage answers from du.
type fakeMachine struct {
	mu      sync.Mutex
	boot    time.Time
	cpu     uint64
	tmpfs   map[string]bool
	du      map[string][2]uint64
	duCalls map[string]int
	fsErr   error
}

func newFakeMachine() *fakeMachine {
	return &fakeMachine{
		boot:    time.Unix(500, 0),
		cpu:     100e9,
		tmpfs:   map[string]bool{},
		du:      map[string][2]uint64{},
		duCalls: map[string]int{},
	}
}

func (m *fakeMachine) BootTime() (time.Time, error) { return m.boot, nil }

func (m *fakeMachine) NodeCPUUsage() (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cpu, nil
}

func (m *fakeMachine) setCPU(v uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.cpu = v
}

func (m *fakeMachine) NodeMemory() (workingSet, usage, available, rss, pageFaults, majorPageFaults uint64, err error) {
	return 3 << 30, 4 << 30, 5 << 30, 2 << 30, 1000, 10, nil
}

func (m *fakeMachine) FsStats(path string) (capacity, available, used, inodes, inodesFree uint64, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fsErr != nil {
		return 0, 0, 0, 0, 0, m.fsErr
	}
	if m.tmpfs[path] {
		return 64 << 20, 60 << 20, 4 << 20, 1000, 990, nil
	}
	return 100 << 30, 40 << 30, 60 << 30, 1_000_000, 900_000, nil
}

func (m *fakeMachine) IsTmpfs(path string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.tmpfs[path], nil
}

func (m *fakeMachine) DiskUsage(path string) (uint64, uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.duCalls[path]++
	v, ok := m.du[path]
	if !ok {
		return 0, 0, fmt.Errorf("disk usage of %s: %w", path, fs.ErrNotExist)
	}
	return v[0], v[1], nil
}

func (m *fakeMachine) duCount(path string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.duCalls[path]
}

func (m *fakeMachine) setDU(path string, used, inodes uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.du[path] = [2]uint64{used, inodes}
}

// t0 is the fake clock's start.
var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

type env struct {
	rt      *fakeRuntime
	machine *fakeMachine
	clk     *testingclock.FakeClock
	p       *Provider
	rootDir string
	logsDir string
}

func newEnv(t testing.TB, opts ...Option) *env {
	e := &env{
		rt:      newFakeRuntime(),
		machine: newFakeMachine(),
		clk:     testingclock.NewFakeClock(t0),
		rootDir: t.TempDir(),
		logsDir: "/var/log/pods",
	}
	opts = append([]Option{WithPodLogsDir(e.logsDir)}, opts...)
	e.p = New(e.rt, e.machine, "node-1", e.rootDir, e.clk, discardLogger(), opts...)
	return e
}

// The CRI client is a Runtime and a MetricsRuntime.
var (
	_ Runtime        = (*cri.Client)(nil)
	_ MetricsRuntime = (*cri.Client)(nil)
)
