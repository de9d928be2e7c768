package agent

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critest "k8s.io/cri-api/pkg/apis/testing"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/base/metrics"
	"github.com/nodelet/nodelet/internal/base/testutil"
	"github.com/nodelet/nodelet/internal/nodeconfig"
	"github.com/nodelet/nodelet/internal/pipeline/cri"
	"github.com/nodelet/nodelet/internal/pipeline/podsource"
	"github.com/nodelet/nodelet/internal/pipeline/podworker"
	"github.com/nodelet/nodelet/internal/pure/podupdate"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
)

// testPipeline is the agent's wiring over the cri-api fakes, with the pod
// workers running; configure, if given, changes the default configuration.
func testPipeline(t *testing.T, configure ...func(*nodeconfig.Config)) *pipeline {
	t.Helper()
	return testPipelineOver(t, networkReady(critest.NewFakeRuntimeService()), configure...)
}

// networkReady makes rs a runtime whose pod network is ready, so that
// pods are not held back.
func networkReady(rs *critest.FakeRuntimeService) *critest.FakeRuntimeService {
	rs.FakeStatus = &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{
		{Type: runtimeapi.RuntimeReady, Status: true}, {Type: runtimeapi.NetworkReady, Status: true}}}
	return rs
}

func testPipelineOver(t *testing.T, rs internalapi.RuntimeService, configure ...func(*nodeconfig.Config)) *pipeline {
	t.Helper()
	is := critest.NewFakeImageService()
	is.SetFakeImageSize(1)
	log := slog.New(slog.DiscardHandler)
	cfg := nodeconfig.DefaultConfig(t.TempDir())
	cfg.NodeName, cfg.CgroupMountDir, cfg.PodLogsDir = "node1", "", t.TempDir()
	for _, f := range configure {
		f(&cfg)
	}
	a, err := New(cfg, Deps{Clock: testingclock.NewFakeClock(time.Unix(1_700_000_000, 0)), Log: log})
	if err != nil {
		t.Fatal(err)
	}
	p, err := a.wire(cri.New(rs, is, "fake", cri.DefaultTimeouts(), log), nil, nil, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); p.workers.Run(t.Context()) }()
	t.Cleanup(func() { <-done })
	return p
}

// gauges reads kubelet_running_pods and kubelet_running_containers
// (state "running") from the wired registry.
func gauges(t *testing.T, p *pipeline) (pods, containers float64) {
	t.Helper()
	families, err := p.api.Metrics.Kubelet.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			switch f.GetName() {
			case "kubelet_running_pods":
				pods = m.GetGauge().GetValue()
			case "kubelet_running_containers":
				for _, l := range m.GetLabel() {
					if l.GetName() == "container_state" && l.GetValue() == metrics.ContainerStateRunning {
						containers = m.GetGauge().GetValue()
					}
				}
			}
		}
	}
	return pods, containers
}

// A pod removed from its manifest goes the way the sync loop sends it
// (a Remove to the pod workers, which terminate it, then housekeeping):
// once it has terminated, its status is forgotten and the running gauges
// drop it, and /pods shows the others with their status.
func TestRemovedPodStatusIsForgotten(t *testing.T) {
	p := testPipeline(t)
	grace := int64(1)
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-node1", Namespace: "default", UID: "uid-web"},
		Spec: v1.PodSpec{
			RestartPolicy: v1.RestartPolicyAlways, TerminationGracePeriodSeconds: &grace,
			Containers: []v1.Container{{Name: "app", Image: "busybox", ImagePullPolicy: v1.PullIfNotPresent}},
		},
	}
	// A second pod stays in the manifest: its status must stay.
	other := pod.DeepCopy()
	other.Name, other.UID = "db-node1", "uid-db"
	running := func(uid types.UID) bool { st, ok := p.status.Get(uid); return ok && st.Phase == v1.PodRunning }
	p.workers.UpdatePod(podworker.UpdatePodOptions{Reason: podupdate.Add, Pod: pod})
	p.workers.UpdatePod(podworker.UpdatePodOptions{Reason: podupdate.Add, Pod: other})
	testutil.Eventually(t, "the pods to run", func() bool { return running(pod.UID) && running(other.UID) })
	if pods, containers := gauges(t, p); pods != 2 || containers != 2 {
		t.Fatalf("running: %v pods, %v containers; want 2 and 2", pods, containers)
	}

	// The manifest no longer has the pod: the sync loop removes it.
	p.workers.UpdatePod(podworker.UpdatePodOptions{Reason: podupdate.Remove, Pod: pod})
	testutil.Eventually(t, "the pod to finish", func() bool {
		info, ok := p.workers.Info(pod.UID)
		return ok && info.State == podworker.Finished
	})
	p.hk.Housekeep(t.Context(), map[types.UID]*v1.Pod{other.UID: other})

	if st, ok := p.status.Get(pod.UID); ok {
		t.Errorf("removed pod's status kept: phase %s", st.Phase)
	}
	if pods, containers := gauges(t, p); pods != 1 || containers != 1 {
		t.Errorf("running: %v pods, %v containers; want 1 and 1 (the removed pod still counted)", pods, containers)
	}
	if !running(other.UID) {
		t.Error("the pod still in the manifest lost its status")
	}

	// A pod admission rejected, then removed, goes the same way.
	rejected := pod.DeepCopy()
	rejected.Name, rejected.UID = "big-node1", "uid-big"
	p.status.Reject(rejected, "OutOfcpu", "Node didn't have enough resource: cpu")
	p.hk.Housekeep(t.Context(), map[types.UID]*v1.Pod{other.UID: other})
	if st, ok := p.status.Get(rejected.UID); ok {
		t.Errorf("removed rejected pod's status kept: phase %s", st.Phase)
	}
}

