package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/agent"
	"github.com/nodelet/nodelet/internal/nodeconfig"
)

const defaultRootDir = "/var/lib/nodelet"

// newRootCommand is `nodelet`: run the node agent in the foreground.
func newRootCommand(stdout, stderr io.Writer) *cobra.Command {
	cfg := nodeconfig.DefaultConfig(defaultRootDir)
	var (
		hostnameOverride string
		verbosity        int
		pauseBinary      string
		urlHeaders       []string
		logMaxSize       string
	)
	cmd := &cobra.Command{
		Use:   "nodelet",
		Short: "Run Kubernetes pods on this machine the way the kubelet does",
		Long: `nodelet runs the pods of a manifest directory on this machine through a CRI
runtime. Without --container-runtime-endpoint it runs its own containerd and
a local image registry under --root-dir.`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := newLogger(stderr, verbosity)
			if err := completeConfig(&cfg, hostnameOverride, pauseBinary); err != nil {
				return err
			}
			var err error
			if cfg.ManifestURLHeader, err = parseHeaders(urlHeaders); err != nil {
				return err
			}
			if cfg.ContainerLogMaxSize, err = parseSize(logMaxSize); err != nil {
				return fmt.Errorf("--container-log-max-size: %w", err)
			}
			a, err := agent.New(cfg, agent.Deps{Clock: clock.RealClock{}, Log: log})
			if err != nil {
				return err
			}
			return a.Run(cmd.Context())
		},
	}
	cmd.SetOut(stdout)
	cmd.SetErr(stderr)
	cmd.PersistentFlags().StringVar(&cfg.RootDir, "root-dir", cfg.RootDir, "Directory for nodelet's state: pod volumes, the managed runtime, images")
	f := cmd.Flags()
	f.StringVar(&cfg.PodManifestPath, "pod-manifest-path", "", "Directory (or file) of static pod manifests to run")
	f.StringVar(&cfg.RuntimeEndpoint, "container-runtime-endpoint", "", "CRI endpoint, e.g. unix:///run/containerd/containerd.sock; empty runs a managed containerd under --root-dir")
	f.StringVar(&hostnameOverride, "hostname-override", "", "Node name to use instead of the hostname")
	f.DurationVar(&cfg.FileCheckFrequency, "file-check-frequency", cfg.FileCheckFrequency, "How often the manifest path is re-read")
	f.DurationVar(&cfg.SyncFrequency, "sync-frequency", cfg.SyncFrequency, "How often every pod is synced with the runtime")
	f.StringVar(&cfg.ManifestURL, "manifest-url", "", "URL of pod manifests to run, polled every --http-check-frequency")
	f.StringArrayVar(&urlHeaders, "manifest-url-header", nil, "HTTP headers for --manifest-url, as 'key:value,key2:value2' (repeatable)")
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
	f.StringVar(&cfg.AuthorizationMode, "authorization-mode", cfg.AuthorizationMode,
		"NodeletGroups (system:masters may do anything, --authorization-read-group may read), Webhook (needs an API server) or AlwaysAllow (any authenticated client may do anything; refused with --anonymous-auth)")
	f.StringVar(&cfg.AuthorizationReadGroup, "authorization-read-group", "system:authenticated", "Group that may use the read-only paths (/pods, /stats, /metrics, /containerLogs, ...) in NodeletGroups mode")
	f.StringVar(&cfg.HealthzBindAddress, "healthz-bind-address", cfg.HealthzBindAddress, "Address of the healthz endpoint")
	f.IntVar(&cfg.HealthzPort, "healthz-port", cfg.HealthzPort, "Port of the healthz endpoint (0 disables it)")
	f.StringVar(&cfg.Address, "address", cfg.Address, "Address of the read-only port")
	f.StringVar(&cfg.CgroupRoot, "cgroup-root-dir", cfg.CgroupRoot, "Where the cgroup v1 hierarchies are mounted; pod cgroups go under kubepods (empty: no pod cgroups)")
	f.IntVar(&cfg.ReadOnlyPort, "read-only-port", cfg.ReadOnlyPort, "Port serving /healthz and /metrics without authentication (0 disables it)")
	f.StringVar(&cfg.NodeIP, "node-ip", "", "IP reported as the pods' hostIP (default: the first non-loopback address)")
	f.IntVar(&cfg.MaxPerPodContainer, "maximum-dead-containers-per-container", cfg.MaxPerPodContainer, "Dead instances kept per container")
	f.StringVar(&logMaxSize, "container-log-max-size", "10Mi", "Size at which a container log is rotated")
	f.IntVar(&cfg.ContainerLogMaxFiles, "container-log-max-files", cfg.ContainerLogMaxFiles, "Log files kept per container, the current one included")
	f.DurationVar(&cfg.ContainerLogMonitorInterval, "container-log-monitor-interval", 10*time.Second, "How often container logs are checked for rotation")
	f.StringVar(&cfg.PodLogsDir, "pod-logs-dir", cfg.PodLogsDir, "Directory of container logs (CRI layout)")
	f.StringVar(&cfg.Managed.Containerd.PodCIDR, "pod-cidr", cfg.Managed.Containerd.PodCIDR, "Pod IP range of the managed runtime's bridge network")
	f.StringVar(&cfg.Managed.Containerd.BridgeName, "cni-bridge-name", cfg.Managed.Containerd.BridgeName, "Linux bridge of the managed runtime's network")
	f.StringVar(&cfg.Managed.RegistryAddress, "image-registry-address", cfg.Managed.RegistryAddress, "Loopback address of the managed image registry (port 0 picks a free one)")
	f.StringVar(&pauseBinary, "pause-binary", "", "Program the pause image is built from (default: 'pause' next to the nodelet binary, then PATH)")
	f.StringVar(&cfg.Managed.Images.BusyboxBinary, "busybox-binary", cfg.Managed.Images.BusyboxBinary, "Static busybox the busybox image is built from")
	f.IntVarP(&verbosity, "v", "v", 0, "Log verbosity: 0 info, 1 and more debug")
	_ = f.MarkHidden("pod-logs-dir")

	cmd.AddCommand(newImagesCommand(&cfg.RootDir), newVersionCommand(stdout))
	cmd.AddCommand(newClientCommands(&cfg.RootDir)...)
	return cmd
}

