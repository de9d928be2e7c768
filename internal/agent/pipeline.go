package agent

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodelet/nodelet/internal/admission"
	"github.com/nodelet/nodelet/internal/cri"
	"github.com/nodelet/nodelet/internal/events"
	"github.com/nodelet/nodelet/internal/gc"
	"github.com/nodelet/nodelet/internal/metrics"
	"github.com/nodelet/nodelet/internal/observed"
	"github.com/nodelet/nodelet/internal/pleg"
	"github.com/nodelet/nodelet/internal/podconfig"
	"github.com/nodelet/nodelet/internal/podresources"
	"github.com/nodelet/nodelet/internal/podruntime"
	"github.com/nodelet/nodelet/internal/podsource"
	"github.com/nodelet/nodelet/internal/podworker"
	"github.com/nodelet/nodelet/internal/prober"
	"github.com/nodelet/nodelet/internal/server"
	"github.com/nodelet/nodelet/internal/stats"
	"github.com/nodelet/nodelet/internal/syncloop"
	"github.com/nodelet/nodelet/internal/volume"
)

// pipeline is every stage of the pod pipeline, wired and not yet started.
type pipeline struct {
	sources []interface {
		Run(ctx context.Context, out chan<- podsource.Update)
	}
	config  *podconfig.Config
	loop    *syncloop.Loop
	workers *podworker.Workers
	runtime *podruntime.Manager
	pleg    *pleg.Generic
	rt      *cri.Client
	gc      *gc.Collector
	status  *statusStore
	events  *events.Recorder
	objects *objectStore
	metrics *metrics.Metrics
	stats   *stats.Provider
	// resourceRegistry serves /metrics/resource.
	resourceRegistry *prometheus.Registry
	volumes          *volume.Manager
	cgroups          *podresources.Manager // nil without pod cgroups
	prober           *prober.Manager
	registry         *prometheus.Registry
	// probeRegistry holds the prober's metrics, served at /metrics/probes.
	probeRegistry *prometheus.Registry
	log           *slog.Logger
	clock         clock.Clock
	cfg           Config

	// orphans are the pods being stopped in the background by
	// housekeeping; background waits for those goroutines.
	orphansMu  sync.Mutex
	orphans    map[types.UID]bool
	background sync.WaitGroup
}

