package plan_test

import (
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/internal/pure/plan"
)

func baseContainer() *v1.Container {
	return &v1.Container{
		Name:    "app",
		Image:   "registry.local/app:1",
		Command: []string{"/bin/app"},
		Args:    []string{"--port=8080"},
		Env:     []v1.EnvVar{{Name: "MODE", Value: "prod"}},
		Ports:   []v1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: v1.ProtocolTCP}},
		Resources: v1.ResourceRequirements{
			Limits: v1.ResourceList{v1.ResourceMemory: resource.MustParse("128Mi")},
		},
		LivenessProbe: &v1.Probe{ProbeHandler: v1.ProbeHandler{
			HTTPGet: &v1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8080)},
		}},
		SecurityContext: &v1.SecurityContext{RunAsUser: ptr.To(int64(1000))},
	}
}

// pinnedContainerHash is ContainerHash(baseContainer()). If this test fails
// the fingerprint of an unchanged spec changed, and every container created
// by an older nodelet would be seen as changed: bump plan.HashVersion (so
// they are kept instead) and then update this value.
const pinnedContainerHash = "v1:c8fd69d4272778e1"

func TestContainerHashPinned(t *testing.T) {
	if got := plan.ContainerHash(baseContainer()); got != pinnedContainerHash {
		t.Errorf("ContainerHash(base) = %s, pinned %s", got, pinnedContainerHash)
	}
}

func TestContainerHash(t *testing.T) {
	base := plan.ContainerHash(baseContainer())
	if !strings.HasPrefix(base, plan.HashVersion+":") || len(base) != len(plan.HashVersion)+1+16 {
		t.Fatalf("ContainerHash = %q, want %s:<16 hex digits>", base, plan.HashVersion)
	}
	tests := []struct {
		name    string
		mutate  func(c *v1.Container)
		changes bool
	}{
		{"same spec", func(*v1.Container) {}, false},
		{"image", func(c *v1.Container) { c.Image = "registry.local/app:2" }, true},
		{"command", func(c *v1.Container) { c.Command = []string{"/bin/other"} }, true},
		{"args", func(c *v1.Container) { c.Args = append(c.Args, "-v") }, true},
		{"env value", func(c *v1.Container) { c.Env[0].Value = "dev" }, true},
		{"env added", func(c *v1.Container) { c.Env = append(c.Env, v1.EnvVar{Name: "X", Value: "1"}) }, true},
		{"port", func(c *v1.Container) { c.Ports[0].ContainerPort = 9090 }, true},
		{"probe", func(c *v1.Container) { c.LivenessProbe.HTTPGet.Path = "/live" }, true},
		{"security context", func(c *v1.Container) { c.SecurityContext.RunAsUser = ptr.To(int64(0)) }, true},
		{"restart policy (sidecar)", func(c *v1.Container) { c.RestartPolicy = ptr.To(v1.ContainerRestartPolicyAlways) }, true},
		{"resources", func(c *v1.Container) {
			c.Resources.Limits[v1.ResourceMemory] = resource.MustParse("1Gi")
			c.Resources.Requests = v1.ResourceList{v1.ResourceCPU: resource.MustParse("100m")}
		}, false},
		{"resize policy", func(c *v1.Container) {
			c.ResizePolicy = []v1.ContainerResizePolicy{{ResourceName: v1.ResourceCPU, RestartPolicy: v1.NotRequired}}
		}, false},
		{"empty list instead of none", func(c *v1.Container) { c.VolumeMounts = []v1.VolumeMount{} }, false},
		{"empty object instead of none", func(c *v1.Container) { c.Lifecycle = &v1.Lifecycle{} }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := baseContainer()
			tt.mutate(c)
			got := plan.ContainerHash(c)
			if changed := got != base; changed != tt.changes {
				t.Errorf("hash changed = %v, want %v (%s vs %s)", changed, tt.changes, got, base)
			}
		})
	}
}

func TestContainerHashDoesNotModify(t *testing.T) {
	c := baseContainer()
	plan.ContainerHash(c)
	if c.Resources.Limits == nil {
		t.Error("ContainerHash cleared the caller's resources")
	}
}

func basePod() *v1.Pod {
	return &v1.Pod{Spec: v1.PodSpec{
		Hostname:   "web",
		DNSPolicy:  v1.DNSClusterFirst,
		Containers: []v1.Container{*baseContainer()},
	}}
}

const pinnedSandboxHash = "v1:53ba4f6cee671830"

func TestSandboxHashPinned(t *testing.T) {
	if got := plan.SandboxHash(basePod()); got != pinnedSandboxHash {
		t.Errorf("SandboxHash(base) = %s, pinned %s", got, pinnedSandboxHash)
	}
}

func TestSandboxHash(t *testing.T) {
	base := plan.SandboxHash(basePod())
	tests := []struct {
		name    string
		mutate  func(p *v1.Pod)
		changes bool
	}{
		{"same spec", func(*v1.Pod) {}, false},
		{"hostNetwork", func(p *v1.Pod) { p.Spec.HostNetwork = true }, true},
		{"hostPID", func(p *v1.Pod) { p.Spec.HostPID = true }, true},
		{"hostIPC", func(p *v1.Pod) { p.Spec.HostIPC = true }, true},
		{"hostname", func(p *v1.Pod) { p.Spec.Hostname = "other" }, true},
		{"subdomain", func(p *v1.Pod) { p.Spec.Subdomain = "svc" }, true},
		{"dnsPolicy", func(p *v1.Pod) { p.Spec.DNSPolicy = v1.DNSDefault }, true},
		{"dnsConfig", func(p *v1.Pod) { p.Spec.DNSConfig = &v1.PodDNSConfig{Nameservers: []string{"1.1.1.1"}} }, true},
		{"hostAliases", func(p *v1.Pod) { p.Spec.HostAliases = []v1.HostAlias{{IP: "10.0.0.1", Hostnames: []string{"db"}}} }, true},
		{"sysctls", func(p *v1.Pod) {
			p.Spec.SecurityContext = &v1.PodSecurityContext{Sysctls: []v1.Sysctl{{Name: "net.core.somaxconn", Value: "1024"}}}
		}, true},
		{"host port", func(p *v1.Pod) { p.Spec.Containers[0].Ports[0].HostPort = 80 }, true},
		{"container image", func(p *v1.Pod) { p.Spec.Containers[0].Image = "other" }, false},
		{"container port without host port", func(p *v1.Pod) { p.Spec.Containers[0].Ports[0].ContainerPort = 1 }, false},
		{"termination grace period", func(p *v1.Pod) { p.Spec.TerminationGracePeriodSeconds = ptr.To(int64(5)) }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := basePod()
			tt.mutate(p)
			if changed := plan.SandboxHash(p) != base; changed != tt.changes {
				t.Errorf("hash changed = %v, want %v", changed, tt.changes)
			}
		})
	}
}

func TestBackoffDelay(t *testing.T) {
	want := []time.Duration{0, 10 * time.Second, 20 * time.Second, 40 * time.Second, 80 * time.Second,
		160 * time.Second, 300 * time.Second, 300 * time.Second}
	for step, w := range want {
		if got := plan.BackoffDelay(step); got != w {
			t.Errorf("BackoffDelay(%d) = %s, want %s", step, got, w)
		}
	}
	if got := plan.BackoffDelay(1 << 30); got != 300*time.Second {
		t.Errorf("BackoffDelay(huge) = %s, want 5m0s", got)
	}
	if got := plan.BackoffDelay(-1); got != 0 {
		t.Errorf("BackoffDelay(-1) = %s, want 0", got)
	}
}
