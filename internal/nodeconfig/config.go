// Package nodeconfig is beside the pipeline: the node agent's settings,
// named as the kubelet's flags and KubeletConfiguration fields, their
// defaults, their checks, and the /configz view of them. cmd/nodelet
// fills a Config from flags and the machine; the agent reads it.
package nodeconfig

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/nodelet/nodelet/internal/cluster/nodestatus"
	"github.com/nodelet/nodelet/internal/managed/containerd"
	"github.com/nodelet/nodelet/internal/managed/registry"
	"github.com/nodelet/nodelet/internal/node/cpumanager"
	"github.com/nodelet/nodelet/internal/node/eviction"
	"github.com/nodelet/nodelet/internal/node/imagegc"
	"github.com/nodelet/nodelet/internal/node/podresources"
	"github.com/nodelet/nodelet/internal/node/pulledimages"
	"github.com/nodelet/nodelet/internal/node/shutdown"
	"github.com/nodelet/nodelet/internal/node/userns"
	"github.com/nodelet/nodelet/internal/pure/pullverify"
	"github.com/nodelet/nodelet/internal/serve/server"
)

// Config is everything the agent is told, already parsed from flags and
// read from the machine.
type Config struct {
	// RootDir holds nodelet's state (--root-dir).
	RootDir string
	// PodManifestPath is a manifest directory or file (--pod-manifest-path).
	PodManifestPath string
	// RuntimeEndpoint is the CRI endpoint (--container-runtime-endpoint);
	// empty means nodelet runs its own containerd.
	RuntimeEndpoint string
	// NodeName is this node's name (--hostname-override or the hostname).
	NodeName string
	// PodLogsDir is where container logs go (/var/log/pods).
	PodLogsDir string
	// FileCheckFrequency is how often the manifest path is re-read.
	FileCheckFrequency time.Duration
	// ManifestURL is polled for pods every HTTPCheckFrequency
	// (--manifest-url), with ManifestURLHeader (--manifest-url-header).
	ManifestURL        string
	ManifestURLHeader  map[string][]string
	HTTPCheckFrequency time.Duration
	// SyncFrequency is how often every pod is synced even with no change.
	SyncFrequency time.Duration
	// PLEGRelistPeriod is how often the runtime is relisted (1s).
	PLEGRelistPeriod time.Duration
	// EventedPLEG (the kubelet's feature gate of that name, set by
	// --feature-gates or featureGates) has the PLEG follow the runtime's
	// container event stream where it has one, relisting only every 5
	// minutes as a safety net and every PLEGRelistPeriod while the stream
	// is down. On by default in nodelet (the kubelet's default is off);
	// off, the PLEG relists every PLEGRelistPeriod.
	EventedPLEG bool
	// NodeIP is reported as the pods' hostIP.
	NodeIP string
	// MaxPods and Allocatable are what admission checks new pods against.
	MaxPods int
	// MaxParallelSandboxes bounds the pod sandboxes being created at once
	// (--max-parallel-sandboxes, nodelet's own); 0 means no bound.
	// cmd/nodelet defaults it to twice the CPUs: a batch of pods then
	// starts sooner than with every sandbox at once (see the bench).
	MaxParallelSandboxes int
	Allocatable          v1.ResourceList
	// MemoryCapacity is the node's memory in bytes (OOM scores).
	MemoryCapacity int64
	// PidMax is the kernel's pid_max (read by cmd/nodelet), the
	// process IDs the pods may take in all (0: unknown, not limited).
	PidMax int64
	// AppArmor tells whether the host enforces AppArmor (read by
	// cmd/nodelet): without it, a pod that asks for an AppArmor profile is
	// refused rather than run unconfined.
	AppArmor bool
	// HostResolvConf and HostHosts are the node's /etc/resolv.conf and
	// /etc/hosts (read by cmd/nodelet: machine facts), the base of pods'
	// DNS config and managed /etc/hosts. Empty: the runtime's defaults.
	HostResolvConf, HostHosts []byte
	// CgroupMountDir is where cgroups are mounted (the v1 hierarchies,
	// or the cgroup v2 unified one; --cgroup-root-dir, nodelet's own). ""
	// disables pod cgroups, as CgroupsPerQOS false does.
	CgroupMountDir string
	// CgroupRoot is the kubelet's cgroupRoot (--cgroup-root): the cgroup,
	// written as a cgroupfs path with either driver, that the QoS
	// hierarchy kubepods is made in ("/": /kubepods or kubepods.slice;
	// "/nodelet-a": /nodelet-a/kubepods or nodelet_a-kubepods.slice). It
	// must exist. Several nodelets on one host each take their own.
	CgroupRoot string
	// CgroupsPerQOS creates the QoS and pod cgroups (cgroupsPerQOS,
	// --cgroups-per-qos). With it, nodelet refuses to start where it
	// cannot manage them; false runs pods without, on purpose.
	CgroupsPerQOS bool
	// CgroupDriver is cgroupfs or systemd (cgroupDriver,
	// --cgroup-driver); the runtime's own, when its RuntimeConfig tells
	// it, wins, as with the kubelet's KubeletCgroupDriverFromCRI.
	CgroupDriver string
	// PodPidsLimit > 0 is each pod cgroup's process limit (podPidsLimit,
	// --pod-max-pids; cgroup v2); -1 or 0 none.
	PodPidsLimit int64
	// MemoryQoS is the MemoryQoS feature gate (cgroup v2 only):
	// memory.high from MemoryThrottlingFactor.
	MemoryQoS bool
	// MemoryThrottlingFactor is memoryThrottlingFactor, in (0, 1].
	MemoryThrottlingFactor float64
	// FailSwapOn refuses to start on a node with swap (failSwapOn,
	// --fail-swap-on; true, as the kubelet's default).
	FailSwapOn bool
	// SwapBehavior is memorySwap.swapBehavior: NoSwap (the default) or
	// LimitedSwap (podresources.Swap).
	SwapBehavior string
	// SwapCapacity is the node's swap in bytes, from /proc/swaps (read by
	// cmd/nodelet); nil when it could not be read.
	SwapCapacity *int64
	// SwapController and CgroupV2 are what cmd/nodelet found of the
	// kernel's swap accounting (podresources.SwapController).
	SwapController, CgroupV2 bool
	// CPUManagerPolicy is cpuManagerPolicy (--cpu-manager-policy): none
	// or static (cpumanager).
	CPUManagerPolicy string
	// CPUManagerReconcilePeriod is cpuManagerReconcilePeriod (10s).
	CPUManagerReconcilePeriod time.Duration
	// ReservedSystemCPUs is reservedSystemCPUs (--reserved-cpus), a CPU
	// list; it replaces the cpu of kubeReserved and systemReserved
	// (ReserveCPUs).
	ReservedSystemCPUs string
	// TopologyManagerPolicy is topologyManagerPolicy
	// (--topology-manager-policy): none or single-numa-node.
	TopologyManagerPolicy string
	// CPUTopology is the machine's online CPUs (read by cmd/nodelet
	// from sysfs).
	CPUTopology cpumanager.Topology
	// MaxPerPodContainer dead instances are kept per container (1).
	MaxPerPodContainer int
	// Port serves the authenticated kubelet API over HTTPS (0 disables).
	Port int
	// Auth are the secure port's certificate and access flags
	// (--tls-cert-file, --client-ca-file, --anonymous-auth,
	// --authorization-mode, ...).
	server.Auth
	// EnableSystemLogHandler serves SystemLogDir at /logs/ on the secure
	// port (enableSystemLogHandler, true).
	EnableSystemLogHandler bool
	// HealthzBindAddress:HealthzPort serves /healthz (0 disables).
	HealthzBindAddress string
	HealthzPort        int
	// Address:ReadOnlyPort serves /healthz and /metrics without
	// authentication (0, the default, disables it).
	Address      string
	ReadOnlyPort int
	// ContainerLogMaxSize and ContainerLogMaxFiles rotate container logs.
	ContainerLogMaxSize  int64
	ContainerLogMaxFiles int
	// ContainerLogMonitorInterval is how often logs are checked for
	// rotation (10s).
	ContainerLogMonitorInterval time.Duration
	// VolumeStatsAggPeriod is how long a measured disk usage of an
	// emptyDir or a log directory is used before it is measured again
	// (volumeStatsAggPeriod, 1m): the stats, and so the local storage
	// evictions, see usage that old at most.
	VolumeStatsAggPeriod time.Duration
	// LocalStorageCapacityIsolation (localStorageCapacityIsolation, true):
	// the node reports its ephemeral-storage capacity, admission counts
	// ephemeral-storage requests, and pods over their ephemeral-storage
	// limits or emptyDir sizeLimits are evicted.
	LocalStorageCapacityIsolation bool

	// ResolvConf is the host's resolver configuration file, the base of
	// pods' DNS (--resolv-conf, resolvConf); cmd/nodelet reads it into
	// HostResolvConf. Empty: none.
	ResolvConf string
	// ClusterDomain and ClusterDNS are the cluster's DNS domain and
	// servers, for pods with dnsPolicy ClusterFirst (--cluster-domain,
	// --cluster-dns).
	ClusterDomain string
	ClusterDNS    []string

	// Capacity is the node's CPU, memory and ephemeral storage (the size
	// of the root directory's filesystem), read from the machine.
	// Allocatable is Capacity less SystemReserved, KubeReserved and what
	// the hard eviction thresholds keep (see Allocatable).
	Capacity v1.ResourceList
	// SystemReserved and KubeReserved are kept from pods for the system
	// and for the node agent and runtime (--system-reserved,
	// --kube-reserved).
	SystemReserved, KubeReserved v1.ResourceList
	// EvictionHard are the hard eviction thresholds, signal to quantity
	// or percentage (--eviction-hard; DefaultEvictionHard).
	EvictionHard map[string]string
	// EvictionSoft, EvictionSoftGracePeriod and EvictionMinimumReclaim
	// are the soft thresholds, how long each must be met before it
	// evicts, and what an eviction must reclaim beyond a threshold
	// (--eviction-soft, --eviction-soft-grace-period,
	// --eviction-minimum-reclaim).
	EvictionSoft, EvictionSoftGracePeriod, EvictionMinimumReclaim map[string]string
	// EvictionPressureTransitionPeriod keeps a pressure condition that
	// long after its threshold was last met (5m); EvictionMaxPodGracePeriod
	// is the longest grace period of a pod evicted under a soft threshold
	// (--eviction-pressure-transition-period, --eviction-max-pod-grace-period).
	EvictionPressureTransitionPeriod time.Duration
	EvictionMaxPodGracePeriod        int32
	// ImageGC is when unused images are removed: imageGCHighThresholdPercent
	// (--image-gc-high-threshold), imageGCLowThresholdPercent
	// (--image-gc-low-threshold), imageMinimumGCAge
	// (--minimum-image-gc-age) and imageMaximumGCAge.
	ImageGC imagegc.Policy
	// EnsureSecretPulledImages is the KubeletEnsureSecretPulledImages
	// feature gate (on by default, as in the kubelet): a pod may use an
	// image another pod pulled with credentials only with the same
	// credentials, as ImagePullCredentialsVerificationPolicy
	// (imagePullCredentialsVerificationPolicy, NeverVerifyPreloadedImages)
	// and PreloadedImagesVerificationAllowlist
	// (preloadedImagesVerificationAllowlist) say.
	EnsureSecretPulledImages               bool
	ImagePullCredentialsVerificationPolicy string
	PreloadedImagesVerificationAllowlist   []string
	// ImageCredentialProviderConfig and ImageCredentialProviderBinDir are
	// the kubelet's credential provider plugins: a CredentialProviderConfig
	// file (or a directory of them) and the directory of the binaries it
	// names (--image-credential-provider-config,
	// --image-credential-provider-bin-dir; flags only, as the kubelet's).
	// Either one needs the other; see CredentialProviders.
	ImageCredentialProviderConfig, ImageCredentialProviderBinDir string

	// ShutdownGracePeriod is how long the node's shutdown is delayed to
	// stop the pods, of which ShutdownGracePeriodCriticalPods is for the
	// critical pods (shutdownGracePeriod, shutdownGracePeriodCriticalPods;
	// 0: no graceful node shutdown). ShutdownGracePeriodByPodPriority
	// gives each priority its own period instead.
	ShutdownGracePeriod, ShutdownGracePeriodCriticalPods time.Duration
	ShutdownGracePeriodByPodPriority                     []shutdown.PriorityPeriod

	// ClusterConfig are cluster mode's settings: Kubeconfig set joins an
	// API server.
	ClusterConfig
	// Host are the machine's identity facts the Node reports (machine
	// ID, boot ID, kernel, OS image), read by cmd/nodelet.
	Host nodestatus.HostInfo

	// Managed holds the settings of the managed runtime.
	Managed ManagedConfig

	// UserNamespaces are the settings of pods' user namespaces
	// (hostUsers: false).
	UserNamespaces UserNamespaces
}

