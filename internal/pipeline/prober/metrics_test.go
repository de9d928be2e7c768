package prober

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/internal/base/testutil"
)

// gather returns the samples of the named metric family in reg as
// `{label="value",...} value` lines, sorted; histograms give their count.
// (prometheus/testutil needs a module this one's go.sum does not have.)
func gather(t *testing.T, reg *prometheus.Registry, name string) []string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			v := m.GetCounter().GetValue()
			if h := m.GetHistogram(); h != nil {
				v = float64(h.GetSampleCount())
			}
			out = append(out, fmt.Sprintf("{%s} %v", strings.Join(labels, ","), v))
		}
	}
	slices.Sort(out)
	return out
}

func TestMetrics(t *testing.T) {
	h := newHarness(t)
	pod := newPod("a", v1.Container{Name: "c", LivenessProbe: execProbe("live", nil)})
	h.m.AddPod(pod)
	h.run(pod, map[string]string{"c": "id1"})
	h.update()
	h.answer("live", 0, "")
	h.step(10 * time.Second)
	h.answer("live", 1, "")
	h.settle()

	want := []string{
		`{container="c",namespace="ns",pod="pod-a",pod_uid="a",probe_type="Liveness",result="failed"} 1`,
		`{container="c",namespace="ns",pod="pod-a",pod_uid="a",probe_type="Liveness",result="successful"} 1`,
	}
	if got := gather(t, h.reg, "prober_probe_total"); !slices.Equal(got, want) {
		t.Fatalf("prober_probe_total:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// Durations are observed for successes (and errors), not failures.
	want = []string{`{container="c",namespace="ns",pod="pod-a",probe_type="Liveness"} 1`}
	if got := gather(t, h.reg, "prober_probe_duration_seconds"); !slices.Equal(got, want) {
		t.Fatalf("prober_probe_duration_seconds:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// A removed pod's series go away.
	h.m.RemovePod(pod)
	testutil.Eventually(t, "series to be deleted", func() bool {
		return len(gather(t, h.reg, "prober_probe_total"))+len(gather(t, h.reg, "prober_probe_duration_seconds")) == 0
	})
}

func TestMetricsRegisterTwice(t *testing.T) {
	reg := prometheus.NewRegistry()
	a := newMetrics(reg)
	b := newMetrics(reg) // a second Manager on the same registry shares them
	if a.total != b.total || a.duration != b.duration {
		t.Fatal("metrics not reused")
	}
	newMetrics(nil) // unregistered
}
