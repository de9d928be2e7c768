package allocation

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodelet/nodelet/internal/base/metrics"
)

// resizeMetrics are the kubelet's in-place resize metrics (v1.37 names,
// labels and help; the buckets of the duration are nodelet's).
type resizeMetrics struct {
	requested        *prometheus.CounterVec
	duration         *prometheus.HistogramVec
	infeasible       *prometheus.CounterVec
	deferredAccepted *prometheus.CounterVec
}

func newResizeMetrics(reg prometheus.Registerer, counts func() (deferred, infeasible, inProgress int)) *resizeMetrics {
	m := &resizeMetrics{
		requested: metrics.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: "kubelet",
			Name:      "container_requested_resizes_total",
			Help: "Number of requested resizes, counted at the container level. Different resources on the same container are counted separately. " +
				"The 'requirement' label refers to 'memory' or 'limits'; the 'operation' label can be one of 'add', 'remove', 'increase' or 'decrease'.",
		}, []string{"resource", "requirement", "operation"})),
		duration: metrics.Register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Subsystem: "kubelet",
			Name:      "pod_resize_duration_milliseconds",
			Help:      "Duration in milliseconds to actuate a pod resize",
			Buckets:   []float64{10, 50, 100, 500, 1000, 2000, 5000, 10000, 20000, 30000, 60000, 120000, 300000, 600000},
		}, []string{"success"})),
		infeasible: metrics.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: "kubelet",
			Name:      "pod_infeasible_resizes_total",
			Help:      "Number of infeasible resizes for pods, broken down by reason",
		}, []string{"reason_detail"})),
		deferredAccepted: metrics.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: "kubelet",
			Name:      "pod_deferred_accepted_resizes_total",
			Help:      "Cumulative number of resizes that were accepted after being deferred, broken down by the retry trigger",
		}, []string{"retry_trigger"})),
	}
	metrics.Register(reg, &pendingCollector{counts: counts})
	return m
}

var (
	pendingDesc = prometheus.NewDesc("kubelet_pod_pending_resizes",
		"Number of pending resizes for pods, broken down by reason (deferred or infeasible)", []string{"reason"}, nil)
	inProgressDesc = prometheus.NewDesc("kubelet_pod_in_progress_resizes",
		"Number of in-progress resizes for pods", nil, nil)
)

// pendingCollector reports the pods' resize conditions as they are at
// each scrape: kubelet_pod_pending_resizes{reason} (a reason with none is
// left out) and kubelet_pod_in_progress_resizes.
type pendingCollector struct {
	counts func() (deferred, infeasible, inProgress int)
}

func (c *pendingCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- pendingDesc
	ch <- inProgressDesc
}

func (c *pendingCollector) Collect(ch chan<- prometheus.Metric) {
	deferred, infeasible, inProgress := c.counts()
	if deferred > 0 {
		ch <- prometheus.MustNewConstMetric(pendingDesc, prometheus.GaugeValue, float64(deferred), "deferred")
	}
	if infeasible > 0 {
		ch <- prometheus.MustNewConstMetric(pendingDesc, prometheus.GaugeValue, float64(infeasible), "infeasible")
	}
	ch <- prometheus.MustNewConstMetric(inProgressDesc, prometheus.GaugeValue, float64(inProgress))
}
