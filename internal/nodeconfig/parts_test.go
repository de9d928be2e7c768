package nodeconfig

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The optional parts are there exactly when the configuration asks.
func TestOptionalParts(t *testing.T) {
	cfg := DefaultConfig("/var/lib/nodelet")
	cfg.NodeName = "n"
	if m := cfg.ManagedRuntime(); m == nil || m.Containerd.Dir != "/var/lib/nodelet/containerd" {
		t.Errorf("no runtime endpoint: managed runtime %+v, want one in <root>/containerd", m)
	}
	cfg.CgroupDriver = "systemd"
	if m := cfg.ManagedRuntime(); !m.Containerd.SystemdCgroup {
		t.Error("the systemd cgroup driver does not reach the managed containerd")
	}
	cfg.RuntimeEndpoint = "unix:///run/containerd/containerd.sock"
	if m := cfg.ManagedRuntime(); m != nil {
		t.Errorf("a runtime endpoint and a managed runtime: %+v", m)
	}
	if cfg.APIClient() != nil || cfg.ServingCertificate() != nil {
		t.Error("standalone has an API client or a serving certificate")
	}
	cfg.Kubeconfig, cfg.ServerTLSBootstrap = "/etc/kubernetes/kubelet.conf", true
	if c := cfg.APIClient(); c == nil || c.Kubeconfig != cfg.Kubeconfig || c.CertDir != cfg.CertDirectory() {
		t.Errorf("cluster mode: API client %+v", c)
	}
	if s := cfg.ServingCertificate(); s == nil || s.NodeName != "n" {
		t.Errorf("serverTLSBootstrap: serving certificate %+v", s)
	}

	cfg.EventRecordQPS, cfg.EventBurst = 0, 7
	if qps, burst := cfg.EventRateLimit(); qps != -1 || burst != 7 {
		t.Errorf("eventRecordQPS 0: %v, %v; want no limit (-1), 7", qps, burst)
	}
	cfg.EventRecordQPS = 5
	if qps, _ := cfg.EventRateLimit(); qps != 5 {
		t.Errorf("eventRecordQPS 5: %v", qps)
	}

	cfg.Port, cfg.HealthzPort, cfg.ReadOnlyPort = 0, 0, 0
	if l := cfg.Listeners(); l.HealthzAddr != "" || l.Secure.Addr != "" || l.ReadOnlyAddr != "" {
		t.Errorf("every port 0: %+v", l)
	}
	cfg.Port, cfg.HealthzPort, cfg.ReadOnlyPort = 10250, 10248, 10255
	cfg.Address, cfg.HealthzBindAddress = "0.0.0.0", "127.0.0.1"
	l := cfg.Listeners()
	if l.HealthzAddr != "127.0.0.1:10248" || l.Secure.Addr != "0.0.0.0:10250" || l.ReadOnlyAddr != "0.0.0.0:10255" {
		t.Errorf("listeners %q %q %q", l.HealthzAddr, l.Secure.Addr, l.ReadOnlyAddr)
	}
}

// TestManagedRuntimeCNI: the mode picks the CNI directories and whether
// --pod-cidr is used; the flags win in both modes.
func TestManagedRuntimeCNI(t *testing.T) {
	for _, tc := range []struct {
		name            string
		cluster         bool
		confDir, binDir string
		wantConf        string
		wantBins        string
		wantCIDR        string
	}{
		{"standalone defaults", false, "", "", "", "/usr/lib/cni", "10.42.0.0/24"},
		{"cluster defaults", true, "", "", "/etc/cni/net.d", "/opt/cni/bin,/usr/lib/cni", ""},
		{"standalone flags", false, "/x/net.d", "/a, /b,", "/x/net.d", "/a,/b", "10.42.0.0/24"},
		{"cluster flags", true, "/x/net.d", "/a", "/x/net.d", "/a", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig("/var/lib/nodelet")
			cfg.Managed.CNIConfDir, cfg.Managed.CNIBinDir = tc.confDir, tc.binDir
			if tc.cluster {
				cfg.Kubeconfig = "/etc/kubernetes/kubelet.conf"
			}
			m := cfg.ManagedRuntime().Containerd
			if m.CNIConfDir != tc.wantConf || strings.Join(m.CNIBinDirs, ",") != tc.wantBins || m.PodCIDR != tc.wantCIDR {
				t.Errorf("conf dir %q, bin dirs %q, pod CIDR %q; want %q, %q, %q",
					m.CNIConfDir, m.CNIBinDirs, m.PodCIDR, tc.wantConf, tc.wantBins, tc.wantCIDR)
			}
			if got := strings.Join(cfg.StandalonePodCIDRs(), ","); got != tc.wantCIDR {
				t.Errorf("StandalonePodCIDRs = %q, want %q", got, tc.wantCIDR)
			}
		})
	}
}

// Credential provider plugins: none without the flags; either flag needs
// the other; a bad configuration is an error naming the flag.
func TestCredentialProviders(t *testing.T) {
	cfg := DefaultConfig("/var/lib/nodelet")
	if c, err := cfg.CredentialProviders(); c != nil || err != nil {
		t.Errorf("no flags: %+v, %v", c, err)
	}
	cfg.ImageCredentialProviderBinDir = t.TempDir()
	if _, err := cfg.CredentialProviders(); err == nil || !strings.Contains(err.Error(), "--image-credential-provider-config is required") {
		t.Errorf("bin dir only: %v", err)
	}
	cfg.ImageCredentialProviderConfig = filepath.Join(t.TempDir(), "missing.yaml")
	if _, err := cfg.CredentialProviders(); err == nil || !strings.Contains(err.Error(), "--image-credential-provider-config") {
		t.Errorf("missing file: %v", err)
	}
	if err := os.WriteFile(cfg.ImageCredentialProviderConfig, []byte("apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n"+
		"- {name: fake, matchImages: [a.example], defaultCacheDuration: 1m, apiVersion: credentialprovider.kubelet.k8s.io/v1}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cfg.ImageCredentialProviderBinDir, "fake"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if c, err := cfg.CredentialProviders(); err != nil || len(c.Providers) != 1 {
		t.Errorf("good configuration: %+v, %v", c, err)
	}
}
