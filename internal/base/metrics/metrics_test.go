package metrics

import (
	"errors"
	"math"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nodelet/nodelet/internal/pure/podupdate"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	testingclock "k8s.io/utils/clock/testing"
)

func gather(t *testing.T, reg *prometheus.Registry) map[string]*dto.MetricFamily {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	// The kubelet's evented PLEG counters end in _count, not _total: their
	// names are the kubelet's, kept as they are.
	problems = slices.DeleteFunc(problems, func(p promlint.Problem) bool {
		return p.Metric == "kubelet_evented_pleg_connection_error_count" || p.Metric == "kubelet_evented_pleg_connection_success_count"
	})
	if err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return out
}

func labelNames(m *dto.Metric) string {
	var names []string
	for _, l := range m.GetLabel() {
		names = append(names, l.GetName())
	}
	sort.Strings(names)
	return strings.Join(names, ",")
}

// find returns the sample of family mf with the label values given as
// name=value pairs.
func find(mf *dto.MetricFamily, labels ...string) *dto.Metric {
	for _, m := range mf.GetMetric() {
		var have []string
		for _, l := range m.GetLabel() {
			have = append(have, l.GetName()+"="+l.GetValue())
		}
		if slices.Equal(have, labels) {
			return m
		}
	}
	return nil
}

func TestRegistryContents(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg, nil)

	// Vectors have no series until observed: touch every one.
	m.PodStartDuration.Observe(1)
	m.PodStartSLIDuration.WithLabelValues("false").Observe(1)
	m.PodWorkerDuration.WithLabelValues(PodWorkerSync).Observe(1)
	m.PLEGRelistDuration.Observe(1)
	m.PLEGRelistInterval.Observe(1)
	m.HousekeepingDuration.Observe(1)
	m.ObserveRuntimeOp(OpListContainers, time.Now(), errors.New("x"))
	m.StartedPods.Inc()
	m.StartedPodsErrors.Inc()
	m.StartedContainers.WithLabelValues(ContainerTypeContainer).Inc()
	m.StartedContainersErrors.WithLabelValues(ContainerTypeInit, "CreateContainerError").Inc()
	m.RunningPods.Set(3)
	m.RunningContainers.WithLabelValues(ContainerStateRunning).Set(4)
	m.ObserveEventStreamConnected()
	m.ObserveEventStreamError()
	m.ObserveEventLatency(time.Millisecond)
	m.SetEventedPLEG(true)

	want := map[string]struct {
		typ    dto.MetricType
		labels string
		bounds []float64 // histograms only
	}{
		"kubelet_pod_start_duration_seconds":              {dto.MetricType_HISTOGRAM, "", podStartupBuckets},
		"kubelet_pod_start_sli_duration_seconds":          {dto.MetricType_HISTOGRAM, "first_with_network", podStartupBuckets},
		"kubelet_pod_worker_duration_seconds":             {dto.MetricType_HISTOGRAM, "operation_type", prometheus.DefBuckets},
		"kubelet_pleg_relist_duration_seconds":            {dto.MetricType_HISTOGRAM, "", prometheus.DefBuckets},
		"kubelet_pleg_relist_interval_seconds":            {dto.MetricType_HISTOGRAM, "", prometheus.DefBuckets},
		"nodelet_housekeeping_duration_seconds":           {dto.MetricType_HISTOGRAM, "", prometheus.DefBuckets},
		"kubelet_runtime_operations_total":                {dto.MetricType_COUNTER, "operation_type", nil},
		"kubelet_evented_pleg_connection_success_count":   {dto.MetricType_COUNTER, "", nil},
		"kubelet_evented_pleg_connection_error_count":     {dto.MetricType_COUNTER, "", nil},
		"kubelet_evented_pleg_connection_latency_seconds": {dto.MetricType_HISTOGRAM, "", prometheus.DefBuckets},
		"kubelet_evented_pleg_active":                     {dto.MetricType_GAUGE, "", nil},
		"kubelet_runtime_operations_duration_seconds":     {dto.MetricType_HISTOGRAM, "operation_type", prometheus.ExponentialBuckets(.005, 2.5, 14)},
		"kubelet_runtime_operations_errors_total":         {dto.MetricType_COUNTER, "operation_type", nil},
		"kubelet_running_pods":                            {dto.MetricType_GAUGE, "", nil},
		"kubelet_running_containers":                      {dto.MetricType_GAUGE, "container_state", nil},
		"kubelet_started_pods_total":                      {dto.MetricType_COUNTER, "", nil},
		"kubelet_started_pods_errors_total":               {dto.MetricType_COUNTER, "", nil},
		"kubelet_started_containers_total":                {dto.MetricType_COUNTER, "container_type", nil},
		"kubelet_started_containers_errors_total":         {dto.MetricType_COUNTER, "code,container_type", nil},
	}
	got := gather(t, reg)
	for name, w := range want {
		mf, ok := got[name]
		if !ok {
			t.Errorf("missing %s", name)
			continue
		}
		if mf.GetType() != w.typ {
			t.Errorf("%s: type %v, want %v", name, mf.GetType(), w.typ)
		}
		if mf.GetHelp() == "" {
			t.Errorf("%s: no help", name)
		}
		for _, s := range mf.GetMetric() {
			if l := labelNames(s); l != w.labels {
				t.Errorf("%s: labels %q, want %q", name, l, w.labels)
			}
			if w.bounds != nil {
				var bounds []float64
				for _, b := range s.GetHistogram().GetBucket() {
					bounds = append(bounds, b.GetUpperBound())
				}
				if !slices.Equal(bounds, w.bounds) {
					t.Errorf("%s: buckets %v, want %v", name, bounds, w.bounds)
				}
			}
		}
	}
	// The Go runtime's and the process's series, as on the kubelet's
	// /metrics; the benchmarks read the first three.
	runtime := map[string]dto.MetricType{
		"go_memstats_heap_inuse_bytes":  dto.MetricType_GAUGE,
		"go_memstats_alloc_bytes_total": dto.MetricType_COUNTER,
		"go_gc_duration_seconds":        dto.MetricType_SUMMARY,
		"go_goroutines":                 dto.MetricType_GAUGE,
		"process_resident_memory_bytes": dto.MetricType_GAUGE,
		"process_cpu_seconds_total":     dto.MetricType_COUNTER,
	}
	for name, typ := range runtime {
		if mf, ok := got[name]; !ok || mf.GetType() != typ {
			t.Errorf("%s: want a %v", name, typ)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok && !strings.HasPrefix(name, "go_") && !strings.HasPrefix(name, "process_") {
			t.Errorf("unexpected metric %s", name)
		}
	}
}

