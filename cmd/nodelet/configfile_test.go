package main

import (
	"bytes"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodelet/nodelet/internal/nodeconfig"
)

// configFrom parses args as `nodelet` would and returns the configuration
// it would run the agent with, and what it logged.
func configFrom(t *testing.T, args ...string) (nodeconfig.Config, string, error) {
	t.Helper()
	cmd, o := newRoot(io.Discard, io.Discard)
	if err := cmd.ParseFlags(append([]string{"--hostname-override", "node-a", "--root-dir", t.TempDir()}, args...)); err != nil {
		t.Fatal(err)
	}
	var logged bytes.Buffer
	cfg, err := o.config(cmd.Flags(), slog.New(slog.NewTextHandler(&logged, nil)))
	return cfg, logged.String(), err
}

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	doc := "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n" + body
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// Flags given on the command line override the file; the file overrides
// the defaults; what neither sets keeps the default.
func TestConfigFilePrecedence(t *testing.T) {
	path := writeConfig(t, `maxPods: 50
syncFrequency: 30s
port: 10260
containerLogMaxSize: 50Mi
staticPodURL: https://manifests.example/a.yaml
staticPodURLHeader:
  X-From: [file]
clusterDNS: [10.96.0.10]
registerWithTaints:
- {key: file, effect: NoSchedule}
nodeStatusUpdateFrequency: 20s
kubeAPIQPS: 5
rotateCertificates: true
`)
	cfg, _, err := configFrom(t, "--config", path,
		"--max-pods", "70", "--container-log-max-size", "20Mi", "--manifest-url-header", "X-From:flag",
		"--cluster-dns", "10.0.0.10,10.0.0.11", "--register-with-taints", "flag=x:NoExecute",
		"--node-status-update-frequency", "7s", "--kubeconfig", "/etc/kubernetes/kubelet.conf")
	if err != nil {
		t.Fatal(err)
	}
	for name, got := range map[string][2]any{
		"maxPods (flag)":                   {cfg.MaxPods, 70},
		"syncFrequency (file)":             {cfg.SyncFrequency, 30 * time.Second},
		"port (file)":                      {cfg.Port, 10260},
		"containerLogMaxSize (flag)":       {cfg.ContainerLogMaxSize, int64(20 << 20)},
		"staticPodURL (file)":              {cfg.ManifestURL, "https://manifests.example/a.yaml"},
		"staticPodURLHeader (flag)":        {strings.Join(cfg.ManifestURLHeader["X-From"], ","), "flag"},
		"clusterDNS (flag)":                {strings.Join(cfg.ClusterDNS, ","), "10.0.0.10,10.0.0.11"},
		"taints (flag)":                    {len(cfg.RegisterWithTaints) == 1 && cfg.RegisterWithTaints[0].Key == "flag", true},
		"nodeStatusUpdateFrequency (flag)": {cfg.NodeStatusUpdateFrequency, 7 * time.Second},
		// The file set only the update frequency: reports follow it.
		"nodeStatusReportFrequency (file rule)": {cfg.NodeStatusReportFrequency, 20 * time.Second},
		"kubeAPIQPS (file)":                     {cfg.KubeAPIQPS, int32(5)},
		"kubeAPIBurst (default)":                {cfg.KubeAPIBurst, int32(100)},
		"rotateCertificates (file)":             {cfg.RotateCertificates, true},
		"fileCheckFrequency (default)":          {cfg.FileCheckFrequency, 20 * time.Second},
		"certDir (default)":                     {cfg.CertDir, filepath.Join(cfg.RootDir, "pki")},
	} {
		if got[0] != got[1] {
			t.Errorf("%s = %v, want %v", name, got[0], got[1])
		}
	}
}

// A flag given with its default value still overrides the file.
func TestFlagAtItsDefaultOverridesFile(t *testing.T) {
	path := writeConfig(t, "maxPods: 50\nhealthzPort: 0\n")
	cfg, _, err := configFrom(t, "--config", path, "--max-pods", "110")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MaxPods != 110 || cfg.HealthzPort != 0 {
		t.Errorf("maxPods %d (want the flag's 110), healthzPort %d (want the file's 0)", cfg.MaxPods, cfg.HealthzPort)
	}
}

