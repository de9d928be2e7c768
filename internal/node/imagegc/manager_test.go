package imagegc

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critest "k8s.io/cri-api/pkg/apis/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/pure/podspec"
)

// fakeRuntime is the CRI fakes' images and containers.
type fakeRuntime struct {
	*critest.FakeImageService
	rs *critest.FakeRuntimeService
}

func (f fakeRuntime) ListContainers(ctx context.Context, filter *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error) {
	return f.rs.ListContainers(ctx, filter)
}

type fakeFs struct{ capacity, available uint64 }

func (f *fakeFs) FsStats(path string) (capacity, available, used, inodes, inodesFree uint64, err error) {
	if path != "/var/lib/containerd" {
		return 0, 0, 0, 0, 0, errors.New("statfs " + path + ": no such file")
	}
	return f.capacity, f.available, f.capacity - f.available, 0, 0, nil
}

type recordedEvent struct{ node, eventType, reason, message string }

type fakeEvents struct {
	mu  sync.Mutex
	got []recordedEvent
}

func (f *fakeEvents) NodeEvent(node, eventType, reason, message string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.got = append(f.got, recordedEvent{node, eventType, reason, message})
}

func (f *fakeEvents) reasons() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, e := range f.got {
		out = append(out, e.reason)
	}
	return out
}

type fixture struct {
	rt     fakeRuntime
	fs     *fakeFs
	events *fakeEvents
	clock  *clocktesting.FakeClock
	reg    *prometheus.Registry
	m      *Manager
}

