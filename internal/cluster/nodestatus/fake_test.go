package nodestatus

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	testclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/base/notify"
	"github.com/nodelet/nodelet/internal/base/testutil"
	"github.com/nodelet/nodelet/internal/base/testutil/fakeapi"
)

// fakeRuntime answers the CRI calls node status makes.
type fakeRuntime struct {
	mu        sync.Mutex
	version   string
	ready     bool
	network   bool
	statusErr error
	images    []*runtimeapi.Image
	calls     atomic.Int64
}

func newFakeRuntime() *fakeRuntime {
	return &fakeRuntime{version: "v1.6.20", ready: true, network: true, images: []*runtimeapi.Image{
		{Id: "sha256:pause", RepoTags: []string{"registry.k8s.io/pause:3.10"}, Size: 320 << 10},
	}}
}

func (r *fakeRuntime) set(f func(r *fakeRuntime)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f(r)
}

func (r *fakeRuntime) Version(context.Context) (*runtimeapi.VersionResponse, error) {
	r.calls.Add(1)
	r.mu.Lock()
	defer r.mu.Unlock()
	return &runtimeapi.VersionResponse{RuntimeName: "containerd", RuntimeVersion: r.version, RuntimeApiVersion: "v1"}, nil
}

func (r *fakeRuntime) Status(context.Context, bool) (*runtimeapi.StatusResponse, error) {
	r.calls.Add(1)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.statusErr != nil {
		return nil, r.statusErr
	}
	cond := func(t string, ok bool, reason, msg string) *runtimeapi.RuntimeCondition {
		if ok {
			reason, msg = "", ""
		}
		return &runtimeapi.RuntimeCondition{Type: t, Status: ok, Reason: reason, Message: msg}
	}
	return &runtimeapi.StatusResponse{Status: &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{
		cond(runtimeapi.RuntimeReady, r.ready, "RuntimeNotReady", "runtime is starting"),
		cond(runtimeapi.NetworkReady, r.network, "NetworkPluginNotReady", "Network plugin returns error: cni plugin not initialized"),
	}}}, nil
}

func (r *fakeRuntime) ListImages(context.Context, *runtimeapi.ImageFilter) ([]*runtimeapi.Image, error) {
	r.calls.Add(1)
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*runtimeapi.Image{}, r.images...), nil
}

func (r *fakeRuntime) ImageFsInfo(context.Context) (*runtimeapi.ImageFsInfoResponse, error) {
	r.calls.Add(1)
	return &runtimeapi.ImageFsInfoResponse{ImageFilesystems: []*runtimeapi.FilesystemUsage{
		{FsId: &runtimeapi.FilesystemIdentifier{Mountpoint: "/var/lib/containerd"}},
	}}, nil
}

// fakeMachine is a 4-CPU, 8 GiB machine with plenty of room, unless a
// test says otherwise.
type fakeMachine struct {
	mu             sync.Mutex
	memAvailable   uint64
	fsAvailable    map[string]uint64
	processes      uint64
	machineErr     error
	fsCapacityGiB  uint64
	hugePages2MiB  uint64
	memoryCapacity uint64
}

func newFakeMachine() *fakeMachine {
	return &fakeMachine{memAvailable: 6 << 30, fsAvailable: map[string]uint64{}, processes: 300,
		fsCapacityGiB: 100, memoryCapacity: 8 << 30}
}

func (m *fakeMachine) NumCPU() (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return 4, m.machineErr
}

func (m *fakeMachine) MemoryCapacity() (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.memoryCapacity, m.machineErr
}

func (m *fakeMachine) HugePages() (map[uint64]uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return map[uint64]uint64{2 << 20: m.hugePages2MiB}, nil
}

func (m *fakeMachine) FsStats(path string) (capacity, available, used, inodes, inodesFree uint64, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	capacity = m.fsCapacityGiB << 30
	available, ok := m.fsAvailable[path]
	if !ok {
		available = capacity / 2
	}
	return capacity, available, capacity - available, 1 << 20, 1 << 19, nil
}

// eventLog records node events.
type eventLog struct {
	mu      sync.Mutex
	reasons []string
}

func (e *eventLog) NodeEvent(node, eventType, reason, message string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.reasons = append(e.reasons, reason)
}

func (e *eventLog) all() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string{}, e.reasons...)
}