func TestObserveRuntimeOp(t *testing.T) {
	reg := prometheus.NewRegistry()
	clk := testingclock.NewFakePassiveClock(time.Unix(1000, 0))
	m := New(reg, nil, WithClock(clk))

	start := clk.Now()
	clk.SetTime(start.Add(30 * time.Millisecond))
	m.ObserveRuntimeOp(OpRunPodSandbox, start, nil)
	clk.SetTime(start.Add(2 * time.Second))
	m.ObserveRuntimeOp(OpRunPodSandbox, start, errors.New("failed"))
	m.ObserveRuntimeOp(OpListPodSandbox, clk.Now(), nil)

	got := gather(t, reg)
	op := func(name, op string) *dto.Metric {
		t.Helper()
		s := find(got[name], "operation_type="+op)
		if s == nil {
			t.Fatalf("%s{operation_type=%q} missing", name, op)
		}
		return s
	}
	if v := op("kubelet_runtime_operations_total", OpRunPodSandbox).GetCounter().GetValue(); v != 2 {
		t.Errorf("run_podsandbox operations = %v, want 2", v)
	}
	if v := op("kubelet_runtime_operations_errors_total", OpRunPodSandbox).GetCounter().GetValue(); v != 1 {
		t.Errorf("run_podsandbox errors = %v, want 1", v)
	}
	if s := find(got["kubelet_runtime_operations_errors_total"], "operation_type="+OpListPodSandbox); s != nil {
		t.Errorf("list_podsandbox has errors: %v", s)
	}
	h := op("kubelet_runtime_operations_duration_seconds", OpRunPodSandbox).GetHistogram()
	if h.GetSampleCount() != 2 || math.Abs(h.GetSampleSum()-2.03) > 1e-9 {
		t.Errorf("duration count %d sum %v, want 2 and 2.03", h.GetSampleCount(), h.GetSampleSum())
	}
	// 0.03 s falls in the 0.03125 bucket (0.005 * 2.5^2), 2 s in 3.05.
	for _, b := range h.GetBucket() {
		var want uint64
		switch {
		case b.GetUpperBound() >= 2:
			want = 2
		case b.GetUpperBound() >= 0.03:
			want = 1
		}
		if b.GetCumulativeCount() != want {
			t.Errorf("bucket le=%v: %d, want %d", b.GetUpperBound(), b.GetCumulativeCount(), want)
		}
	}

	var nilMetrics *Metrics
	nilMetrics.ObserveRuntimeOp(OpVersion, time.Now(), nil) // no panic
}

