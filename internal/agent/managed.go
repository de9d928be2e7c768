package agent

import (
	"context"
	"fmt"

	"github.com/nodelet/nodelet/internal/managed/containerd"
	"github.com/nodelet/nodelet/internal/managed/registry"
	"github.com/nodelet/nodelet/internal/nodeconfig"
)

// managed is the runtime nodelet runs itself: the image registry and
// containerd.
type managed struct {
	endpoint   string
	containerd *containerd.Manager
	registry   *registry.Server
}

// startManaged seeds the image store, starts the registry on loopback and
// then containerd with the registry as its mirror, as m says. Both stop
// when ctx ends.
func (a *Agent) startManaged(ctx context.Context, m nodeconfig.ManagedConfig) (*managed, error) {
	log := a.deps.Log
	store, err := registry.OpenStore(registry.StoreDir(a.cfg.RootDir), log.With("component", "image-store"))
	if err != nil {
		return nil, fmt.Errorf("open image store: %w", err)
	}
	if _, err := registry.Seed(store, m.Images, log); err != nil {
		return nil, fmt.Errorf("build local images: %w", err)
	}
	reg := registry.NewServer(store, m.RegistryAddress, log)
	if err := reg.Start(ctx); err != nil {
		return nil, fmt.Errorf("start image registry: %w", err)
	}
	cfg := m.Containerd // its directory and cgroup driver filled in (nodeconfig.Config.ManagedRuntime)
	cfg.Mirror = reg.Addr()
	mgr := containerd.New(cfg, containerd.Deps{Clock: a.deps.Clock, Log: log.With("component", "containerd")})
	if err := mgr.Start(ctx); err != nil {
		_ = reg.Close()
		return nil, fmt.Errorf("start managed containerd: %w", err)
	}
	log.Info("managed runtime is up", "registry", reg.Addr(), "endpoint", cfg.Endpoint(),
		"inspect", "ctr --address "+cfg.Socket()+" -n k8s.io containers ls")
	return &managed{endpoint: cfg.Endpoint(), containerd: mgr, registry: reg}, nil
}

// stop ends the managed runtime's context with cancel, waits until
// containerd has stopped (bounded by containerd.StopTimeout) and stops the
// registry.
func (m *managed) stop(cancel context.CancelFunc) {
	cancel()
	<-m.containerd.Done()
	_ = m.registry.Close()
}