// ManifestHTTPHeader is ManifestURLHeader with canonical names.
func (cfg Config) ManifestHTTPHeader() http.Header {
	h := http.Header{}
	for k, vs := range cfg.ManifestURLHeader {
		for _, v := range vs {
			h.Add(k, v)
		}
	}
	return h
}

// UserNamespaceOptions are the settings of the pods' user namespaces
// (userns.Manager) under <root-dir>/pods.
func (cfg Config) UserNamespaceOptions() userns.Options {
	return userns.Options{PodsDir: filepath.Join(cfg.RootDir, "pods"), IDsPerPod: cfg.UserNamespaces.IDsPerPod,
		MaxPods: cfg.MaxPods, Kubelet: cfg.UserNamespaces.KubeletUser}
}

// UserNamespaces are the settings of pods' user namespaces.
type UserNamespaces struct {
	// IDsPerPod is each pod's block of host IDs (KubeletConfiguration
	// userNamespaces.idsPerPod): a multiple of 65536 below 2^32.
	IDsPerPod int64
	// KubeletUser is the node's "kubelet" user with its /etc/subuid and
	// /etc/subgid (read by cmd/nodelet: machine facts), whose one entry is
	// the pods' range; nil: there is no such user, and the range is every
	// ID from IDsPerPod up.
	KubeletUser *userns.KubeletUser
}

