package nodeconfig

import (
	"net"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/nodelet/nodelet/internal/cluster/certs"
	"github.com/nodelet/nodelet/internal/node/credprovider"
	"github.com/nodelet/nodelet/internal/serve/server"
)

// The settings of the parts the configuration makes optional, decided
// here so that the agent, which wires them, only asks whether there is
// one (nil when there is none).

// The CNI directories of cluster mode's managed runtime where
// --cni-conf-dir and --cni-bin-dir say nothing: where CNI installers
// (a DaemonSet's) put their configuration and plug-ins, then Debian's
// containernetworking-plugins, which nodelet's own network uses when
// nothing was installed in /opt/cni/bin. nodelet never writes plug-ins.
const (
	ClusterCNIConfDir = "/etc/cni/net.d"
	ClusterCNIBinDir  = "/opt/cni/bin"
	DebianCNIBinDir   = "/usr/lib/cni"
)

// ManagedRuntime is the runtime nodelet runs itself, its containerd in
// <RootDir>/containerd placing containers as nodelet places pods (the
// cgroup driver); nil when RuntimeEndpoint names the node's own runtime.
// The agent fills in Containerd.Mirror once the registry is up.
//
// Its CNI directories are --cni-conf-dir and --cni-bin-dir, else the
// mode's: in cluster mode the standard ones (/etc/cni/net.d;
// /opt/cni/bin, then /usr/lib/cni), and no pod CIDR at start (the Node's
// arrive later: podcidr); standalone nodelet's own configuration
// directory under the root directory, /usr/lib/cni, and --pod-cidr.
func (cfg Config) ManagedRuntime() *ManagedConfig {
	if cfg.RuntimeEndpoint != "" {
		return nil
	}
	m := cfg.Managed
	m.Containerd.Dir = filepath.Join(cfg.RootDir, "containerd")
	m.Containerd.SystemdCgroup = cfg.CgroupDriver == "systemd"
	m.Containerd.CNIConfDir = m.CNIConfDir
	m.Containerd.CNIBinDirs = []string{DebianCNIBinDir}
	if cfg.ClusterMode() {
		m.Containerd.PodCIDR = ""
		m.Containerd.CNIBinDirs = []string{ClusterCNIBinDir, DebianCNIBinDir}
		if m.Containerd.CNIConfDir == "" {
			m.Containerd.CNIConfDir = ClusterCNIConfDir
		}
	}
	if m.CNIBinDir != "" {
		m.Containerd.CNIBinDirs = splitList(m.CNIBinDir)
	}
	return &m
}

// StandalonePodCIDRs are the pod CIDRs nodelet hands the runtime at
// start, as the kubelet does without an API client: --pod-cidr. In
// cluster mode none: they are the Node's.
func (cfg Config) StandalonePodCIDRs() []string {
	if cfg.ClusterMode() || cfg.Managed.Containerd.PodCIDR == "" {
		return nil
	}
	return []string{cfg.Managed.Containerd.PodCIDR}
}

// splitList splits a comma-separated flag value, dropping empty entries.
func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// APIClient are the settings of the node's API client (cluster mode:
// --kubeconfig); nil standalone.
func (cfg Config) APIClient() *certs.ClientConfig {
	if !cfg.ClusterMode() {
		return nil
	}
	return &certs.ClientConfig{
		Kubeconfig:          cfg.Kubeconfig,
		BootstrapKubeconfig: cfg.BootstrapKubeconfig,
		CertDir:             cfg.CertDirectory(),
		NodeName:            cfg.NodeName,
		RotateCertificates:  cfg.RotateCertificates,
		QPS:                 float32(cfg.KubeAPIQPS),
		Burst:               int(cfg.KubeAPIBurst),
		ContentType:         cfg.KubeAPIContentType,
	}
}

// EventRateLimit is the rate limit of the events sent to the API server
// (eventRecordQPS, eventBurst), as client-go's: a QPS of 0 is no limit
// (-1).
func (cfg Config) EventRateLimit() (qps float32, burst int) {
	if cfg.EventRecordQPS == 0 {
		return -1, int(cfg.EventBurst)
	}
	return float32(cfg.EventRecordQPS), int(cfg.EventBurst)
}

// ServingCertificate are the settings of the secure port's certificate
// requested from the API server (serverTLSBootstrap); nil when it is off
// (the certificate is --tls-cert-file's, or self-signed).
func (cfg Config) ServingCertificate() *certs.ServingConfig {
	if !cfg.ServerTLSBootstrap {
		return nil
	}
	return &certs.ServingConfig{
		NodeName:          cfg.NodeName,
		CertDir:           cfg.CertDirectory(),
		Addresses:         certs.StaticAddresses(cfg.NodeName, cfg.NodeIP),
		TLSCertFile:       cfg.TLSCertFile,
		TLSPrivateKeyFile: cfg.TLSPrivateKeyFile,
	}
}

// Listeners are the HTTP servers to start: /healthz (--healthz-port), the
// kubelet API (--port, SecureSettings) and the read-only port
// (--read-only-port), each off at port 0.
func (cfg Config) Listeners() server.Listeners {
	var l server.Listeners
	if cfg.HealthzPort > 0 {
		l.HealthzAddr = net.JoinHostPort(cfg.HealthzBindAddress, strconv.Itoa(cfg.HealthzPort))
	}
	if cfg.Port > 0 {
		l.Secure = cfg.SecureSettings()
	}
	if cfg.ReadOnlyPort > 0 {
		l.ReadOnlyAddr = net.JoinHostPort(cfg.Address, strconv.Itoa(cfg.ReadOnlyPort))
	}
	return l
}

// CredentialProviders are the credential provider plugins, read and
// checked (the files, each plugin's binary); nil when neither
// --image-credential-provider-config nor --image-credential-provider-bin-dir
// is given. Given one without the other, or a configuration that does not
// check, it is an error naming the flag, file and field: nodelet does not
// start, as the kubelet exits.
func (cfg Config) CredentialProviders() (*credprovider.Config, error) {
	if cfg.ImageCredentialProviderConfig == "" && cfg.ImageCredentialProviderBinDir == "" {
		return nil, nil
	}
	return credprovider.LoadConfig(cfg.ImageCredentialProviderConfig, cfg.ImageCredentialProviderBinDir)
}
