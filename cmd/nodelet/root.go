package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/agent"
	"github.com/nodelet/nodelet/internal/base/bounded"
	"github.com/nodelet/nodelet/internal/cluster/nodestatus"
	"github.com/nodelet/nodelet/internal/managed/containerd"
	"github.com/nodelet/nodelet/internal/node/cpumanager"
	"github.com/nodelet/nodelet/internal/nodeconfig"
)

const defaultRootDir = "/var/lib/nodelet"

// rootOptions are the settings of `nodelet`: the configuration the flags
// are bound to, and the flags that are parsed before they go into it.
type rootOptions struct {
	cfg              nodeconfig.Config
	configFile       string
	hostnameOverride string
	verbosity        int
	pauseBinary      string
	containerdBinary string
	urlHeaders       []string
	logMaxSize       string
	nodeLabels       string
	taints           string
	systemReserved   string
	kubeReserved     string
	evictionHard     string
	evictionSoft     string
	evictionSoftGP   string
	evictionReclaim  string
	featureGates     gatesFlag
	runtimeHandlers  []string
	privateRegistry  string
}

// newRootCommand is `nodelet`: run the node agent in the foreground.
func newRootCommand(stdout, stderr io.Writer) *cobra.Command {
	cmd, _ := newRoot(stdout, stderr)
	return cmd
}