// ClusterConfig are the settings of cluster mode, by the kubelet's flag
// and KubeletConfiguration names.
type ClusterConfig struct {
	// Kubeconfig is the node's kubeconfig (--kubeconfig); empty is
	// standalone mode. With BootstrapKubeconfig nodelet writes it.
	Kubeconfig string
	// BootstrapKubeconfig requests the node's client certificate with a
	// CSR when Kubeconfig has no usable one (--bootstrap-kubeconfig).
	BootstrapKubeconfig string
	// CertDir holds the node's client and serving certificates
	// (--cert-dir); empty is <RootDir>/pki.
	CertDir string
	// RotateCertificates renews the client certificate before it expires
	// (--rotate-certificates, rotateCertificates).
	RotateCertificates bool
	// ServerTLSBootstrap has the secure port's certificate issued through
	// a kubelet-serving CSR instead of self-signed (serverTLSBootstrap).
	ServerTLSBootstrap bool
	// RegisterNode registers the Node object (--register-node, true),
	// with NodeLabels (--node-labels) and RegisterWithTaints
	// (--register-with-taints, registerWithTaints).
	RegisterNode       bool
	NodeLabels         map[string]string
	RegisterWithTaints []v1.Taint
	// KubeAPIQPS and KubeAPIBurst limit requests to the API server
	// (--kube-api-qps 50, --kube-api-burst 100); KubeAPIContentType is
	// what they send (protobuf).
	KubeAPIQPS         int32
	KubeAPIBurst       int32
	KubeAPIContentType string
	// EventRecordQPS and EventBurst limit the events sent to the API
	// server (--event-qps 50, --event-burst 100); 0 QPS: no limit.
	EventRecordQPS int32
	EventBurst     int32
	// NodeStatusUpdateFrequency is how often node status is computed
	// (10s); NodeStatusReportFrequency how often it is patched when
	// nothing changed (5m); NodeLeaseDurationSeconds the lease's duration
	// (40).
	NodeStatusUpdateFrequency time.Duration
	NodeStatusReportFrequency time.Duration
	NodeLeaseDurationSeconds  int32
	// AuthenticationTokenWebhook resolves bearer tokens on the secure
	// port with TokenReviews, cached AuthenticationTokenWebhookCacheTTL
	// (--authentication-token-webhook, authentication.webhook.enabled);
	// nil is the mode's default (see Config.TokenWebhook).
	AuthenticationTokenWebhook         *bool
	AuthenticationTokenWebhookCacheTTL time.Duration
	// AuthorizationWebhookCacheAuthorizedTTL and
	// AuthorizationWebhookCacheUnauthorizedTTL keep the answers of
	// SubjectAccessReviews (authorization mode Webhook) that allowed
	// (5m) and that denied (30s); 0 keeps none of that kind
	// (authorization.webhook, --authorization-webhook-cache-*-ttl).
	AuthorizationWebhookCacheAuthorizedTTL   time.Duration
	AuthorizationWebhookCacheUnauthorizedTTL time.Duration
}

