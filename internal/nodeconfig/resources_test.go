package nodeconfig

import (
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodelet/nodelet/internal/node/podresources"
)

func list(kv ...string) v1.ResourceList {
	out := v1.ResourceList{}
	for i := 0; i < len(kv); i += 2 {
		out[v1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return out
}

// Allocatable is capacity less systemReserved, kubeReserved and the hard
// eviction thresholds, as the kubelet computes it.
func TestAllocatable(t *testing.T) {
	// nodefs.available<10% of 100Gi, in the kubelet's float32 arithmetic:
	// 0.1 is 0.10000000149, so 10737418400 bytes are kept, not 10Gi.
	const tenPercentKept = "96636764000"
	capacity := list("cpu", "4", "memory", "8Gi", "ephemeral-storage", "100Gi")
	for _, tc := range []struct {
		name             string
		system, kube     v1.ResourceList
		eviction         map[string]string
		cpu, mem, ephem  string
		capacityOverride v1.ResourceList
	}{
		{name: "defaults", eviction: DefaultEvictionHard(), cpu: "4", mem: "8092Mi", ephem: tenPercentKept},
		{name: "reserved", system: list("cpu", "500m", "memory", "512Mi"), kube: list("cpu", "250m", "memory", "256Mi", "ephemeral-storage", "1Gi"),
			eviction: DefaultEvictionHard(), cpu: "3250m", mem: "7324Mi", ephem: "95563022176"},
		{name: "percent memory threshold", eviction: map[string]string{"memory.available": "25%"}, cpu: "4", mem: "6Gi", ephem: "100Gi"},
		{name: "no thresholds", eviction: map[string]string{}, cpu: "4", mem: "8Gi", ephem: "100Gi"},
		{name: "0% is none", eviction: map[string]string{"memory.available": "0%"}, cpu: "4", mem: "8Gi", ephem: "100Gi"},
		{name: "never below zero", system: list("memory", "9Gi", "cpu", "5"), eviction: DefaultEvictionHard(), cpu: "0", mem: "0", ephem: tenPercentKept},
		{name: "pid reservation is not a capacity", system: list("pid", "1000"), eviction: map[string]string{}, cpu: "4", mem: "8Gi", ephem: "100Gi"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Allocatable(capacity, tc.system, tc.kube, tc.eviction)
			if err != nil {
				t.Fatal(err)
			}
			for name, want := range map[v1.ResourceName]string{"cpu": tc.cpu, "memory": tc.mem, "ephemeral-storage": tc.ephem} {
				q := got[name]
				if q.Cmp(resource.MustParse(want)) != 0 {
					t.Errorf("%s = %s, want %s", name, q.String(), want)
				}
			}
			if _, ok := got["pid"]; ok || len(got) != 3 {
				t.Errorf("allocatable has %v, want the capacity's resources only", got)
			}
		})
	}
	// Without ephemeral storage in capacity, nodefs.available takes
	// nothing away (as the kubelet: 10% of nothing).
	got, err := Allocatable(list("memory", "1Gi"), nil, nil, DefaultEvictionHard())
	if err != nil {
		t.Fatal(err)
	}
	if m := got["memory"]; m.Cmp(resource.MustParse("924Mi")) != 0 || len(got) != 1 {
		t.Errorf("memory-only capacity: %v", got)
	}
	if _, err := Allocatable(capacity, nil, nil, map[string]string{"memory.available": "-1"}); err == nil {
		t.Error("a negative threshold is accepted")
	}
}

func TestParseMapAndReserved(t *testing.T) {
	m, err := ParseMap("system-reserved", " cpu=200m, memory=1Gi ,", "=")
	if err != nil || len(m) != 2 || m["cpu"] != "200m" || m["memory"] != "1Gi" {
		t.Fatalf("%v %v", m, err)
	}
	if _, err := ParseMap("eviction-hard", "memory.available<1Gi,memory.available<2Gi", "<"); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Errorf("duplicate: %v", err)
	}
	if _, err := ParseMap("node-labels", "novalue", "="); err == nil || !strings.Contains(err.Error(), "--node-labels") {
		t.Errorf("no separator: %v", err)
	}
	if l, err := ParseReserved("systemReserved", m); err != nil || l.Cpu().MilliValue() != 200 {
		t.Errorf("%v %v", l, err)
	}
	if _, err := ParseReserved("kubeReserved", map[string]string{"memory": "-1Gi"}); err == nil {
		t.Error("negative reservation accepted")
	}
}

