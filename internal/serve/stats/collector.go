package stats

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// collectTimeout bounds one scrape of the resource metrics.
const collectTimeout = 10 * time.Second

// resourceCollector is the kubelet's /metrics/resource: the CPU and memory
// summary as Prometheus metrics, one series per running container and
// ready pod, with the samples' own timestamps. It collects one summary
// (nil: the scrape failed).
type resourceCollector struct {
	*resourceDescs
	summary *v1alpha1.Summary
}

type resourceDescs struct {
	nodeCPU, nodeMemory                     *prometheus.Desc
	containerCPU, containerMemory, ctrStart *prometheus.Desc
	podCPU, podMemory                       *prometheus.Desc
	scrapeError, resourceScrapeError        *prometheus.Desc
}

func newResourceDescs() *resourceDescs {
	ctrLabels := []string{"container", "pod", "namespace"}
	podLabels := []string{"pod", "namespace"}
	return &resourceDescs{
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

// ResourceGatherer returns the gatherer of the kubelet's resource metrics
// (its /metrics/resource endpoint), built from the cached CPU-and-memory
// summary. The metric families are built once per cached summary and
// shared by the scrapes of its cache period; a failed scrape is not kept.
func (p *Provider) ResourceGatherer() prometheus.Gatherer {
	return &resourceGatherer{p: p, descs: newResourceDescs()}
}

type resourceGatherer struct {
	p     *Provider
	descs *resourceDescs

	// mu makes concurrent scrapes of a new summary build it once.
	mu       sync.Mutex
	snap     *snapshot
	families []*dto.MetricFamily
}

// Gather implements prometheus.Gatherer. The families returned are shared:
// callers must not modify them (promhttp does not).
func (g *resourceGatherer) Gather() ([]*dto.MetricFamily, error) {
	ctx, cancel := context.WithTimeout(context.Background(), collectTimeout)
	defer cancel()
	s, err := g.p.snapshot(ctx, true, false)
	if err != nil {
		g.p.log.Warn("resource metrics: no stats summary", "err", err)
		return g.gather(nil)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.snap == s {
		return g.families, nil
	}
	fams, err := g.gather(s.summary)
	if err != nil {
		return fams, err
	}
	g.snap, g.families = s, fams
	return fams, nil
}

// gather collects one summary through a registry of its own, which checks
// the series as any registry would.
func (g *resourceGatherer) gather(s *v1alpha1.Summary) ([]*dto.MetricFamily, error) {
	reg := prometheus.NewRegistry()
	if err := reg.Register(&resourceCollector{resourceDescs: g.descs, summary: s}); err != nil {
		return nil, fmt.Errorf("resource metrics: %w", err)
	}
	return reg.Gather()
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
	s := c.summary
	failed := 0.0
	if s == nil {
		failed = 1
	}
	ch <- prometheus.MustNewConstMetric(c.scrapeError, prometheus.GaugeValue, failed)
	ch <- prometheus.MustNewConstMetric(c.resourceScrapeError, prometheus.GaugeValue, failed)
	if s == nil {
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