// SystemLogDir is the node's log directory, served at /logs/ when
// EnableSystemLogHandler is set, as the kubelet serves it.
const SystemLogDir = "/var/log"

// SystemLogs is the directory to serve at /logs/: SystemLogDir, or ""
// when EnableSystemLogHandler is off.
func (cfg Config) SystemLogs() string {
	if !cfg.EnableSystemLogHandler {
		return ""
	}
	return SystemLogDir
}

// SecureSettings are the secure port's (--address, --port): its access
// settings with the mode's defaults (SecureAuth, TokenWebhook) and the
// webhook caches' lifetimes, which apply once the agent gives it the API
// server's client (cluster mode).
func (cfg Config) SecureSettings() server.Settings {
	return server.Settings{
		RootDir: cfg.RootDir, Addr: net.JoinHostPort(cfg.Address, strconv.Itoa(cfg.Port)),
		NodeName: cfg.NodeName, NodeIP: cfg.NodeIP, Auth: cfg.SecureAuth(),
		WebhookAuthn: cfg.TokenWebhook(), TokenCacheTTL: cfg.AuthenticationTokenWebhookCacheTTL,
		AuthorizedTTL: cfg.AuthorizationWebhookCacheAuthorizedTTL, UnauthorizedTTL: cfg.AuthorizationWebhookCacheUnauthorizedTTL,
	}
}

