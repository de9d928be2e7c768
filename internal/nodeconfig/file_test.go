package nodeconfig

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

var rewrite = flag.Bool("rewrite", false, "rewrite golden files in testdata/")

// fileView is what a KubeletConfiguration file can set of a Config, for
// the golden files.
type fileView struct {
	PodManifestPath, PodLogsDir, ManifestURL            string
	ManifestURLHeader                                   map[string][]string
	SyncFrequency, FileCheckFrequency                   string
	HTTPCheckFrequency                                  string
	Address                                             string
	Port, ReadOnlyPort, HealthzPort                     int
	HealthzBindAddress, TLSCertFile, TLSPrivateKeyFile  string
	ClientCAFile                                        string
	AnonymousAuth                                       bool
	AuthorizationMode                                   string
	AuthenticationTokenWebhook                          bool
	AuthenticationTokenWebhookCacheTTL                  string
	MaxPods                                             int
	PodCIDR, ResolvConf, ClusterDomain, RuntimeEndpoint string
	ClusterDNS                                          []string
	ContainerLogMaxSize                                 int64
	ContainerLogMaxFiles                                int
	ContainerLogMonitorInterval                         string
	VolumeStatsAggPeriod                                string
	LocalStorageCapacityIsolation                       bool
	SystemReserved, KubeReserved                        map[string]string
	EvictionHard                                        map[string]string
	ImageGC                                             string
	RotateCertificates, ServerTLSBootstrap              bool
	RegisterNode                                        bool
	RegisterWithTaints                                  []v1.Taint
	KubeAPIQPS, KubeAPIBurst                            int32
	KubeAPIContentType                                  string
	NodeStatusUpdateFrequency                           string
	NodeStatusReportFrequency                           string
	NodeLeaseDurationSeconds                            int32
	CgroupsPerQOS                                       bool
	CgroupDriver                                        string
	PodPidsLimit                                        int64
	MemoryQoS                                           bool
	MemoryThrottlingFactor                              float64
	Warnings                                            []string
}

func view(cfg Config, warnings []string) fileView {
	return fileView{
		PodManifestPath: cfg.PodManifestPath, PodLogsDir: cfg.PodLogsDir, ManifestURL: cfg.ManifestURL, ManifestURLHeader: cfg.ManifestURLHeader,
		SyncFrequency: cfg.SyncFrequency.String(), FileCheckFrequency: cfg.FileCheckFrequency.String(), HTTPCheckFrequency: cfg.HTTPCheckFrequency.String(),
		Address: cfg.Address, Port: cfg.Port, ReadOnlyPort: cfg.ReadOnlyPort, HealthzPort: cfg.HealthzPort,
		HealthzBindAddress: cfg.HealthzBindAddress, TLSCertFile: cfg.TLSCertFile, TLSPrivateKeyFile: cfg.TLSPrivateKeyFile,
		ClientCAFile: cfg.ClientCAFile, AnonymousAuth: cfg.AnonymousAuth, AuthorizationMode: cfg.SecureAuth().AuthorizationMode,
		AuthenticationTokenWebhook: cfg.TokenWebhook(), AuthenticationTokenWebhookCacheTTL: cfg.AuthenticationTokenWebhookCacheTTL.String(),
		MaxPods: cfg.MaxPods, PodCIDR: cfg.Managed.Containerd.PodCIDR, ResolvConf: cfg.ResolvConf, ClusterDomain: cfg.ClusterDomain,
		RuntimeEndpoint: cfg.RuntimeEndpoint, ClusterDNS: cfg.ClusterDNS,
		ContainerLogMaxSize: cfg.ContainerLogMaxSize, ContainerLogMaxFiles: cfg.ContainerLogMaxFiles,
		ContainerLogMonitorInterval: cfg.ContainerLogMonitorInterval.String(),
		VolumeStatsAggPeriod:        cfg.VolumeStatsAggPeriod.String(), LocalStorageCapacityIsolation: cfg.LocalStorageCapacityIsolation,
		SystemReserved: reservedMap(cfg.SystemReserved), KubeReserved: reservedMap(cfg.KubeReserved), EvictionHard: cfg.EvictionHard,
		ImageGC: fmt.Sprintf("high %d%%, low %d%%, minimum age %v, maximum age %v", cfg.ImageGC.HighThresholdPercent,
			cfg.ImageGC.LowThresholdPercent, cfg.ImageGC.MinAge, cfg.ImageGC.MaxAge),
		RotateCertificates: cfg.RotateCertificates, ServerTLSBootstrap: cfg.ServerTLSBootstrap, RegisterNode: cfg.RegisterNode,
		RegisterWithTaints: cfg.RegisterWithTaints, KubeAPIQPS: cfg.KubeAPIQPS, KubeAPIBurst: cfg.KubeAPIBurst,
		KubeAPIContentType: cfg.KubeAPIContentType, NodeStatusUpdateFrequency: cfg.NodeStatusUpdateFrequency.String(),
		NodeStatusReportFrequency: cfg.NodeStatusReportFrequency.String(), NodeLeaseDurationSeconds: cfg.NodeLeaseDurationSeconds,
		CgroupsPerQOS: cfg.CgroupsPerQOS, CgroupDriver: cfg.CgroupDriver, PodPidsLimit: cfg.PodPidsLimit, MemoryQoS: cfg.MemoryQoS,
		MemoryThrottlingFactor: cfg.MemoryThrottlingFactor,
		Warnings:               warnings,
	}
}