func TestValidateNodeLabels(t *testing.T) {
	for labels, want := range map[string]string{
		"role=edge,node.kubernetes.io/pool=a,kubelet.kubernetes.io/x=y,topology.kubernetes.io/zone=z1": "",
		"example.com/team=infra":            "",
		"node-role.kubernetes.io/worker=":   "may not set node-role.kubernetes.io/worker",
		"kubernetes.io/role=master":         "may not set kubernetes.io/role",
		"foo.k8s.io/x=y":                    "may not set foo.k8s.io/x",
		"bad key!=x":                        `key "bad key!"`,
		"ok=" + strings.Repeat("v", 64):     "ok=",
		"kubernetes.io/hostname=override-x": "",
	} {
		m, err := ParseMap("node-labels", labels, "=")
		if err != nil {
			t.Fatal(err)
		}
		err = ValidateNodeLabels(m)
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: %v", labels, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%s: %v, want %q", labels, err, want)
		}
	}
}

func TestParseTaints(t *testing.T) {
	got, err := ParseTaints("dedicated=edge:NoSchedule, maintenance:NoExecute")
	if err != nil {
		t.Fatal(err)
	}
	want := []v1.Taint{{Key: "dedicated", Value: "edge", Effect: v1.TaintEffectNoSchedule}, {Key: "maintenance", Effect: v1.TaintEffectNoExecute}}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("%v", got)
	}
	for spec, errWant := range map[string]string{
		"a=b":                         "want key=value:Effect",
		"a=b:Never":                   `effect "Never"`,
		"a:NoSchedule,a=x:NoSchedule": "given twice",
		"=b:NoSchedule":               `key ""`,
	} {
		if _, err := ParseTaints(spec); err == nil || !strings.Contains(err.Error(), errWant) {
			t.Errorf("%q: %v, want %q", spec, err, errWant)
		}
	}
	if got, err := ParseTaints("a:NoSchedule,a:NoExecute"); err != nil || len(got) != 2 {
		t.Errorf("same key, two effects: %v %v", got, err)
	}
}