// newRoot is newRootCommand, with the options its flags fill in.
func newRoot(stdout, stderr io.Writer) (*cobra.Command, *rootOptions) {
	o := &rootOptions{cfg: nodeconfig.DefaultConfig(defaultRootDir)}
	cmd := &cobra.Command{
		Use:   "nodelet",
		Short: "Run Kubernetes pods on this machine the way the kubelet does",
		Long: `nodelet runs the pods of a manifest directory on this machine through a CRI
runtime. Without --container-runtime-endpoint it runs its own containerd and
a local image registry under --root-dir. With --kubeconfig it joins a
Kubernetes cluster as a node. --config reads a KubeletConfiguration file;
flags given on the command line override it.`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := newLogger(stderr, o.verbosity)
			cfg, err := o.config(cmd.Flags(), log)
			if err != nil {
				return err
			}
			a, err := agent.New(cfg, agent.Deps{Clock: clock.RealClock{}, Log: log, NodeShutdown: nodeShutdownSignals(cmd.Context())})
			if err != nil {
				return err
			}
			return a.Run(cmd.Context())
		},
	}
	cmd.SetOut(stdout)
	cmd.SetErr(stderr)
	cfg := &o.cfg
	cmd.PersistentFlags().StringVar(&cfg.RootDir, "root-dir", cfg.RootDir, "Directory for nodelet's state: pod volumes, the managed runtime, images")
	f := cmd.Flags()
	f.StringVar(&o.configFile, "config", "", "KubeletConfiguration file (kubelet.config.k8s.io/v1beta1); flags given on the command line override it")
	f.StringVar(&cfg.PodManifestPath, "pod-manifest-path", "", "Directory (or file) of static pod manifests to run")
	f.StringVar(&cfg.RuntimeEndpoint, "container-runtime-endpoint", "", "CRI endpoint, e.g. unix:///run/containerd/containerd.sock; empty runs a managed containerd under --root-dir")
	f.StringVar(&o.hostnameOverride, "hostname-override", "", "Node name to use instead of the hostname")
	f.DurationVar(&cfg.FileCheckFrequency, "file-check-frequency", cfg.FileCheckFrequency, "How often the manifest path is re-read")
	f.DurationVar(&cfg.SyncFrequency, "sync-frequency", cfg.SyncFrequency, "How often every pod is synced with the runtime")
	f.StringVar(&cfg.ManifestURL, "manifest-url", "", "URL of pod manifests to run, polled every --http-check-frequency")
	f.StringArrayVar(&o.urlHeaders, "manifest-url-header", nil, "HTTP headers for --manifest-url, as 'key:value,key2:value2' (repeatable)")
	f.DurationVar(&cfg.HTTPCheckFrequency, "http-check-frequency", cfg.HTTPCheckFrequency, "How often --manifest-url is polled")
	f.IntVar(&cfg.MaxPods, "max-pods", cfg.MaxPods, "Number of pods this node admits")
	f.IntVar(&cfg.MaxParallelSandboxes, "max-parallel-sandboxes", 2*runtime.NumCPU(),
		"Pod sandboxes created at once (0: no bound); more wait their turn")
	f.IntVar(&cfg.Port, "port", cfg.Port, "Port of the authenticated kubelet API (HTTPS; 0 disables it)")
	f.StringVar(&cfg.TLSCertFile, "tls-cert-file", "", "Serving certificate (default: self-signed, under --root-dir/pki)")
	f.StringVar(&cfg.TLSPrivateKeyFile, "tls-private-key-file", "", "Key of --tls-cert-file")
	f.StringVar(&cfg.ClientCAFile, "client-ca-file", "", "CA bundle that client certificates are verified against (the local admin CA is always trusted)")
	f.StringVar(&cfg.TokenAuthFile, "token-auth-file", "", "Static bearer tokens: token,user,uid,\"group1,group2\" per line")
	f.BoolVar(&cfg.AnonymousAuth, "anonymous-auth", false, "Let requests without credentials in as system:anonymous")
	f.StringVar(&cfg.AuthorizationMode, "authorization-mode", "",
		"Webhook (SubjectAccessReviews against the API server; the default with --kubeconfig, as the kubelet's config-file default), "+
			"NodeletGroups (system:masters may do anything, --authorization-read-group may read; the default standalone) "+
			"or AlwaysAllow (any authenticated client may do anything; refused with --anonymous-auth)")
	f.StringVar(&cfg.AuthorizationReadGroup, "authorization-read-group", "system:authenticated", "Group that may use the read-only paths (/pods, /stats, /metrics, /containerLogs, ...) in NodeletGroups mode")
	f.StringVar(&cfg.HealthzBindAddress, "healthz-bind-address", cfg.HealthzBindAddress, "Address of the healthz endpoint")
	f.IntVar(&cfg.HealthzPort, "healthz-port", cfg.HealthzPort, "Port of the healthz endpoint (0 disables it)")
	f.StringVar(&cfg.Address, "address", cfg.Address, "Address of the read-only port")
	f.StringVar(&cfg.CgroupMountDir, "cgroup-root-dir", cfg.CgroupMountDir, "Where cgroups are mounted (the v1 hierarchies or the v2 unified one); pod cgroups go under --cgroup-root there (empty: no pod cgroups)")
	f.StringVar(&cfg.CgroupRoot, "cgroup-root", cfg.CgroupRoot, "Cgroup the QoS hierarchy kubepods is made in, as a cgroupfs path with either driver (/nodelet-a: /nodelet-a/kubepods, or nodelet_a-kubepods.slice with systemd); it must exist. Several nodelets on one host each need their own")
	f.BoolVar(&cfg.CgroupsPerQOS, "cgroups-per-qos", cfg.CgroupsPerQOS, "Create the QoS and pod cgroups; nodelet refuses to start where it cannot (false: pods run without them)")
	f.StringVar(&cfg.CgroupDriver, "cgroup-driver", cfg.CgroupDriver, "cgroupfs or systemd; the runtime's own, when it tells it (CRI RuntimeConfig), wins")
	f.StringVar(&cfg.CPUManagerPolicy, "cpu-manager-policy", cfg.CPUManagerPolicy, "none, or static: CPUs of their own for the containers of Guaranteed pods with whole CPUs")
	f.DurationVar(&cfg.CPUManagerReconcilePeriod, "cpu-manager-reconcile-period", cfg.CPUManagerReconcilePeriod, "How often running containers' cpusets are brought in line with the CPU manager")
	f.StringVar(&cfg.ReservedSystemCPUs, "reserved-cpus", "", "CPUs (a list: 0,2-3) kept for the system and never given to a container exclusively; replaces the cpu of --system-reserved and --kube-reserved")
	f.StringVar(&cfg.TopologyManagerPolicy, "topology-manager-policy", cfg.TopologyManagerPolicy, "none, or single-numa-node: a container's exclusive CPUs all come from one NUMA node, or its pod is refused")
	f.BoolVar(&cfg.FailSwapOn, "fail-swap-on", cfg.FailSwapOn, "Refuse to start on a node with swap (/proc/swaps); false lets memorySwap.swapBehavior decide what pods get")
	f.Int64Var(&cfg.PodPidsLimit, "pod-max-pids", cfg.PodPidsLimit, "Most processes in a pod (cgroup v2 pids.max; -1: no limit)")
	f.IntVar(&cfg.ReadOnlyPort, "read-only-port", cfg.ReadOnlyPort, "Port serving /healthz and /metrics without authentication (0 disables it)")
	f.StringVar(&cfg.NodeIP, "node-ip", "", "IP reported as the pods' hostIP (default: the first non-loopback address)")
	f.IntVar(&cfg.MaxPerPodContainer, "maximum-dead-containers-per-container", cfg.MaxPerPodContainer, "Dead instances kept per container")
	f.StringVar(&o.logMaxSize, "container-log-max-size", "10Mi", "Size at which a container log is rotated")
	f.IntVar(&cfg.ContainerLogMaxFiles, "container-log-max-files", cfg.ContainerLogMaxFiles, "Log files kept per container, the current one included")
	f.DurationVar(&cfg.ContainerLogMonitorInterval, "container-log-monitor-interval", cfg.ContainerLogMonitorInterval, "How often container logs are checked for rotation")
	f.DurationVar(&cfg.VolumeStatsAggPeriod, "volume-stats-agg-period", cfg.VolumeStatsAggPeriod, "How long a measured disk usage of volumes and logs is used before it is measured again")
	f.BoolVar(&cfg.LocalStorageCapacityIsolation, "local-storage-capacity-isolation", cfg.LocalStorageCapacityIsolation, "Report ephemeral-storage capacity, admit by ephemeral-storage requests and evict pods over their ephemeral-storage limits or emptyDir size limits")
	f.StringVar(&cfg.PodLogsDir, "pod-logs-dir", cfg.PodLogsDir, "Directory of container logs (CRI layout)")
	f.StringVar(&cfg.ResolvConf, "resolv-conf", cfg.ResolvConf, "Resolver configuration the pods' DNS configuration starts from (empty: none)")
	f.StringVar(&cfg.ClusterDomain, "cluster-domain", "", "The cluster's DNS domain, searched by pods with dnsPolicy ClusterFirst")
	f.StringSliceVar(&cfg.ClusterDNS, "cluster-dns", nil, "IP addresses of the cluster's DNS servers, for pods with dnsPolicy ClusterFirst (comma-separated)")
	f.StringVar(&o.systemReserved, "system-reserved", "", "Resources kept from pods for the system, e.g. cpu=200m,memory=500Mi,ephemeral-storage=1Gi")
	f.StringVar(&o.kubeReserved, "kube-reserved", "", "Resources kept from pods for nodelet and the runtime, as --system-reserved")
	f.StringVar(&o.evictionHard, "eviction-hard", "", "Hard eviction thresholds, e.g. memory.available<100Mi,nodefs.available<10% (default: the kubelet's)")
	f.StringVar(&o.evictionSoft, "eviction-soft", "", "Soft eviction thresholds, e.g. memory.available<1.5Gi; each needs a grace period")
	f.StringVar(&o.evictionSoftGP, "eviction-soft-grace-period", "", "How long each soft threshold must be met before it evicts, e.g. memory.available=1m30s")
	f.StringVar(&o.evictionReclaim, "eviction-minimum-reclaim", "", "What an eviction reclaims beyond a threshold, e.g. memory.available=0Mi,nodefs.available=500Mi")
	f.DurationVar(&cfg.EvictionPressureTransitionPeriod, "eviction-pressure-transition-period", cfg.EvictionPressureTransitionPeriod, "How long a pressure condition stays after its threshold was last met")
	f.Int32Var(&cfg.EvictionMaxPodGracePeriod, "eviction-max-pod-grace-period", cfg.EvictionMaxPodGracePeriod, "Longest grace period, in seconds, of a pod evicted under a soft threshold")
	f.IntVar(&cfg.ImageGC.HighThresholdPercent, "image-gc-high-threshold", cfg.ImageGC.HighThresholdPercent, "Percent of the image filesystem's disk in use at which unused images are removed (100: never)")
	f.IntVar(&cfg.ImageGC.LowThresholdPercent, "image-gc-low-threshold", cfg.ImageGC.LowThresholdPercent, "Percent of the image filesystem's disk in use that removing images brings it down to")
	f.DurationVar(&cfg.ImageGC.MinAge, "minimum-image-gc-age", cfg.ImageGC.MinAge, "How long an image must have been on the node before disk usage may remove it")
	f.StringVar(&cfg.ImageCredentialProviderConfig, "image-credential-provider-config", "",
		"Credential provider plugin configuration: a CredentialProviderConfig file (JSON/YAML) or a directory of them (merged in name order); needs --image-credential-provider-bin-dir")
	f.StringVar(&cfg.ImageCredentialProviderBinDir, "image-credential-provider-bin-dir", "",
		"Directory of the credential provider plugins' binaries (not world-writable; each plugin a regular executable file in it)")
	f.StringVar(&cfg.Managed.Containerd.PodCIDR, "pod-cidr", cfg.Managed.Containerd.PodCIDR, "Pod IP range of the managed runtime's bridge network, standalone (IPv4 or IPv6). In cluster mode the Node's spec.podCIDRs are used instead, as the controller manager allocates them (--allocate-node-cidrs)")
	f.StringVar(&cfg.Managed.CNIConfDir, "cni-conf-dir", "", "CNI configuration directory of the managed runtime; nodelet writes its bridge network there only when it holds no network configuration (default /etc/cni/net.d in cluster mode, <root-dir>/containerd/cni/net.d standalone)")
	f.StringVar(&cfg.Managed.CNIBinDir, "cni-bin-dir", "", "Comma-separated CNI plug-in directories of the managed runtime, searched in order; containerd 1.x uses the first that holds the bridge plug-in (default /opt/cni/bin,/usr/lib/cni in cluster mode, /usr/lib/cni standalone)")
	f.StringVar(&cfg.Managed.Containerd.BridgeName, "cni-bridge-name", cfg.Managed.Containerd.BridgeName, "Linux bridge of the managed runtime's network")
	f.StringArrayVar(&o.runtimeHandlers, "runtime-handler", nil,
		"A runtime handler of the managed containerd beside runc, for RuntimeClasses to name (repeatable): name=NAME[,type=RUNTIME_TYPE][,binary=PATH], "+
			"containerd's runtime name, runtime_type (default io.containerd.runc.v2) and, for runc's shim, the OCI runtime binary it runs instead of runc (options.BinaryName), "+
			"e.g. name=crun,binary=/usr/bin/crun or name=gvisor,type=io.containerd.runsc.v1")
	f.StringVar(&o.privateRegistry, "private-registry", "",
		"Registries file of the managed containerd, as k3s's registries.yaml: mirrors (endpoints tried after the node's own images, before the registry), "+
			"and per registry host credentials and TLS (CA, client certificate, insecure_skip_verify); the file must be root's and not world-writable "+
			"(default <root-dir>/registries.yaml, when it exists)")
	f.StringVar(&cfg.Managed.RegistryAddress, "image-registry-address", cfg.Managed.RegistryAddress, "Loopback address of the managed image registry (port 0 picks a free one)")
	f.StringVar(&o.pauseBinary, "pause-binary", "", "Program the pause image is built from (default: 'pause' next to the nodelet binary, then PATH)")
	f.StringVar(&o.containerdBinary, "containerd-binary", "", "containerd of the managed runtime, 2.x or 1.6/1.7; its runc shim is looked up in its directory first (default: 'containerd' next to the nodelet binary, as make build puts it, then PATH)")
	f.StringVar(&cfg.Managed.Images.BusyboxBinary, "busybox-binary", cfg.Managed.Images.BusyboxBinary, "Static busybox the busybox image is built from")
	o.featureGates = gatesFlag{}
	f.Var(o.featureGates, "feature-gates",
		"Kubelet feature gates as key=value pairs; nodelet knows MemoryQoS (default false), EventedPLEG (default true: follow the runtime's container event stream, relisting every 5m as a safety net; false: relist every second) and KubeletEnsureSecretPulledImages (default true: a pod uses an image pulled with credentials only with the same credentials)")
	f.IntVarP(&o.verbosity, "v", "v", 0, "Log verbosity: 0 info, 1 and more debug")
	_ = f.MarkHidden("pod-logs-dir")
	addClusterFlags(f, o)

	cmd.AddCommand(newImagesCommand(&cfg.RootDir), newVersionCommand(stdout))
	cmd.AddCommand(newClientCommands(&cfg.RootDir)...)
	return cmd, o
}