// CertDirectory is where the node's certificates are: CertDir, else
// <RootDir>/pki.
func (cfg Config) CertDirectory() string {
	if cfg.CertDir != "" {
		return cfg.CertDir
	}
	return server.PKIDir(cfg.RootDir)
}

// ManagedConfig configures the containerd and registry nodelet runs itself
// when no runtime endpoint is given.
type ManagedConfig struct {
	// Containerd is the managed containerd's configuration; Dir and
	// SystemdCgroup are filled in by ManagedRuntime, Mirror by the agent.
	Containerd containerd.Config
	// CNIConfDir is --cni-conf-dir: the CNI configuration directory the
	// managed containerd reads; empty: the mode's (ManagedRuntime).
	CNIConfDir string
	// CNIBinDir is --cni-bin-dir: the CNI plug-in directories, comma
	// separated as the kubelet's flag was; empty: the mode's.
	CNIBinDir string
	// RegistryAddress is the loopback address of the image registry.
	RegistryAddress string
	// Images are the binaries the built-in images are made from.
	Images registry.SeedSpec
}

// DefaultConfig returns the defaults of every setting under rootDir.
func DefaultConfig(rootDir string) Config {
	return Config{
		RootDir:                                rootDir,
		PodLogsDir:                             "/var/log/pods",
		FileCheckFrequency:                     20 * time.Second,
		HTTPCheckFrequency:                     20 * time.Second,
		SyncFrequency:                          time.Minute,
		PLEGRelistPeriod:                       time.Second,
		EventedPLEG:                            true,
		MaxPods:                                110,
		Port:                                   10250,
		HealthzBindAddress:                     "127.0.0.1",
		EnableSystemLogHandler:                 true,
		CgroupMountDir:                         "/sys/fs/cgroup",
		CgroupRoot:                             podresources.DefaultCgroupRoot,
		CgroupsPerQOS:                          true,
		CgroupDriver:                           "cgroupfs",
		PodPidsLimit:                           -1,
		MemoryThrottlingFactor:                 0.9,
		FailSwapOn:                             true,
		CPUManagerPolicy:                       cpumanager.PolicyNone,
		CPUManagerReconcilePeriod:              10 * time.Second,
		TopologyManagerPolicy:                  cpumanager.TopologyPolicyNone,
		HealthzPort:                            10248,
		Address:                                "0.0.0.0",
		MaxPerPodContainer:                     1,
		ContainerLogMaxSize:                    10 << 20,
		ContainerLogMaxFiles:                   5,
		ContainerLogMonitorInterval:            10 * time.Second,
		VolumeStatsAggPeriod:                   time.Minute,
		LocalStorageCapacityIsolation:          true,
		ResolvConf:                             "/etc/resolv.conf",
		EvictionHard:                           DefaultEvictionHard(),
		EvictionPressureTransitionPeriod:       eviction.DefaultPressureTransitionPeriod,
		UserNamespaces:                         UserNamespaces{IDsPerPod: userns.DefaultIDsPerPod},
		ImageGC:                                imagegc.DefaultPolicy(),
		EnsureSecretPulledImages:               true,
		ImagePullCredentialsVerificationPolicy: string(pullverify.DefaultPolicy),
		ClusterConfig: ClusterConfig{
			RegisterNode:                       true,
			KubeAPIQPS:                         50,
			KubeAPIBurst:                       100,
			KubeAPIContentType:                 "application/vnd.kubernetes.protobuf",
			EventRecordQPS:                     50,
			EventBurst:                         100,
			NodeStatusUpdateFrequency:          10 * time.Second,
			NodeStatusReportFrequency:          5 * time.Minute,
			NodeLeaseDurationSeconds:           40,
			AuthenticationTokenWebhookCacheTTL: 2 * time.Minute,
			// The kubelet's defaults (pkg/kubelet/apis/config/v1beta1).
			AuthorizationWebhookCacheAuthorizedTTL:   5 * time.Minute,
			AuthorizationWebhookCacheUnauthorizedTTL: 30 * time.Second,
		},
		Managed: ManagedConfig{
			Containerd:      containerd.DefaultConfig(rootDir),
			RegistryAddress: "127.0.0.1:0",
			Images:          registry.SeedSpec{BusyboxBinary: "/bin/busybox"},
		},
	}
}