// A file nodelet cannot read is an error naming it and the field; fields
// it does not implement are warnings in the log, and it runs.
func TestConfigFileErrorsAndWarnings(t *testing.T) {
	_, _, err := configFrom(t, "--config", writeConfig(t, "maxPodz: 3\n"))
	if err == nil || !strings.Contains(err.Error(), "config.yaml") || !strings.Contains(err.Error(), `unknown field "maxPodz"`) {
		t.Errorf("unknown field: %v", err)
	}
	_, _, err = configFrom(t, "--config", filepath.Join(t.TempDir(), "none.yaml"))
	if err == nil || !strings.Contains(err.Error(), "--config") {
		t.Errorf("missing file: %v", err)
	}
	_, logged, err := configFrom(t, "--config", writeConfig(t, "memoryManagerPolicy: Static\ncpuManagerPolicyOptions:\n  full-pcpus-only: \"true\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, field := range []string{"memoryManagerPolicy", "cpuManagerPolicyOptions"} {
		if !strings.Contains(logged, "level=WARN") || !strings.Contains(logged, field+" is not implemented") {
			t.Errorf("no warning about %s in %q", field, logged)
		}
	}
}

// Allocatable is the machine's capacity less the reservations and the
// hard eviction threshold.
func TestAllocatableFromFlags(t *testing.T) {
	cfg, _, err := configFrom(t, "--system-reserved", "memory=1Gi,cpu=100m", "--kube-reserved", "memory=512Mi",
		"--eviction-hard", "memory.available<256Mi")
	if err != nil {
		t.Fatal(err)
	}
	mem := cfg.Capacity[v1.ResourceMemory]
	want := mem.DeepCopy()
	want.Sub(resource.MustParse("1792Mi"))
	if got := cfg.Allocatable[v1.ResourceMemory]; got.Cmp(want) != 0 {
		t.Errorf("allocatable memory %s, want %s (capacity %s)", got.String(), want.String(), mem.String())
	}
	if got := cfg.Allocatable[v1.ResourceCPU]; got.MilliValue() != cfg.Capacity.Cpu().MilliValue()-100 {
		t.Errorf("allocatable cpu %s", got.String())
	}
	if cfg.MemoryCapacity != mem.Value() {
		t.Errorf("memory capacity %d, want %d", cfg.MemoryCapacity, mem.Value())
	}
	// The defaults: only the kubelet's 100Mi memory threshold.
	cfg, _, err = configFrom(t)
	if err != nil {
		t.Fatal(err)
	}
	mem = cfg.Capacity[v1.ResourceMemory]
	if got := cfg.Allocatable[v1.ResourceMemory]; mem.Value()-got.Value() != 100<<20 {
		t.Errorf("default allocatable memory %s of %s", got.String(), mem.String())
	}
}

// Node labels and taints from flags are checked as the kubelet checks
// them.
func TestClusterFlags(t *testing.T) {
	cfg, _, err := configFrom(t, "--kubeconfig", "/k", "--bootstrap-kubeconfig", "/b", "--cert-dir", "/pki", "--rotate-certificates",
		"--node-labels", "team=infra,node.kubernetes.io/pool=a", "--register-node=false", "--kube-api-qps", "20", "--kube-api-burst", "40")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Kubeconfig != "/k" || cfg.BootstrapKubeconfig != "/b" || cfg.CertDir != "/pki" || !cfg.RotateCertificates ||
		cfg.RegisterNode || cfg.KubeAPIQPS != 20 || cfg.KubeAPIBurst != 40 || cfg.NodeLabels["team"] != "infra" {
		t.Errorf("cluster flags not applied: %+v", cfg.ClusterConfig)
	}
	if _, _, err := configFrom(t, "--register-with-taints", "a=b:Never"); err == nil {
		t.Error("bad taint accepted")
	}
	if _, _, err := configFrom(t, "--eviction-hard", "memory.available=1Gi"); err == nil {
		t.Error("eviction threshold without < accepted")
	}
}

// The SubjectAccessReview cache TTLs: the kubelet's defaults, the file's
// values, and the flags over them, where 0 switches a cache off.
func TestAuthorizationWebhookCacheFlags(t *testing.T) {
	cfg, _, err := configFrom(t)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.AuthorizationWebhookCacheAuthorizedTTL != 5*time.Minute || cfg.AuthorizationWebhookCacheUnauthorizedTTL != 30*time.Second {
		t.Errorf("defaults %v, %v", cfg.AuthorizationWebhookCacheAuthorizedTTL, cfg.AuthorizationWebhookCacheUnauthorizedTTL)
	}
	path := writeConfig(t, "authorization:\n  webhook:\n    cacheAuthorizedTTL: 1m\n    cacheUnauthorizedTTL: 10s\n")
	cfg, _, err = configFrom(t, "--config", path, "--authorization-webhook-cache-unauthorized-ttl=0")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.AuthorizationWebhookCacheAuthorizedTTL != time.Minute || cfg.AuthorizationWebhookCacheUnauthorizedTTL != 0 {
		t.Errorf("file and flag: %v, %v", cfg.AuthorizationWebhookCacheAuthorizedTTL, cfg.AuthorizationWebhookCacheUnauthorizedTTL)
	}
	if cfg, _, err := configFrom(t, "--authorization-webhook-cache-authorized-ttl=-1s"); err != nil {
		t.Fatal(err)
	} else if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "authorization-webhook-cache") {
		t.Errorf("negative TTL: %v", err)
	}
}

