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

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
)

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
	drivers map[string]string // name → endpoint
	timeout time.Duration
}

// NewPlugins returns an empty set of drivers.
func NewPlugins() *Plugins {
	return &Plugins{drivers: map[string]string{}, timeout: callTimeout}
}

// RegisterPlugin records a driver that registered at endpoint and
// speaks one of versions, which must include the v1 DRAPlugin service
// (the kubelet's ValidatePlugin and RegisterPlugin).
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
	if !slices.Contains(versions, drapb.DRAPluginService) {
		return fmt.Errorf("invalid supported gRPC versions of DRA driver plugin %s at endpoint %s: none of services supported by the plugin (%q) are supported by nodelet (%q)",
			name, endpoint, versions, []string{drapb.DRAPluginService})
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.drivers[name] = endpoint
	return nil
}

// DeregisterPlugin drops the driver when endpoint is still its
// registration.
func (p *Plugins) DeregisterPlugin(name, endpoint string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.drivers[name] == endpoint {
		delete(p.drivers, name)
	}
}

// endpoint is the socket of the registered driver name; the error is the
// kubelet's words when there is none.
func (p *Plugins) endpoint(name string) (string, error) {
	if name == "" {
		return "", errors.New("DRA driver name is empty")
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	ep, ok := p.drivers[name]
	if !ok {
		return "", fmt.Errorf("DRA driver %s is not registered", name)
	}
	return ep, nil
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

// call connects to the driver for one call, bounded by the timeout.
func (p *Plugins) call(ctx context.Context, driver string, f func(context.Context, drapb.DRAPluginClient) error) error {
	ep, err := p.endpoint(driver)
	if err != nil {
		return err
	}
	conn, err := grpc.NewClient("unix://"+ep,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessage)),
	)
	if err != nil {
		return fmt.Errorf("connecting to DRA driver %s at %s: %w", driver, ep, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	return f(ctx, drapb.NewDRAPluginClient(conn))
}