// addClusterFlags are cluster mode's flags, by the kubelet's names.
func addClusterFlags(f *pflag.FlagSet, o *rootOptions) {
	cl := &o.cfg.ClusterConfig
	f.StringVar(&cl.Kubeconfig, "kubeconfig", "", "Kubeconfig of the node's API credentials: joins the cluster as a node (with --bootstrap-kubeconfig, nodelet writes it)")
	f.StringVar(&cl.BootstrapKubeconfig, "bootstrap-kubeconfig", "", "Kubeconfig whose credentials request the node's client certificate (TLS bootstrapping) when --kubeconfig has no usable one")
	f.StringVar(&cl.CertDir, "cert-dir", "", "Directory of the node's client and serving certificates (default: --root-dir/pki)")
	f.BoolVar(&cl.RotateCertificates, "rotate-certificates", false, "Request a new client certificate from the API server before the current one expires")
	f.StringVar(&o.nodeLabels, "node-labels", "", "Labels the node registers with, key=value,... (in kubernetes.io and k8s.io only those a node may set on itself)")
	f.BoolVar(&cl.RegisterNode, "register-node", cl.RegisterNode, "Register the Node object with the API server")
	f.StringVar(&o.taints, "register-with-taints", "", "Taints the node registers with, key=value:Effect,... (NoSchedule, PreferNoSchedule, NoExecute)")
	f.Int32Var(&cl.KubeAPIQPS, "kube-api-qps", cl.KubeAPIQPS, "Requests per second to the API server")
	f.Int32Var(&cl.KubeAPIBurst, "kube-api-burst", cl.KubeAPIBurst, "Requests to the API server allowed in a burst")
	f.Int32Var(&cl.EventRecordQPS, "event-qps", cl.EventRecordQPS, "Events sent to the API server per second (0: no limit)")
	f.Int32Var(&cl.EventBurst, "event-burst", cl.EventBurst, "Events sent to the API server in a burst")
	f.StringVar(&cl.KubeAPIContentType, "kube-api-content-type", cl.KubeAPIContentType, "Content type of requests to the API server")
	f.DurationVar(&cl.NodeStatusUpdateFrequency, "node-status-update-frequency", cl.NodeStatusUpdateFrequency, "How often the node's status is computed (and posted when it changed)")
	f.Var(&optionalBool{dst: &cl.AuthenticationTokenWebhook}, "authentication-token-webhook",
		"Authenticate bearer tokens on the secure port with TokenReviews (default: true with --kubeconfig, as the kubelet's config-file default)")
	f.Lookup("authentication-token-webhook").NoOptDefVal = "true"
	f.DurationVar(&cl.AuthenticationTokenWebhookCacheTTL, "authentication-token-webhook-cache-ttl", cl.AuthenticationTokenWebhookCacheTTL, "How long TokenReview answers are cached")
	f.DurationVar(&cl.AuthorizationWebhookCacheAuthorizedTTL, "authorization-webhook-cache-authorized-ttl", cl.AuthorizationWebhookCacheAuthorizedTTL,
		"How long SubjectAccessReview answers that allowed are cached (0: not at all)")
	f.DurationVar(&cl.AuthorizationWebhookCacheUnauthorizedTTL, "authorization-webhook-cache-unauthorized-ttl", cl.AuthorizationWebhookCacheUnauthorizedTTL,
		"How long SubjectAccessReview answers that denied are cached (0: not at all)")
}

