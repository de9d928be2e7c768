package eviction

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/pipeline/podworker"
	"github.com/nodelet/nodelet/internal/pure/podupdate"
	"github.com/nodelet/nodelet/internal/pure/status"
)

type fakeSummary struct {
	mu    sync.Mutex
	clk   *clocktesting.FakeClock
	mem   uint64 // available
	disk  uint64 // available
	pods  []statsapi.PodStats
	err   error
	calls int
	// reads are the calls in order: full, node or fresh.
	reads []string
}

func (f *fakeSummary) FreshSummary(ctx context.Context) (*statsapi.Summary, error) {
	return f.read("fresh", true)
}

func (f *fakeSummary) Summary(context.Context, bool) (*statsapi.Summary, error) {
	return f.read("full", true)
}

// NodeSummary is the node's stats without the pods.
func (f *fakeSummary) NodeSummary(context.Context) (*statsapi.Summary, error) {
	return f.read("node", false)
}

func (f *fakeSummary) read(kind string, pods bool) (*statsapi.Summary, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	f.reads = append(f.reads, kind)
	if f.err != nil {
		return nil, f.err
	}
	now := metav1.NewTime(f.clk.Now())
	ws, capacity, inodes := uint64(2<<30), uint64(100<<30), uint64(1000)
	mem, disk := f.mem, f.disk
	s := &statsapi.Summary{
		Node: statsapi.NodeStats{
			Memory: &statsapi.MemoryStats{Time: now, AvailableBytes: &mem, WorkingSetBytes: &ws},
			Fs:     &statsapi.FsStats{Time: now, AvailableBytes: &disk, CapacityBytes: &capacity, Inodes: &inodes, InodesFree: &inodes},
		},
	}
	if pods {
		s.Pods = f.pods
	}
	return s, nil
}

type fakeWorkers struct {
	updates []podworker.UpdatePodOptions
}

func (w *fakeWorkers) UpdatePod(o podworker.UpdatePodOptions) { w.updates = append(w.updates, o) }
func (w *fakeWorkers) IsPodFinished(types.UID) bool           { return true }

// fakeStatuses holds "reason: message" per pod, and " (no DisruptionTarget)"
// after it when the stop carries none.
type fakeStatuses map[types.UID]string

func (s fakeStatuses) StopByNode(uid types.UID, r status.Rejection) {
	s[uid] = r.Reason + ": " + r.Message
	if r.NoDisruptionTarget {
		s[uid] += " (no DisruptionTarget)"
	}
}

// syncOne is one Synchronize that evicts at most one pod.
func syncOne(t *testing.T, m *Manager) *v1.Pod {
	t.Helper()
	pods := m.Synchronize(context.Background())
	switch len(pods) {
	case 0:
		return nil
	case 1:
		return pods[0]
	}
	t.Fatalf("evicted %d pods at once: %s", len(pods), podNames(pods))
	return nil
}

type fakeRecorder struct{ events []string }

func (r *fakeRecorder) Event(pod *v1.Pod, _, reason, _ string) {
	r.events = append(r.events, pod.Name+" "+reason)
}
func (r *fakeRecorder) NodeEvent(node, _, reason, message string) {
	r.events = append(r.events, node+" "+reason+" "+message)
}

type harness struct {
	m        *Manager
	sum      *fakeSummary
	workers  *fakeWorkers
	statuses fakeStatuses
	rec      *fakeRecorder
	reg      *prometheus.Registry
	reclaims int
	pods     []*v1.Pod
}

func newHarness(t *testing.T, c Config, reclaim func(h *harness)) *harness {
	clk := clocktesting.NewFakeClock(time.Unix(5000, 0))
	h := &harness{sum: &fakeSummary{clk: clk, mem: 4 << 30, disk: 50 << 30}, workers: &fakeWorkers{},
		statuses: fakeStatuses{}, rec: &fakeRecorder{}, reg: prometheus.NewRegistry()}
	h.m = New(Options{Thresholds: mustThresholds(t, c), NodeName: "node1"}, Deps{
		Summary: h.sum, Workers: h.workers, Statuses: h.statuses, Recorder: h.rec,
		ActivePods: func() []*v1.Pod { return h.pods },
		ReclaimContainers: func(context.Context) error {
			h.reclaims++
			if reclaim != nil {
				reclaim(h)
			}
			return nil
		},
		ReclaimImages: func(context.Context) (int64, error) { return 0, errors.New("no image GC here") },
		Metrics:       h.reg, Clock: clk,
	})
	return h
}

