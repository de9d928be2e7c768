package agent

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/nodelet/nodelet/internal/base/events"
	"github.com/nodelet/nodelet/internal/base/notify"
	"github.com/nodelet/nodelet/internal/cluster/apievents"
	"github.com/nodelet/nodelet/internal/cluster/certs"
	"github.com/nodelet/nodelet/internal/cluster/mirror"
	"github.com/nodelet/nodelet/internal/cluster/nodestatus"
	"github.com/nodelet/nodelet/internal/cluster/objects"
	"github.com/nodelet/nodelet/internal/cluster/statussync"
	"github.com/nodelet/nodelet/internal/pipeline/cri"
	"github.com/nodelet/nodelet/internal/serve/stats"
)

// apiServer is the node's connection to the API server (cluster mode).
type apiServer struct {
	certs *certs.Client
	rest  *rest.Config
	kube  kubernetes.Interface
}

// connect loads the node's API credentials, bootstrapping a client
// certificate first when it has none it can use (TLS bootstrap); nil
// standalone.
func (a *Agent) connect(ctx context.Context) (*apiServer, error) {
	cc := a.cfg.APIClient()
	if cc == nil {
		return nil, nil // standalone
	}
	c, err := certs.LoadClient(ctx, *cc, certs.Deps{Clock: a.deps.Clock, Log: a.deps.Log.With("component", "certs")})
	if err != nil {
		return nil, err
	}
	restCfg := c.RESTConfig()
	kube, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return nil, fmt.Errorf("API client: %w", err)
	}
	return &apiServer{certs: c, rest: restCfg, kube: kube}, nil
}

// heartbeatClient is the client of node status and lease updates, as the
// kubelet's: a timeout of the shorter of the status period and the lease,
// and no rate limit, so heartbeats never queue behind pod status patches.
func (s *apiServer) heartbeatClient(statusEvery time.Duration, leaseSeconds int32) (kubernetes.Interface, error) {
	c := rest.CopyConfig(s.rest)
	c.Timeout = min(statusEvery, time.Duration(leaseSeconds)*time.Second)
	c.QPS, c.Burst = -1, 0
	return kubernetes.NewForConfig(c)
}

// eventClient is the client of the events sent to the API server, as the
// kubelet's: its own rate limit (nodeconfig.Config.EventRateLimit), so
// events never hold back pod status patches.
func (s *apiServer) eventClient(qps float32, burst int) (kubernetes.Interface, error) {
	c := rest.CopyConfig(s.rest)
	c.QPS, c.Burst = qps, burst
	return kubernetes.NewForConfig(c)
}

// clusterParts are what cluster mode adds to the pipeline.
type clusterParts struct {
	api      *apiServer
	pods     cache.SharedIndexInformer
	watcher  *objects.Watcher
	services *objects.Services
	classes  *objects.RuntimeClasses
	node     *nodestatus.Manager
	status   *statussync.Syncer
	mirrors  *mirror.Manager
	serving  *certs.Serving
	events   *apievents.Sink
}

// run starts cluster mode's parts; a failure that needs a restart (no
// usable client certificate any more) is sent on fatal.
func (c *clusterParts) run(ctx context.Context, goRun func(func()), fatal func(error)) {
	goRun(func() { c.pods.Run(ctx.Done()) })
	goRun(func() { c.watcher.Run(ctx) })
	goRun(func() { c.services.Run(ctx) })
	goRun(func() { c.classes.Run(ctx) })
	goRun(func() { c.node.Run(ctx) })
	goRun(func() { c.status.Run(ctx) })
	goRun(func() { c.mirrors.Run(ctx) })
	goRun(func() { c.events.Run(ctx) })
	goRun(func() {
		if err := c.api.certs.Run(ctx); err != nil {
			fatal(err)
		}
	})
	if c.serving != nil {
		goRun(func() { c.serving.Run(ctx) })
	}
}

// clusterNotifications connect cluster mode's parts to each other and to
// the pipeline's (see wire).
type clusterNotifications struct {
	nodeChanged   *notify.Kick // the graceful shutdown → the Node's status
	mirrorsWanted *notify.Kick // the status syncer → the mirror pods
	podsFinished  *notify.UIDs // the pod workers → the status syncer
}

// wireCluster constructs cluster mode's parts beside the pipeline p, in
// the order they call each other: the status syncer, the mirror pods (which
// tell it what they created), the Node and its lease (which tell it when
// the API server was away), the serving certificate.
func (a *Agent) wireCluster(c *clusterParts, p *pipeline, n clusterNotifications,
	rt *cri.Client, machine *stats.HostMachine, recorder *events.Recorder, reg *prometheus.Registry) error {
	cfg, log, clk, kube := a.cfg, a.deps.Log, a.deps.Clock, c.api.kube
	c.status = statussync.New(statussync.Deps{
		NodeName:       cfg.NodeName,
		Client:         kube,
		Statuses:       p.status,
		APIPods:        c.pods.GetStore(),
		Workers:        p.workers,
		APIPodsVersion: c.pods.LastSyncResourceVersion,
		KickMirrors:    n.mirrorsWanted.Kick,
		Finished:       n.podsFinished,
		Clock:          clk,
		Log:            log,
	})
	status := c.status
	if err := c.pods.SetWatchErrorHandler(func(*cache.Reflector, error) { status.Stale() }); err != nil {
		return err
	}
	c.mirrors = mirror.New(mirror.Deps{
		Client:      kube,
		NodeName:    cfg.NodeName,
		Sources:     p.config,
		APIPods:     c.pods.GetStore(),
		Created:     status.MirrorCreated,
		Terminating: p.workers.IsStaticPodTerminating,
		Kicks:       n.mirrorsWanted,
		Clock:       clk,
		Log:         log,
	})
	if _, err := c.pods.AddEventHandler(c.mirrors.Handler()); err != nil {
		return err
	}
	hb, err := c.api.heartbeatClient(cfg.NodeStatusUpdateFrequency, cfg.NodeLeaseDurationSeconds)
	if err != nil {
		return err
	}
	c.node, err = nodestatus.New(kube, cfg.NodeStatusOptions(), nodestatus.Deps{
		HeartbeatClient: hb,
		Runtime:         rt,
		Machine:         machine,
		PLEGHealthy:     p.pleg.Healthy,
		Pressure:        p.evict.Pressure,
		ShutdownStatus:  p.shutdown.Status,
		Changed:         n.nodeChanged,
		PodCIDRs:        p.podCIDR,
		VolumesInUse:    p.csiVolumes.VolumesInUse,
		Devices:         p.devices.Capacity,
		OnLeaseFailure:  status.Stale,
		Events:          recorder,
		Registerer:      reg,
		Clock:           clk,
		Log:             log,
	})
	if err != nil {
		return err
	}
	if sc := cfg.ServingCertificate(); sc != nil {
		c.serving, err = certs.NewServing(*sc, kube, certs.Deps{Clock: clk, Log: log})
		if err != nil {
			return err
		}
	}
	return nil
}