// optionalBool is a boolean flag whose absence is kept apart from false:
// nil until given, so that the mode's default applies (see
// nodeconfig.Config.TokenWebhook).
type optionalBool struct{ dst **bool }

func (b *optionalBool) String() string {
	if b.dst == nil || *b.dst == nil {
		return ""
	}
	return strconv.FormatBool(**b.dst)
}

func (b *optionalBool) Set(s string) error {
	v, err := strconv.ParseBool(s)
	if err != nil {
		return err
	}
	*b.dst = &v
	return nil
}

func (b *optionalBool) Type() string { return "bool" }

// config is the configuration the agent runs with: the defaults, then
// --config's file, then the flags given on the command line (which win,
// as the kubelet's do), then what comes from the machine.
func (o *rootOptions) config(flags *pflag.FlagSet, log *slog.Logger) (nodeconfig.Config, error) {
	if o.configFile != "" {
		if err := applyConfigFile(flags, &o.cfg, o.configFile, log); err != nil {
			return nodeconfig.Config{}, err
		}
	}
	if err := o.parseFlags(flags); err != nil {
		return nodeconfig.Config{}, err
	}
	if err := readRegistries(flags, &o.cfg, o.privateRegistry, log); err != nil {
		return nodeconfig.Config{}, err
	}
	cfg := o.cfg
	if err := completeConfig(&cfg, o.hostnameOverride, o.pauseBinary, o.containerdBinary); err != nil {
		return nodeconfig.Config{}, err
	}
	return cfg, nil
}

