package podresourcesapi

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodelet/nodelet/internal/base/metrics"
)

// apiVersion is the server_api_version label of every series.
const apiVersion = "v1"

// serverMetrics are the kubelet's pod-resources endpoint counters.
type serverMetrics struct {
	total, list, get, allocatable, listErrors, getErrors, allocatableErrors prometheus.Counter
}

func newServerMetrics(reg prometheus.Registerer) serverMetrics {
	counter := func(name, help string) prometheus.Counter {
		return metrics.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kubelet_" + name, Help: help},
			[]string{"server_api_version"})).WithLabelValues(apiVersion)
	}
	return serverMetrics{
		total: counter("pod_resources_endpoint_requests_total",
			"Cumulative number of requests to the PodResource endpoint. Broken down by server api version."),
		list: counter("pod_resources_endpoint_requests_list",
			"Number of requests to the PodResource List endpoint. Broken down by server api version."),
		get: counter("pod_resources_endpoint_requests_get",
			"Number of requests to the PodResource Get endpoint. Broken down by server api version."),
		allocatable: counter("pod_resources_endpoint_requests_get_allocatable",
			"Number of requests to the PodResource GetAllocatableResources endpoint. Broken down by server api version."),
		listErrors: counter("pod_resources_endpoint_errors_list",
			"Number of requests to the PodResource List endpoint which returned error. Broken down by server api version."),
		getErrors: counter("pod_resources_endpoint_errors_get",
			"Number of requests to the PodResource Get endpoint which returned error. Broken down by server api version."),
		allocatableErrors: counter("pod_resources_endpoint_errors_get_allocatable",
			"Number of requests to the PodResource GetAllocatableResources endpoint which returned error. Broken down by server api version."),
	}
}
