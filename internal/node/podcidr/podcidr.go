// Package podcidr is beside the pipeline (node-level, every mode): the
// node's pod CIDRs, handed to the runtime as the kubelet's updatePodCIDR
// hands them (CRI UpdateRuntimeConfig, NetworkConfig.PodCidr, comma-joined
// for dual-stack) and, with the managed runtime, to its bridge network. In
// cluster mode they are the Node's spec.podCIDRs, as the controller
// manager allocates them (node status calls Apply at each computation);
// standalone, --pod-cidr once at start.
//
// Unlike the kubelet, CIDRs that change while pods on the pod network run
// are refused, not applied under them: a Warning event on the Node, a log
// line and kubelet_pod_cidr_changes_refused_total; they are applied once
// no such pod runs. The decision is podnet.DecidePodCIDRs (pure).
package podcidr

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/base/metrics"
	"github.com/nodelet/nodelet/internal/pure/podnet"
)

// Runtime is what the Manager asks of the CRI runtime (*cri.Client).
type Runtime interface {
	UpdateRuntimeConfig(ctx context.Context, cfg *runtimeapi.RuntimeConfig) error
	ListPodSandbox(ctx context.Context, filter *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error)
	PodSandboxStatus(ctx context.Context, id string) (*runtimeapi.PodSandboxStatusResponse, error)
}

// Network is the managed runtime's pod network (*containerd.Manager).
type Network interface {
	// SetPodCIDRs makes the network hand out pod IPs from cidrs; false
	// when a network configuration of someone else is in use instead.
	SetPodCIDRs(cidrs []string) (bool, error)
	// PodCIDRs are the CIDRs the network was last set to (across
	// restarts); nil when unknown.
	PodCIDRs() []string
}

// EventRecorder records events about the node (*events.Recorder).
type EventRecorder interface {
	NodeEvent(node, eventType, reason, message string)
}

// Event reasons of this package (nodelet's own: the kubelet applies every
// change).
const (
	ReasonChangeRefused = "PodCIDRChangeRefused"
	ReasonInvalid       = "InvalidPodCIDR"
)

// Deps are what the Manager works with.
type Deps struct {
	Runtime Runtime
	// Network is the managed runtime's network; nil with a runtime of the
	// node's own (--container-runtime-endpoint).
	Network Network
	// NodeName names the Node events are about.
	NodeName string
	// Events receives the refusals; nil: none.
	Events     EventRecorder
	Registerer prometheus.Registerer
	Clock      clock.Clock
	Log        *slog.Logger
}

// Manager hands the pod CIDRs to the runtime. Apply is safe to call from
// several goroutines.
type Manager struct {
	deps    Deps
	refused prometheus.Counter

	mu      sync.Mutex
	current []string // what the pod network has: last pushed, or the network's
	pushed  bool     // the runtime was told current by this process
	loaded  bool     // current was read from the network
	warned  string   // the last refused or invalid CIDRs reported
}

// New returns a Manager; it starts nothing.
func New(d Deps) *Manager {
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	if d.Clock == nil {
		d.Clock = clock.RealClock{}
	}
	return &Manager{deps: d, refused: metrics.Register(d.Registerer, prometheus.NewCounter(prometheus.CounterOpts{
		Subsystem: "kubelet", Name: "pod_cidr_changes_refused_total",
		Help: "Number of pod CIDR changes nodelet refused to apply while pods on the pod network ran (each distinct change counted once)",
	}))}
}

// PodCIDRs are the pod CIDRs the runtime was last given; nil before.
func (m *Manager) PodCIDRs() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.pushed {
		return nil
	}
	return slices.Clone(m.current)
}