// parseFlags reads the flags given on the command line whose values need
// parsing into the configuration (only those given: the others leave the
// defaults or --config's values).
func (o *rootOptions) parseFlags(flags *pflag.FlagSet) error {
	cfg := &o.cfg
	var err error
	if flags.Changed("manifest-url-header") {
		if cfg.ManifestURLHeader, err = parseHeaders(o.urlHeaders); err != nil {
			return err
		}
	}
	if flags.Changed("container-log-max-size") {
		if cfg.ContainerLogMaxSize, err = parseSize(o.logMaxSize); err != nil {
			return fmt.Errorf("--container-log-max-size: %w", err)
		}
	}
	if flags.Changed("feature-gates") {
		if unknown := cfg.SetFeatureGates(o.featureGates); len(unknown) > 0 {
			return fmt.Errorf("--feature-gates: unrecognized feature gate(s) %s; nodelet knows EventedPLEG, KubeletEnsureSecretPulledImages and MemoryQoS", strings.Join(unknown, ", "))
		}
	}
	if flags.Changed("runtime-handler") {
		cfg.Managed.Containerd.Handlers = nil
		for _, v := range o.runtimeHandlers {
			h, err := containerd.ParseHandler(v)
			if err != nil {
				return fmt.Errorf("--runtime-handler: %w", err)
			}
			cfg.Managed.Containerd.Handlers = append(cfg.Managed.Containerd.Handlers, h)
		}
	}
	if flags.Changed("node-labels") {
		if cfg.NodeLabels, err = nodeconfig.ParseMap("node-labels", o.nodeLabels, "="); err != nil {
			return err
		}
	}
	if flags.Changed("register-with-taints") {
		if cfg.RegisterWithTaints, err = nodeconfig.ParseTaints(o.taints); err != nil {
			return err
		}
	}
	for _, r := range []struct {
		flag, value string
		dst         *v1.ResourceList
	}{{"system-reserved", o.systemReserved, &cfg.SystemReserved}, {"kube-reserved", o.kubeReserved, &cfg.KubeReserved}} {
		if !flags.Changed(r.flag) {
			continue
		}
		m, err := nodeconfig.ParseMap(r.flag, r.value, "=")
		if err != nil {
			return err
		}
		if *r.dst, err = nodeconfig.ParseReserved("--"+r.flag, m); err != nil {
			return err
		}
	}
	if flags.Changed("eviction-hard") {
		if cfg.EvictionHard, err = nodeconfig.ParseMap("eviction-hard", o.evictionHard, "<"); err != nil {
			return err
		}
	}
	for _, m := range []struct {
		flag, value, sep string
		dst              *map[string]string
	}{
		{"eviction-soft", o.evictionSoft, "<", &cfg.EvictionSoft},
		{"eviction-soft-grace-period", o.evictionSoftGP, "=", &cfg.EvictionSoftGracePeriod},
		{"eviction-minimum-reclaim", o.evictionReclaim, "=", &cfg.EvictionMinimumReclaim},
	} {
		if flags.Changed(m.flag) {
			if *m.dst, err = nodeconfig.ParseMap(m.flag, m.value, m.sep); err != nil {
				return err
			}
		}
	}
	return nil
}