// newPipeline wires the stages over rt. It starts nothing.
func (a *Agent) newPipeline(rt *cri.Client) *pipeline {
	log, clk := a.deps.Log, a.deps.Clock
	p := &pipeline{status: newStatusStore(log), registry: prometheus.NewRegistry(), log: log, rt: rt, orphans: map[types.UID]bool{}, cfg: a.cfg, clock: clk}
	manifestErrors := podsource.NewManifestErrorsCounter(p.registry)
	p.events = events.New(events.DefaultMax, clk, log) // before the sources: they record manifest problems
	var names []string
	if a.cfg.PodManifestPath != "" {
		p.sources = append(p.sources, podsource.NewFileSource(a.cfg.PodManifestPath, a.cfg.NodeName,
			a.cfg.FileCheckFrequency, clk, log, manifestErrors, p.events))
		names = append(names, podsource.SourceFile)
	}
	if a.cfg.ManifestURL != "" {
		header := http.Header{}
		for k, vs := range a.cfg.ManifestURLHeader {
			for _, v := range vs {
				header.Add(k, v)
			}
		}
		p.sources = append(p.sources, podsource.NewHTTPSource(a.cfg.ManifestURL, header, a.cfg.NodeName,
			a.cfg.HTTPCheckFrequency, clk, log, manifestErrors, p.events))
		names = append(names, podsource.SourceHTTP)
	}
	p.config = podconfig.New(names, clk, log)
	p.metrics = metrics.New(p.registry, p.status.running, metrics.WithClock(clk))
	rt.SetObserver(func(op string, took time.Duration, err error) {
		p.metrics.RuntimeOperations.WithLabelValues(op).Inc()
		p.metrics.RuntimeOperationsDuration.WithLabelValues(op).Observe(took.Seconds())
		if err != nil {
			p.metrics.RuntimeOperationsErrors.WithLabelValues(op).Inc()
		}
	})
	p.status.metrics, p.status.clock = p.metrics, clk
	p.stats = stats.New(rt, stats.NewHostMachine(), a.cfg.NodeName, a.cfg.RootDir, clk, log, stats.WithPodLogsDir(a.cfg.PodLogsDir), stats.WithServeStale(10*time.Second))
	p.resourceRegistry = prometheus.NewRegistry()
	p.resourceRegistry.MustRegister(p.stats.ResourceCollector())
	p.probeRegistry = prometheus.NewRegistry()
	p.prober = prober.New(prober.Deps{Exec: rt, GRPC: cri.HealthChecker{}, Clock: clk, Log: log, Metrics: p.probeRegistry, Recorder: p.events})
	p.objects = newObjectStore()
	p.volumes = volume.New(a.cfg.RootDir, p.objects, downward{nodeName: a.cfg.NodeName, hostIP: a.cfg.NodeIP, allocatable: a.cfg.Allocatable}, log)
	var cgroups podruntime.PodCgroups
	if a.cfg.CgroupRoot != "" {
		p.cgroups = podresources.NewManager(a.cfg.CgroupRoot, log)
		if err := p.cgroups.EnsureQoS(); err != nil {
			log.Warn("pods run without pod-level cgroups", "err", err)
			p.cgroups = nil
		} else {
			cgroups = p.cgroups
		}
	}
	resolvConf, _ := os.ReadFile("/etc/resolv.conf") // missing: the runtime's defaults, as the kubelet
	hosts, _ := os.ReadFile("/etc/hosts")
	p.runtime = podruntime.New(rt, podruntime.Options{
		PodLogsDir: a.cfg.PodLogsDir, HostIP: a.cfg.NodeIP, NodeName: a.cfg.NodeName, Allocatable: a.cfg.Allocatable,
		PodsDir: filepath.Join(a.cfg.RootDir, "pods"), HostResolvConf: resolvConf, HostHosts: hosts,
		SeccompRoot: filepath.Join(a.cfg.RootDir, "seccomp"), NodeMemoryCapacity: a.cfg.MemoryCapacity,
	}, podruntime.Deps{Clock: clk, Log: log, Status: p.status, Recorder: p.events, Probes: p.prober, Objects: p.objects, Cgroups: cgroups, Volumes: p.volumes,
		Observed: func(pod *v1.Pod, obs *observed.PodStatus) { bindProbes(p.prober, pod, obs, a.cfg.NodeIP) }})
	syncer := &podSyncer{rt: p.runtime, clock: clk, prober: p.prober, volumes: p.volumes, log: log, metrics: p.metrics}
	// The sync loop resyncs every pod each SyncFrequency; the workers' own
	// resync is only a slow safety net, so pods are not synced twice.
	p.workers = podworker.New(syncer, clk, log, podworker.Options{ResyncInterval: 10 * a.cfg.SyncFrequency})
	syncer.requeue = p.workers.RequeueAfter
	p.pleg = pleg.New(p.runtime, a.cfg.PLEGRelistPeriod, clk, log)
	p.pleg.RelistObserver = func(d time.Duration) { p.metrics.PLEGRelistDuration.Observe(d.Seconds()) }
	p.gc = gc.New(rt, gc.Policy{PodLogsDir: a.cfg.PodLogsDir, MaxPerPodContainer: a.cfg.MaxPerPodContainer}, gc.LogPolicy{
		MaxSize: a.cfg.ContainerLogMaxSize, MaxFiles: a.cfg.ContainerLogMaxFiles, MonitorInterval: a.cfg.ContainerLogMonitorInterval}, clk, log)
	p.loop = syncloop.New(syncloop.Options{
		SyncFrequency: a.cfg.SyncFrequency,
		Node:          admission.Node{MaxPods: a.cfg.MaxPods, Allocatable: a.cfg.Allocatable},
	}, clk, log, dispatcher{workers: p.workers, prober: p.prober}, p.status, p.housekeeping, p.config.SourcesReady)
	return p
}

