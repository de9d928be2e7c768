package devicemanager

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"time"

	"google.golang.org/grpc"
	v1 "k8s.io/api/core/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/nodelet/nodelet/internal/pure/podspec"
)

// Bounds of the conversation with plugins.
const (
	// maxMessage bounds every message nodelet reads from a plugin.
	maxMessage = 4 << 20
	// maxDevices bounds the devices of one resource, maxResources the
	// resources plugins may register.
	maxDevices   = 4096
	maxResources = 256
	// optionsTimeout bounds the registration's GetDevicePluginOptions.
	optionsTimeout = 10 * time.Second
	// callTimeout bounds Allocate and GetPreferredAllocation.
	callTimeout = 30 * time.Second
	// preStartTimeout is the kubelet's for PreStartContainer.
	preStartTimeout = pluginapi.KubeletPreStartContainerRPCTimeoutInSecs * time.Second
)

// plugin is the connection to one registered device plugin.
type plugin struct {
	resource string
	conn     *grpc.ClientConn
	client   pluginapi.DevicePluginClient
	opts     *pluginapi.DevicePluginOptions
	// stop ends the plugin's ListAndWatch.
	stop context.CancelFunc
}

// registration is the Registration service on kubelet.sock.
type registration struct {
	pluginapi.UnimplementedRegistrationServer
	m *Manager
	// ctx is Run's: the plugins' streams live as long as the manager.
	ctx context.Context
}

// Register validates a plugin's registration as the kubelet does,
// connects to the plugin and asks its options (a failure there is the
// registration's error, and the plugin is not used); its ListAndWatch is
// followed from then on, without the answer waiting for it.
func (r *registration) Register(ctx context.Context, req *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	// The kubelet counts every request, refused or not.
	r.m.registrations.WithLabelValues(req.GetResourceName()).Inc()
	p, err := r.m.connect(ctx, req)
	if err != nil {
		r.m.log.Warn("device plugin registration refused", "resource", req.GetResourceName(), "err", err)
		return nil, err
	}
	r.m.log.Info("device plugin registered", "resource", req.ResourceName, "endpoint", req.Endpoint)
	go r.m.follow(r.ctx, p)
	return &pluginapi.Empty{}, nil
}

func validate(req *pluginapi.RegisterRequest) error {
	if !slices.Contains(pluginapi.SupportedVersions[:], req.GetVersion()) {
		return fmt.Errorf("requested API version %q is not supported by kubelet. Supported versions are %q",
			req.GetVersion(), pluginapi.SupportedVersions)
	}
	if !podspec.IsExtendedResourceName(v1.ResourceName(req.GetResourceName())) {
		return fmt.Errorf("the ResourceName %q is invalid", req.GetResourceName())
	}
	// The plugin's socket is a name in the device plugin directory.
	if e := req.GetEndpoint(); e == "" || e != filepath.Base(e) || e == "." || e == ".." || e == SocketName {
		return fmt.Errorf("invalid name of device plugin socket: %q", e)
	}
	return nil
}

// connect validates req, dials the plugin and asks its options, as the
// kubelet's PluginConnected does: the options the plugin answers are the
// ones used, not those of the registration.
func (m *Manager) connect(ctx context.Context, req *pluginapi.RegisterRequest) (*plugin, error) {
	if err := validate(req); err != nil {
		return nil, err
	}
	m.mu.Lock()
	_, known := m.resources[req.ResourceName]
	full := !known && len(m.resources) >= maxResources
	m.mu.Unlock()
	if full {
		return nil, fmt.Errorf("too many device plugin resources (%d): %q refused", maxResources, req.ResourceName)
	}
	conn, err := dial(m.opts.Dir, req.Endpoint)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, optionsTimeout)
	defer cancel()
	opts, err := pluginapi.NewDevicePluginClient(conn).GetDevicePluginOptions(ctx, &pluginapi.Empty{})
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("failed to get device plugin options: %w", err)
	}
	return &plugin{resource: req.ResourceName, conn: conn, client: pluginapi.NewDevicePluginClient(conn), opts: opts}, nil
}

// follow makes p its resource's plugin (replacing an earlier one) and
// follows its ListAndWatch until it ends; the kubelet does not call it
// again: the plugin registers again if it wants to.
func (m *Manager) follow(ctx context.Context, p *plugin) {
	conn := p.conn
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	p.stop = stop
	// The resource is the node's from now on, without devices until the
	// plugin lists them.
	m.attach(p)
	defer func() {
		m.detach(p)
		_ = conn.Close()
	}()
	stream, err := p.client.ListAndWatch(ctx, &pluginapi.Empty{})
	if err != nil {
		m.log.Error("device plugin ListAndWatch", "resource", p.resource, "err", err)
		return
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			if !errors.Is(err, io.EOF) && ctx.Err() == nil {
				m.log.Warn("device plugin stream ended", "resource", p.resource, "err", err)
			}
			break
		}
		m.update(p, resp.GetDevices())
	}
}

// attach makes p its resource's plugin, stopping the one before.
func (m *Manager) attach(p *plugin) {
	m.mu.Lock()
	r := m.resources[p.resource]
	if r == nil {
		r = &resourceState{devices: map[string]*pluginapi.Device{}}
		m.resources[p.resource] = r
	}
	old := r.plugin
	r.plugin, r.stoppedAt = p, time.Time{}
	delete(m.removed, p.resource)
	m.mu.Unlock()
	if old != nil {
		old.stop()
	}
	m.changed()
}

// update records the devices a plugin listed. A list longer than
// maxDevices is cut there.
func (m *Manager) update(p *plugin, devices []*pluginapi.Device) {
	if len(devices) > maxDevices {
		m.log.Warn("device plugin lists too many devices; the rest are ignored", "resource", p.resource, "devices", len(devices), "max", maxDevices)
		devices = devices[:maxDevices]
	}
	m.mu.Lock()
	r := m.resources[p.resource]
	if r == nil || r.plugin != p {
		m.mu.Unlock()
		return
	}
	r.order, r.devices = nil, make(map[string]*pluginapi.Device, len(devices))
	for _, d := range devices {
		if _, dup := r.devices[d.GetID()]; dup || d.GetID() == "" {
			continue
		}
		r.order = append(r.order, d.GetID())
		r.devices[d.GetID()] = d
	}
	err := m.checkpointLocked()
	m.mu.Unlock()
	if err != nil {
		m.log.Error("device checkpoint", "err", err)
	}
	m.changed()
}

// detach marks p's resource as without plugin (every device unhealthy),
// unless another plugin has replaced p.
func (m *Manager) detach(p *plugin) {
	m.mu.Lock()
	r := m.resources[p.resource]
	current := r != nil && r.plugin == p
	if current {
		r.plugin, r.stoppedAt = nil, m.deps.Clock.Now()
	}
	m.mu.Unlock()
	if current {
		m.log.Warn("device plugin gone; its devices are unhealthy", "resource", p.resource)
		m.changed()
	}
}

func (m *Manager) disconnectAll() {
	m.mu.Lock()
	var ps []*plugin
	for _, r := range m.resources {
		if r.plugin != nil {
			ps = append(ps, r.plugin)
		}
	}
	m.mu.Unlock()
	for _, p := range ps {
		p.stop()
	}
}
