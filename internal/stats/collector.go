package stats

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// collectTimeout bounds one scrape of the resource metrics.
const collectTimeout = 10 * time.Second

// resourceCollector is the kubelet's /metrics/resource: the CPU and memory
// summary as Prometheus metrics, one series per running container and
// ready pod, with the samples' own timestamps.
type resourceCollector struct {
	p *Provider

	nodeCPU, nodeMemory                     *prometheus.Desc
	containerCPU, containerMemory, ctrStart *prometheus.Desc
	podCPU, podMemory                       *prometheus.Desc
	scrapeError, resourceScrapeError        *prometheus.Desc
}

// ResourceCollector returns the collector of the kubelet's resource
// metrics (its /metrics/resource endpoint), built from the cached
// CPU-and-memory summary. Register it on the registry served there.
func (p *Provider) ResourceCollector() prometheus.Collector {
	ctrLabels := []string{"container", "pod", "namespace"}
	podLabels := []string{"pod", "namespace"}
	return &resourceCollector{
		p:                   p,
		nodeCPU:             prometheus.NewDesc("node_cpu_usage_seconds_total", "Cumulative cpu time consumed by the node in core-seconds", nil, nil),
		nodeMemory:          prometheus.NewDesc("node_memory_working_set_bytes", "Current working set of the node in bytes", nil, nil),
		containerCPU:        prometheus.NewDesc("container_cpu_usage_seconds_total", "Cumulative cpu time consumed by the container in core-seconds", ctrLabels, nil),
		containerMemory:     prometheus.NewDesc("container_memory_working_set_bytes", "Current working set of the container in bytes", ctrLabels, nil),
		ctrStart:            prometheus.NewDesc("container_start_time_seconds", "Start time of the container since unix epoch in seconds", ctrLabels, nil),
		podCPU:              prometheus.NewDesc("pod_cpu_usage_seconds_total", "Cumulative cpu time consumed by the pod in core-seconds", podLabels, nil),
		podMemory:           prometheus.NewDesc("pod_memory_working_set_bytes", "Current working set of the pod in bytes", podLabels, nil),
		scrapeError:         prometheus.NewDesc("scrape_error", "1 if there was an error while getting container metrics, 0 otherwise", nil, nil),
		resourceScrapeError: prometheus.NewDesc("resource_scrape_error", "1 if there was an error while getting container metrics, 0 otherwise", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *resourceCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		c.nodeCPU, c.nodeMemory, c.containerCPU, c.containerMemory, c.ctrStart,
		c.podCPU, c.podMemory, c.scrapeError, c.resourceScrapeError,
	} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *resourceCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), collectTimeout)
	defer cancel()
	var failed float64
	defer func() {
		ch <- prometheus.MustNewConstMetric(c.scrapeError, prometheus.GaugeValue, failed)
		ch <- prometheus.MustNewConstMetric(c.resourceScrapeError, prometheus.GaugeValue, failed)
	}()
	s, err := c.p.Summary(ctx, true)
	if err != nil {
		failed = 1
		c.p.log.Warn("resource metrics: no stats summary", "err", err)
		return
	}

	if cpu := s.Node.CPU; cpu != nil && cpu.UsageCoreNanoSeconds != nil {
		ch <- at(cpu.Time.Time, prometheus.MustNewConstMetric(c.nodeCPU, prometheus.CounterValue, seconds(*cpu.UsageCoreNanoSeconds)))
	}
	if mem := s.Node.Memory; mem != nil && mem.WorkingSetBytes != nil {
		ch <- at(mem.Time.Time, prometheus.MustNewConstMetric(c.nodeMemory, prometheus.GaugeValue, float64(*mem.WorkingSetBytes)))
	}
	// Two ready sandboxes of one pod name (a pod recreated while the old
	// one is going away) would give duplicate series, which fail the whole
	// scrape: the first wins.
	seenPods := make(map[[2]string]bool, len(s.Pods))
	for i := range s.Pods {
		pod := &s.Pods[i]
		key := [2]string{pod.PodRef.Namespace, pod.PodRef.Name}
		if seenPods[key] {
			continue
		}
		seenPods[key] = true
		c.collectPod(ch, pod)
	}
}

func (c *resourceCollector) collectPod(ch chan<- prometheus.Metric, pod *v1alpha1.PodStats) {
	name, ns := pod.PodRef.Name, pod.PodRef.Namespace
	seen := make(map[string]bool, len(pod.Containers))
	for i := range pod.Containers {
		ctr := &pod.Containers[i]
		if seen[ctr.Name] {
			continue
		}
		seen[ctr.Name] = true
		if ctr.StartTime.Unix() > 0 {
			ch <- prometheus.MustNewConstMetric(c.ctrStart, prometheus.GaugeValue,
				float64(ctr.StartTime.UnixNano())/float64(time.Second), ctr.Name, name, ns)
		}
		if cpu := ctr.CPU; cpu != nil && cpu.UsageCoreNanoSeconds != nil {
			ch <- at(cpu.Time.Time, prometheus.MustNewConstMetric(c.containerCPU, prometheus.CounterValue,
				seconds(*cpu.UsageCoreNanoSeconds), ctr.Name, name, ns))
		}
		if mem := ctr.Memory; mem != nil && mem.WorkingSetBytes != nil {
			ch <- at(mem.Time.Time, prometheus.MustNewConstMetric(c.containerMemory, prometheus.GaugeValue,
				float64(*mem.WorkingSetBytes), ctr.Name, name, ns))
		}
	}
	if cpu := pod.CPU; cpu != nil && cpu.UsageCoreNanoSeconds != nil {
		ch <- at(cpu.Time.Time, prometheus.MustNewConstMetric(c.podCPU, prometheus.CounterValue,
			seconds(*cpu.UsageCoreNanoSeconds), name, ns))
	}
	if mem := pod.Memory; mem != nil && mem.WorkingSetBytes != nil {
		ch <- at(mem.Time.Time, prometheus.MustNewConstMetric(c.podMemory, prometheus.GaugeValue,
			float64(*mem.WorkingSetBytes), name, ns))
	}
}

func at(t time.Time, m prometheus.Metric) prometheus.Metric {
	return prometheus.NewMetricWithTimestamp(t, m)
}

func seconds(ns uint64) float64 { return float64(ns) / float64(time.Second) }
