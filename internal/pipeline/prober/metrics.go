package prober

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodelet/nodelet/internal/base/metrics"
)

// Result label values of prober_probe_total, the kubelet's.
const (
	metricSuccessful = "successful"
	metricFailed     = "failed"
	metricUnknown    = "unknown" // the probe could not be run (errored)
)

// probeMetrics are the kubelet's probe metrics (its /metrics/probes).
type probeMetrics struct {
	total    *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// workerLabels are the label values of one worker's series.
type workerLabels struct {
	probeType, container, pod, namespace, podUID string
}

// newMetrics creates the metrics and registers them in reg; metrics already
// registered there by an earlier Manager are reused. A nil reg leaves them
// unregistered.
func newMetrics(reg prometheus.Registerer) *probeMetrics {
	return &probeMetrics{
		total: metrics.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: "prober",
			Name:      "probe_total",
			Help:      "Cumulative number of a liveness, readiness or startup probe for a container by result.",
		}, []string{"probe_type", "result", "container", "pod", "namespace", "pod_uid"})),
		duration: metrics.Register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Subsystem: "prober",
			Name:      "probe_duration_seconds",
			Help:      "Duration in seconds for a probe response.",
			Buckets:   prometheus.DefBuckets,
		}, []string{"probe_type", "container", "pod", "namespace"})),
	}
}

// observe counts one probe run; its duration is observed for successes and
// errors, not failures (which are often timeouts), as the kubelet does.
func (m *probeMetrics) observe(l workerLabels, out outcome, err error, d time.Duration) {
	res := metricSuccessful
	switch {
	case err != nil:
		res = metricUnknown
	case out == outcomeFailure:
		res = metricFailed
	}
	m.total.WithLabelValues(l.probeType, res, l.container, l.pod, l.namespace, l.podUID).Inc()
	if res != metricFailed {
		m.duration.WithLabelValues(l.probeType, l.container, l.pod, l.namespace).Observe(d.Seconds())
	}
}

// forget deletes a stopped worker's series.
func (m *probeMetrics) forget(l workerLabels) {
	for _, res := range []string{metricSuccessful, metricFailed, metricUnknown} {
		m.total.DeleteLabelValues(l.probeType, res, l.container, l.pod, l.namespace, l.podUID)
	}
	m.duration.DeleteLabelValues(l.probeType, l.container, l.pod, l.namespace)
}
