package agent

import (
	"context"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/nodelet/nodelet/internal/base/events"
	"github.com/nodelet/nodelet/internal/base/logs"
	"github.com/nodelet/nodelet/internal/base/metrics"
	"github.com/nodelet/nodelet/internal/base/notify"
	"github.com/nodelet/nodelet/internal/cluster/apievents"
	"github.com/nodelet/nodelet/internal/cluster/claims"
	"github.com/nodelet/nodelet/internal/cluster/csinode"
	"github.com/nodelet/nodelet/internal/cluster/objects"
	"github.com/nodelet/nodelet/internal/cluster/token"
	"github.com/nodelet/nodelet/internal/node/allocation"
	"github.com/nodelet/nodelet/internal/node/cpumanager"
	"github.com/nodelet/nodelet/internal/node/credprovider"
	"github.com/nodelet/nodelet/internal/node/csi"
	"github.com/nodelet/nodelet/internal/node/devicemanager"
	"github.com/nodelet/nodelet/internal/node/dra"
	"github.com/nodelet/nodelet/internal/node/eviction"
	"github.com/nodelet/nodelet/internal/node/gc"
	"github.com/nodelet/nodelet/internal/node/imagegc"
	"github.com/nodelet/nodelet/internal/node/localnet"
	"github.com/nodelet/nodelet/internal/node/nodecreds"
	"github.com/nodelet/nodelet/internal/node/podcidr"
	"github.com/nodelet/nodelet/internal/node/podhooks"
	"github.com/nodelet/nodelet/internal/node/podresources"
	"github.com/nodelet/nodelet/internal/node/podresourcesapi"
	"github.com/nodelet/nodelet/internal/node/pulledimages"
	"github.com/nodelet/nodelet/internal/node/shutdown"
	"github.com/nodelet/nodelet/internal/node/userns"
	"github.com/nodelet/nodelet/internal/node/volume"
	"github.com/nodelet/nodelet/internal/nodeconfig"
	"github.com/nodelet/nodelet/internal/pipeline/cri"
	"github.com/nodelet/nodelet/internal/pipeline/housekeeping"
	"github.com/nodelet/nodelet/internal/pipeline/pleg"
	"github.com/nodelet/nodelet/internal/pipeline/podconfig"
	"github.com/nodelet/nodelet/internal/pipeline/podruntime"
	"github.com/nodelet/nodelet/internal/pipeline/podsource"
	"github.com/nodelet/nodelet/internal/pipeline/podworker"
	"github.com/nodelet/nodelet/internal/pipeline/prober"
	"github.com/nodelet/nodelet/internal/pipeline/statusmanager"
	"github.com/nodelet/nodelet/internal/pipeline/syncloop"
	"github.com/nodelet/nodelet/internal/pure/admission"
	"github.com/nodelet/nodelet/internal/pure/envvars"
	"github.com/nodelet/nodelet/internal/serve/podview"
	"github.com/nodelet/nodelet/internal/serve/server"
	"github.com/nodelet/nodelet/internal/serve/stats"
)

// pipeline is every part, constructed and connected, not yet started.
type pipeline struct {
	a       *Agent
	sources []podsource.Source
	objects *objects.Store
	config  *podconfig.Config
	loop    *syncloop.Loop
	workers *podworker.Workers
	pleg    *pleg.Generic
	prober  *prober.Manager
	gc      *gc.Collector
	images  *imagegc.Manager // unused images, by disk usage and age
	hk      *housekeeping.Housekeeper
	evict   *eviction.Manager
	watcher pleg.Watcher // nil with the EventedPLEG feature gate off
	// api serves the kubelet API and /healthz.
	api      server.Deps
	status   *statusmanager.Manager
	shutdown *shutdown.Manager
	localnet *localnet.Keeper // in every mode, as the kubelet
	// podCIDR hands the pod CIDRs to the runtime: the Node's (node
	// status applies them), standalone --pod-cidr at start.
	podCIDR *podcidr.Manager
	// devices is the device plugin manager; podResources the
	// pod-resources API over it.
	devices      *devicemanager.Manager
	podResources *podresourcesapi.Server
	// csiPlugins registers the CSI drivers of <root-dir>/plugins_registry.
	csiPlugins *csi.Watcher
	// csiVolumes publishes CSI volumes and gathers their stats.
	csiVolumes *csi.Mounter
	// cluster is cluster mode's parts; nil standalone.
	cluster *clusterParts
	// credentials are the credential provider plugins; nil without
	// --image-credential-provider-config.
	credentials *credprovider.Manager
	// cpus is the CPU manager (cpuManagerPolicy, topologyManagerPolicy).
	cpus *cpumanager.Manager
	rt   *cri.Client
}