// Every flag of the brief exists with the kubelet's name.
func TestKubeletFlagNames(t *testing.T) {
	f := newRootCommand(io.Discard, io.Discard).Flags()
	for _, name := range []string{"config", "kubeconfig", "bootstrap-kubeconfig", "cert-dir", "rotate-certificates", "node-labels",
		"register-node", "register-with-taints", "kube-api-qps", "kube-api-burst", "node-status-update-frequency",
		"system-reserved", "kube-reserved", "eviction-hard", "cluster-dns", "cluster-domain", "resolv-conf"} {
		if f.Lookup(name) == nil {
			t.Errorf("no --%s", name)
		}
	}
	if got := f.Lookup("register-node").DefValue; got != "true" {
		t.Errorf("--register-node defaults to %s", got)
	}
	if got := f.Lookup("kube-api-qps").DefValue; !slices.Contains([]string{"50"}, got) {
		t.Errorf("--kube-api-qps defaults to %s", got)
	}
}

// The pod cgroup settings come from the file, and the kubelet's flags
// win over it.
func TestConfigFileCgroupSettings(t *testing.T) {
	path := writeConfig(t, "cgroupDriver: systemd\ncgroupsPerQOS: false\npodPidsLimit: 100\ncgroupRoot: /from-file\n")
	cfg, _, err := configFrom(t, "--config", path)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.CgroupDriver != "systemd" || cfg.CgroupsPerQOS || cfg.PodPidsLimit != 100 || cfg.CgroupRoot != "/from-file" || cfg.CgroupMountDir != "/sys/fs/cgroup" {
		t.Errorf("from the file: %q %v %d %q %q", cfg.CgroupDriver, cfg.CgroupsPerQOS, cfg.PodPidsLimit, cfg.CgroupRoot, cfg.CgroupMountDir)
	}
	cfg, _, err = configFrom(t, "--config", path, "--cgroup-driver", "cgroupfs", "--cgroups-per-qos=true", "--pod-max-pids", "7",
		"--cgroup-root", "/nodelet-a", "--cgroup-root-dir", "/mnt/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.CgroupDriver != "cgroupfs" || !cfg.CgroupsPerQOS || cfg.PodPidsLimit != 7 || cfg.CgroupRoot != "/nodelet-a" || cfg.CgroupMountDir != "/mnt/cgroup" {
		t.Errorf("flags over the file: %q %v %d %q %q", cfg.CgroupDriver, cfg.CgroupsPerQOS, cfg.PodPidsLimit, cfg.CgroupRoot, cfg.CgroupMountDir)
	}
	cfg, _, err = configFrom(t, "--cgroup-root", "nodelet-a")
	if err == nil {
		err = cfg.Validate()
	}
	if err == nil || !strings.Contains(err.Error(), "--cgroup-root") {
		t.Errorf("--cgroup-root nodelet-a: %v", err)
	}
	cfg, _, err = configFrom(t, "--cgroup-driver", "upstart")
	if err == nil {
		err = cfg.Validate()
	}
	if err == nil || !strings.Contains(err.Error(), "--cgroup-driver") {
		t.Errorf("--cgroup-driver upstart: %v", err)
	}
}