// harness runs a Manager against a fake API server and a fake clock.
type harness struct {
	t       *testing.T
	client  *fake.Clientset
	clk     *testclock.FakeClock
	rt      *fakeRuntime
	machine *fakeMachine
	events  *eventLog
	m       *Manager
	rand    atomic.Uint64 // math.Float64bits of what Rand returns
	pleg    atomic.Pointer[error]
	// memoryPressure is what the eviction manager says.
	memoryPressure atomic.Bool

	failures      atomic.Int64 // OnRepeatedHeartbeatFailure calls
	leaseFailures atomic.Int64 // OnLeaseFailure calls
	changed       *notify.Kick // Deps.Changed, as the graceful shutdown kicks it
	podCIDRs      *fakePodCIDRs
	uids          atomic.Int64
	watches       *atomic.Int64 // fakeapi.CountWatches

	mu      sync.Mutex
	actions []recorded

	cancel context.CancelFunc
	done   chan struct{}
}

// recorded is one API request and the fake time it was made at.
type recorded struct {
	at     time.Time
	action k8stesting.Action
}

func (r recorded) String() string {
	return fmt.Sprintf("%s %s %s/%s", r.at.Format("15:04:05.000"), r.action.GetVerb(), r.action.GetResource().Resource, r.action.GetSubresource())
}

func newHarness(t *testing.T, opts func(o *Options), objects ...runtime.Object) *harness {
	t.Helper()
	h := &harness{
		t:       t,
		client:  fake.NewClientset(objects...),
		clk:     testclock.NewFakeClock(t0),
		rt:      newFakeRuntime(),
		machine: newFakeMachine(),
		events:  &eventLog{},
	}
	h.setRand(0)
	// Every request, with the fake time it was made at.
	h.client.PrependReactor("*", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		h.mu.Lock()
		h.actions = append(h.actions, recorded{h.clk.Now(), a})
		h.mu.Unlock()
		return false, nil, nil
	})
	h.watches = fakeapi.CountWatches(h.client)
	h.client.PrependWatchReactor("*", func(a k8stesting.Action) (bool, watch.Interface, error) {
		h.mu.Lock()
		h.actions = append(h.actions, recorded{h.clk.Now(), a})
		h.mu.Unlock()
		return false, nil, nil
	})
	// The API server gives each new object a UID.
	h.client.PrependReactor("create", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		obj := a.(k8stesting.CreateAction).GetObject()
		if m, ok := obj.(metav1.Object); ok && m.GetUID() == "" {
			m.SetUID(types.UID(fmt.Sprintf("uid-%d", h.uids.Add(1))))
		}
		return false, nil, nil
	})
	o := testOptions()
	if opts != nil {
		opts(&o)
	}
	h.changed = notify.NewKick()
	h.podCIDRs = &fakePodCIDRs{rt: h.rt}
	m, err := New(h.client, o, Deps{
		Changed:  h.changed,
		PodCIDRs: h.podCIDRs,
		Runtime:  h.rt,
		Machine:  h.machine,
		PLEGHealthy: func() (bool, error) {
			if err := h.pleg.Load(); err != nil {
				return false, *err
			}
			return true, nil
		},
		Pressure:                   func() (bool, bool, bool) { return h.memoryPressure.Load(), false, false },
		Events:                     h.events,
		OnRepeatedHeartbeatFailure: func() { h.failures.Add(1) },
		OnLeaseFailure:             func() { h.leaseFailures.Add(1) },
		Clock:                      h.clk,
		Log:                        slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Rand:                       func() float64 { return math.Float64frombits(h.rand.Load()) },
	})
	if err != nil {
		t.Fatal(err)
	}
	m.cfg.goos, m.cfg.goarch = "linux", "amd64"
	h.m = m
	return h
}

// fakePodCIDRs records the pod CIDRs node status hands on and, as a
// runtime whose network needs them, makes the network ready.
type fakePodCIDRs struct {
	rt    *fakeRuntime
	mu    sync.Mutex
	calls [][]string
}

func (f *fakePodCIDRs) Apply(_ context.Context, cidrs []string) error {
	f.mu.Lock()
	f.calls = append(f.calls, cidrs)
	f.mu.Unlock()
	f.rt.set(func(r *fakeRuntime) { r.network = true })
	return nil
}

func (f *fakePodCIDRs) all() [][]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

