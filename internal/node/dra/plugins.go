package dra

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	drapbv1beta1 "k8s.io/kubelet/pkg/apis/dra/v1beta1"
	"k8s.io/utils/clock"
)

// services are the DRAPlugin gRPC services nodelet speaks, as the kubelet
// v1.37: v1, and v1beta1 through the conversion of its messages.
var services = []string{drapb.DRAPluginService, drapbv1beta1.DRAPluginService}

// driver is one registration: where the driver listens and which
// service it is asked through.
type driver struct {
	endpoint, service string
}

// callTimeout bounds each call to a driver, the kubelet's default.
const callTimeout = 45 * time.Second

// maxMessage bounds what nodelet reads from a driver.
const maxMessage = 4 << 20

// Plugins are the registered DRA drivers, by name: the latest
// registration of a name wins, and a deregistration only removes the
// endpoint it names. Plugins is the plugin watcher's handler of type
// DRAPlugin (RegisterPlugin, DeregisterPlugin).
type Plugins struct {
	mu      sync.RWMutex
	drivers map[string]driver // by name
	timeout time.Duration
	clock   clock.PassiveClock
	metrics *opMetrics
}

// NewPlugins returns an empty set of drivers whose calls are timed on
// clk and observed in the kubelet's dra_grpc_operations_duration_seconds
// on reg (nil: not registered).
func NewPlugins(clk clock.PassiveClock, reg prometheus.Registerer) *Plugins {
	return &Plugins{drivers: map[string]driver{}, timeout: callTimeout, clock: clk, metrics: newMetrics(reg)}
}

// RegisterPlugin records a driver that registered at endpoint and
// speaks one of versions: the first of them that nodelet speaks (v1 or
// v1beta1 DRAPlugin) is used, as the kubelet's ValidatePlugin and
// RegisterPlugin choose.
func (p *Plugins) RegisterPlugin(_ context.Context, name, endpoint string, versions []string) error {
	if name == "" || len(name) > 253 || strings.ContainsAny(name, "/\x00 ") {
		return fmt.Errorf("invalid DRA driver name %q", name)
	}
	if !filepath.IsAbs(endpoint) {
		return fmt.Errorf("DRA driver %s: endpoint %q is not an absolute path", name, endpoint)
	}
	if len(versions) == 0 {
		return fmt.Errorf("invalid supported gRPC versions of DRA driver plugin %s at endpoint %s: empty list of supported gRPC services (aka supported versions)", name, endpoint)
	}
	i := slices.IndexFunc(versions, func(v string) bool { return slices.Contains(services, v) })
	if i < 0 {
		return fmt.Errorf("invalid supported gRPC versions of DRA driver plugin %s at endpoint %s: none of services supported by the plugin (%q) are supported by nodelet (%q)",
			name, endpoint, versions, services)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.drivers[name] = driver{endpoint: endpoint, service: versions[i]}
	return nil
}

// DeregisterPlugin drops the driver when endpoint is still its
// registration.
func (p *Plugins) DeregisterPlugin(name, endpoint string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.drivers[name].endpoint == endpoint {
		delete(p.drivers, name)
	}
}

// endpoint is the socket of the registered driver name; the error is the
// kubelet's words when there is none.
func (p *Plugins) endpoint(name string) (string, error) {
	d, err := p.driver(name)
	return d.endpoint, err
}

func (p *Plugins) driver(name string) (driver, error) {
	if name == "" {
		return driver{}, errors.New("DRA driver name is empty")
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	d, ok := p.drivers[name]
	if !ok {
		return driver{}, fmt.Errorf("DRA driver %s is not registered", name)
	}
	return d, nil
}

// prepare calls the driver's NodePrepareResources with claims.
func (p *Plugins) prepare(ctx context.Context, driver string, claims []*drapb.Claim) (*drapb.NodePrepareResourcesResponse, error) {
	var resp *drapb.NodePrepareResourcesResponse
	err := p.call(ctx, driver, func(ctx context.Context, c drapb.DRAPluginClient) (err error) {
		resp, err = c.NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{Claims: claims})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("NodePrepareResources: %w", err)
	}
	return resp, nil
}

// unprepare calls the driver's NodeUnprepareResources with claims.
func (p *Plugins) unprepare(ctx context.Context, driver string, claims []*drapb.Claim) (*drapb.NodeUnprepareResourcesResponse, error) {
	var resp *drapb.NodeUnprepareResourcesResponse
	err := p.call(ctx, driver, func(ctx context.Context, c drapb.DRAPluginClient) (err error) {
		resp, err = c.NodeUnprepareResources(ctx, &drapb.NodeUnprepareResourcesRequest{Claims: claims})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("NodeUnprepareResources: %w", err)
	}
	return resp, nil
}

// call connects to the driver for one call, bounded by the timeout; a
// v1beta1 driver's messages are converted.
func (p *Plugins) call(ctx context.Context, name string, f func(context.Context, drapb.DRAPluginClient) error) error {
	d, err := p.driver(name)
	if err != nil {
		return err
	}
	conn, err := grpc.NewClient("unix://"+d.endpoint,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessage)),
		grpc.WithChainUnaryInterceptor(p.observe(name)),
	)
	if err != nil {
		return fmt.Errorf("connecting to DRA driver %s at %s: %w", name, d.endpoint, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	var client drapb.DRAPluginClient = drapb.NewDRAPluginClient(conn)
	if d.service == drapbv1beta1.DRAPluginService {
		client = drapbv1beta1.V1Beta1ClientWrapper{DRAPluginClient: drapbv1beta1.NewDRAPluginClient(conn)}
	}
	return f(ctx, client)
}

// observe times each call to the driver, by method and status code.
func (p *Plugins) observe(name string) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		start := p.clock.Now()
		err := invoker(ctx, method, req, reply, cc, opts...)
		p.metrics.grpc.WithLabelValues(name, method, status.Code(err).String()).Observe(p.clock.Since(start).Seconds())
		return err
	}
}