// run starts every stage and returns when ctx ends and they have stopped.
func (p *pipeline) run(ctx context.Context) {
	var wg sync.WaitGroup
	goRun := func(f func()) {
		wg.Add(1)
		go func() { defer wg.Done(); f() }()
	}
	updates := make(chan podsource.Update) // unbuffered: sources block until merged
	for _, s := range p.sources {
		goRun(func() { s.Run(ctx, updates) })
	}
	merged := make(chan podsource.Update)     // unbuffered, as updates
	objectsChanged := make(chan types.UID, 1) // one pending "resync all" is enough
	goRun(func() { p.tapObjects(ctx, updates, merged, objectsChanged) })
	goRun(func() { p.config.Run(ctx, merged) })
	goRun(func() { p.workers.Run(ctx) })
	// Relist every PLEGRelistPeriod, or on every container event where the
	// runtime streams them (then relisting every 5 minutes as a safety net).
	goRun(func() { p.pleg.RunEvented(ctx, podruntime.EventWatcher{Stream: p.rt}, 5*time.Minute) })
	goRun(func() { p.gc.Run(ctx, 0, p.podActive) })
	goRun(func() { p.prober.Run(ctx) })
	checks := []server.HealthCheck{{Name: "pleg", Check: func() error { _, err := p.pleg.Healthy(); return err }}}
	if p.cfg.HealthzPort > 0 {
		addr := net.JoinHostPort(p.cfg.HealthzBindAddress, strconv.Itoa(p.cfg.HealthzPort))
		h := server.HealthzHandler(checks)
		goRun(func() {
			p.serveForever(ctx, addr, func(ctx context.Context) error { return server.Serve(ctx, addr, h, p.log) })
		})
	}
	if p.cfg.Port > 0 {
		scfg, deps, err := p.secureAPI()
		if err != nil {
			p.log.Error("the kubelet API is off", "err", err)
		} else {
			deps.Health = checks
			h, err := server.NewSecure(scfg, deps)
			if err != nil {
				p.log.Error("the kubelet API is off", "err", err)
			} else {
				tlsCfg := scfg.TLSConfig()
				goRun(func() {
					p.serveForever(ctx, scfg.Addr, func(ctx context.Context) error { return server.ServeTLS(ctx, scfg.Addr, tlsCfg, h, p.log) })
				})
			}
		}
	}
	if p.cfg.ReadOnlyPort > 0 {
		addr := net.JoinHostPort(p.cfg.Address, strconv.Itoa(p.cfg.ReadOnlyPort))
		h := server.ReadOnlyHandler(checks, server.Metrics{Kubelet: p.registry, Probes: p.probeRegistry, Resource: p.resourceRegistry})
		goRun(func() {
			p.serveForever(ctx, addr, func(ctx context.Context) error { return server.Serve(ctx, addr, h, p.log) })
		})
	}
	config := make(chan syncloop.ConfigUpdate) // unbuffered: handed over one by one
	goRun(func() { translateConfig(ctx, p.config.Updates(), config) })
	plegUIDs := make(chan types.UID, 1) // one pending event; the PLEG itself buffers
	goRun(func() { translatePLEG(ctx, p.pleg.Events(), plegUIDs) })
	podEvents := make(chan types.UID) // probe results and object changes, to the loop
	goRun(func() { fanIn(ctx, podEvents, p.prober.Updates(), p.resyncOnObjects(ctx, objectsChanged)) })
	p.loop.Run(ctx, config, plegUIDs, podEvents)
	wg.Wait()
	p.background.Wait()
}

