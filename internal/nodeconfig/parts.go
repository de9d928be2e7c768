package nodeconfig

import (
	"net"
	"path/filepath"
	"strconv"

	"github.com/nodelet/nodelet/internal/cluster/certs"
	"github.com/nodelet/nodelet/internal/serve/server"
)

// The settings of the parts the configuration makes optional, decided
// here so that the agent, which wires them, only asks whether there is
// one (nil when there is none).

// ManagedRuntime is the runtime nodelet runs itself, its containerd in
// <RootDir>/containerd placing containers as nodelet places pods (the
// cgroup driver); nil when RuntimeEndpoint names the node's own runtime.
// The agent fills in Containerd.Mirror once the registry is up.
func (cfg Config) ManagedRuntime() *ManagedConfig {
	if cfg.RuntimeEndpoint != "" {
		return nil
	}
	m := cfg.Managed
	m.Containerd.Dir = filepath.Join(cfg.RootDir, "containerd")
	m.Containerd.SystemdCgroup = cfg.CgroupDriver == "systemd"
	return &m
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
