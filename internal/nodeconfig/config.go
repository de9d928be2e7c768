// Package nodeconfig is beside the pipeline: the node agent's settings,
// named as the kubelet's flags and KubeletConfiguration fields, their
// defaults, their checks, and the /configz view of them. cmd/nodelet
// fills a Config from flags and the machine; the agent reads it.
package nodeconfig

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/nodelet/nodelet/internal/containerd"
	"github.com/nodelet/nodelet/internal/registry"
	"github.com/nodelet/nodelet/internal/server"
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
	// HostResolvConf and HostHosts are the node's /etc/resolv.conf and
	// /etc/hosts (read by cmd/nodelet: machine facts), the base of pods'
	// DNS config and managed /etc/hosts. Empty: the runtime's defaults.
	HostResolvConf, HostHosts []byte
	// CgroupRoot is where the cgroup v1 hierarchies are mounted; pod
	// cgroups go under kubepods there. "" disables pod cgroups.
	CgroupRoot string
	// MaxPerPodContainer dead instances are kept per container (1).
	MaxPerPodContainer int
	// Port serves the authenticated kubelet API over HTTPS (0 disables).
	Port int
	// Auth are the secure port's certificate and access flags
	// (--tls-cert-file, --client-ca-file, --anonymous-auth,
	// --authorization-mode, ...).
	server.Auth
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

	// Managed holds the settings of the managed runtime.
	Managed ManagedConfig
}

// ManagedConfig configures the containerd and registry nodelet runs itself
// when no runtime endpoint is given.
type ManagedConfig struct {
	// Containerd is the managed containerd's configuration; Dir and Mirror
	// are filled in by the agent.
	Containerd containerd.Config
	// RegistryAddress is the loopback address of the image registry.
	RegistryAddress string
	// Images are the binaries the built-in images are made from.
	Images registry.SeedSpec
}

// DefaultConfig returns the defaults of every setting under rootDir.
func DefaultConfig(rootDir string) Config {
	return Config{
		RootDir:              rootDir,
		PodLogsDir:           "/var/log/pods",
		FileCheckFrequency:   20 * time.Second,
		HTTPCheckFrequency:   20 * time.Second,
		SyncFrequency:        time.Minute,
		PLEGRelistPeriod:     time.Second,
		MaxPods:              110,
		Port:                 10250,
		Auth:                 server.Auth{AuthorizationMode: server.AuthorizationNodeletGroups},
		HealthzBindAddress:   "127.0.0.1",
		CgroupRoot:           "/sys/fs/cgroup",
		HealthzPort:          10248,
		Address:              "0.0.0.0",
		MaxPerPodContainer:   1,
		ContainerLogMaxSize:  10 << 20,
		ContainerLogMaxFiles: 5,
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
	return server.CheckAuthorization(cfg.AuthorizationMode, cfg.AnonymousAuth)
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
