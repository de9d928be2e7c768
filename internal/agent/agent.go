// Package agent is the composition root: it wires the pipeline stages
// (sources → runtime manager → CRI) and the managed runtime together. New
// builds and starts nothing; Run starts every loop and returns when its
// context ends. Only cmd/nodelet imports it.
package agent

import (
	"context"
	"github.com/nodelet/nodelet/internal/node/podcidr"
	"log/slog"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/base/metrics"
	"github.com/nodelet/nodelet/internal/node/credprovider"
	"github.com/nodelet/nodelet/internal/nodeconfig"
	"github.com/nodelet/nodelet/internal/pipeline/cri"
)

// Deps are the agent's outside-world dependencies.
type Deps struct {
	Clock clock.WithTicker
	Log   *slog.Logger
	// NodeShutdown triggers a graceful node shutdown (cmd/nodelet: SIGPWR; see shutdown.Manager.Run).
	NodeShutdown <-chan bool
}

// Agent is a running node agent.
type Agent struct {
	cfg  nodeconfig.Config
	deps Deps
	// credentialProviders are the credential provider plugins, checked
	// at New; nil without --image-credential-provider-config.
	credentialProviders *credprovider.Config
}

// New checks cfg and returns an agent. It starts nothing.
func New(cfg nodeconfig.Config, deps Deps) (*Agent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	providers, err := cfg.CredentialProviders()
	if err != nil {
		return nil, err
	}
	if deps.Clock == nil {
		deps.Clock = clock.RealClock{}
	}
	if deps.Log == nil {
		deps.Log = slog.New(slog.DiscardHandler)
	}
	return &Agent{cfg: cfg, deps: deps, credentialProviders: providers}, nil
}

// Run brings up the runtime (managed or given), connects to it over CRI and
// runs the pipeline (sources → merge → sync loop → pod workers → runtime
// manager) until ctx ends. Pods keep running after Run returns.
//
// Every error returns promptly: the managed runtime is stopped on the way
// out (its shims, and so the pods, keep running), whether ctx ended or not.
func (a *Agent) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	endpoint := a.cfg.RuntimeEndpoint
	var network podcidr.Network // the managed runtime's pod network; nil with the node's own runtime
	if m := a.cfg.ManagedRuntime(); m != nil {
		managed, err := a.startManaged(ctx, *m)
		if err != nil {
			return err
		}
		defer managed.stop(cancel)
		endpoint, network = managed.endpoint, managed.containerd
	}
	// The kubelet's metrics registry comes first: the CRI client reports
	// every call to it from the start.
	reg := prometheus.NewRegistry()
	calls := metrics.NewRuntimeCalls(reg)
	rt, err := cri.Dial(ctx, endpoint, cri.DefaultTimeouts(), a.deps.Log, cri.WithObserver(calls.Observe))
	if err != nil {
		return err
	}
	defer rt.Close()
	api, err := a.connect(ctx) // nil standalone
	if err != nil {
		return err
	}
	p, err := a.wire(rt, api, network, reg)
	if err != nil {
		return err
	}
	var fatalErr error
	var once sync.Once
	p.run(ctx, func(err error) { once.Do(func() { fatalErr = err; cancel() }) })
	if fatalErr != nil {
		return fatalErr
	}
	a.deps.Log.Info("stopped; pods keep running")
	return nil
}