func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *rewrite {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -rewrite to write it)", err)
	}
	if string(got) != string(want) {
		t.Errorf("differs from %s (run go test -rewrite to accept):\n%s", path, got)
	}
}

// A kubeadm node's file, and one tuned as operators tune them, map to the
// Config in the golden files: every field nodelet implements, the
// defaults where the file leaves a field out or at zero, and one warning
// per field set that nodelet does not implement.
func TestFileMapsToConfig(t *testing.T) {
	for _, name := range []string{"kubeadm", "tuned"} {
		t.Run(name, func(t *testing.T) {
			f, err := ReadFile(filepath.Join("testdata", name+".yaml"))
			if err != nil {
				t.Fatal(err)
			}
			f.Path = name + ".yaml" // stable in the golden file
			cfg := DefaultConfig("/var/lib/nodelet")
			warnings, err := f.Apply(&cfg)
			if err != nil {
				t.Fatal(err)
			}
			got, err := json.MarshalIndent(view(cfg, warnings), "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			checkGolden(t, name+".golden", append(got, '\n'))
		})
	}
}

// The kubeadm file loads without a warning: its systemd cgroup driver is
// taken, and all the zero values kubeadm writes are defaults.
func TestKubeadmFileLoads(t *testing.T) {
	f, err := ReadFile(filepath.Join("testdata", "kubeadm.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig("/var/lib/nodelet")
	warnings, err := f.Apply(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(warnings) != 0 {
		t.Errorf("warnings %q, want none", warnings)
	}
	if cfg.CgroupDriver != "systemd" {
		t.Errorf("cgroupDriver %q, want systemd", cfg.CgroupDriver)
	}
	cfg.NodeName = "node-a"
	cfg.Kubeconfig = "/etc/kubernetes/kubelet.conf"
	if err := cfg.Validate(); err != nil {
		t.Errorf("kubeadm file does not validate: %v", err)
	}
	// Standalone too: rotateCertificates and Webhook do not stop it.
	cfg.Kubeconfig = ""
	if err := cfg.Validate(); err != nil {
		t.Errorf("kubeadm file standalone: %v", err)
	}
}

// Strict decoding: what the kubelet would refuse, nodelet refuses, naming
// the file and the field.
func TestFileStrictErrors(t *testing.T) {
	head := "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
	for _, tc := range []struct{ name, doc, want string }{
		{"unknown field", head + "maxPod: 10\n", `unknown field "maxPod"`},
		{"unknown nested field", head + "authentication:\n  x509:\n    clientCAFiles: /x\n", `unknown field "authentication.x509.clientCAFiles"`},
		{"duplicate field", head + "maxPods: 10\nmaxPods: 20\n", `"maxPods"`},
		{"wrong type", head + "maxPods: lots\n", "maxPods"},
		{"bad duration", head + "syncFrequency: often\n", "often"},
		{"wrong kind", "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeProxyConfiguration\n", `kind "KubeProxyConfiguration"`},
		{"wrong version", "apiVersion: kubelet.config.k8s.io/v1alpha1\nkind: KubeletConfiguration\n", `apiVersion "kubelet.config.k8s.io/v1alpha1"`},
		{"no object", "- a\n- b\n", "not a KubeletConfiguration"},
		{"not yaml", "{{", "--config"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeFile("/etc/nodelet/config.yaml", []byte(tc.doc))
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "/etc/nodelet/config.yaml") {
				t.Errorf("err = %v, want one naming the file and %q", err, tc.want)
			}
		})
	}
}

// Values that decode but do not parse are errors naming the field.
func TestFileValueErrors(t *testing.T) {
	head := "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
	for _, tc := range []struct{ name, doc, want string }{
		{"log size", head + "containerLogMaxSize: big\n", "containerLogMaxSize"},
		{"reserved resource", head + "systemReserved:\n  gpu: \"1\"\n", `systemReserved: cannot reserve "gpu"`},
		{"reserved quantity", head + "kubeReserved:\n  memory: lots\n", "kubeReserved memory"},
		{"eviction signal", head + "evictionHard:\n  memory.free: 1Gi\n", `unknown signal "memory.free"`},
		{"eviction value", head + "evictionHard:\n  memory.available: 120%\n", "memory.available"},
		{"taint effect", head + "registerWithTaints:\n- key: a\n  effect: Sometimes\n", `effect "Sometimes"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := DecodeFile("c.yaml", []byte(tc.doc))
			if err != nil {
				t.Fatal(err)
			}
			cfg := DefaultConfig("/var/lib/nodelet")
			_, err = f.Apply(&cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "c.yaml") {
				t.Errorf("err = %v, want one naming the file and %q", err, tc.want)
			}
		})
	}
}

// Fields the kubelet knows and nodelet does not implement load with one
// warning each, unless set to a value nodelet behaves as anyway.
func TestFileUnimplementedFieldsWarn(t *testing.T) {
	head := "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
	for _, tc := range []struct {
		doc  string
		want string // "" for no warning
	}{
		{"cgroupDriver: systemd\n", ""},
		{"cgroupDriver: cgroupfs\n", ""},
		{"failSwapOn: false\n", ""},
		{"memorySwap:\n  swapBehavior: LimitedSwap\n", ""},
		{"cgroupsPerQOS: false\n", ""},
		{"featureGates:\n  Foo: true\n", "featureGates.Foo"},
		{"featureGates:\n  MemoryQoS: true\n", ""},
		{"memoryReservationPolicy: None\n", ""},
		{"memoryReservationPolicy: TieredReservation\n", "memoryReservationPolicy"},
		{"featureGates:\n  EventedPLEG: false\n", ""},
		{"imageGCHighThresholdPercent: 90\n", ""},
		{"shutdownGracePeriod: 30s\n", ""},
		{"shutdownGracePeriod: 0s\n", ""},
		{"authorization:\n  mode: Webhook\n  webhook:\n    cacheAuthorizedTTL: 1m\n", ""},
		{"enableSystemLogHandler: false\n", ""},
		{"logging:\n  verbosity: 4\n", "logging"},
	} {
		f, err := DecodeFile("c.yaml", []byte(head+tc.doc))
		if err != nil {
			t.Fatalf("%q: %v", tc.doc, err)
		}
		cfg := DefaultConfig("/var/lib/nodelet")
		warnings, err := f.Apply(&cfg)
		if err != nil {
			t.Fatalf("%q: %v", tc.doc, err)
		}
		switch {
		case tc.want == "" && len(warnings) != 0:
			t.Errorf("%q: warnings %q, want none", tc.doc, warnings)
		case tc.want != "" && (len(warnings) != 1 || !strings.Contains(warnings[0], tc.want+" is not implemented")):
			t.Errorf("%q: warnings %q, want one about %s", tc.doc, warnings, tc.want)
		}
	}
}

// authorization.webhook's cache TTLs and enableSystemLogHandler are taken
// from the file; 0s there is unset, as the kubelet's defaulting reads it.
func TestFileAuthorizationWebhookAndSystemLogs(t *testing.T) {
	head := "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
	for _, tc := range []struct {
		doc                string
		authorized, denied time.Duration
		systemLogs         string
	}{
		{"", 5 * time.Minute, 30 * time.Second, "/var/log"},
		{"authorization:\n  webhook:\n    cacheAuthorizedTTL: 1m\n    cacheUnauthorizedTTL: 10s\n", time.Minute, 10 * time.Second, "/var/log"},
		{"authorization:\n  webhook:\n    cacheAuthorizedTTL: 0s\n    cacheUnauthorizedTTL: 0s\n", 5 * time.Minute, 30 * time.Second, "/var/log"},
		{"enableSystemLogHandler: false\n", 5 * time.Minute, 30 * time.Second, ""},
		{"enableSystemLogHandler: true\n", 5 * time.Minute, 30 * time.Second, "/var/log"},
	} {
		f, err := DecodeFile("c.yaml", []byte(head+tc.doc))
		if err != nil {
			t.Fatalf("%q: %v", tc.doc, err)
		}
		cfg := DefaultConfig("/var/lib/nodelet")
		if _, err := f.Apply(&cfg); err != nil {
			t.Fatalf("%q: %v", tc.doc, err)
		}
		if cfg.AuthorizationWebhookCacheAuthorizedTTL != tc.authorized || cfg.AuthorizationWebhookCacheUnauthorizedTTL != tc.denied ||
			cfg.SystemLogs() != tc.systemLogs {
			t.Errorf("%q: authorized %v, unauthorized %v, system logs %q", tc.doc, cfg.AuthorizationWebhookCacheAuthorizedTTL,
				cfg.AuthorizationWebhookCacheUnauthorizedTTL, cfg.SystemLogs())
		}
	}
}

// The pod cgroup settings are taken from the file, and checked.
func TestFileCgroupSettings(t *testing.T) {
	head := "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
	f, err := DecodeFile("c.yaml", []byte(head+"cgroupsPerQOS: false\ncgroupDriver: systemd\npodPidsLimit: 4096\n"+
		"memoryThrottlingFactor: 0.8\nfeatureGates:\n  MemoryQoS: true\ncgroupRoot: /nodelet-a\n"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig("/var/lib/nodelet")
	if !cfg.CgroupsPerQOS || cfg.CgroupDriver != "cgroupfs" || cfg.PodPidsLimit != -1 || cfg.MemoryQoS || cfg.MemoryThrottlingFactor != 0.9 {
		t.Errorf("defaults: %v %q %d %v %v", cfg.CgroupsPerQOS, cfg.CgroupDriver, cfg.PodPidsLimit, cfg.MemoryQoS, cfg.MemoryThrottlingFactor)
	}
	if _, err := f.Apply(&cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.CgroupsPerQOS || cfg.CgroupDriver != "systemd" || cfg.PodPidsLimit != 4096 || !cfg.MemoryQoS || cfg.MemoryThrottlingFactor != 0.8 || cfg.CgroupRoot != "/nodelet-a" {
		t.Errorf("applied: %v %q %d %v %v %q", cfg.CgroupsPerQOS, cfg.CgroupDriver, cfg.PodPidsLimit, cfg.MemoryQoS, cfg.MemoryThrottlingFactor, cfg.CgroupRoot)
	}
	cfg.NodeName = "n"
	perQOS := func(root string) func(*Config) {
		return func(c *Config) { c.CgroupsPerQOS, c.CgroupRoot = true, root }
	}
	for _, bad := range []func(*Config){
		func(c *Config) { c.CgroupDriver = "upstart" },
		func(c *Config) { c.MemoryThrottlingFactor = 0 },
		func(c *Config) { c.MemoryThrottlingFactor = 1.5 },
		perQOS(""), perQOS("nodelet-a"), perQOS("/a/../b"), perQOS("/a b"), perQOS("/system.slice"),
	} {
		c := cfg
		bad(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%q %v %q validates", c.CgroupDriver, c.MemoryThrottlingFactor, c.CgroupRoot)
		}
	}
	if err := cfg.Validate(); err != nil {
		t.Error(err)
	}
	for _, good := range []func(*Config){perQOS("/"), perQOS("/nodelet-a"), perQOS("/a/b")} {
		c := cfg
		good(&c)
		if err := c.Validate(); err != nil {
			t.Errorf("%q: %v", c.CgroupRoot, err)
		}
	}
	// /system.slice is a cgroupfs name like any other.
	c := cfg
	c.CgroupsPerQOS, c.CgroupDriver, c.CgroupRoot = true, "cgroupfs", "/system.slice"
	if err := c.Validate(); err != nil {
		t.Errorf("cgroupfs /system.slice: %v", err)
	}
}

// A file that sets only nodeStatusUpdateFrequency reports at that
// frequency too, as the kubelet defaults it; evictionHard replaces the
// defaults unless merged.
func TestFileKubeletDefaultingRules(t *testing.T) {
	head := "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
	apply := func(doc string) Config {
		t.Helper()
		f, err := DecodeFile("c.yaml", []byte(head+doc))
		if err != nil {
			t.Fatal(err)
		}
		cfg := DefaultConfig("/var/lib/nodelet")
		if _, err := f.Apply(&cfg); err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	if cfg := apply("nodeStatusUpdateFrequency: 20s\n"); cfg.NodeStatusReportFrequency != 20*time.Second {
		t.Errorf("report frequency %s, want the update frequency", cfg.NodeStatusReportFrequency)
	}
	if cfg := apply(""); cfg.NodeStatusUpdateFrequency != 10*time.Second || cfg.NodeStatusReportFrequency != 5*time.Minute || cfg.NodeLeaseDurationSeconds != 40 {
		t.Errorf("defaults: %s %s %d", cfg.NodeStatusUpdateFrequency, cfg.NodeStatusReportFrequency, cfg.NodeLeaseDurationSeconds)
	}
	if cfg := apply("evictionHard:\n  memory.available: 1Gi\n"); fmt.Sprint(cfg.EvictionHard) != "map[memory.available:1Gi]" {
		t.Errorf("evictionHard %v, want only the file's", cfg.EvictionHard)
	}
	if cfg := apply("evictionHard:\n  memory.available: 1Gi\nmergeDefaultEvictionSettings: true\n"); len(cfg.EvictionHard) != 5 || cfg.EvictionHard["memory.available"] != "1Gi" {
		t.Errorf("merged evictionHard %v", cfg.EvictionHard)
	}
	if cfg := apply("enableServer: false\n"); cfg.Port != 0 {
		t.Errorf("enableServer false: port %d", cfg.Port)
	}
	if cfg := apply("healthzPort: 0\nregisterNode: false\nkubeAPIQPS: 0\n"); cfg.HealthzPort != 0 || cfg.RegisterNode || cfg.KubeAPIQPS != 0 {
		t.Errorf("pointer fields set to zero are applied: healthz %d registerNode %v qps %d", cfg.HealthzPort, cfg.RegisterNode, cfg.KubeAPIQPS)
	}
}

// A file larger than 1 MiB is refused, not read whole.
func TestReadFileBounded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "big.yaml")
	big := "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n# " + strings.Repeat("x", maxFileSize) + "\n"
	if err := os.WriteFile(path, []byte(big), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFile(path); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("err = %v", err)
	}
	if _, err := ReadFile(filepath.Join(t.TempDir(), "missing.yaml")); err == nil || !strings.Contains(err.Error(), "--config") {
		t.Errorf("missing: %v", err)
	}
}

// userNamespaces.idsPerPod is read from the file without a warning and
// checked by the kubelet's rules.
func TestFileUserNamespacesIDsPerPod(t *testing.T) {
	head := "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
	for _, tc := range []struct {
		ids     string
		want    int64
		wantErr string
	}{
		{"", 65536, ""},
		{"userNamespaces:\n  idsPerPod: 131072\n", 131072, ""},
		{"userNamespaces:\n  idsPerPod: 1000\n", 1000, "userNamespaces.idsPerPod 1000 must be a multiple of 65536"},
		{"userNamespaces:\n  idsPerPod: 0\n", 0, "userNamespaces.idsPerPod 0"},
		{"userNamespaces:\n  idsPerPod: 4295032832\n", 4295032832, "at most 4294967295"},
	} {
		f, err := DecodeFile("c.yaml", []byte(head+tc.ids))
		if err != nil {
			t.Fatal(err)
		}
		cfg := DefaultConfig("/var/lib/nodelet")
		cfg.NodeName = "node-1"
		warnings, err := f.Apply(&cfg)
		if err != nil || len(warnings) != 0 || cfg.UserNamespaces.IDsPerPod != tc.want {
			t.Errorf("%q: idsPerPod %d, warnings %q, err %v", tc.ids, cfg.UserNamespaces.IDsPerPod, warnings, err)
		}
		err = cfg.Validate()
		if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("%q: Validate = %v, want %q", tc.ids, err, tc.wantErr)
		}
	}
}

// The graceful node shutdown settings load by the kubelet's names, are
// checked as the kubelet checks them and show in /configz.
func TestFileShutdown(t *testing.T) {
	head := "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
	for _, tc := range []struct {
		doc     string
		periods string // fmt of ShutdownPeriods
		invalid string
	}{
		{"shutdownGracePeriod: 30s\nshutdownGracePeriodCriticalPods: 10s\n", "[{0 20s} {2000000000 10s}]", ""},
		{"shutdownGracePeriod: 30s\n", "[{0 30s} {2000000000 0s}]", ""},
		{"", "[]", ""},
		{"shutdownGracePeriod: 10s\nshutdownGracePeriodCriticalPods: 20s\n", "", "must be <= shutdownGracePeriod"},
		{"shutdownGracePeriod: 500ms\n", "", "either zero or otherwise >= 1 sec"},
		{"shutdownGracePeriodByPodPriority:\n- priority: 100000\n  shutdownGracePeriodSeconds: 5\n- priority: 0\n  shutdownGracePeriodSeconds: 20\n",
			"[{0 20s} {100000 5s}]", ""},
		{"shutdownGracePeriod: 30s\nshutdownGracePeriodByPodPriority:\n- priority: 0\n  shutdownGracePeriodSeconds: 20\n", "", "cannot specify both"},
	} {
		f, err := DecodeFile("c.yaml", []byte(head+tc.doc))
		if err != nil {
			t.Fatalf("%q: %v", tc.doc, err)
		}
		cfg := DefaultConfig("/var/lib/nodelet")
		cfg.NodeName = "n"
		if warnings, err := f.Apply(&cfg); err != nil || len(warnings) != 0 {
			t.Fatalf("%q: %v %q", tc.doc, err, warnings)
		}
		err = cfg.Validate()
		if tc.invalid != "" {
			if err == nil || !strings.Contains(err.Error(), tc.invalid) {
				t.Errorf("%q: %v, want %q", tc.doc, err, tc.invalid)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%q: %v", tc.doc, err)
		}
		if got := fmt.Sprint(cfg.ShutdownPeriods()); got != tc.periods {
			t.Errorf("%q: periods %s, want %s", tc.doc, got, tc.periods)
		}
		c := Configz(cfg)
		if c.ShutdownGracePeriod.Duration != cfg.ShutdownGracePeriod || len(c.ShutdownGracePeriodByPodPriority) != len(cfg.ShutdownGracePeriodByPodPriority) {
			t.Errorf("%q: /configz %v %v", tc.doc, c.ShutdownGracePeriod, c.ShutdownGracePeriodByPodPriority)
		}
	}
}

// imagePullCredentialsVerificationPolicy and
// preloadedImagesVerificationAllowlist load by the kubelet's names, are
// checked with its rules (and the KubeletEnsureSecretPulledImages gate)
// and reach the pull records' options and /configz.
func TestFilePullVerification(t *testing.T) {
	head := "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
	for _, tc := range []struct {
		doc       string
		policy    string
		allowlist []string
		enabled   bool
		wantErr   string
	}{
		{doc: "", policy: "NeverVerifyPreloadedImages", enabled: true},
		{doc: "imagePullCredentialsVerificationPolicy: AlwaysVerify\n", policy: "AlwaysVerify", enabled: true},
		{doc: "imagePullCredentialsVerificationPolicy: NeverVerifyAllowlistedImages\npreloadedImagesVerificationAllowlist: [\"registry.k8s.io/*\", \"docker.io/library/busybox\"]\n",
			policy: "NeverVerifyAllowlistedImages", allowlist: []string{"registry.k8s.io/*", "docker.io/library/busybox"}, enabled: true},
		{doc: "imagePullCredentialsVerificationPolicy: Sometimes\n", policy: "Sometimes", enabled: true, wantErr: "Valid options are"},
		{doc: "preloadedImagesVerificationAllowlist: [\"registry.k8s.io/*\"]\n", policy: "NeverVerifyPreloadedImages",
			allowlist: []string{"registry.k8s.io/*"}, enabled: true, wantErr: "can't set `preloadedImagesVerificationAllowlist`"},
		{doc: "imagePullCredentialsVerificationPolicy: NeverVerifyAllowlistedImages\npreloadedImagesVerificationAllowlist: [\"registry.k8s.io/pause:3.10\"]\n",
			policy: "NeverVerifyAllowlistedImages", allowlist: []string{"registry.k8s.io/pause:3.10"}, enabled: true, wantErr: "neither tag nor digest"},
		{doc: "featureGates:\n  KubeletEnsureSecretPulledImages: false\n", policy: "NeverVerifyPreloadedImages"},
		{doc: "featureGates:\n  KubeletEnsureSecretPulledImages: false\nimagePullCredentialsVerificationPolicy: AlwaysVerify\n", policy: "AlwaysVerify",
			wantErr: "must not be set if KubeletEnsureSecretPulledImages feature gate is not enabled"},
	} {
		f, err := DecodeFile("c.yaml", []byte(head+tc.doc))
		if err != nil {
			t.Fatal(err)
		}
		cfg := DefaultConfig("/var/lib/nodelet")
		cfg.NodeName = "node-1"
		warnings, err := f.Apply(&cfg)
		if err != nil || len(warnings) != 0 {
			t.Fatalf("%q: warnings %q, err %v", tc.doc, warnings, err)
		}
		opts := cfg.PullRecordOptions()
		if string(opts.Policy) != tc.policy || !slices.Equal(opts.Allowlist, tc.allowlist) || opts.Enabled != tc.enabled || opts.RootDir != "/var/lib/nodelet" {
			t.Errorf("%q: options %+v", tc.doc, opts)
		}
		err = cfg.Validate()
		if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("%q: Validate = %v, want %q", tc.doc, err, tc.wantErr)
		}
		if z := Configz(cfg); string(z.ImagePullCredentialsVerificationPolicy) != tc.policy || !slices.Equal(z.PreloadedImagesVerificationAllowlist, tc.allowlist) {
			t.Errorf("%q: configz %q %q", tc.doc, z.ImagePullCredentialsVerificationPolicy, z.PreloadedImagesVerificationAllowlist)
		}
	}
}

// failSwapOn is the kubelet's, true by default; memorySwap.swapBehavior
// is NoSwap or LimitedSwap, anything else refused.
func TestFileSwapSettings(t *testing.T) {
	head := "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
	cfg := DefaultConfig("/var/lib/nodelet")
	if !cfg.FailSwapOn || cfg.SwapBehavior != "" {
		t.Errorf("defaults: failSwapOn %v, swapBehavior %q", cfg.FailSwapOn, cfg.SwapBehavior)
	}
	f, err := DecodeFile("c.yaml", []byte(head+"failSwapOn: false\nmemorySwap:\n  swapBehavior: LimitedSwap\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Apply(&cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.FailSwapOn || cfg.SwapBehavior != "LimitedSwap" {
		t.Errorf("applied: failSwapOn %v, swapBehavior %q", cfg.FailSwapOn, cfg.SwapBehavior)
	}
	cfg.NodeName = "n"
	if err := cfg.Validate(); err != nil {
		t.Errorf("LimitedSwap: %v", err)
	}
	cfg.SwapBehavior = "UnlimitedSwap"
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "memorySwap.swapBehavior") {
		t.Errorf("UnlimitedSwap: %v", err)
	}
}

// The CPU and topology managers' settings by the kubelet's names;
// reservedSystemCPUs replaces the cpu of kubeReserved and systemReserved.
func TestFileCPUManagerSettings(t *testing.T) {
	head := "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
	cfg := DefaultConfig("/var/lib/nodelet")
	cfg.NodeName = "n"
	if cfg.CPUManagerPolicy != "none" || cfg.TopologyManagerPolicy != "none" || cfg.CPUManagerReconcilePeriod != 10*time.Second {
		t.Errorf("defaults: %q %q %v", cfg.CPUManagerPolicy, cfg.TopologyManagerPolicy, cfg.CPUManagerReconcilePeriod)
	}
	f, err := DecodeFile("c.yaml", []byte(head+"cpuManagerPolicy: static\ncpuManagerReconcilePeriod: 5s\nreservedSystemCPUs: \"0\"\n"+
		"topologyManagerPolicy: single-numa-node\ntopologyManagerScope: container\nkubeReserved:\n  cpu: 500m\nsystemReserved:\n  cpu: 1500m\n  memory: 1Gi\n"))
	if err != nil {
		t.Fatal(err)
	}
	warnings, err := f.Apply(&cfg)
	if err != nil || len(warnings) != 0 {
		t.Fatalf("apply: %v %v", warnings, err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := cfg.ReserveCPUs(); err != nil {
		t.Fatal(err)
	}
	o := cfg.CPUManagerOptions()
	if o.Policy != "static" || o.TopologyPolicy != "single-numa-node" || o.ReconcilePeriod != 5*time.Second || o.ReservedSystemCPUs.String() != "0" || o.ReservedMilliCPU != 1000 {
		t.Errorf("options %+v", o)
	}
	if q := cfg.SystemReserved[v1.ResourceMemory]; q.String() != "1Gi" {
		t.Errorf("systemReserved memory %s kept?", &q)
	}
	if _, ok := cfg.KubeReserved[v1.ResourceCPU]; ok {
		t.Error("kubeReserved cpu kept")
	}
	for _, bad := range []struct{ field, value, err string }{
		{"cpuManagerPolicy", "dynamic", `cpuManagerPolicy "dynamic"`},
		{"topologyManagerPolicy", "restricted", `topologyManagerPolicy "restricted"`},
		{"reservedSystemCPUs", "x", "reservedSystemCPUs"},
	} {
		c := cfg
		switch bad.field {
		case "cpuManagerPolicy":
			c.CPUManagerPolicy = bad.value
		case "topologyManagerPolicy":
			c.TopologyManagerPolicy = bad.value
		case "reservedSystemCPUs":
			c.ReservedSystemCPUs = bad.value
		}
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), bad.err) {
			t.Errorf("%s %s: %v", bad.field, bad.value, err)
		}
	}
}