// wire constructs every part over rt (and api, the API server in cluster
// mode; nil standalone; network, the managed runtime's pod network, nil
// with the node's own runtime) and connects them; reg is the registry of the
// kubelet's metrics, which rt already reports its calls to. It starts
// nothing. Each part is constructed after the parts it calls; two parts
// that tell each other something are connected by a notification (package
// notify) created before both.
func (a *Agent) wire(rt *cri.Client, api *apiServer, network podcidr.Network, reg *prometheus.Registry) (*pipeline, error) {
	cfg, log, clk := a.cfg, a.deps.Log, a.deps.Clock
	p := &pipeline{
		a:       a,
		objects: objects.NewStore(),
		watcher: pleg.WatcherFor(rt, cfg.EventedPLEG),
	}
	probeReg := prometheus.NewRegistry()
	// The graceful shutdown changes what the Node's status says; the
	// status syncer asks for mirror pods; the pod workers tell the status
	// syncer which pods finished (cluster mode; nil drops them).
	nodeChanged, mirrorsWanted := notify.NewKick(), notify.NewKick()
	var podsFinished *notify.UIDs

	// Cluster mode's connections: the pods bound to the node, the events
	// sent to the API server.
	var cl *clusterParts
	var apiPods cache.SharedIndexInformer
	var eventOpts []events.Option
	if api != nil {
		ec, err := api.eventClient(cfg.EventRateLimit())
		if err != nil {
			return nil, err
		}
		apiPods = podsource.NewNodePodInformer(api.kube, cfg.NodeName)
		cl = &clusterParts{
			api:    api,
			pods:   apiPods,
			events: apievents.New(ec, cfg.NodeName),
		}
		p.cluster = cl
		eventOpts = append(eventOpts, events.WithForwarder(cl.events))
		podsFinished = notify.NewUIDs()
	}
	recorder := events.New(events.DefaultMax, clk, log, eventOpts...)
	if cl != nil {
		server.WarnClusterAuthorization(recorder, cfg.NodeName, cfg.Listeners().Secure)
	}

	// 1-2. Sources and their merge; what they refuse is a node event.
	sources, names := podsource.NewSources(podsource.Config{
		NodeName:           cfg.NodeName,
		ManifestPath:       cfg.PodManifestPath,
		FileCheckFrequency: cfg.FileCheckFrequency,
		ManifestURL:        cfg.ManifestURL,
		ManifestHeader:     cfg.ManifestHTTPHeader(),
		HTTPCheckFrequency: cfg.HTTPCheckFrequency,
		APIPods:            apiPods,
	}, podsource.SourceDeps{
		Clock:   clk,
		Log:     log,
		Metrics: podsource.NewManifestErrorsCounter(reg),
		Events:  recorder,
	})
	p.sources = sources
	p.config = podconfig.New(names, clk, log)

	// Beside the pipeline: probes, status, metrics, stats.
	p.prober = prober.New(prober.Deps{
		Exec:     rt,
		GRPC:     cri.HealthChecker{},
		Clock:    clk,
		Log:      log,
		Metrics:  probeReg,
		Recorder: recorder,
	})
	p.status = statusmanager.New(log, p.prober)
	m := metrics.New(reg, p.status.Running, metrics.WithClock(clk))
	machine := stats.NewHostMachine()
	machine.PodCgroups = podresources.QoSTopCgroups(cfg.CgroupRoot)

	// 4. The per-pod resources, in the order they are prepared. Static
	// pods read the manifest directory's objects, API pods the API's.
	objs := objects.Router{Static: p.objects}
	volumeOpts := []volume.Option{volume.WithMountPropagation()}
	// Credential provider plugins in service account token mode get the
	// pod's token in cluster mode; standalone there is none.
	credentialDeps := credprovider.Deps{Clock: clk, Log: log, Recorder: recorder, Metrics: reg}
	var services podruntime.Services
	var classes podruntime.RuntimeClasses // standalone: none, and a pod naming a RuntimeClass does not start
	var registry podhooks.ObjectRegistry  // cluster mode: the objects a pod refers to are watched before its volumes are set up
	var csiAPI csi.API                    // cluster mode: CSIDriver and VolumeAttachment objects
	var csiListener csi.Listener          // cluster mode: the CSINode object and the Node's labels
	var resourceClaims dra.Claims         // cluster mode: standalone, a pod with resource claims does not start
	if cl != nil {
		csiAPI = csinode.Objects{Kube: api.kube}
		csiListener = csinode.New(api.kube, cfg.NodeName)
		cl.watcher = objects.NewWatcher(api.kube, p.objects.Notify, clk, log)
		registry = cl.watcher
		cl.services = objects.NewServices(api.kube)
		cl.classes = objects.NewRuntimeClasses(api.kube, clk)
		objs.API, services, classes = cl.watcher, cl.services, cl.classes
		tokens := token.New(api.kube.CoreV1(), clk, log)
		volumeOpts = append(volumeOpts, volume.WithTokens(tokens))
		volumeOpts = append(volumeOpts, volume.WithClaims(claims.New(api.kube.CoreV1())))
		resourceClaims = claims.NewResourceClaims(api.kube.ResourceV1())
		credentialDeps.Tokens, credentialDeps.ServiceAccounts = tokens, token.NewServiceAccounts(api.kube.CoreV1())
	}
	if a.credentialProviders != nil {
		p.credentials = credprovider.New(a.credentialProviders, credentialDeps)
	}
	downward := envvars.Downward{NodeName: cfg.NodeName, HostIP: cfg.NodeIP, Allocatable: cfg.Allocatable}
	csiDrivers := csi.NewRegistry()
	// DRA drivers register in the same directory as CSI drivers.
	draDrivers := dra.NewPlugins(clk, reg)
	p.csiPlugins = csi.NewWatcher(cfg.RootDir, csiDrivers, csiListener, clk, log, csi.WithHandler(registerapi.DRAPlugin, draDrivers))
	dynamicResources, err := dra.NewManager(cfg.RootDir, dra.Deps{Plugins: draDrivers, Claims: resourceClaims,
		Recorder: recorder, Log: log, Clock: clk, Metrics: reg})
	if err != nil {
		return nil, err
	}
	p.csiVolumes = csi.NewMounter(cfg.RootDir, cfg.NodeName, csiDrivers, csiAPI, objs, log)
	volumeOpts = append(volumeOpts, volume.WithCSI(p.csiVolumes))
	volumes := volume.New(cfg.RootDir, objs, downward, log, volumeOpts...)
	// The stats of the node, the pods and their volumes (CSI volumes'
	// from their drivers).
	statsProvider := stats.New(rt, machine, cfg.NodeName, cfg.RootDir, clk, log,
		stats.WithPodLogsDir(cfg.PodLogsDir), stats.WithServeStale(10*time.Second), stats.WithVolumes(p.csiVolumes),
		stats.WithDiskUsageTTL(cfg.VolumeStatsAggPeriod))
	if err := reg.Register(stats.NewVolumeMetrics(p.csiVolumes)); err != nil {
		return nil, err
	}
	cg, err := podresources.Setup(podresources.SetupConfig{
		CgroupsPerQOS:          cfg.CgroupsPerQOS,
		MountDir:               cfg.CgroupMountDir,
		CgroupRoot:             cfg.CgroupRoot,
		Kubepods:               cfg.KubepodsLimits(),
		Driver:                 cfg.CgroupDriver,
		PodPidsLimit:           cfg.PodPidsLimit,
		MemoryQoS:              cfg.MemoryQoS,
		MemoryThrottlingFactor: cfg.MemoryThrottlingFactor,
		NodeAllocatableMemory:  cfg.Allocatable.Memory().Value(),
		NodeName:               cfg.NodeName,
		Runtime:                rt,
		Events:                 recorder,
		Log:                    log,
	})
	if err != nil {
		return nil, err
	}
	// The CPU manager: admission allocates, the CPUs hook hands out the
	// cpusets, Run reconciles running containers.
	cpuOpts := cfg.CPUManagerOptions()
	cpuOpts.Clock, cpuOpts.Log = clk, log
	if p.cpus, err = cpumanager.New(cpuOpts); err != nil {
		return nil, err
	}
	p.rt = rt
	podsDir := filepath.Join(cfg.RootDir, "pods")
	// The node's image pull credentials: its docker config files, then
	// (in order) the credential provider plugins.
	nodeKeyring := nodecreds.New(nodecreds.DefaultOptions(cfg.RootDir), clk, log)
	// Device plugins register on <root-dir>/device-plugins; what a node
	// status says follows their devices at once.
	p.devices = devicemanager.New(devicemanager.Options{Dir: filepath.Join(cfg.RootDir, "device-plugins")},
		devicemanager.Deps{Clock: clk, Log: log, Metrics: reg, Changed: nodeChanged.Kick})
	uns := userns.New(cfg.UserNamespaceOptions(), userns.Deps{Runtime: rt, Log: log})
	hooks := []podworker.Hook{
		podhooks.PodDir{PodsDir: podsDir},
		podhooks.Cgroup{Cgroups: cg, NodeMemoryCapacity: cfg.MemoryCapacity, Swap: cfg.Swap(), Log: log}, // cg is an interface: nil stays nil
		podhooks.CPUs{Manager: p.cpus},
		podhooks.Objects{Registry: registry, Objects: objs},
		podhooks.PullSecrets{Secrets: objs, Node: nodeKeyring, Providers: p.credentials, Recorder: recorder},
		podhooks.UserNamespaces{Manager: uns, Recorder: recorder}, // hostUsers: false
		podhooks.Volumes{Volumes: volumes, Recorder: recorder},
		p.devices,
		dynamicResources, // resource claims: prepared by their DRA drivers, CDI devices
		podhooks.Probes{Prober: p.prober},
	}
	resources := housekeeping.Holders(hooks)

	// The image pull records (ensure-secret-pulled-images), which the
	// runtime manager asks before it uses an image present and the image
	// garbage collector prunes.
	pullRecords, err := pulledimages.New(cfg.PullRecordOptions(), pulledimages.Deps{Runtime: rt, Clock: clk, Log: log})
	if err != nil {
		return nil, err
	}

	// What each pod is allocated and was given (in-place resize), kept in
	// <root-dir>/allocated_pods_state across restarts.
	allocations, err := allocation.Open(filepath.Join(cfg.RootDir, allocation.FileName), log)
	if err != nil {
		return nil, err
	}
	allocator := allocation.NewManager(allocations, clk, recorder, reg)

	// 5. The runtime manager, and 4. the pod workers over it.
	runtime := podruntime.New(rt, podruntime.Options{
		PodLogsDir:           cfg.PodLogsDir,
		LegacyLogLinks:       true,
		HostIP:               cfg.NodeIP,
		NodeName:             cfg.NodeName,
		Allocatable:          cfg.Allocatable,
		PodsDir:              podsDir,
		HostResolvConf:       cfg.HostResolvConf,
		ClusterDNS:           cfg.ClusterDNS,
		ClusterDomain:        cfg.ClusterDomain,
		HostHosts:            cfg.HostHosts,
		SeccompRoot:          filepath.Join(cfg.RootDir, "seccomp"),
		MaxParallelSandboxes: cfg.MaxParallelSandboxes,
	}, podruntime.Deps{
		Clock:            clk,
		Log:              log,
		Status:           p.status,
		Recorder:         recorder,
		Services:         services,
		RuntimeClasses:   classes,
		PodStartDuration: m.PodStartDuration,
		PodStartStages:   m,
		Starts:           m,
		RuntimeFeatures:  cri.NewHandlerFeatures(rt, clk, log),
		Network:          cri.NewNetworkState(rt, clk, log),
		PullRecords:      pullRecords,
		ImageVolumes:     cri.NewImageVolumes(rt, clk, log),
		Resizes:          allocator,
	})
	// The sync loop resyncs every pod each SyncFrequency; the workers' own
	// resync is only a slow safety net, so pods are not synced twice.
	p.workers = podworker.New(podworker.Deps{
		Syncer:     runtime,
		Hooks:      hooks,
		Metrics:    m,
		OnFinished: podsFinished.Add,
		Clock:      clk,
		Log:        log,
	}, podworker.Options{ResyncInterval: 10 * cfg.SyncFrequency})
	p.pleg = pleg.New(runtime, cfg.PLEGRelistPeriod, clk, log,
		pleg.WithStreamMetrics(m),
		pleg.WithNodeEvents(cfg.NodeName, recorder),
		pleg.WithRelistObserver(func(d time.Duration) { m.PLEGRelistDuration.Observe(d.Seconds()) }),
		// The events of a pod's start come 5-75 ms apart (sandbox,
		// container created, started): one relist after them.
		pleg.WithEventSettle(100*time.Millisecond, time.Second))
	runtime.SetView(p.pleg)
	p.gc = gc.New(rt, gc.Policy{
		PodLogsDir:         cfg.PodLogsDir,
		MaxPerPodContainer: cfg.MaxPerPodContainer,
	}, gc.LogPolicy{
		MaxSize:         cfg.ContainerLogMaxSize,
		MaxFiles:        cfg.ContainerLogMaxFiles,
		MonitorInterval: cfg.ContainerLogMonitorInterval,
	}, clk, log)
	p.images, err = imagegc.New(cfg.ImageGC, []string{cfg.Managed.Containerd.SandboxImage}, imagegc.Deps{
		Runtime:    rt,
		Fs:         machine,
		Events:     recorder,
		NodeName:   cfg.NodeName,
		Registerer: reg,
		Records:    pullRecords,
		Clock:      clk,
		Log:        log,
	})
	if err != nil {
		return nil, err
	}
	// 3. Housekeeping, which eviction asks which pods are active.
	p.hk = housekeeping.New(housekeeping.Deps{
		Sources:     p.config,
		Workers:     p.workers,
		Runtime:     runtime,
		Observed:    p.pleg,
		Statuses:    p.status,
		Resources:   resources,
		Allocations: allocator,
		Observe:     func(d time.Duration) { m.HousekeepingDuration.Observe(d.Seconds()) },
		Clock:       clk,
		Log:         log,
	})

	// Beside: eviction under pressure, the graceful node shutdown, the
	// local network's firewall.
	thresholds, err := eviction.ParseThresholds(cfg.EvictionConfig())
	if err != nil {
		return nil, err
	}
	hk, containers := p.hk, p.gc
	p.evict = eviction.New(eviction.Options{
		Thresholds:                    thresholds,
		PressureTransitionPeriod:      cfg.EvictionPressureTransitionPeriod,
		MaxPodGracePeriodSeconds:      int64(cfg.EvictionMaxPodGracePeriod),
		NodeName:                      cfg.NodeName,
		LocalStorageCapacityIsolation: cfg.LocalStorageCapacityIsolation,
	}, eviction.Deps{
		Summary:           statsProvider,
		Workers:           p.workers,
		Statuses:          p.status,
		Recorder:          recorder,
		ActivePods:        hk.ActivePods,
		ReclaimContainers: func(ctx context.Context) error { return containers.ReclaimContainers(ctx, hk.PodActive) },
		ReclaimImages:     p.images.DeleteUnusedImages,
		Metrics:           reg,
		Clock:             clk,
		Log:               log,
	})
	p.shutdown = shutdown.New(cfg.ShutdownConfig(), shutdown.Deps{
		Workers:     p.workers,
		Statuses:    p.status,
		Sources:     p.config,
		Logind:      shutdown.ConnectLogind,
		NodeChanged: nodeChanged.Kick, // in cluster mode the Node follows at once
		Events:      recorder,
		Registerer:  reg,
		Clock:       clk,
		Log:         log,
	})
	p.localnet = localnet.New(localnet.Deps{
		Iptables:   localnet.Exec{},
		Events:     recorder,
		NodeName:   cfg.NodeName,
		Registerer: reg,
		Clock:      clk,
		Log:        log,
	})

	p.podCIDR = podcidr.New(podcidr.Deps{
		Runtime:    rt,
		Network:    network,
		NodeName:   cfg.NodeName,
		Events:     recorder,
		Registerer: reg,
		Clock:      clk,
		Log:        log,
	})

	// Cluster mode, beside the pipeline: pod statuses to the API, mirror
	// pods of static pods, the Node and its lease.
	var node func() *v1.Node
	if cl != nil {
		if err := a.wireCluster(cl, p, clusterNotifications{
			nodeChanged:   nodeChanged,
			mirrorsWanted: mirrorsWanted,
			podsFinished:  podsFinished,
		}, rt, machine, recorder, reg); err != nil {
			return nil, err
		}
		node = cl.node.Node
	}

	// 3. The sync loop.
	p.loop = syncloop.New(syncloop.Options{
		SyncFrequency: cfg.SyncFrequency,
		Resize:        cfg.ResizeNode(),
		Node: admission.Node{
			MaxPods:     cfg.MaxPods,
			Allocatable: cfg.Allocatable,
			AppArmor:    cfg.AppArmor,
		},
	}, syncloop.Deps{
		Workers:      p.workers,
		Rejector:     p.status,
		Recorder:     recorder,
		Seen:         p.status,
		Housekeeper:  p.hk,
		SourcesReady: p.config.SourcesReady,
		Node:         node,
		Pressure:     p.evict.Conditions,
		ShuttingDown: p.shutdown.ShuttingDown,
		// The kubelet's order of providers: devices, then CPUs.
		Allocators:          []syncloop.Allocator{p.devices, p.cpus},
		ExtendedAllocatable: p.devices.AdmissionAllocatable,
		Allocations:         allocator,
		Clock:               clk,
		Log:                 log,
	})

	// The pod-resources API, for monitoring agents.
	p.podResources = podresourcesapi.New(podresourcesapi.Options{Dir: filepath.Join(cfg.RootDir, "pod-resources")},
		podresourcesapi.Deps{Pods: p.hk, Providers: podresourcesapi.Providers{Devices: p.devices, CPUs: p.cpus, Dynamic: dynamicResources}, Log: log, Metrics: reg})

	// The kubelet API.
	relist := p.pleg
	health := []server.HealthCheck{{Name: "pleg", Check: func() error { _, err := relist.Healthy(); return err }}}
	view := podview.New(podview.Deps{Sources: p.config, Statuses: p.status, Pods: runtime, CRI: rt})
	p.api = server.Deps{
		Pods:           view,
		RunningPods:    view,
		Streaming:      view,
		Events:         recorder,
		Stats:          statsProvider,
		NodeConditions: p.evict.Conditions,
		Logs:           podview.Logs{Streamer: logs.NewStreamer(view, cfg.PodLogsDir, clk, log)},
		Metrics: server.Metrics{
			Kubelet:  reg,
			Probes:   probeReg,
			Resource: statsProvider.ResourceGatherer(),
			Cadvisor: stats.NewContainerMetrics(rt, machine, clk, log),
		},
		Configz:    nodeconfig.Configz(cfg),
		Health:     health,
		Log:        log,
		Clock:      clk,
		SystemLogs: cfg.SystemLogs(),
	}
	return p, nil
}

