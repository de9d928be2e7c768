package agent

import (
	"context"
	"fmt"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/nodelet/nodelet/internal/apievents"
	"github.com/nodelet/nodelet/internal/certs"
	"github.com/nodelet/nodelet/internal/mirror"
	"github.com/nodelet/nodelet/internal/nodestatus"
	"github.com/nodelet/nodelet/internal/objects"
	"github.com/nodelet/nodelet/internal/statussync"
)

// apiServer is the node's connection to the API server (cluster mode).
type apiServer struct {
	certs *certs.Client
	rest  *rest.Config
	kube  kubernetes.Interface
}

// connect loads the node's API credentials, bootstrapping a client
// certificate first when it has none it can use (TLS bootstrap).
func (a *Agent) connect(ctx context.Context) (*apiServer, error) {
	cfg := a.cfg
	c, err := certs.LoadClient(ctx, certs.ClientConfig{
		Kubeconfig: cfg.Kubeconfig, BootstrapKubeconfig: cfg.BootstrapKubeconfig, CertDir: cfg.CertDirectory(),
		NodeName: cfg.NodeName, RotateCertificates: cfg.RotateCertificates,
		QPS: float32(cfg.KubeAPIQPS), Burst: int(cfg.KubeAPIBurst), ContentType: cfg.KubeAPIContentType,
	}, certs.Deps{Clock: a.deps.Clock, Log: a.deps.Log.With("component", "certs")})
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
// kubelet's: its own rate limit (eventRecordQPS, eventBurst), so events
// never hold back pod status patches.
func (s *apiServer) eventClient(qps, burst int32) (kubernetes.Interface, error) {
	c := rest.CopyConfig(s.rest)
	c.QPS, c.Burst = float32(qps), int(burst)
	if qps == 0 {
		c.QPS = -1
	}
	return kubernetes.NewForConfig(c)
}

// clusterParts are what cluster mode adds to the pipeline.
type clusterParts struct {
	api      *apiServer
	pods     cache.SharedIndexInformer
	watcher  *objects.Watcher
	services *objects.Services
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
	goRun(func() { c.node.Run(ctx) })
	goRun(func() { c.status.Run(ctx) })
	goRun(func() { c.mirrors.Run(ctx) })
	goRun(func() { c.events.Run(ctx) })
	goRun(func() {
		if err := c.api.certs.Run(ctx); err != nil && ctx.Err() == nil {
			fatal(err)
		}
	})
	if c.serving != nil {
		goRun(func() { c.serving.Run(ctx) })
	}
}
