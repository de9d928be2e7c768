package stats

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	apitest "k8s.io/cri-api/pkg/apis/testing"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/base/testutil"
	"github.com/nodelet/nodelet/internal/pipeline/cri"
	"github.com/nodelet/nodelet/internal/pure/podspec"
)

// criMetricsEnv is the CRI client over the cri-api fake runtime, with
// two ready sandboxes of nodelet and one of someone else.
type criMetricsEnv struct {
	fake *apitest.FakeRuntimeService
	rt   *unimplementable
	clk  *testingclock.FakePassiveClock
	m    *CRIMetrics
}

// unimplementable answers the CRI metrics calls Unimplemented, as the
// CRI client does for containerd 1.6, while unimplemented is set.
type unimplementable struct {
	*cri.Client
	mu            sync.Mutex
	unimplemented bool
	calls         map[string]int
}

func (u *unimplementable) check(name string) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.calls[name]++
	if u.unimplemented {
		return fmt.Errorf("%s: %w: unknown method %s", name, cri.ErrUnimplemented, name)
	}
	return nil
}

func (u *unimplementable) ListMetricDescriptors(ctx context.Context) ([]*runtimeapi.MetricDescriptor, error) {
	if err := u.check("ListMetricDescriptors"); err != nil {
		return nil, err
	}
	return u.Client.ListMetricDescriptors(ctx)
}

func (u *unimplementable) ListPodSandboxMetrics(ctx context.Context) ([]*runtimeapi.PodSandboxMetrics, error) {
	if err := u.check("ListPodSandboxMetrics"); err != nil {
		return nil, err
	}
	return u.Client.ListPodSandboxMetrics(ctx)
}

func (u *unimplementable) count(name string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.calls[name]
}

func newCRIMetricsEnv(t *testing.T) *criMetricsEnv {
	t.Helper()
	fake := apitest.NewFakeRuntimeService()
	managed := map[string]string{podspec.LabelManagedBy: podspec.ManagedByValue}
	fake.SetFakeSandboxes([]*apitest.FakePodSandbox{
		{PodSandboxStatus: runtimeapi.PodSandboxStatus{Id: "sb-web", State: runtimeapi.PodSandboxState_SANDBOX_READY, Labels: managed}},
		{PodSandboxStatus: runtimeapi.PodSandboxStatus{Id: "sb-dns", State: runtimeapi.PodSandboxState_SANDBOX_READY, Labels: managed}},
		{PodSandboxStatus: runtimeapi.PodSandboxStatus{Id: "sb-other", State: runtimeapi.PodSandboxState_SANDBOX_READY}},
		{PodSandboxStatus: runtimeapi.PodSandboxStatus{Id: "sb-gone", State: runtimeapi.PodSandboxState_SANDBOX_NOTREADY, Labels: managed}},
	})
	fake.FakeMetricDescriptors = map[string]*runtimeapi.MetricDescriptor{
		"container_cpu_usage_seconds_total":  {Name: "container_cpu_usage_seconds_total", Help: "Cumulative cpu time consumed in seconds.", LabelKeys: []string{"container", "pod", "namespace"}},
		"container_memory_working_set_bytes": {Name: "container_memory_working_set_bytes", Help: "Current working set in bytes.", LabelKeys: []string{"container", "pod", "namespace"}},
		"container_network_receive_bytes_total": {Name: "container_network_receive_bytes_total", Help: "Cumulative count of bytes received.",
			LabelKeys: []string{"interface", "pod", "namespace"}},
	}
	at := t0.UnixNano()
	ctr := func(id, name, pod, ns string, cpu, ws uint64) *runtimeapi.ContainerMetrics {
		return &runtimeapi.ContainerMetrics{ContainerId: id, Metrics: []*runtimeapi.Metric{
			{Name: "container_cpu_usage_seconds_total", Timestamp: at, MetricType: runtimeapi.MetricType_COUNTER, LabelValues: []string{name, pod, ns}, Value: &runtimeapi.UInt64Value{Value: cpu}},
			{Name: "container_memory_working_set_bytes", MetricType: runtimeapi.MetricType_GAUGE, LabelValues: []string{name, pod, ns}, Value: &runtimeapi.UInt64Value{Value: ws}},
		}}
	}
	fake.SetFakePodSandboxMetrics([]*runtimeapi.PodSandboxMetrics{
		{PodSandboxId: "sb-web", Metrics: []*runtimeapi.Metric{
			{Name: "container_network_receive_bytes_total", Timestamp: at, MetricType: runtimeapi.MetricType_COUNTER, LabelValues: []string{"eth0", "web", "default"}, Value: &runtimeapi.UInt64Value{Value: 1000}},
			// Undescribed, and with too few labels: left out.
			{Name: "container_undescribed", MetricType: runtimeapi.MetricType_GAUGE, Value: &runtimeapi.UInt64Value{Value: 1}},
			{Name: "container_memory_working_set_bytes", MetricType: runtimeapi.MetricType_GAUGE, LabelValues: []string{"web"}, Value: &runtimeapi.UInt64Value{Value: 2}},
		}, ContainerMetrics: []*runtimeapi.ContainerMetrics{ctr("c-app", "app", "web", "default", 12, 100)}},
		{PodSandboxId: "sb-dns", ContainerMetrics: []*runtimeapi.ContainerMetrics{ctr("c-dns", "dns", "dns", "kube-system", 5, 50)}},
		{PodSandboxId: "sb-other", ContainerMetrics: []*runtimeapi.ContainerMetrics{ctr("c-x", "x", "other", "default", 1, 1)}},
		{PodSandboxId: "sb-gone", ContainerMetrics: []*runtimeapi.ContainerMetrics{ctr("c-y", "y", "gone", "default", 1, 1)}},
	})
	client := cri.New(fake, apitest.NewFakeImageService(), "fake", cri.DefaultTimeouts(), discardLogger())
	rt := &unimplementable{Client: client, calls: map[string]int{}}
	clk := testingclock.NewFakePassiveClock(t0)
	return &criMetricsEnv{fake: fake, rt: rt, clk: clk, m: NewCRIMetrics(rt, clk, discardLogger())}
}