// completeConfig fills in what comes from the machine: the node name,
// where the binaries are, the node's resources, resolv.conf and hosts.
func completeConfig(cfg *nodeconfig.Config, hostnameOverride, pauseBinary, containerdBinary string) error {
	cfg.NodeName = strings.ToLower(strings.TrimSpace(hostnameOverride))
	from := "--hostname-override"
	if cfg.NodeName == "" {
		host, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("read hostname (set --hostname-override): %w", err)
		}
		cfg.NodeName, from = strings.ToLower(host), "the hostname"
	}
	if err := nodeconfig.ValidateNodeName(cfg.NodeName); err != nil {
		return fmt.Errorf("%w (from %s); set --hostname-override to a valid name such as %q", err, from, suggestNodeName(cfg.NodeName))
	}
	cfg.Managed.Containerd.Dir = filepath.Join(cfg.RootDir, "containerd")
	cfg.Managed.Containerd.Env = childEnv()
	cfg.Managed.Images.PauseBinary = findBinary("pause", pauseBinary)
	cfg.Managed.Containerd.Binary = findBinary("containerd", containerdBinary)
	if cfg.NodeIP == "" {
		cfg.NodeIP = nodeIP()
	}
	if cfg.CertDir == "" {
		cfg.CertDir = cfg.CertDirectory()
	}
	capacity, mem, err := machineCapacity(cfg.RootDir, cfg.LocalStorageCapacityIsolation)
	if err != nil {
		return err
	}
	cfg.Capacity, cfg.MemoryCapacity, cfg.PidMax = capacity, mem, pidMax()
	cfg.AppArmor = appArmorEnabled()
	if err := readSwap(cfg); err != nil {
		return err
	}
	if err := cfg.ReserveCPUs(); err != nil {
		return err
	}
	if cfg.CPUTopology, err = cpumanager.ReadTopology(os.DirFS("/sys")); err != nil {
		return fmt.Errorf("CPU topology: %w", err)
	}
	if cfg.Allocatable, err = nodeconfig.Allocatable(capacity, cfg.SystemReserved, cfg.KubeReserved, cfg.EvictionHard); err != nil {
		return err
	}
	// Missing files: the runtime's defaults, as the kubelet.
	if cfg.ResolvConf != "" {
		cfg.HostResolvConf, _ = readSmallFile(cfg.ResolvConf)
	}
	cfg.HostHosts, _ = readSmallFile("/etc/hosts")
	cfg.UserNamespaces.KubeletUser = kubeletUser()
	if cfg.Kubeconfig != "" {
		// What the Node reports of the machine; a part that cannot be
		// read is left empty, as the kubelet leaves it.
		cfg.Host, _ = nodestatus.ReadHostInfo(os.DirFS("/"))
	}
	return nil
}