// housekeeping, every 2 s once all sources have reported: pod workers
// forget or terminate pods no source wants, the statuses of those that
// have terminated are forgotten, and pods found in the runtime
// that nothing knows (left by an earlier nodelet) are stopped.
func (p *pipeline) housekeeping(ctx context.Context, desired map[types.UID]*v1.Pod) {
	want := make(map[types.UID]bool, len(desired))
	for uid := range desired {
		want[uid] = true
	}
	p.workers.SyncKnownPods(want)
	// A pod no source wants keeps its status until its containers have
	// stopped (its worker terminated it or never had it).
	p.status.ForgetGone(func(uid types.UID) bool { return want[uid] || p.workers.CouldHaveRunningContainers(uid) })
	running, err := p.runtime.RunningPods(ctx)
	if err != nil {
		p.log.Error("housekeeping: list pods in the runtime", "err", err)
		return
	}
	for uid, st := range running {
		if want[uid] || p.workers.CouldHaveRunningContainers(uid) || !hasRunning(st) {
			continue
		}
		p.killOrphan(ctx, uid, st)
	}
	p.removePodCgroups(want, running)
	// Volumes stay while a pod is wanted or has anything in the runtime
	// (its sandbox goes with garbage collection).
	active := map[types.UID]bool{}
	for uid := range want {
		active[uid] = true
	}
	for uid := range running {
		active[uid] = true
	}
	if err := p.volumes.CleanupOrphans(ctx, active); err != nil && ctx.Err() == nil {
		p.log.Warn("housekeeping: clean up volumes of gone pods", "err", err)
	}
}

// removePodCgroups removes the cgroups of pods that are gone; a cgroup
// still holding a container (not yet garbage-collected) is left for a
// later round.
func (p *pipeline) removePodCgroups(want map[types.UID]bool, running map[types.UID]*observed.PodStatus) {
	if p.cgroups == nil {
		return
	}
	uids, err := p.cgroups.Pods()
	if err != nil {
		p.log.Error("housekeeping: list pod cgroups", "err", err)
		return
	}
	for _, uid := range uids {
		if want[uid] || running[uid] != nil || p.workers.CouldHaveRunningContainers(uid) {
			continue
		}
		if err := p.cgroups.RemovePod(uid, ""); err != nil && !errors.Is(err, podresources.ErrPodCgroupBusy) {
			p.log.Warn("housekeeping: remove pod cgroup", "podUID", uid, "err", err)
		}
	}
}

// killOrphan stops, in the background, a pod found in the runtime that no
// source defines, giving its containers their recorded grace periods; the
// sync loop does not wait for it. One kill per pod at a time.
func (p *pipeline) killOrphan(ctx context.Context, uid types.UID, st *observed.PodStatus) {
	p.orphansMu.Lock()
	defer p.orphansMu.Unlock()
	if p.orphans[uid] {
		return
	}
	p.orphans[uid] = true
	name := st.Namespace + "/" + st.Name
	p.log.Info("stopping pod no source defines", "pod", name, "podUID", uid)
	p.background.Add(1)
	go func() {
		defer p.background.Done()
		if err := p.runtime.KillPod(ctx, uid, st.Name, st.Namespace); err != nil && ctx.Err() == nil {
			p.log.Error("stop orphaned pod", "pod", name, "err", err)
		}
		p.status.Forget(uid)
		p.orphansMu.Lock()
		delete(p.orphans, uid)
		p.orphansMu.Unlock()
	}()
}

// podActive tells garbage collection which pods may still run: before the
// sources are ready, all of them.
func (p *pipeline) podActive(uid types.UID) bool {
	if !p.config.SourcesReady() {
		return true
	}
	for _, pod := range p.config.Pods() {
		if pod.UID == uid {
			return true
		}
	}
	return p.workers.CouldHaveRunningContainers(uid)
}