// Validate checks the settings.
func (cfg Config) Validate() error {
	if cfg.RootDir == "" || !filepath.IsAbs(cfg.RootDir) {
		return fmt.Errorf("--root-dir %q must be an absolute path", cfg.RootDir)
	}
	if err := ValidateNodeName(cfg.NodeName); err != nil {
		return err
	}
	if cfg.FileCheckFrequency <= 0 || cfg.HTTPCheckFrequency <= 0 || cfg.SyncFrequency <= 0 || cfg.PLEGRelistPeriod <= 0 {
		return errors.New("--file-check-frequency, --http-check-frequency and --sync-frequency must be positive")
	}
	if err := ValidateEvictionHard(cfg.EvictionHard); err != nil {
		return err
	}
	if err := cfg.validateCgroupRoot(); err != nil {
		return err
	}
	if _, err := eviction.ParseThresholds(cfg.EvictionConfig()); err != nil {
		return err
	}
	if cfg.VolumeStatsAggPeriod <= 0 {
		return fmt.Errorf("volumeStatsAggPeriod %s: want a positive duration (nodelet does not turn volume stats off: the local storage limits need them)", cfg.VolumeStatsAggPeriod)
	}
	if cfg.EvictionPressureTransitionPeriod < 0 || cfg.EvictionMaxPodGracePeriod < 0 {
		return errors.New("evictionPressureTransitionPeriod and evictionMaxPodGracePeriod must not be negative")
	}
	if err := cfg.ImageGC.Validate(); err != nil {
		return err
	}
	if err := cfg.validatePullVerification(); err != nil {
		return err
	}
	if err := validateShutdown(cfg); err != nil {
		return err
	}
	if cfg.RuntimeEndpoint != "" && len(cfg.Managed.Containerd.Handlers) > 0 {
		return fmt.Errorf("--runtime-handler defines handlers of the managed containerd; with --container-runtime-endpoint %s, define them in that runtime's configuration", cfg.RuntimeEndpoint)
	}
	if cfg.CgroupDriver != "cgroupfs" && cfg.CgroupDriver != "systemd" {
		return fmt.Errorf("--cgroup-driver %q: want cgroupfs or systemd", cfg.CgroupDriver)
	}
	if cfg.MemoryThrottlingFactor <= 0 || cfg.MemoryThrottlingFactor > 1 {
		return fmt.Errorf("memoryThrottlingFactor %v: want more than 0 and at most 1", cfg.MemoryThrottlingFactor)
	}
	if _, err := podresources.ParseSwapBehavior(cfg.SwapBehavior); err != nil {
		return err
	}
	if err := cfg.validateCPUManager(); err != nil {
		return err
	}
	for _, ip := range cfg.ClusterDNS {
		if _, err := netip.ParseAddr(ip); err != nil {
			return fmt.Errorf("--cluster-dns %q: not an IP address", ip)
		}
	}
	if err := cfg.ClusterConfig.validate(); err != nil {
		return err
	}
	if ids := cfg.UserNamespaces.IDsPerPod; ids < userns.DefaultIDsPerPod || ids%userns.DefaultIDsPerPod != 0 || ids > math.MaxUint32 {
		return fmt.Errorf("userNamespaces.idsPerPod %d must be a multiple of %d, at least that and at most %d", ids, userns.DefaultIDsPerPod, int64(math.MaxUint32))
	}
	return server.CheckAuthorization(cfg.SecureAuth().AuthorizationMode, cfg.AnonymousAuth)
}

// ClusterMode reports whether nodelet joins a cluster (--kubeconfig).
func (cfg Config) ClusterMode() bool { return cfg.Kubeconfig != "" }

// SecureAuth are the secure port's access settings with the mode's
// default authorization filled in where neither a flag nor --config set
// one: in cluster mode the kubelet's config-file default, Webhook (every
// request is a SubjectAccessReview against the API server, so a pod's
// service-account token or another node's certificate gets what RBAC
// gives it on nodes/<name>: nothing, by default); standalone
// NodeletGroups, as there is no API server to ask.
func (cfg Config) SecureAuth() server.Auth {
	a := cfg.Auth
	if a.AuthorizationMode == "" {
		a.AuthorizationMode = server.AuthorizationNodeletGroups
		if cfg.ClusterMode() {
			a.AuthorizationMode = server.AuthorizationWebhook
		}
	}
	return a
}

// TokenWebhook reports whether bearer tokens are resolved with
// TokenReviews: as set, else the kubelet's config-file default in cluster
// mode (on), and off standalone (there is no API server).
func (cfg Config) TokenWebhook() bool {
	if cfg.AuthenticationTokenWebhook != nil {
		return *cfg.AuthenticationTokenWebhook
	}
	return cfg.ClusterMode()
}