// completeConfig fills in what comes from the machine: the node name,
// where the binaries are, the node's resources, resolv.conf and hosts.
func completeConfig(cfg *nodeconfig.Config, hostnameOverride, pauseBinary string) error {
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
	cfg.Managed.Images.PauseBinary = findPause(pauseBinary)
	if cfg.NodeIP == "" {
		cfg.NodeIP = nodeIP()
	}
	alloc, capacity, err := allocatable()
	if err != nil {
		return err
	}
	cfg.Allocatable, cfg.MemoryCapacity = alloc, capacity
	// Missing files: the runtime's defaults, as the kubelet.
	cfg.HostResolvConf, _ = readSmallFile("/etc/resolv.conf")
	cfg.HostHosts, _ = readSmallFile("/etc/hosts")
	return nil
}

// readSmallFile reads a machine file of at most 1 MiB (more is an error).
func readSmallFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	const limit = 1 << 20
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if len(b) > limit {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, limit)
	}
	return b, nil
}

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

// findPause locates the pause program: the flag, then next to this binary,
// then PATH.
func findPause(flag string) string {
	if flag != "" {
		return flag
	}
	if self, err := os.Executable(); err == nil {
		candidate := filepath.Join(filepath.Dir(self), "pause")
		if _, err := os.Stat(candidate); err == nil {
			return candidate
		}
	}
	if p, err := exec.LookPath("pause"); err == nil {
		return p
	}
	return "pause (not found next to nodelet or in PATH)"
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