// Under memory pressure the manager evicts the first pod of the ranking
// that is not critical, with the kubelet's grace, status and event, and
// nothing of the node is reclaimed for memory.
func TestManagerEvictsLowestRanked(t *testing.T) {
	h := newHarness(t, Config{EvictionHard: map[string]string{"memory.available": "1Gi"}}, nil)
	critical := testPod("critical", "", 0)
	critical.Spec.Priority = nil
	critical.Spec.PriorityClassName = "system-node-critical"
	h.pods = []*v1.Pod{testPod("small", "", 0), critical, testPod("big", "", 0)}
	h.sum.pods = []statsapi.PodStats{podStats("small", 10<<20, 0), podStats("critical", 2<<30, 0), podStats("big", 500<<20, 0)}

	if p := syncOne(t, h.m); p != nil {
		t.Fatalf("evicted %s without pressure", p.Name)
	}
	h.sum.mem = 512 << 20
	h.sum.clk.Step(10 * time.Second)
	p := syncOne(t, h.m)
	if p == nil || p.Name != "big" {
		t.Fatalf("evicted %v, want big (critical is skipped)", p)
	}
	if got := h.m.Conditions(); len(got) != 1 || got[0] != v1.NodeMemoryPressure {
		t.Errorf("conditions %v", got)
	}
	if len(h.workers.updates) != 1 {
		t.Fatalf("updates %+v", h.workers.updates)
	}
	u := h.workers.updates[0]
	if u.Reason != podupdate.Kill || u.KillPodOptions == nil || !u.KillPodOptions.Evict || *u.KillPodOptions.PodTerminationGracePeriodSecondsOverride != 1 {
		t.Errorf("kill %+v %+v", u, u.KillPodOptions)
	}
	want := "Evicted: The node was low on resource: memory. Threshold quantity: 1Gi, available: 512Mi. " +
		"Container c was using 500Mi, request is 0, has larger consumption of memory. "
	if got := h.statuses["big"]; got != want {
		t.Errorf("status\n%q\nwant\n%q", got, want)
	}
	if got := strings.Join(h.rec.events, "|"); got != "node1 EvictionThresholdMet Attempting to reclaim memory|big Evicted" {
		t.Errorf("events %s", got)
	}
	if h.reclaims != 0 {
		t.Errorf("reclaimed node disk %d times for memory", h.reclaims)
	}
	if v := testutil.ToFloat64(h.m.evictions.WithLabelValues("memory.available")); v != 1 {
		t.Errorf("kubelet_evictions = %v", v)
	}
}

// Under disk pressure the node's own garbage goes first; when that
// resolves the threshold, no pod is evicted.
func TestManagerReclaimsBeforeEvicting(t *testing.T) {
	h := newHarness(t, Config{EvictionHard: map[string]string{"nodefs.available": "10Gi"}},
		func(h *harness) { h.sum.disk = 20 << 30 })
	h.pods = []*v1.Pod{testPod("a", "", 0)}
	h.sum.pods = []statsapi.PodStats{podStats("a", 0, 1<<30)}
	h.sum.disk = 5 << 30
	if p := syncOne(t, h.m); p != nil {
		t.Fatalf("evicted %s though reclaim was enough", p.Name)
	}
	if h.reclaims != 1 {
		t.Errorf("reclaims %d, want 1", h.reclaims)
	}
	if got := h.m.Conditions(); len(got) != 1 || got[0] != v1.NodeDiskPressure {
		t.Errorf("conditions %v", got)
	}
	// Not enough: the pod goes.
	h2 := newHarness(t, Config{EvictionHard: map[string]string{"nodefs.available": "10Gi"}}, nil)
	h2.pods, h2.sum.pods, h2.sum.disk = h.pods, h.sum.pods, 5<<30
	if p := syncOne(t, h2.m); p == nil || p.Name != "a" || h2.reclaims != 1 {
		t.Fatalf("evicted %v after %d reclaims, want a after 1", p, h2.reclaims)
	}
	if !strings.HasPrefix(h2.statuses["a"], "Evicted: The node was low on resource: ephemeral-storage. Threshold quantity: 10Gi, available: 5Gi. ") {
		t.Errorf("status %q", h2.statuses["a"])
	}
}

// Only critical pods left: nothing is evicted, and stats that cannot be
// read change nothing.
func TestManagerNeverEvictsCritical(t *testing.T) {
	h := newHarness(t, Config{EvictionHard: map[string]string{"memory.available": "1Gi"}}, nil)
	c := testPod("c", "", 2000000000)
	h.pods = []*v1.Pod{c}
	h.sum.pods = []statsapi.PodStats{podStats("c", 3<<30, 0)}
	h.sum.mem = 100 << 20
	if p := syncOne(t, h.m); p != nil || len(h.workers.updates) != 0 {
		t.Fatalf("evicted %v", p)
	}
	h.sum.err = errors.New("stats down")
	h.sum.clk.Step(time.Minute)
	if p := syncOne(t, h.m); p != nil {
		t.Fatalf("evicted %v without stats", p)
	}
	if got := h.m.Conditions(); len(got) != 1 {
		t.Errorf("conditions %v, want the last known", got)
	}
}
