package server

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	body, _ := io.ReadAll(rec.Result().Body)
	return rec.Code, string(body)
}

func TestHealthz(t *testing.T) {
	healthy := HealthzHandler([]HealthCheck{{Name: "pleg", Check: func() error { return nil }}})
	if code, body := get(t, healthy, "/healthz"); code != 200 || body != "ok" {
		t.Errorf("healthy: %d %q", code, body)
	}
	if code, _ := get(t, healthy, "/metrics"); code != http.StatusNotFound {
		t.Errorf("healthz port served /metrics: %d", code)
	}
	sick := HealthzHandler([]HealthCheck{{Name: "pleg", Check: func() error { return errors.New("relist is 3m old") }}})
	if code, body := get(t, sick, "/healthz"); code != 500 || !strings.Contains(body, "pleg: relist is 3m old") {
		t.Errorf("unhealthy: %d %q", code, body)
	}
}

func TestReadOnlyMetrics(t *testing.T) {
	kubelet, probes := prometheus.NewRegistry(), prometheus.NewRegistry()
	kubelet.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "kubelet_test_total"}))
	probes.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "prober_test_total"}))
	h := ReadOnlyHandler(Deps{Metrics: Metrics{Kubelet: kubelet, Probes: probes}})
	if code, body := get(t, h, "/metrics"); code != 200 || !strings.Contains(body, "kubelet_test_total 0") || strings.Contains(body, "prober_test_total") {
		t.Errorf("/metrics: %d\n%s", code, body)
	}
	if code, body := get(t, h, "/metrics/probes"); code != 200 || !strings.Contains(body, "prober_test_total 0") {
		t.Errorf("/metrics/probes: %d\n%s", code, body)
	}
}

// The read-only port serves what reads the node's state, without
// authentication, and nothing that reaches into containers or the config.
func TestReadOnlyPaths(t *testing.T) {
	h := ReadOnlyHandler(Deps{Metrics: Metrics{Kubelet: prometheus.NewRegistry(), Probes: prometheus.NewRegistry()}})
	for _, path := range []string{"/configz", "/containerLogs/ns/pod/c", "/exec/ns/pod/c", "/events", "/debug/pprof/"} {
		if code, _ := get(t, h, path); code != http.StatusNotFound && code != http.StatusMethodNotAllowed {
			t.Errorf("%s: %d, want not served", path, code)
		}
	}
	if code, _ := get(t, h, "/pods"); code != http.StatusOK {
		t.Errorf("/pods: %d", code)
	}
	// Served, though this node has no stats to give.
	if code, body := get(t, h, "/stats/summary"); !strings.Contains(body, "stats are not available") {
		t.Errorf("/stats/summary: %d %q", code, body)
	}
}