func (h *harness) setRand(f float64) { h.rand.Store(math.Float64bits(f)) }

func (h *harness) setPLEG(err error) {
	if err == nil {
		h.pleg.Store(nil)
		return
	}
	h.pleg.Store(&err)
}

// start runs the Manager and waits until it is idle.
func (h *harness) start() {
	h.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel, h.done = cancel, make(chan struct{})
	go func() {
		defer close(h.done)
		h.m.Run(ctx)
	}()
	h.t.Cleanup(h.stop)
	testutil.Eventually(h.t, "the node informer to sync", h.m.informer.HasSynced)
	testutil.Eventually(h.t, "the node informer to watch", func() bool { return h.watches.Load() > 0 })
	h.settle()
}

func (h *harness) stop() {
	if h.cancel != nil {
		h.cancel()
		<-h.done
		h.cancel = nil
	}
}

// settle waits until both goroutines wait on the clock and the informer
// has seen the API's Node as it is.
func (h *harness) settle() {
	h.t.Helper()
	testutil.Eventually(h.t, "the status and lease goroutines to wait on the clock", func() bool {
		return h.clk.Waiters() == 2
	})
	testutil.Eventually(h.t, "the informer to catch up with the API", func() bool {
		stored, ok, _ := h.m.store.GetByKey("node-1")
		api, err := h.client.Tracker().Get(v1.SchemeGroupVersion.WithResource("nodes"), "", "node-1")
		if apierrors.IsNotFound(err) {
			return !ok
		}
		return ok && err == nil && equality.Semantic.DeepEqual(stored, api)
	})
	// Events handled after the store changed (a deletion's trigger), and
	// a lease wake-up taken but not yet acted on.
	testutil.Eventually(h.t, "the status and lease goroutines to wait on the clock", func() bool {
		return h.clk.Waiters() == 2 && len(h.m.trigger.C()) == 0 && len(h.m.leaseWake) == 0 && h.m.leaseWakes.Load() == 0
	})
}

// advance steps the clock by d in steps of at most a second, settling
// after each.
func (h *harness) advance(d time.Duration) {
	h.t.Helper()
	h.advanceBy(d, time.Second)
}

// advanceBy steps the clock by d in steps of at most step.
func (h *harness) advanceBy(d, step time.Duration) {
	h.t.Helper()
	for d > 0 {
		s := min(d, step)
		h.clk.Step(s)
		h.settle()
		d -= s
	}
}

// mark returns the number of requests so far, for since.
func (h *harness) mark() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.actions)
}

// since are the requests made after mark n, those of the informer's
// list and watch aside, as "verb resource[/subresource]".
func (h *harness) since(n int) []recorded {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []recorded
	for _, r := range h.actions[n:] {
		if v := r.action.GetVerb(); v == "list" || v == "watch" {
			continue
		}
		out = append(out, r)
	}
	return out
}

func count(rs []recorded, verb, resource, subresource string) int {
	n := 0
	for _, r := range rs {
		if r.action.GetVerb() == verb && r.action.GetResource().Resource == resource && r.action.GetSubresource() == subresource {
			n++
		}
	}
	return n
}

func (h *harness) node() *v1.Node {
	h.t.Helper()
	n, err := h.client.CoreV1().Nodes().Get(context.Background(), "node-1", metav1.GetOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	return n
}

func (h *harness) lease() *coordinationv1.Lease {
	h.t.Helper()
	l, err := h.client.CoordinationV1().Leases(v1.NamespaceNodeLease).Get(context.Background(), "node-1", metav1.GetOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	return l
}

// fail makes the next n requests of verb on resource fail with a 503.
func (h *harness) fail(verb, resource string, n int) {
	h.failWith(verb, resource, n, apierrors.NewServiceUnavailable("the API server is down"))
}

// failWith makes the next n requests of verb on resource fail with err
// (recorded as requests all the same).
func (h *harness) failWith(verb, resource string, n int, err error) {
	var left atomic.Int64
	left.Store(int64(n))
	h.client.PrependReactor(verb, resource, func(a k8stesting.Action) (bool, runtime.Object, error) {
		if left.Add(-1) >= 0 {
			h.mu.Lock()
			h.actions = append(h.actions, recorded{h.clk.Now(), a})
			h.mu.Unlock()
			return true, nil, err
		}
		return false, nil, nil
	})
}