func TestRunningFunc(t *testing.T) {
	reg := prometheus.NewRegistry()
	var calls atomic.Int32
	pods, state := 2, map[string]int{ContainerStateRunning: 3, ContainerStateExited: 1}
	New(reg, func() (int, map[string]int) {
		calls.Add(1)
		return pods, state
	})

	got := gather(t, reg)
	if calls.Load() != 1 {
		t.Errorf("running called %d times by one scrape", calls.Load())
	}
	if v := got["kubelet_running_pods"].GetMetric()[0].GetGauge().GetValue(); v != 2 {
		t.Errorf("running pods = %v", v)
	}
	want := map[string]float64{"created": 0, "running": 3, "exited": 1, "unknown": 0}
	for s, w := range want {
		m := find(got["kubelet_running_containers"], "container_state="+s)
		if m == nil || m.GetGauge().GetValue() != w {
			t.Errorf("running containers{%s} = %v, want %v", s, m, w)
		}
	}

	// Every scrape asks again.
	pods, state = 0, map[string]int{ContainerStateExited: 4}
	got = gather(t, reg)
	if v := got["kubelet_running_pods"].GetMetric()[0].GetGauge().GetValue(); v != 0 {
		t.Errorf("running pods = %v, want 0", v)
	}
	if m := find(got["kubelet_running_containers"], "container_state=running"); m.GetGauge().GetValue() != 0 {
		t.Errorf("running containers{running} = %v, want 0", m)
	}
	if calls.Load() != 2 {
		t.Errorf("running called %d times by two scrapes", calls.Load())
	}
}

func TestNewTwiceOnOneRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	a := New(reg, nil)
	b := New(reg, nil)
	if a.PodStartDuration != b.PodStartDuration || a.RunningPods != b.RunningPods {
		t.Error("second New did not reuse the registered metrics")
	}
	a.StartedPods.Inc()
	if v := gather(t, reg)["kubelet_started_pods_total"].GetMetric()[0].GetCounter().GetValue(); v != 1 {
		t.Errorf("started pods = %v", v)
	}
	// A nil registry leaves everything unregistered but usable.
	New(nil, nil).ObserveRuntimeOp(OpVersion, time.Now(), nil)
}

func TestObservePodWorkerLabelsByReason(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg, nil)
	count := func(op string) uint64 {
		var d dto.Metric
		if err := m.PodWorkerDuration.WithLabelValues(op).(prometheus.Metric).Write(&d); err != nil {
			t.Fatal(err)
		}
		return d.GetHistogram().GetSampleCount()
	}
	for r, want := range map[podupdate.Reason]string{podupdate.Add: PodWorkerCreate, podupdate.Update: PodWorkerUpdate,
		podupdate.Resync: PodWorkerSync, podupdate.Kill: PodWorkerKill} {
		before := count(want)
		m.ObservePodWorker(r, time.Second)
		if count(want) != before+1 {
			t.Errorf("%s: no observation under operation_type=%s", r, want)
		}
	}
}

func TestRegister(t *testing.T) {
	opts := prometheus.CounterOpts{Name: "nodelet_test_total", Help: "A test counter."}
	first := prometheus.NewCounter(opts)
	if got := Register(nil, first); got != first {
		t.Error("Register(nil) did not return its collector")
	}
	reg := prometheus.NewRegistry()
	if got := Register(reg, first); got != first {
		t.Error("first Register did not return its collector")
	}
	if got := Register(reg, prometheus.NewCounter(opts)); got != first {
		t.Error("second Register of the same metric did not return the first collector")
	}
	defer func() {
		if recover() == nil {
			t.Error("a clashing metric of another type did not panic")
		}
	}()
	Register(reg, prometheus.NewGauge(prometheus.GaugeOpts{Name: "nodelet_test_total", Help: "A test counter."}))
}

// The CRI client is dialled with RuntimeCalls' observer before New runs on
// the same registry: both count into the same metrics.
func TestRuntimeCallsSharedWithNew(t *testing.T) {
	reg := prometheus.NewRegistry()
	calls := NewRuntimeCalls(reg)
	m := New(reg, nil)
	calls.Observe(OpVersion, time.Second, errors.New("x"))
	if got := testutil.ToFloat64(m.RuntimeOperations.WithLabelValues(OpVersion)); got != 1 {
		t.Errorf("runtime_operations_total = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.RuntimeOperationsErrors.WithLabelValues(OpVersion)); got != 1 {
		t.Errorf("runtime_operations_errors_total = %v, want 1", got)
	}
}