// The cluster settings that cannot work without an API server are refused
// standalone; the others are not.
func TestValidateClusterSettings(t *testing.T) {
	base := DefaultConfig("/var/lib/nodelet")
	base.NodeName = "node-a"
	for _, tc := range []struct {
		name string
		set  func(*Config)
		want string
	}{
		{"standalone defaults", func(*Config) {}, ""},
		{"rotate standalone", func(c *Config) { c.RotateCertificates = true }, ""},
		{"bootstrap without kubeconfig", func(c *Config) { c.BootstrapKubeconfig = "/b" }, "--bootstrap-kubeconfig needs --kubeconfig"},
		{"serving bootstrap standalone", func(c *Config) { c.ServerTLSBootstrap = true }, "serverTLSBootstrap needs --kubeconfig"},
		{"serving bootstrap in cluster", func(c *Config) { c.ServerTLSBootstrap, c.Kubeconfig = true, "/k" }, ""},
		{"negative qps", func(c *Config) { c.KubeAPIQPS = -1 }, "--kube-api-qps"},
		{"zero status frequency", func(c *Config) { c.NodeStatusUpdateFrequency = 0 }, "--node-status-update-frequency"},
		{"bad label", func(c *Config) { c.NodeLabels = map[string]string{"kubernetes.io/role": "x"} }, "may not set"},
		{"bad taint", func(c *Config) { c.RegisterWithTaints = []v1.Taint{{Key: "a", Effect: "x"}} }, "effect"},
		{"volume stats off", func(c *Config) { c.VolumeStatsAggPeriod = -time.Second }, "volumeStatsAggPeriod -1s: want a positive duration"},
		{"bad cluster DNS", func(c *Config) { c.ClusterDNS = []string{"dns.example"} }, "--cluster-dns"},
		{"bad eviction", func(c *Config) { c.EvictionHard = map[string]string{"memory.available": "x"} }, "evictionHard"},
	} {
		cfg := base
		tc.set(&cfg)
		err := cfg.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	if d := base.CertDirectory(); d != "/var/lib/nodelet/pki" {
		t.Errorf("cert dir default %s", d)
	}
	base.CertDir = "/etc/nodelet/pki"
	if d := base.CertDirectory(); d != "/etc/nodelet/pki" {
		t.Errorf("cert dir %s", d)
	}
}

// kubepods gets the capacity less the reservations, not less the hard
// eviction thresholds, as the kubelet's node allocatable cgroup.
func TestKubepodsLimits(t *testing.T) {
	cfg := DefaultConfig("/var/lib/nodelet")
	cfg.Capacity = v1.ResourceList{v1.ResourceCPU: resource.MustParse("4"), v1.ResourceMemory: resource.MustParse("8Gi")}
	cfg.PidMax = 4194304
	if got, want := cfg.KubepodsLimits(), (podresources.KubepodsLimits{MilliCPU: 4000, Memory: 8 << 30, Pids: 4194304}); got != want {
		t.Errorf("nothing reserved: %+v, want %+v", got, want)
	}
	cfg.SystemReserved = v1.ResourceList{v1.ResourceCPU: resource.MustParse("500m"), v1.ResourceMemory: resource.MustParse("1Gi"), "pid": resource.MustParse("1000")}
	cfg.KubeReserved = v1.ResourceList{v1.ResourceCPU: resource.MustParse("250m")}
	cfg.EvictionHard = map[string]string{"memory.available": "1Gi"}
	if got, want := cfg.KubepodsLimits(), (podresources.KubepodsLimits{MilliCPU: 3250, Memory: 7 << 30, Pids: 4193304}); got != want {
		t.Errorf("reserved: %+v, want %+v", got, want)
	}
	cfg.KubeReserved = v1.ResourceList{v1.ResourceMemory: resource.MustParse("16Gi")}
	if got := cfg.KubepodsLimits(); got.Memory != 0 || got.MilliCPU != 3500 {
		t.Errorf("more reserved than there is: %+v, want no memory left", got)
	}
	cfg.Capacity, cfg.PidMax = nil, 0
	if got := cfg.KubepodsLimits(); got != (podresources.KubepodsLimits{}) {
		t.Errorf("no capacity known: %+v, want no limits", got)
	}
}

// ResizeNode: the static CPU manager policy and the swap settings reach
// the resize checks (a Burstable container with LimitedSwap on cgroup v2
// swaps; with NoSwap none does).
func TestResizeNode(t *testing.T) {
	pod := &v1.Pod{Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c", Resources: v1.ResourceRequirements{
		Requests: v1.ResourceList{v1.ResourceMemory: resource.MustParse("64Mi")},
		Limits:   v1.ResourceList{v1.ResourceMemory: resource.MustParse("128Mi")},
	}}}}}
	cfg := Config{CPUManagerPolicy: "static", CgroupV2: true, SwapController: true, SwapBehavior: string(podresources.LimitedSwap), MemoryCapacity: 1 << 30}
	n := cfg.ResizeNode()
	if !n.CPUManagerStatic || n.CgroupV1 || n.Swaps == nil || !n.Swaps(pod, &pod.Spec.Containers[0]) {
		t.Errorf("static, LimitedSwap on v2: %+v, swaps %v", n, n.Swaps != nil && n.Swaps(pod, &pod.Spec.Containers[0]))
	}
	n = Config{CPUManagerPolicy: "none"}.ResizeNode()
	if n.CPUManagerStatic || !n.CgroupV1 || n.Swaps(pod, &pod.Spec.Containers[0]) {
		t.Errorf("none, NoSwap on v1: %+v", n)
	}
}
