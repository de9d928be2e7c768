package dra

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodelet/nodelet/internal/base/metrics"
)

// durationBuckets are the kubelet's DRA buckets: 0.1 s to 40 s (the calls'
// timeout is 45 s).
var durationBuckets = prometheus.ExponentialBucketsRange(.1, 40, 15)

// opMetrics are the kubelet's DRA metrics, with its names (subsystem
// "dra", no "kubelet_" prefix).
type opMetrics struct {
	// operations: PrepareResources and UnprepareResources of a pod.
	operations *prometheus.HistogramVec
	// grpc: each call to a driver.
	grpc *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) *opMetrics {
	return &opMetrics{
		operations: metrics.Register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Subsystem: "dra", Name: "operations_duration_seconds",
			Help:    "Latency histogram in seconds for the duration of handling all ResourceClaims referenced by a pod when the pod starts or stops. Identified by the name of the operation (PrepareResources or UnprepareResources) and separated by the success of the operation. The number of failed operations is provided through the histogram's overall count.",
			Buckets: durationBuckets,
		}, []string{"operation_name", "is_error"})),
		grpc: metrics.Register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Subsystem: "dra", Name: "grpc_operations_duration_seconds",
			Help:    "Duration in seconds of the DRA gRPC operations",
			Buckets: durationBuckets,
		}, []string{"driver_name", "method_name", "grpc_status_code"})),
	}
}
