package podsource

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestManifestErrorsCounter(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := NewManifestErrorsCounter(reg)
	c.Inc(ReasonDecode)
	// A second source built on the same registry shares the counter.
	NewManifestErrorsCounter(reg).Inc(ReasonDecode)

	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		if f.GetName() != "nodelet_manifest_errors_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			got[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
		}
	}
	if got[ReasonDecode] != 2 {
		t.Errorf("decode = %v, want 2", got[ReasonDecode])
	}
	for _, r := range reasons() {
		if _, ok := got[r]; !ok {
			t.Errorf("reason %q not exported before its first error", r)
		}
	}
}