// readSmallFile reads a machine file of at most 1 MiB (more is an error).
func readSmallFile(path string) ([]byte, error) { return bounded.ReadFile(path, 1<<20) }

// suggestNodeName turns name into a valid node name: characters other
// than lowercase letters, digits, "-" and "." become "-", and what is left
// starts and ends with a letter or digit.
func suggestNodeName(name string) string {
	b := []byte(strings.ToLower(name))
	for i, c := range b {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' && c != '.' {
			b[i] = '-'
		}
	}
	s := strings.Trim(string(b), "-.")
	if len(s) > 253 {
		s = strings.TrimRight(s[:253], "-.")
	}
	if s == "" {
		return "node-1"
	}
	return s
}

// findBinary locates one of the programs nodelet runs (pause, containerd):
// the flag, then next to this binary, then PATH.
func findBinary(name, flag string) string {
	if flag != "" {
		return flag
	}
	if self, err := os.Executable(); err == nil {
		candidate := filepath.Join(filepath.Dir(self), name)
		if _, err := os.Stat(candidate); err == nil {
			return candidate
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	return name + " (not found next to nodelet or in PATH)"
}

// childEnv is the environment of the managed containerd: ours, with the
// system directories runc and the CNI plugins live in on PATH.
func childEnv() []string {
	env := os.Environ()
	path := os.Getenv("PATH")
	for _, dir := range []string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"} {
		if !strings.Contains(":"+path+":", ":"+dir+":") {
			path += ":" + dir
		}
	}
	return append(env, "PATH="+strings.TrimPrefix(path, ":"))
}

func newLogger(w io.Writer, verbosity int) *slog.Logger {
	level := slog.LevelInfo
	if verbosity > 0 {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}