// run starts every part and returns when ctx ends and they have stopped.
// fatal ends the agent with an error that needs a restart.
func (p *pipeline) run(ctx context.Context, fatal func(error)) {
	var wg sync.WaitGroup
	goRun := func(f func()) {
		wg.Add(1)
		go func() { defer wg.Done(); f() }()
	}
	updates := make(chan podsource.Update) // unbuffered: sources block until merged
	for _, s := range p.sources {
		goRun(func() { s.Run(ctx, updates) })
	}
	merged := make(chan podsource.Update) // unbuffered, as updates
	goRun(func() { p.objects.Pass(ctx, updates, merged) })
	goRun(func() { p.config.Run(ctx, merged) })
	goRun(func() { p.localnet.Run(ctx) }) // first: its check takes milliseconds, a first sandbox far longer
	goRun(func() { p.podCIDR.RunStatic(ctx, p.a.cfg.StandalonePodCIDRs()) })
	goRun(func() { p.workers.Run(ctx) })
	goRun(func() {
		if err := p.csiPlugins.Run(ctx); err != nil {
			p.a.deps.Log.Error("CSI plugin registration stopped", "err", err)
		}
	})
	goRun(func() {
		if err := p.devices.Run(ctx); err != nil {
			p.a.deps.Log.Error("device plugin registration stopped", "err", err)
		}
	})
	goRun(func() {
		if err := p.podResources.Run(ctx); err != nil {
			p.a.deps.Log.Error("pod-resources API stopped", "err", err)
		}
	})
	goRun(func() { p.csiVolumes.RunStats(ctx, p.a.deps.Clock) })
	// Relist every PLEGRelistPeriod, or on every container event where the
	// runtime streams them (EventedPLEG; then every 5 minutes as a safety net).
	goRun(func() { p.pleg.RunEvented(ctx, p.watcher, 5*time.Minute) })
	goRun(func() { p.gc.Run(ctx, 0, p.hk.PodActive) })
	goRun(func() { p.images.Run(ctx) })
	goRun(func() { p.prober.Run(ctx) })
	goRun(func() { p.cpus.Run(ctx, p.rt) })
	goRun(func() { p.evict.Run(ctx) })
	goRun(func() { p.shutdown.Run(ctx, p.a.deps.NodeShutdown) })
	if p.cluster != nil {
		p.cluster.run(ctx, goRun, fatal)
	}
	p.serve(ctx, goRun)
	p.loop.Run(ctx, syncloop.Inputs{
		Config:    p.config.Updates(),
		PLEG:      p.pleg.Events(),
		Pods:      p.prober.Updates(),
		ResyncAll: p.objects.Changed(),
	})
	wg.Wait()
	p.hk.Wait()
}

// serve starts the HTTP servers that are configured.
func (p *pipeline) serve(ctx context.Context, goRun func(func())) {
	l := p.a.cfg.Listeners()
	if c := p.cluster; c != nil {
		l.Secure.Client = c.api.kube
		if c.serving != nil {
			l.Secure.GetCertificate = c.serving.GetCertificate
		}
	}
	server.ServeAll(ctx, l, p.api, p.a.deps.Clock, p.a.deps.Log, goRun)
}