// newFixture has images pause (pinned), busybox (a container's), old and
// new, each of 100 MiB, on a disk of 1000 MiB of which free is available.
func newFixture(t *testing.T, policy Policy, free uint64) *fixture {
	t.Helper()
	f := &fixture{rt: fakeRuntime{critest.NewFakeImageService(), critest.NewFakeRuntimeService()},
		fs: &fakeFs{capacity: 1000 * mib, available: free}, events: &fakeEvents{}, clock: clocktesting.NewFakeClock(t0),
		reg: prometheus.NewRegistry()}
	for _, i := range []struct {
		id, tag string
		pinned  bool
	}{
		{"sha256:pause", "registry.k8s.io/pause:3.10", true},
		{"sha256:busybox", "docker.io/library/busybox:1.35", false},
		{"sha256:old", "example.com/old:v1", false},
		{"sha256:new", "example.com/new:v1", false},
	} {
		f.rt.Images[i.id] = &runtimeapi.Image{Id: i.id, RepoTags: []string{i.tag}, Size: 100 * mib, Pinned: i.pinned}
	}
	f.rt.SetFakeFilesystemUsage([]*runtimeapi.FilesystemUsage{{FsId: &runtimeapi.FilesystemIdentifier{Mountpoint: "/var/lib/containerd"}}})
	f.rt.rs.SetFakeContainers([]*critest.FakeContainer{{ContainerStatus: runtimeapi.ContainerStatus{
		Id: "c1", State: runtimeapi.ContainerState_CONTAINER_EXITED, Image: &runtimeapi.ImageSpec{Image: "docker.io/library/busybox:1.35"},
		ImageRef: "sha256:busybox"}}})
	m, err := New(policy, []string{"registry.k8s.io/pause:3.10"}, Deps{Runtime: f.rt, Fs: f.fs, Events: f.events, NodeName: "node-1",
		Registerer: f.reg, Clock: f.clock, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	f.m = m
	return f
}

func (f *fixture) images() []string {
	imgs, _ := f.rt.ListImages(context.Background(), nil)
	var ids []string
	for _, i := range imgs {
		ids = append(ids, i.Id)
	}
	slices.Sort(ids)
	return ids
}

func (f *fixture) collected(reason string) float64 {
	var m dto.Metric
	if err := f.m.removed.WithLabelValues(reason).Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}

func TestGarbageCollectFreesDownToTheLowThreshold(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, DefaultPolicy(), 100*mib) // 90 % used: 100 MiB to free to 80 %
	// First seen now: younger than the minimum age, nothing goes, and the
	// disk stays full.
	err := f.m.GarbageCollect(ctx)
	if err == nil || !strings.Contains(err.Error(), "Insufficient free disk space") {
		t.Fatalf("first collection: %v, want insufficient free disk space", err)
	}
	if got := f.images(); len(got) != 4 {
		t.Fatalf("images after the first collection: %v, want all four (too young)", got)
	}
	// "new" is used once, a minute later, then its container goes.
	f.clock.Step(time.Minute)
	f.rt.rs.SetFakeContainers(append(slices.Collect(maps(f.rt.rs)), &critest.FakeContainer{ContainerStatus: runtimeapi.ContainerStatus{
		Id: "c2", Image: &runtimeapi.ImageSpec{Image: "example.com/new:v1"}, ImageRef: "sha256:new"}}))
	if err := f.m.GarbageCollect(ctx); err == nil {
		t.Fatal("second collection: want an error, nothing is old enough")
	}
	f.rt.rs.SetFakeContainers(slices.DeleteFunc(slices.Collect(maps(f.rt.rs)), func(c *critest.FakeContainer) bool { return c.Id == "c2" }))

	f.clock.Step(5 * time.Minute)
	if err := f.m.GarbageCollect(ctx); err != nil {
		t.Fatalf("third collection: %v", err)
	}
	// "old" was never used: it goes first; 100 MiB is enough.
	if got, want := f.images(), []string{"sha256:busybox", "sha256:new", "sha256:pause"}; !slices.Equal(got, want) {
		t.Errorf("images = %v, want %v", got, want)
	}
	if got := f.collected(ReasonSpace); got != 1 {
		t.Errorf("kubelet_image_garbage_collected_total{reason=space} = %v, want 1", got)
	}
	if got, want := f.events.reasons(), []string{EventFreeDiskSpaceFailed, EventFreeDiskSpaceFailed}; !slices.Equal(got, want) {
		t.Errorf("events %v, want %v", got, want)
	}
	if e := f.events.got[0]; e.node != "node-1" || e.eventType != "Warning" ||
		!strings.Contains(e.message, "(90% of 1000.0 MiB used)") || !strings.Contains(e.message, "freed 0 bytes") {
		t.Errorf("event %+v, want the kubelet's message on node-1", e)
	}
}

// maps lists the fake runtime's containers.
func maps(rs *critest.FakeRuntimeService) func(func(*critest.FakeContainer) bool) {
	return func(yield func(*critest.FakeContainer) bool) {
		rs.Lock()
		cs := make([]*critest.FakeContainer, 0, len(rs.Containers))
		for _, c := range rs.Containers {
			cs = append(cs, c)
		}
		rs.Unlock()
		for _, c := range cs {
			if !yield(c) {
				return
			}
		}
	}
}

func TestGarbageCollectBelowThresholdRemovesNothing(t *testing.T) {
	f := newFixture(t, DefaultPolicy(), 300*mib) // 70 %
	f.clock.Step(time.Hour)
	if err := f.m.GarbageCollect(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.clock.Step(time.Hour)
	if err := f.m.GarbageCollect(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := f.images(); len(got) != 4 || len(f.events.reasons()) != 0 {
		t.Errorf("images %v, events %v: want all four and no event", got, f.events.reasons())
	}
}

func TestGarbageCollectMaximumAge(t *testing.T) {
	f := newFixture(t, Policy{HighThresholdPercent: 85, LowThresholdPercent: 80, MinAge: time.Minute, MaxAge: time.Hour}, 900*mib)
	ctx := context.Background()
	if err := f.m.GarbageCollect(ctx); err != nil {
		t.Fatal(err)
	}
	f.clock.Step(61 * time.Minute)
	if err := f.m.GarbageCollect(ctx); err != nil {
		t.Fatal(err)
	}
	// Unused for over an hour: old and new; busybox has a container, pause is pinned.
	if got, want := f.images(), []string{"sha256:busybox", "sha256:pause"}; !slices.Equal(got, want) {
		t.Errorf("images = %v, want %v", got, want)
	}
	if got := f.collected(ReasonAge); got != 2 {
		t.Errorf("collected by age = %v, want 2", got)
	}
}

// The configured sandbox image is kept even when the runtime does not pin
// it, under any spelling of its name.
func TestSandboxImageKeptUnpinned(t *testing.T) {
	f := newFixture(t, DefaultPolicy(), 10*mib)
	f.rt.Images["sha256:pause"].Pinned = false
	f.rt.Images["sha256:pause"].RepoTags = []string{"registry.k8s.io/pause:3.10"}
	f.rt.Images["sha256:hubpause"] = &runtimeapi.Image{Id: "sha256:hubpause", RepoTags: []string{"docker.io/library/pause:latest"}, Size: mib}
	m, err := New(DefaultPolicy(), []string{"registry.k8s.io/pause:3.10", "pause"}, f.m.deps)
	if err != nil {
		t.Fatal(err)
	}
	freed, err := m.DeleteUnusedImages(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if freed != 0 {
		t.Errorf("freed %d right after detection, want 0 (minimum age)", freed)
	}
	f.clock.Step(3 * time.Minute)
	if freed, err = m.DeleteUnusedImages(context.Background()); err != nil || freed != 200*mib {
		t.Errorf("DeleteUnusedImages = %d, %v; want 200 MiB", freed, err)
	}
	if got, want := f.images(), []string{"sha256:busybox", "sha256:hubpause", "sha256:pause"}; !slices.Equal(got, want) {
		t.Errorf("images = %v, want %v", got, want)
	}
}

// A removal that fails is made up for by the next image; the error says
// what failed.
func TestGarbageCollectGoesOnPastAFailedRemoval(t *testing.T) {
	f := newFixture(t, DefaultPolicy(), 100*mib)
	ctx := context.Background()
	_ = f.m.GarbageCollect(ctx)
	f.clock.Step(10 * time.Minute)
	f.rt.InjectError("RemoveImage", errors.New("image is busy"))
	err := f.m.GarbageCollect(ctx)
	if err == nil || !strings.Contains(err.Error(), "image is busy") {
		t.Fatalf("GarbageCollect: %v, want the removal's error", err)
	}
	// Both never used, detected together: new goes first by ID, fails,
	// and old is removed in its place.
	if got, want := f.images(), []string{"sha256:busybox", "sha256:new", "sha256:pause"}; !slices.Equal(got, want) {
		t.Errorf("images = %v, want %v", got, want)
	}
}

func TestGarbageCollectErrors(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, DefaultPolicy(), 100*mib)
	f.rt.InjectError("ListImages", errors.New("runtime down"))
	if err := f.m.GarbageCollect(ctx); err == nil || !strings.Contains(err.Error(), "list images: runtime down") {
		t.Errorf("GarbageCollect: %v, want the list error", err)
	}
	f.fs.capacity, f.fs.available = 0, 0
	if err := f.m.GarbageCollect(ctx); !errors.Is(err, ErrInvalidCapacity) {
		t.Errorf("GarbageCollect: %v, want ErrInvalidCapacity", err)
	}
	if got := f.events.reasons(); !slices.Equal(got, []string{EventInvalidDiskCapacity}) {
		t.Errorf("events %v, want InvalidDiskCapacity", got)
	}
	f.rt.SetFakeFilesystemUsage(nil)
	if err := f.m.GarbageCollect(ctx); err == nil || !strings.Contains(err.Error(), "names none") {
		t.Errorf("GarbageCollect: %v, want no image filesystem", err)
	}
}

// Run collects at once and every Period; the second failure in a row is
// an ImageGCFailed event.
func TestRunRecordsRepeatedFailures(t *testing.T) {
	f := newFixture(t, Policy{HighThresholdPercent: 85, LowThresholdPercent: 80, MinAge: time.Hour}, 100*mib) // nothing old enough: each collection fails
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.m.Run(ctx) }()
	waitFor(t, func() bool { return f.clock.HasWaiters() })
	if got := f.events.reasons(); !slices.Equal(got, []string{EventFreeDiskSpaceFailed}) {
		t.Errorf("after one collection: events %v", got)
	}
	f.clock.Step(Period)
	waitFor(t, func() bool { return len(f.events.reasons()) == 3 })
	if got, want := f.events.reasons(), []string{EventFreeDiskSpaceFailed, EventFreeDiskSpaceFailed, EventImageGCFailed}; !slices.Equal(got, want) {
		t.Errorf("events %v, want %v", got, want)
	}
	cancel()
	<-done
}

func TestRunOffAtHighThreshold100(t *testing.T) {
	f := newFixture(t, Policy{HighThresholdPercent: 100, LowThresholdPercent: 80}, 0)
	f.m.Run(context.Background()) // returns at once
	if got := f.rt.Called; len(got) != 0 {
		t.Errorf("runtime calls %v, want none", got)
	}
}

func TestNewRefusesInvalidPolicy(t *testing.T) {
	if _, err := New(Policy{HighThresholdPercent: 80, LowThresholdPercent: 90}, nil, Deps{Clock: clocktesting.NewFakeClock(t0)}); err == nil {
		t.Error("New accepted a low threshold above the high one")
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 10s")
		}
		time.Sleep(time.Millisecond)
	}
}

type fakeRecords struct {
	present []string
	listed  time.Time
	calls   int
}

func (r *fakeRecords) PruneUnknown(present []string, listed time.Time) {
	r.calls++
	r.present, r.listed = slices.Sorted(slices.Values(present)), listed
}

// After each collection the pull records are told which images are left,
// and when they were listed, so those of removed images go.
func TestCollectionPrunesPullRecords(t *testing.T) {
	f := newFixture(t, Policy{HighThresholdPercent: 85, LowThresholdPercent: 80, MinAge: time.Minute, MaxAge: time.Hour}, 900*mib)
	rec := &fakeRecords{}
	f.m.deps.Records = rec
	ctx := context.Background()
	if err := f.m.GarbageCollect(ctx); err != nil {
		t.Fatal(err)
	}
	if want := []string{"sha256:busybox", "sha256:new", "sha256:old", "sha256:pause"}; rec.calls != 1 || !slices.Equal(rec.present, want) || !rec.listed.Equal(t0) {
		t.Errorf("pruned %d times, present %v at %v; want once, %v at %v", rec.calls, rec.present, rec.listed, want, t0)
	}
	f.clock.Step(61 * time.Minute)
	if err := f.m.GarbageCollect(ctx); err != nil {
		t.Fatal(err)
	}
	if want := []string{"sha256:busybox", "sha256:pause"}; !slices.Equal(rec.present, want) || !rec.listed.Equal(f.clock.Now()) {
		t.Errorf("present %v at %v; want %v at %v", rec.present, rec.listed, want, f.clock.Now())
	}
	f.rt.Images["sha256:gone"] = &runtimeapi.Image{Id: "sha256:gone", Size: mib}
	if _, err := f.m.DeleteUnusedImages(ctx); err != nil {
		t.Fatal(err)
	}
	if rec.calls != 3 {
		t.Errorf("DeleteUnusedImages did not prune the records (%d calls)", rec.calls)
	}
}

// An image a container mounts as an image volume (its
// nodelet.io/image-volumes annotation) is in use, as its own image is.
func TestImageVolumeImagesKept(t *testing.T) {
	f := newFixture(t, DefaultPolicy(), 10*mib)
	f.rt.rs.SetFakeContainers([]*critest.FakeContainer{{ContainerStatus: runtimeapi.ContainerStatus{
		Id: "c1", State: runtimeapi.ContainerState_CONTAINER_RUNNING, Image: &runtimeapi.ImageSpec{Image: "docker.io/library/busybox:1.35"},
		ImageRef: "sha256:busybox", Annotations: map[string]string{podspec.AnnotationImageVolumes: "sha256:old,sha256:gone"}}}})
	if _, err := f.m.DeleteUnusedImages(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.clock.Step(3 * time.Minute)
	if freed, err := f.m.DeleteUnusedImages(context.Background()); err != nil || freed != 100*mib {
		t.Errorf("DeleteUnusedImages = %d, %v; want 100 MiB (new only)", freed, err)
	}
	if got, want := f.images(), []string{"sha256:busybox", "sha256:old", "sha256:pause"}; !slices.Equal(got, want) {
		t.Errorf("images = %v, want %v", got, want)
	}
}