// sandboxRecorder is the fake runtime, keeping the sandbox configs it is
// given.
type sandboxRecorder struct {
	*critest.FakeRuntimeService
	mu      sync.Mutex
	configs []*runtimeapi.PodSandboxConfig
}

func (r *sandboxRecorder) RunPodSandbox(ctx context.Context, config *runtimeapi.PodSandboxConfig, handler string) (string, error) {
	r.mu.Lock()
	r.configs = append(r.configs, config)
	r.mu.Unlock()
	return r.FakeRuntimeService.RunPodSandbox(ctx, config, handler)
}

func (r *sandboxRecorder) dns() []*runtimeapi.DNSConfig {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*runtimeapi.DNSConfig
	for _, c := range r.configs {
		out = append(out, c.GetDnsConfig())
	}
	return out
}

// --cluster-dns and --cluster-domain (clusterDNS, clusterDomain) reach the
// sandboxes of ClusterFirst pods: the cluster's DNS server and its search
// domains, as the kubelet gives them.
func TestWireClusterDNS(t *testing.T) {
	rs := &sandboxRecorder{FakeRuntimeService: networkReady(critest.NewFakeRuntimeService())}
	p := testPipelineOver(t, rs, func(c *nodeconfig.Config) {
		c.ClusterDNS, c.ClusterDomain = []string{"10.96.0.10"}, "cluster.local"
		c.HostResolvConf = []byte("nameserver 192.0.2.53\n")
	})
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop", UID: "uid-web"},
		Spec: v1.PodSpec{
			RestartPolicy: v1.RestartPolicyAlways, DNSPolicy: v1.DNSClusterFirst,
			Containers: []v1.Container{{Name: "app", Image: "busybox", ImagePullPolicy: v1.PullIfNotPresent}},
		},
	}
	p.workers.UpdatePod(podworker.UpdatePodOptions{Reason: podupdate.Add, Pod: pod})
	testutil.Eventually(t, "the pod's sandbox", func() bool { return len(rs.dns()) > 0 })
	dns := rs.dns()[0]
	if !slices.Equal(dns.GetServers(), []string{"10.96.0.10"}) {
		t.Errorf("servers %q, want the cluster DNS 10.96.0.10", dns.GetServers())
	}
	if want := []string{"shop.svc.cluster.local", "svc.cluster.local", "cluster.local"}; len(dns.GetSearches()) < 3 ||
		!slices.Equal(dns.GetSearches()[:3], want) {
		t.Errorf("searches %q, want %q first", dns.GetSearches(), want)
	}
}

// In cluster mode the API server is a third source into the same merge,
// and the parts that talk to it are wired; standalone has none of them.
func TestWireClusterMode(t *testing.T) {
	rs, is := critest.NewFakeRuntimeService(), critest.NewFakeImageService()
	log := slog.New(slog.DiscardHandler)
	cfg := nodeconfig.DefaultConfig(t.TempDir())
	cfg.NodeName, cfg.CgroupMountDir, cfg.PodLogsDir, cfg.Kubeconfig = "node1", "", t.TempDir(), "/unused"
	a, err := New(cfg, Deps{Clock: testingclock.NewFakeClock(time.Unix(1_700_000_000, 0)), Log: log})
	if err != nil {
		t.Fatal(err)
	}
	api := &apiServer{kube: fake.NewClientset(), rest: &rest.Config{Host: "https://127.0.0.1:6443"}}
	p, err := a.wire(cri.New(rs, is, "fake", cri.DefaultTimeouts(), log), api, nil, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	c := p.cluster
	if c == nil || c.pods == nil || c.watcher == nil || c.services == nil || c.node == nil || c.status == nil || c.mirrors == nil {
		t.Fatalf("cluster parts not wired: %+v", c)
	}
	if c.serving != nil {
		t.Error("a serving certificate manager without serverTLSBootstrap")
	}
	if _, ok := p.sources[len(p.sources)-1].(*podsource.APISource); !ok {
		t.Errorf("the API source is not among the sources: %T", p.sources)
	}
}