func translateConfig(ctx context.Context, in <-chan podconfig.PodUpdate, out chan<- syncloop.ConfigUpdate) {
	for {
		select {
		case <-ctx.Done():
			return
		case u := <-in:
			op := syncloop.Reconcile
			switch u.Op {
			case podconfig.ADD:
				op = syncloop.Add
			case podconfig.UPDATE:
				op = syncloop.Update
			case podconfig.REMOVE, podconfig.DELETE:
				op = syncloop.Remove
			}
			select {
			case out <- syncloop.ConfigUpdate{Op: op, Pods: u.Pods}:
			case <-ctx.Done():
				return
			}
		}
	}
}

func translatePLEG(ctx context.Context, in <-chan pleg.Event, out chan<- types.UID) {
	for {
		select {
		case <-ctx.Done():
			return
		case e := <-in:
			if e.Type == pleg.ContainerRemoved {
				continue
			}
			select {
			case out <- e.PodUID:
			case <-ctx.Done():
				return
			}
		}
	}
}

// hasRunning reports whether anything of the pod runs.
func hasRunning(st *observed.PodStatus) bool {
	for _, s := range st.Sandboxes {
		if s.State == observed.SandboxReady {
			return true
		}
	}
	return len(st.Running()) > 0
}

// bindProbes tells the prober which container instance runs for each of
// the pod's containers, and the pod IP its HTTP and TCP probes target.
func bindProbes(pr *prober.Manager, pod *v1.Pod, obs *observed.PodStatus, nodeIP string) {
	running := map[string]prober.RunningContainer{}
	for _, c := range obs.Running() {
		if _, seen := running[c.Name]; !seen { // newest first
			running[c.Name] = prober.RunningContainer{ID: c.ID, StartedAt: c.StartedAt}
		}
	}
	ip := nodeIP
	if !pod.Spec.HostNetwork && len(obs.IPs) > 0 {
		ip = obs.IPs[0]
	}
	pr.SetContainers(pod, ip, running)
}

// serveForever runs serve until ctx ends; when the port cannot be had it
// logs why and tries again every 5 s, as the kubelet does: a busy port must
// not stop the pods.
func (p *pipeline) serveForever(ctx context.Context, addr string, serve func(context.Context) error) {
	for {
		err := serve(ctx)
		if ctx.Err() != nil {
			return
		}
		p.log.Error("HTTP server failed; retrying in 5s", "addr", addr, "err", err)
		select {
		case <-ctx.Done():
			return
		case <-p.clock.After(5 * time.Second):
		}
	}
}

// tapObjects passes source updates on to the merge, keeping the file
// source's ConfigMaps and Secrets in the object store; when they change,
// it asks for every pod to be synced (env and volumes refer to them).
func (p *pipeline) tapObjects(ctx context.Context, in <-chan podsource.Update, out chan<- podsource.Update, changed chan<- types.UID) {
	for {
		select {
		case <-ctx.Done():
			return
		case u := <-in:
			if u.Source == podsource.SourceFile && p.objects.replace(u.ConfigMaps, u.Secrets) {
				select {
				case changed <- "":
				default: // one is pending already
				}
			}
			select {
			case out <- u:
			case <-ctx.Done():
				return
			}
		}
	}
}

// resyncOnObjects turns "objects changed" into the UIDs of every desired
// pod.
func (p *pipeline) resyncOnObjects(ctx context.Context, changed <-chan types.UID) <-chan types.UID {
	out := make(chan types.UID) // unbuffered: handed to the fan-in one by one
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-changed:
				for _, pod := range p.config.Pods() {
					select {
					case out <- pod.UID:
					case <-ctx.Done():
						return
					}
				}
			}
		}
	}()
	return out
}

// fanIn forwards UIDs from every input to out until ctx ends.
func fanIn(ctx context.Context, out chan<- types.UID, ins ...<-chan types.UID) {
	var wg sync.WaitGroup
	for _, in := range ins {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-ctx.Done():
					return
				case uid := <-in:
					select {
					case out <- uid:
					case <-ctx.Done():
						return
					}
				}
			}
		}()
	}
	wg.Wait()
}
