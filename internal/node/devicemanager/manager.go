package devicemanager

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/base/metrics"
)

// The kubelet's names and periods.
const (
	// SocketName is the registration socket in the device plugin
	// directory.
	SocketName = "kubelet.sock"
	// EndpointStopGracePeriod is how long a resource whose plugin died
	// stays on the node (every device unhealthy) before it is removed.
	EndpointStopGracePeriod = 5 * time.Minute
)

// Options configure a Manager.
type Options struct {
	// Dir is the device plugin directory, <root-dir>/device-plugins.
	Dir string
}

// Deps are the Manager's collaborators.
type Deps struct {
	Clock clock.Clock
	Log   *slog.Logger
	// Metrics gets the kubelet's device plugin metrics; nil: none.
	Metrics prometheus.Registerer
	// Changed, when set, is called (without the manager's lock) when a
	// resource's devices or health changed, so that the node status is
	// sent again soon.
	Changed func()
}

// Manager is the device plugin manager. Construct with New; Run serves
// the registration socket.
type Manager struct {
	opts Options
	deps Deps
	log  *slog.Logger
	// loadOnce reads the checkpoint back, at the first use of the
	// manager (Run, an allocation, a question), so that nothing is
	// answered from before it, whether Run has started or not.
	loadOnce sync.Once

	mu        sync.Mutex
	resources map[string]*resourceState
	// removed are resources whose plugin stayed away past the grace
	// period: reported with zero capacity until one registers again.
	removed map[string]bool
	allocs  allocations

	registrations *prometheus.CounterVec
	allocDuration *prometheus.HistogramVec
}

// resourceState is one resource: its devices as its plugin last listed
// them, and the plugin.
type resourceState struct {
	// order is the devices' IDs in the plugin's order.
	order   []string
	devices map[string]*pluginapi.Device
	// plugin is the connected plugin; nil when none is (it died, or the
	// resource comes from the checkpoint of an earlier run).
	plugin *plugin
	// stoppedAt is when the resource lost its plugin.
	stoppedAt time.Time
}

func (r *resourceState) healthy() []string {
	if r.plugin == nil {
		return nil
	}
	var out []string
	for _, id := range r.order {
		if r.devices[id].GetHealth() == pluginapi.Healthy {
			out = append(out, id)
		}
	}
	return out
}

// New returns a Manager; it starts nothing.
func New(opts Options, deps Deps) *Manager {
	if deps.Clock == nil {
		deps.Clock = clock.RealClock{}
	}
	if deps.Log == nil {
		deps.Log = slog.New(slog.DiscardHandler)
	}
	return &Manager{opts: opts, deps: deps, log: deps.Log.With("component", "devicemanager"),
		resources: map[string]*resourceState{}, removed: map[string]bool{}, allocs: allocations{},
		registrations: metrics.Register(deps.Metrics, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kubelet_device_plugin_registration_total",
			Help: "Cumulative number of device plugin registrations. Broken down by resource name.",
		}, []string{"resource_name"})),
		allocDuration: metrics.Register(deps.Metrics, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "kubelet_device_plugin_alloc_duration_seconds",
			Help:    "Duration in seconds to serve a device plugin Allocation request. Broken down by resource name.",
			Buckets: prometheus.DefBuckets,
		}, []string{"resource_name"})),
	}
}

func (m *Manager) checkpointPath() string { return filepath.Join(m.opts.Dir, CheckpointFile) }