// validateShutdown checks the graceful node shutdown settings as the
// kubelet does.
func validateShutdown(cfg Config) error {
	total, critical := cfg.ShutdownGracePeriod, cfg.ShutdownGracePeriodCriticalPods
	if critical > total {
		return fmt.Errorf("shutdownGracePeriodCriticalPods %v must be <= shutdownGracePeriod %v", critical, total)
	}
	if total < 0 || (total > 0 && total < time.Second) {
		return fmt.Errorf("shutdownGracePeriod %v must be either zero or otherwise >= 1 sec", total)
	}
	if critical < 0 || (critical > 0 && critical < time.Second) {
		return fmt.Errorf("shutdownGracePeriodCriticalPods %v must be either zero or otherwise >= 1 sec", critical)
	}
	if len(cfg.ShutdownGracePeriodByPodPriority) > 0 && (total > 0 || critical > 0) {
		return errors.New("cannot specify both shutdownGracePeriodByPodPriority and shutdownGracePeriod at the same time")
	}
	for _, p := range cfg.ShutdownGracePeriodByPodPriority {
		if p.GracePeriod < 0 {
			return fmt.Errorf("shutdownGracePeriodByPodPriority: priority %d: shutdownGracePeriodSeconds %v must not be negative", p.Priority, p.GracePeriod)
		}
	}
	return nil
}

// ShutdownPeriods are the graceful node shutdown's groups (none: off).
func (cfg Config) ShutdownPeriods() []shutdown.PriorityPeriod {
	return shutdown.Periods(cfg.ShutdownGracePeriod, cfg.ShutdownGracePeriodCriticalPods, cfg.ShutdownGracePeriodByPodPriority)
}

// ShutdownConfig is the graceful node shutdown's configuration.
func (cfg Config) ShutdownConfig() shutdown.Config {
	return shutdown.Config{Periods: cfg.ShutdownPeriods(), StatePath: filepath.Join(cfg.RootDir, shutdown.StateFile), NodeName: cfg.NodeName}
}

// validate checks the cluster-mode settings. Those that only matter in
// cluster mode (rotateCertificates, the node status frequencies) are not
// refused standalone, so that a kubeadm KubeletConfiguration loads there;
// those that cannot work without an API server are.
func (c ClusterConfig) validate() error {
	if c.Kubeconfig == "" {
		switch {
		case c.BootstrapKubeconfig != "":
			return errors.New("--bootstrap-kubeconfig needs --kubeconfig: the file nodelet writes the node's credentials to")
		case c.ServerTLSBootstrap:
			return errors.New("serverTLSBootstrap needs --kubeconfig: the serving certificate is issued by the API server")
		}
	}
	if c.EventRecordQPS < 0 || c.EventBurst < 0 {
		return errors.New("--event-qps and --event-burst must not be negative")
	}
	if c.KubeAPIQPS < 0 || c.KubeAPIBurst < 0 {
		return errors.New("--kube-api-qps and --kube-api-burst must not be negative")
	}
	if c.NodeStatusUpdateFrequency <= 0 || c.NodeStatusReportFrequency <= 0 || c.NodeLeaseDurationSeconds <= 0 {
		return errors.New("--node-status-update-frequency, nodeStatusReportFrequency and nodeLeaseDurationSeconds must be positive")
	}
	if c.AuthenticationTokenWebhookCacheTTL < 0 {
		return errors.New("--authentication-token-webhook-cache-ttl must not be negative")
	}
	if c.AuthorizationWebhookCacheAuthorizedTTL < 0 || c.AuthorizationWebhookCacheUnauthorizedTTL < 0 {
		return errors.New("--authorization-webhook-cache-authorized-ttl and --authorization-webhook-cache-unauthorized-ttl must not be negative")
	}
	if err := ValidateNodeLabels(c.NodeLabels); err != nil {
		return err
	}
	return ValidateTaints(c.RegisterWithTaints)
}

// ValidateNodeName checks a node name as the API server checks the name of
// a Node: a lowercase RFC 1123 subdomain. Static pods are named
// <name>-<node> and their log directories <namespace>_<pod>_<uid>, so a
// name the API server would refuse (one with "_", say) breaks every pod.
func ValidateNodeName(name string) error {
	if name == "" {
		return errors.New("node name is empty: set --hostname-override")
	}
	if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
		return fmt.Errorf("node name %q is not valid: %s", name, strings.Join(msgs, "; "))
	}
	return nil
}

