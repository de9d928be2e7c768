package stats

import (
	"errors"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
)

// series gathers reg into "name{label=value,...}" -> sample.
func series(t *testing.T, reg prometheus.Gatherer) map[string]*dto.Metric {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	out := map[string]*dto.Metric{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			sort.Strings(labels)
			out[mf.GetName()+"{"+strings.Join(labels, ",")+"}"] = m
		}
	}
	return out
}

func metricValue(m *dto.Metric) float64 {
	switch {
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	}
	return -1
}

func TestResourceCollector(t *testing.T) {
	e := newEnv(t)
	twoPods(e)
	reg := e.p.ResourceGatherer()

	got := series(t, reg)
	want := map[string]float64{
		"node_cpu_usage_seconds_total{}":                                                  100,
		"node_memory_working_set_bytes{}":                                                 3 << 30,
		"container_cpu_usage_seconds_total{container=app,namespace=default,pod=web}":      10,
		"container_cpu_usage_seconds_total{container=sidecar,namespace=default,pod=web}":  2,
		"container_cpu_usage_seconds_total{container=dns,namespace=kube-system,pod=dns}":  5,
		"container_memory_working_set_bytes{container=app,namespace=default,pod=web}":     100 * mib,
		"container_memory_working_set_bytes{container=sidecar,namespace=default,pod=web}": 20 * mib,
		"container_memory_working_set_bytes{container=dns,namespace=kube-system,pod=dns}": 50 * mib,
		"container_start_time_seconds{container=app,namespace=default,pod=web}":           float64(t0.Add(-time.Hour + 2*time.Second).Unix()),
		"container_start_time_seconds{container=sidecar,namespace=default,pod=web}":       float64(t0.Add(-time.Hour + time.Second).Unix()),
		"container_start_time_seconds{container=dns,namespace=kube-system,pod=dns}":       float64(t0.Add(-2*time.Hour + time.Second).Unix()),
		"pod_cpu_usage_seconds_total{namespace=default,pod=web}":                          12,
		"pod_cpu_usage_seconds_total{namespace=kube-system,pod=dns}":                      5,
		"pod_memory_working_set_bytes{namespace=default,pod=web}":                         120 * mib,
		"pod_memory_working_set_bytes{namespace=kube-system,pod=dns}":                     50 * mib,
		"scrape_error{}":          0,
		"resource_scrape_error{}": 0,
	}
	for k, v := range want {
		m, ok := got[k]
		if !ok {
			t.Errorf("missing %s", k)
			continue
		}
		if metricValue(m) != v {
			t.Errorf("%s = %v, want %v", k, metricValue(m), v)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("unexpected series %s", k)
		}
	}
	// Samples carry the time they were taken.
	if ts := got["container_cpu_usage_seconds_total{container=app,namespace=default,pod=web}"].GetTimestampMs(); ts != t0.UnixMilli() {
		t.Errorf("timestamp = %d, want %d", ts, t0.UnixMilli())
	}
	if ts := got["container_start_time_seconds{container=app,namespace=default,pod=web}"].TimestampMs; ts != nil {
		t.Errorf("start time has a timestamp %d", *ts)
	}
	// Counters are counters.
	if got["node_cpu_usage_seconds_total{}"].GetCounter() == nil || got["pod_memory_working_set_bytes{namespace=default,pod=web}"].GetGauge() == nil {
		t.Error("wrong metric types")
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if problems, err := promlint.NewWithMetricFamilies(mfs).Lint(); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}

	// Built from the cached summary: no runtime calls within a second.
	calls := e.rt.totalCalls()
	series(t, reg)
	if e.rt.totalCalls() != calls {
		t.Error("a scrape within the cache period called the runtime")
	}
}

func TestResourceCollectorScrapeError(t *testing.T) {
	e := newEnv(t)
	twoPods(e)
	e.rt.err = errors.New("down")
	reg := e.p.ResourceGatherer()
	got := series(t, reg)
	if len(got) != 2 || metricValue(got["scrape_error{}"]) != 1 || metricValue(got["resource_scrape_error{}"]) != 1 {
		t.Errorf("series = %v, want only the scrape errors at 1", got)
	}
}

func TestResourceCollectorDuplicatePods(t *testing.T) {
	e := newEnv(t)
	// The same pod name twice (recreated with a new UID while the old
	// sandbox is still ready): one series, not a failed scrape.
	for _, uid := range []string{"uid-1", "uid-2"} {
		e.rt.addPod(podSpec{ns: "default", name: "web", uid: uid, state: ready, created: t0, containers: []ctrSpec{
			{name: "app", state: running, cpu: 1e9, ws: 1},
		}})
	}
	reg := e.p.ResourceGatherer()
	got := series(t, reg)
	if metricValue(got["scrape_error{}"]) != 0 {
		t.Error("scrape error")
	}
	if _, ok := got["pod_cpu_usage_seconds_total{namespace=default,pod=web}"]; !ok {
		t.Error("missing pod series")
	}
}