// EventedPLEG is on by default and turned off by the kubelet's feature gate,
// in the file or by --feature-gates (which wins); gates nodelet does not
// know are a warning in the file and an error on the command line.
func TestFeatureGates(t *testing.T) {
	cfg, _, err := configFrom(t)
	if err != nil || !cfg.EventedPLEG {
		t.Fatalf("default: EventedPLEG %v, err %v; want on", cfg.EventedPLEG, err)
	}
	cfg, _, err = configFrom(t, "--feature-gates", "EventedPLEG=false")
	if err != nil || cfg.EventedPLEG {
		t.Errorf("--feature-gates EventedPLEG=false: EventedPLEG %v, err %v; want off", cfg.EventedPLEG, err)
	}
	path := writeConfig(t, "featureGates:\n  EventedPLEG: false\n  SomeOtherGate: true\n")
	cfg, logged, err := configFrom(t, "--config", path)
	if err != nil || cfg.EventedPLEG || !strings.Contains(logged, "featureGates.SomeOtherGate is not implemented") {
		t.Errorf("file: EventedPLEG %v, err %v, logged %q; want off and a warning for SomeOtherGate", cfg.EventedPLEG, err, logged)
	}
	cfg, _, err = configFrom(t, "--config", path, "--feature-gates", "EventedPLEG=true")
	if err != nil || !cfg.EventedPLEG {
		t.Errorf("flag over file: EventedPLEG %v, err %v; want on", cfg.EventedPLEG, err)
	}
	for _, bad := range []string{"NoSuchGate=true", "EventedPLEG=maybe"} {
		cmd, o := newRoot(io.Discard, io.Discard)
		err := cmd.ParseFlags([]string{"--hostname-override", "node-a", "--root-dir", t.TempDir(), "--feature-gates", bad})
		if err == nil {
			_, err = o.config(cmd.Flags(), slog.New(slog.DiscardHandler))
		}
		if err == nil {
			t.Errorf("--feature-gates %s: no error", bad)
		}
	}
}

// The image garbage collector's settings come from the kubelet's flags and
// file fields, the flags winning; the kubelet's checks apply.
func TestImageGCSettings(t *testing.T) {
	cfg, _, err := configFrom(t)
	if err != nil {
		t.Fatal(err)
	}
	if p := cfg.ImageGC; p.HighThresholdPercent != 85 || p.LowThresholdPercent != 80 || p.MinAge != 2*time.Minute || p.MaxAge != 0 {
		t.Errorf("defaults %+v, want the kubelet's 85, 80, 2m, 0", p)
	}
	path := writeConfig(t, "imageGCHighThresholdPercent: 70\nimageGCLowThresholdPercent: 50\nimageMinimumGCAge: 1m\nimageMaximumGCAge: 24h\n")
	cfg, _, err = configFrom(t, "--config", path, "--image-gc-high-threshold", "60", "--minimum-image-gc-age", "30s")
	if err != nil {
		t.Fatal(err)
	}
	if p := cfg.ImageGC; p.HighThresholdPercent != 60 || p.LowThresholdPercent != 50 || p.MinAge != 30*time.Second || p.MaxAge != 24*time.Hour {
		t.Errorf("file and flags: %+v, want 60 (flag), 50 (file), 30s (flag), 24h (file)", p)
	}
	cfg, _, err = configFrom(t, "--image-gc-high-threshold", "80", "--image-gc-low-threshold", "80")
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "imageGCLowThresholdPercent (--image-gc-low-threshold) 80 must be less than") {
		t.Errorf("Validate: %v, want the low threshold refused", err)
	}
}

// The credential provider flags reach the configuration by the kubelet's
// names.
func TestCredentialProviderFlags(t *testing.T) {
	cfg, _, err := configFrom(t, "--image-credential-provider-config", "/etc/nodelet/credential-providers.yaml",
		"--image-credential-provider-bin-dir", "/usr/libexec/nodelet/credential-providers")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ImageCredentialProviderConfig != "/etc/nodelet/credential-providers.yaml" || cfg.ImageCredentialProviderBinDir != "/usr/libexec/nodelet/credential-providers" {
		t.Errorf("credential provider flags not applied: %q %q", cfg.ImageCredentialProviderConfig, cfg.ImageCredentialProviderBinDir)
	}
}