// Apply hands wanted (the Node's spec.podCIDRs, or --pod-cidr) to the
// runtime when DecidePodCIDRs says so. A failure is logged and returned;
// the next Apply tries again.
func (m *Manager) Apply(ctx context.Context, wanted []string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.loaded && m.deps.Network != nil {
		m.current, m.loaded = m.deps.Network.PodCIDRs(), true
	}
	in := podnet.CIDRInput{Wanted: wanted, Current: m.current, Pushed: m.pushed}
	if len(wanted) > 0 && !slices.Equal(wanted, m.current) && len(m.current) > 0 {
		n, err := m.podsOnNetwork(ctx)
		if err != nil {
			// Not knowing is not "none": nothing changes this time.
			return fmt.Errorf("count the pods on the pod network before changing its CIDR: %w", err)
		}
		in.PodsOnNetwork = n
	}
	d := podnet.DecidePodCIDRs(in)
	switch d.Action {
	case podnet.CIDRKeep:
		return nil
	case podnet.CIDRInvalid, podnet.CIDRRefuse:
		m.report(d, wanted)
		return nil
	}
	return m.push(ctx, d)
}

// push tells the runtime and the managed network the CIDRs of d.
func (m *Manager) push(ctx context.Context, d podnet.CIDRDecision) error {
	cfg := &runtimeapi.RuntimeConfig{NetworkConfig: &runtimeapi.NetworkConfig{PodCidr: d.Joined()}}
	if err := m.deps.Runtime.UpdateRuntimeConfig(ctx, cfg); err != nil {
		m.deps.Log.Error("pod CIDR update failed", "podCIDR", d.Joined(), "err", err)
		return fmt.Errorf("update the runtime's pod CIDR to %s: %w", d.Joined(), err)
	}
	if m.deps.Network != nil {
		if _, err := m.deps.Network.SetPodCIDRs(d.CIDRs); err != nil {
			m.deps.Log.Error("pod CIDR update failed: the managed network", "podCIDR", d.Joined(), "err", err)
			return fmt.Errorf("set the managed network's pod CIDR to %s: %w", d.Joined(), err)
		}
	}
	m.deps.Log.Info("updating pod CIDR", "originalPodCIDR", strings.Join(m.current, ","), "newPodCIDR", d.Joined(), "why", d.Reason)
	m.current, m.pushed, m.warned = d.CIDRs, true, ""
	return nil
}

// report says once per distinct wanted CIDRs why they are not applied.
func (m *Manager) report(d podnet.CIDRDecision, wanted []string) {
	key := d.Action.String() + " " + strings.Join(wanted, ",")
	if m.warned == key {
		return
	}
	m.warned = key
	reason := ReasonInvalid
	if d.Action == podnet.CIDRRefuse {
		reason = ReasonChangeRefused
		m.refused.Inc()
	}
	m.deps.Log.Warn("pod CIDR not applied", "reason", reason, "podCIDRs", wanted, "why", d.Reason)
	if m.deps.Events != nil {
		m.deps.Events.NodeEvent(m.deps.NodeName, "Warning", reason, d.Reason)
	}
}

// podsOnNetwork counts the ready sandboxes that are not on the host's
// network namespace (the runtime's view: pods of an earlier nodelet count
// too). A sandbox whose status cannot be read counts.
func (m *Manager) podsOnNetwork(ctx context.Context) (int, error) {
	ready := &runtimeapi.PodSandboxFilter{State: &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY}}
	sandboxes, err := m.deps.Runtime.ListPodSandbox(ctx, ready)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, s := range sandboxes {
		st, err := m.deps.Runtime.PodSandboxStatus(ctx, s.GetId())
		if err == nil && st.GetStatus().GetLinux().GetNamespaces().GetOptions().GetNetwork() == runtimeapi.NamespaceMode_NODE {
			continue
		}
		n++
	}
	return n, nil
}

// staticRetry is how long RunStatic waits after a failed push.
const staticRetry = 10 * time.Second

// RunStatic hands cidrs (standalone: --pod-cidr) to the runtime once, as
// the kubelet does at start without an API client, trying again every
// 10 s until it succeeds or ctx ends. Without cidrs (cluster mode) it
// returns at once.
func (m *Manager) RunStatic(ctx context.Context, cidrs []string) {
	for len(cidrs) > 0 {
		if m.Apply(ctx, cidrs) == nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-m.deps.Clock.After(staticRetry):
		}
	}
}