// Run reads the checkpoint back, serves the registration socket until ctx
// ends, then disconnects every plugin.
func (m *Manager) Run(ctx context.Context) error {
	m.loadOnce.Do(m.load)
	if err := os.MkdirAll(m.opts.Dir, 0o750); err != nil {
		return fmt.Errorf("device plugin directory: %w", err)
	}
	sock := filepath.Join(m.opts.Dir, SocketName)
	if err := os.Remove(sock); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove stale registration socket: %w", err)
	}
	lis, err := net.Listen("unix", sock)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", sock, err)
	}
	// Plugins run as root (privileged pods); nobody else registers.
	if err := os.Chmod(sock, 0o600); err != nil {
		_ = lis.Close()
		return fmt.Errorf("registration socket: %w", err)
	}
	srv := grpc.NewServer(grpc.MaxRecvMsgSize(maxMessage))
	pluginapi.RegisterRegistrationServer(srv, &registration{m: m, ctx: ctx})
	errc := make(chan error, 1) // Serve's one result
	go func() { errc <- srv.Serve(lis) }()
	m.log.Info("device plugin registration socket serving", "socket", sock)
	select {
	case <-ctx.Done():
		srv.Stop()
		<-errc
	case err = <-errc:
	}
	m.disconnectAll()
	if err != nil {
		return fmt.Errorf("serve %s: %w", sock, err)
	}
	return nil
}

// load reads the checkpoint: its allocations are kept, its resources are
// reported (every device unhealthy) until their plugins register again or
// the grace period ends. A checkpoint that cannot be read is logged and
// left for the next write to replace, as the kubelet continues.
func (m *Manager) load() {
	allocs, registered, err := readCheckpoint(m.checkpointPath())
	if err != nil {
		m.log.Error("device allocations of an earlier run are lost", "err", err)
		return
	}
	defer m.changed()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.allocs = allocs
	now := m.deps.Clock.Now()
	for name, ids := range registered {
		r := &resourceState{devices: map[string]*pluginapi.Device{}, stoppedAt: now}
		for _, id := range ids {
			r.order = append(r.order, id)
			r.devices[id] = &pluginapi.Device{ID: id, Health: pluginapi.Unhealthy}
		}
		m.resources[name] = r
	}
}

// registered is every resource's devices, for the checkpoint.
func (m *Manager) registeredLocked() map[string][]string {
	out := make(map[string][]string, len(m.resources))
	for name, r := range m.resources {
		out[name] = slices.Clone(r.order)
	}
	return out
}

func (m *Manager) checkpointLocked() error {
	return writeCheckpoint(m.checkpointPath(), m.allocs, m.registeredLocked())
}

func (m *Manager) changed() {
	if m.deps.Changed != nil {
		m.deps.Changed()
	}
}

// Capacity is the node's device plugin resources: capacity counts every
// device, allocatable the healthy ones of a connected plugin. A resource
// whose plugin has been away longer than EndpointStopGracePeriod is
// removed: it is reported at zero from then on, as the kubelet zeroes a
// removed resource in the Node.
func (m *Manager) Capacity() (capacity, allocatable v1.ResourceList) {
	m.loadOnce.Do(m.load)
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.deps.Clock.Now()
	capacity, allocatable = v1.ResourceList{}, v1.ResourceList{}
	gone := false
	for name, r := range m.resources {
		if r.plugin == nil && now.Sub(r.stoppedAt) > EndpointStopGracePeriod {
			delete(m.resources, name)
			m.removed[name] = true
			gone = true
			continue
		}
		capacity[v1.ResourceName(name)] = *resource.NewQuantity(int64(len(r.order)), resource.DecimalSI)
		allocatable[v1.ResourceName(name)] = *resource.NewQuantity(int64(len(r.healthy())), resource.DecimalSI)
	}
	for name := range m.removed {
		capacity[v1.ResourceName(name)] = *resource.NewQuantity(0, resource.DecimalSI)
		allocatable[v1.ResourceName(name)] = *resource.NewQuantity(0, resource.DecimalSI)
	}
	if gone {
		if err := m.checkpointLocked(); err != nil {
			m.log.Error("device checkpoint", "err", err)
		}
	}
	return capacity, allocatable
}

// Resources are the names of the resources plugins serve now (or served,
// within the grace period), sorted.
func (m *Manager) Resources() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Sorted(maps.Keys(m.resources))
}