func TestCRIMetrics(t *testing.T) {
	e := newCRIMetricsEnv(t)
	if err := e.m.Unavailable(context.Background()); err != nil {
		t.Fatalf("Unavailable = %v", err)
	}
	got := series(t, e.m)
	want := map[string]float64{
		"container_cpu_usage_seconds_total{container=app,namespace=default,pod=web}":      12,
		"container_cpu_usage_seconds_total{container=dns,namespace=kube-system,pod=dns}":  5,
		"container_memory_working_set_bytes{container=app,namespace=default,pod=web}":     100,
		"container_memory_working_set_bytes{container=dns,namespace=kube-system,pod=dns}": 50,
		"container_network_receive_bytes_total{interface=eth0,namespace=default,pod=web}": 1000,
	}
	for k, v := range want {
		if m, ok := got[k]; !ok || metricValue(m) != v {
			t.Errorf("%s = %v (present %v), want %v", k, metricValue(m), ok, v)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("unexpected series %s (not nodelet's pod, or not described)", k)
		}
	}
	// Types and timestamps are the runtime's.
	cpu := got["container_cpu_usage_seconds_total{container=app,namespace=default,pod=web}"]
	if cpu.GetCounter() == nil || cpu.GetTimestampMs() != t0.UnixMilli() {
		t.Errorf("cpu sample: %v", cpu)
	}
	if mem := got["container_memory_working_set_bytes{container=app,namespace=default,pod=web}"]; mem.GetGauge() == nil || mem.TimestampMs != nil {
		t.Errorf("memory sample: %v", mem)
	}
	// Descriptors are asked once; nodelet's sandboxes are asked by label.
	series(t, e.m)
	if n := e.rt.count("ListMetricDescriptors"); n != 1 {
		t.Errorf("ListMetricDescriptors called %d times, want 1", n)
	}
	if n := e.rt.count("ListPodSandboxMetrics"); n != 2 {
		t.Errorf("ListPodSandboxMetrics called %d times, want 2", n)
	}
}

func TestCRIMetricsUnimplemented(t *testing.T) {
	e := newCRIMetricsEnv(t)
	e.rt.unimplemented = true
	ctx := context.Background()
	err := e.m.Unavailable(ctx)
	if !errors.Is(err, ErrNoCRIMetrics) || !strings.Contains(err.Error(), "containerd 1.x does not") {
		t.Fatalf("Unavailable = %v, want ErrNoCRIMetrics", err)
	}
	if _, err := e.m.Gather(); !errors.Is(err, ErrNoCRIMetrics) {
		t.Errorf("Gather = %v, want ErrNoCRIMetrics", err)
	}
	// Believed for a while: not asked again.
	e.clk.SetTime(t0.Add(sandboxStatsRetry - time.Second))
	_ = e.m.Unavailable(ctx)
	if n := e.rt.count("ListMetricDescriptors"); n != 1 {
		t.Errorf("ListMetricDescriptors called %d times within the retry period, want 1", n)
	}
	// The runtime was upgraded: after the retry period the metrics come.
	e.rt.mu.Lock()
	e.rt.unimplemented = false
	e.rt.mu.Unlock()
	e.clk.SetTime(t0.Add(sandboxStatsRetry))
	if err := e.m.Unavailable(ctx); err != nil {
		t.Fatalf("after the retry period: %v", err)
	}
	if got := series(t, e.m); len(got) != 5 {
		t.Errorf("%d series after the upgrade, want 5", len(got))
	}
}

// Another failure is not "unavailable": the scrape fails and says why.
func TestCRIMetricsRuntimeError(t *testing.T) {
	e := newCRIMetricsEnv(t)
	e.fake.InjectError("ListPodSandboxMetrics", errors.New("shim died"))
	if err := e.m.Unavailable(context.Background()); err != nil {
		t.Errorf("Unavailable = %v, want nil", err)
	}
	if _, err := e.m.Gather(); err == nil || errors.Is(err, ErrNoCRIMetrics) || !strings.Contains(err.Error(), "shim died") {
		t.Errorf("Gather = %v, want the runtime's error", err)
	}
	if got := series(t, e.m); len(got) != 5 {
		t.Errorf("%d series on the next scrape, want 5", len(got))
	}
}

// A metric that does not match its descriptor (containerd 2.2 sends every
// metric with more label values than its descriptor has keys) is left out
// with one warning per name, not one per scrape.
func TestCRIMetricsWarnsOnceOfAMetricItsDescriptorDoesNotFit(t *testing.T) {
	e := newCRIMetricsEnv(t)
	var logs testutil.SyncBuffer
	e.m.log = slog.New(slog.NewTextHandler(&logs, nil))
	series(t, e.m)
	series(t, e.m)
	if n := strings.Count(logs.String(), "does not match the runtime's descriptor"); n != 1 {
		t.Errorf("%d warnings about the ill-fitting metric, want 1:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "name=container_memory_working_set_bytes") {
		t.Errorf("the warning does not name the metric:\n%s", logs.String())
	}
}
