package nodestatus

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodelet/nodelet/internal/base/metrics"
)

// registerMetrics registers the kubelet's kubelet_node_name: 1, labelled
// with the node's name.
func registerMetrics(reg prometheus.Registerer, node string) {
	if reg == nil {
		return
	}
	name := metrics.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Subsystem: "kubelet",
		Name:      "node_name",
		Help:      "The node's name. The count is always 1.",
	}, []string{"node"}))
	name.WithLabelValues(node).Set(1)
}
