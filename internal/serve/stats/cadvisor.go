package stats

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/pipeline/cri"
	"github.com/nodelet/nodelet/internal/pure/podspec"
)

// MetricsRuntime is the part of the CRI client the CRI metrics use.
type MetricsRuntime interface {
	ListPodSandbox(ctx context.Context, filter *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error)
	ListMetricDescriptors(ctx context.Context) ([]*runtimeapi.MetricDescriptor, error)
	ListPodSandboxMetrics(ctx context.Context) ([]*runtimeapi.PodSandboxMetrics, error)
}

// ErrNoCRIMetrics is why CRIMetrics has nothing to serve: the runtime
// does not implement ListMetricDescriptors or ListPodSandboxMetrics.
var ErrNoCRIMetrics = errors.New("the container runtime does not implement the CRI metrics calls (ListMetricDescriptors, ListPodSandboxMetrics): containerd 1.x does not, 2.x does")

// CRIMetrics is the kubelet's /metrics/cadvisor when it takes pod and
// container stats from the runtime (PodAndContainerStatsFromCRI): the
// metrics of ListPodSandboxMetrics, described by ListMetricDescriptors,
// for nodelet's ready pods. It is safe for concurrent use.
type CRIMetrics struct {
	rt  MetricsRuntime
	clk clock.PassiveClock
	log *slog.Logger

	mu sync.Mutex
	// descs are the runtime's descriptors by metric name, asked once
	// (nil: not yet known).
	descs map[string]*prometheus.Desc
	// unimplemented is when the runtime last answered Unimplemented
	// (zero: never); it is asked again after sandboxStatsRetry.
	unimplemented time.Time
	unimplErr     error
	// warned are the metric names already logged as not matching their
	// descriptor: one warning each, not one per scrape.
	warned map[string]bool
}

// NewCRIMetrics returns the CRI metrics of rt. Nothing is asked before
// the first use.
func NewCRIMetrics(rt MetricsRuntime, clk clock.PassiveClock, log *slog.Logger) *CRIMetrics {
	return &CRIMetrics{rt: rt, clk: clk, log: log}
}

// Unavailable returns an error wrapping ErrNoCRIMetrics when the runtime
// does not implement the CRI metrics calls (remembered for ten minutes),
// nil when it does or when that is not known (the runtime failed
// otherwise: Gather then says so).
func (m *CRIMetrics) Unavailable(ctx context.Context) error {
	_, err := m.descriptors(ctx)
	if errors.Is(err, ErrNoCRIMetrics) {
		return err
	}
	return nil
}

// descriptors returns the runtime's metric descriptors, asking it the
// first time (and again after an Unimplemented answer grew old).
func (m *CRIMetrics) descriptors(ctx context.Context) (map[string]*prometheus.Desc, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.descs != nil {
		return m.descs, nil
	}
	if !m.unimplemented.IsZero() && m.clk.Since(m.unimplemented) < sandboxStatsRetry {
		return nil, m.unimplErr
	}
	list, err := m.rt.ListMetricDescriptors(ctx)
	if err != nil {
		return nil, m.failed(err)
	}
	descs := make(map[string]*prometheus.Desc, len(list))
	for _, d := range list {
		if d.GetName() == "" {
			continue
		}
		descs[d.GetName()] = prometheus.NewDesc(d.GetName(), d.GetHelp(), d.GetLabelKeys(), nil)
	}
	m.descs = descs
	m.unimplemented = time.Time{}
	return descs, nil
}

// failed classifies a runtime error; call with mu held.
func (m *CRIMetrics) failed(err error) error {
	if !cri.IsUnimplemented(err) {
		return fmt.Errorf("cri metrics: %w", err)
	}
	if m.unimplemented.IsZero() {
		m.log.Info("runtime does not implement the CRI metrics calls; /metrics/cadvisor answers 404", "err", err)
	}
	m.unimplemented = m.clk.Now()
	m.unimplErr = fmt.Errorf("%w (%w)", ErrNoCRIMetrics, err)
	return m.unimplErr
}