// SetFeatureGates sets the kubelet feature gates nodelet knows from gates
// (name to enabled) and returns the names it does not know, sorted. Known:
// EventedPLEG, KubeletEnsureSecretPulledImages, MemoryQoS.
func (c *Config) SetFeatureGates(gates map[string]bool) (unknown []string) {
	for _, name := range slices.Sorted(maps.Keys(gates)) {
		switch name {
		case "EventedPLEG":
			c.EventedPLEG = gates[name]
		case "MemoryQoS":
			c.MemoryQoS = gates[name]
		case "KubeletEnsureSecretPulledImages":
			c.EnsureSecretPulledImages = gates[name]
		default:
			unknown = append(unknown, name)
		}
	}
	return unknown
}

// EvictionConfig are the eviction thresholds' settings.
func (cfg Config) EvictionConfig() eviction.Config {
	return eviction.Config{EvictionHard: cfg.EvictionHard, EvictionSoft: cfg.EvictionSoft,
		EvictionSoftGracePeriod: cfg.EvictionSoftGracePeriod, EvictionMinimumReclaim: cfg.EvictionMinimumReclaim}
}

// validateCgroupRoot checks cgroupRoot (--cgroup-root) for the configured
// driver, with pod cgroups on: they are made in it (podresources.Setup
// checks it again with the runtime's driver).
func (cfg Config) validateCgroupRoot() error {
	if !cfg.CgroupsPerQOS || cfg.CgroupMountDir == "" {
		return nil
	}
	if _, err := podresources.ParseCgroupRoot(cfg.CgroupRoot, podresources.Driver(cfg.CgroupDriver)); err != nil {
		return fmt.Errorf("--cgroup-root (cgroupRoot): %w", err)
	}
	return nil
}

// pidResource is the kubelet's internal resource of process IDs
// (pidlimit.PIDs), which systemReserved and kubeReserved may reserve.
const pidResource v1.ResourceName = "pid"

// KubepodsLimits are the limits the kubelet sets at start on the QoS
// hierarchy's top cgroup (kubepods), with pod cgroups and its default
// enforceNodeAllocatable ["pods"]: the machine's CPUs, memory and process
// IDs (PidMax) less systemReserved and kubeReserved, never below zero;
// the hard eviction thresholds are not taken off, as in the kubelet's
// getNodeAllocatableInternalAbsolute.
func (cfg Config) KubepodsLimits() podresources.KubepodsLimits {
	left := func(name v1.ResourceName, capacity resource.Quantity) resource.Quantity {
		for _, reserved := range []v1.ResourceList{cfg.SystemReserved, cfg.KubeReserved} {
			if q, ok := reserved[name]; ok {
				capacity.Sub(q)
			}
		}
		if capacity.Sign() < 0 {
			capacity.Set(0)
		}
		return capacity
	}
	var l podresources.KubepodsLimits
	if q, ok := cfg.Capacity[v1.ResourceCPU]; ok {
		cpu := left(v1.ResourceCPU, q.DeepCopy())
		l.MilliCPU = cpu.MilliValue()
	}
	if q, ok := cfg.Capacity[v1.ResourceMemory]; ok {
		mem := left(v1.ResourceMemory, q.DeepCopy())
		l.Memory = mem.Value()
	}
	if cfg.PidMax > 0 {
		pids := left(pidResource, *resource.NewQuantity(cfg.PidMax, resource.DecimalSI))
		l.Pids = pids.Value()
	}
	return l
}

// validatePullVerification checks imagePullCredentialsVerificationPolicy
// and preloadedImagesVerificationAllowlist as the kubelet: valid with the
// KubeletEnsureSecretPulledImages gate on, not set with it off.
func (cfg Config) validatePullVerification() error {
	if cfg.EnsureSecretPulledImages {
		return pullverify.Validate(pullverify.Policy(cfg.ImagePullCredentialsVerificationPolicy), cfg.PreloadedImagesVerificationAllowlist)
	}
	if cfg.ImagePullCredentialsVerificationPolicy != "" && cfg.ImagePullCredentialsVerificationPolicy != string(pullverify.DefaultPolicy) {
		return errors.New("invalid configuration: `imagePullCredentialsVerificationPolicy` must not be set if KubeletEnsureSecretPulledImages feature gate is not enabled")
	}
	if len(cfg.PreloadedImagesVerificationAllowlist) > 0 {
		return errors.New("invalid configuration: `preloadedImagesVerificationAllowlist` must not be set if KubeletEnsureSecretPulledImages feature gate is not enabled")
	}
	return nil
}

// PullRecordOptions are the settings of the image pull records
// (ensure-secret-pulled-images) under <root-dir>/image_manager.
func (cfg Config) PullRecordOptions() pulledimages.Options {
	return pulledimages.Options{Enabled: cfg.EnsureSecretPulledImages, RootDir: cfg.RootDir,
		Policy: pullverify.Policy(cfg.ImagePullCredentialsVerificationPolicy), Allowlist: cfg.PreloadedImagesVerificationAllowlist}
}