// Gather implements prometheus.Gatherer: one ListPodSandboxMetrics and
// one ListPodSandbox (nodelet's ready sandboxes) per scrape. A metric the
// descriptors do not name, or with the wrong number of labels, is left
// out, as the kubelet does; a sample carries the runtime's timestamp
// when it has one.
func (m *CRIMetrics) Gather() ([]*dto.MetricFamily, error) {
	ctx, cancel := context.WithTimeout(context.Background(), collectTimeout)
	defer cancel()
	descs, err := m.descriptors(ctx)
	if err != nil {
		return nil, err
	}
	var (
		wg        sync.WaitGroup
		sandboxes []*runtimeapi.PodSandbox
		sbErr     error
	)
	wg.Go(func() {
		sandboxes, sbErr = m.rt.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{
			State:         &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY},
			LabelSelector: podspec.ManagedSelector(),
		})
	})
	pods, err := m.rt.ListPodSandboxMetrics(ctx)
	wg.Wait()
	if err != nil {
		m.mu.Lock()
		err = m.failed(err)
		m.mu.Unlock()
		return nil, err
	}
	if sbErr != nil {
		return nil, fmt.Errorf("cri metrics: %w", sbErr)
	}
	ours := make(map[string]bool, len(sandboxes))
	for _, sb := range sandboxes {
		if sb.GetState() == runtimeapi.PodSandboxState_SANDBOX_READY && podspec.IsManaged(sb.GetLabels()) {
			ours[sb.GetId()] = true
		}
	}
	reg := prometheus.NewRegistry()
	if err := reg.Register(&criCollector{descs: descs, pods: pods, ours: ours, log: m.log, dropped: m.dropped}); err != nil {
		return nil, fmt.Errorf("cri metrics: %w", err)
	}
	return reg.Gather()
}

// criCollector turns one ListPodSandboxMetrics answer into metrics. It
// is unchecked (it describes nothing): the descriptors are the runtime's.
type criCollector struct {
	descs map[string]*prometheus.Desc
	pods  []*runtimeapi.PodSandboxMetrics
	ours  map[string]bool
	log   *slog.Logger
	// dropped is told of a metric that does not match its descriptor.
	dropped func(name string, err error)
}

// dropped warns, once per metric name, that the runtime's metric does not
// match its own descriptor and is left out. containerd 2.2 does this for
// every metric (its descriptors name fewer label keys than its metrics
// carry values), so /metrics/cadvisor is empty there: the kubelet drops
// them too, logging an error per metric and scrape.
func (m *CRIMetrics) dropped(name string, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.warned[name] {
		return
	}
	if m.warned == nil {
		m.warned = map[string]bool{}
	}
	m.warned[name] = true
	m.log.Warn("runtime metric left out of /metrics/cadvisor: it does not match the runtime's descriptor", "name", name, "err", err)
}

func (c *criCollector) Describe(chan<- *prometheus.Desc) {}

func (c *criCollector) Collect(ch chan<- prometheus.Metric) {
	for _, pod := range c.pods {
		if !c.ours[pod.GetPodSandboxId()] {
			continue
		}
		for _, metric := range pod.GetMetrics() {
			c.send(ch, metric)
		}
		for _, ctr := range pod.GetContainerMetrics() {
			for _, metric := range ctr.GetMetrics() {
				c.send(ch, metric)
			}
		}
	}
}

func (c *criCollector) send(ch chan<- prometheus.Metric, m *runtimeapi.Metric) {
	desc, ok := c.descs[m.GetName()]
	if !ok {
		c.log.Debug("cri metrics: no descriptor", "name", m.GetName())
		return
	}
	typ := prometheus.GaugeValue
	if m.GetMetricType() == runtimeapi.MetricType_COUNTER {
		typ = prometheus.CounterValue
	}
	pm, err := prometheus.NewConstMetric(desc, typ, float64(m.GetValue().GetValue()), m.GetLabelValues()...)
	if err != nil {
		c.dropped(m.GetName(), err)
		return
	}
	if ts := m.GetTimestamp(); ts != 0 {
		pm = prometheus.NewMetricWithTimestamp(time.Unix(0, ts), pm)
	}
	ch <- pm
}
