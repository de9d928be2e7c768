package dra

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	"k8s.io/utils/clock"
	testclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/pure/podsetup"
)

type fixture struct {
	reg     *prometheus.Registry
	root    string
	plugins *Plugins
	api     *fakeClaims
	rec     *fakeRecorder
	drv     *fakeDriver
	m       *Manager
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	reg := prometheus.NewRegistry()
	f := &fixture{reg: reg, root: shortDir(t), plugins: NewPlugins(testclock.NewFakePassiveClock(time.Unix(0, 0)), reg), api: &fakeClaims{claims: map[string]*resourceapi.ResourceClaim{}}, rec: &fakeRecorder{}}
	f.drv = startFakeDriver(t, f.root, "gpu.example.com")
	if err := f.plugins.RegisterPlugin(context.Background(), f.drv.name, f.drv.socket, []string{drapb.DRAPluginService, "v1beta1.DRAPlugin"}); err != nil {
		t.Fatal(err)
	}
	f.m = f.restart(t)
	return f
}

// restart is a new manager on the same root directory, as after a
// nodelet restart.
func (f *fixture) restart(t *testing.T) *Manager {
	t.Helper()
	m, err := NewManager(f.root, Deps{Plugins: f.plugins, Claims: f.api, Recorder: f.rec, Log: testLog(t),
		Clock: testclock.NewFakePassiveClock(time.Unix(0, 0)), Metrics: f.reg})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func cdiOf(t *testing.T, s podsetup.Setup, pod *v1.Pod, container int) []string {
	t.Helper()
	a, err := s.Apply(podsetup.Container{Pod: pod, Container: &pod.Spec.Containers[container]})
	if err != nil {
		t.Fatalf("contribute: %v", err)
	}
	var out []string
	for _, d := range a.CDIDevices {
		out = append(out, d.Name)
	}
	return out
}

func TestPrepareCleanupAndRestart(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	pod := podUsing("p", "c1")
	f.api.add(allocated("c1", f.drv.name, pod))

	s, err := f.m.Prepare(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	if got := cdiOf(t, s, pod, 0); !slices.Equal(got, []string{"vendor.com/dev=c1"}) {
		t.Errorf("app's CDI devices = %q", got)
	}
	if got := cdiOf(t, s, pod, 1); len(got) != 0 {
		t.Errorf("side uses no claim, got CDI devices %q", got)
	}
	fi, err := os.Stat(filepath.Join(f.root, StateFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("checkpoint: %v, %v", fi, err)
	}

	// A later sync asks neither the API server nor the driver.
	gets := f.api.gets
	if _, err := f.m.Prepare(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if prep, _ := f.drv.calls(); f.api.gets != gets || len(prep) != 1 {
		t.Errorf("second Prepare: %d API reads (want %d), prepare calls %q", f.api.gets, gets, prep)
	}

	// After a restart the claim is known (held for the pod) and its
	// devices too: the running pod's next sync asks nobody.
	m2 := f.restart(t)
	if held, _ := m2.Holding(); !slices.Equal(held, []types.UID{pod.UID}) {
		t.Errorf("Holding after restart = %v", held)
	}
	s, err = m2.Prepare(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	if got := cdiOf(t, s, pod, 0); !slices.Equal(got, []string{"vendor.com/dev=c1"}) {
		t.Errorf("app's CDI devices after restart = %q", got)
	}
	if err := m2.Cleanup(ctx, pod); err != nil {
		t.Fatal(err)
	}
	prep, unprep := f.drv.calls()
	if !slices.Equal(prep, []string{"c1"}) || !slices.Equal(unprep, []string{"c1"}) || f.api.gets != gets {
		t.Errorf("driver calls: prepare %q, unprepare %q", prep, unprep)
	}
	if held, _ := f.restart(t).Holding(); len(held) != 0 {
		t.Errorf("checkpoint after cleanup still holds %v", held)
	}
	if len(f.rec.events) != 0 {
		t.Errorf("events: %v", f.rec.events)
	}
}

func TestSharedClaimUnpreparedAfterLastPod(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	a, b := podUsing("a", "shared"), podUsing("b", "shared")
	f.api.add(allocated("shared", f.drv.name, a, b))
	for _, p := range []*v1.Pod{a, b} {
		if _, err := f.m.Prepare(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.m.Cleanup(ctx, a); err != nil {
		t.Fatal(err)
	}
	if _, unprep := f.drv.calls(); len(unprep) != 0 {
		t.Fatalf("unprepared while b still uses it: %q", unprep)
	}
	if err := f.m.Cleanup(ctx, b); err != nil {
		t.Fatal(err)
	}
	prep, unprep := f.drv.calls()
	if !slices.Equal(prep, []string{"shared"}) || !slices.Equal(unprep, []string{"shared"}) {
		t.Errorf("driver calls: prepare %q, unprepare %q", prep, unprep)
	}
}

func TestRequestsPickDevices(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	pod := podUsing("p", "c")
	pod.Spec.Containers[0].Resources.Claims[0].Request = "gpu"
	pod.Spec.Containers[1].Resources.Claims = []v1.ResourceClaim{{Name: "rc-c"}}
	f.api.add(allocated("c", f.drv.name, pod))
	f.drv.devices["c"] = []*drapb.Device{
		{RequestNames: []string{"gpu"}, PoolName: "p", DeviceName: "g", CdiDeviceIds: []string{"v.com/gpu=0"}},
		{RequestNames: []string{"nic"}, PoolName: "p", DeviceName: "n", CdiDeviceIds: []string{"v.com/nic=0", "v.com/nic=extra"}},
		{PoolName: "p", DeviceName: "any", CdiDeviceIds: []string{"v.com/any=0"}},
	}
	s, err := f.m.Prepare(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	if got := cdiOf(t, s, pod, 0); !slices.Equal(got, []string{"v.com/gpu=0", "v.com/any=0"}) {
		t.Errorf("request gpu: %q", got)
	}
	if got := cdiOf(t, s, pod, 1); !slices.Equal(got, []string{"v.com/gpu=0", "v.com/nic=0", "v.com/nic=extra", "v.com/any=0"}) {
		t.Errorf("whole claim: %q", got)
	}
	cc, err := f.m.ContainerClaims(pod, &pod.Spec.Containers[0])
	if err != nil || len(cc) != 2 || cc[0].Device != "g" || cc[1].Device != "any" || cc[0].Driver != f.drv.name {
		t.Errorf("ContainerClaims = %+v, %v", cc, err)
	}
}

func TestPrepareFailures(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(f *fixture, pod *v1.Pod)
		want   string
	}{
		{"driver not registered", func(f *fixture, pod *v1.Pod) {
			f.api.add(allocated("c", "other.example.com", pod))
		}, "DRA driver other.example.com is not registered"},
		{"claim missing", func(f *fixture, pod *v1.Pod) {}, `fetch ResourceClaim c: resourceclaims.resource.k8s.io "c" not found`},
		{"not reserved for the pod", func(f *fixture, pod *v1.Pod) {
			f.api.add(allocated("c", f.drv.name))
		}, "pod p (pod-p) is not allowed to use ResourceClaim c (uid-c)"},
		{"not allocated", func(f *fixture, pod *v1.Pod) {
			c := allocated("c", f.drv.name, pod)
			c.Status.Allocation = nil
			f.api.add(c)
		}, "ResourceClaim c: not allocated"},
		{"template claim not created", func(f *fixture, pod *v1.Pod) {
			tmpl := "tmpl"
			pod.Spec.ResourceClaims[0] = v1.PodResourceClaim{Name: "rc-c", ResourceClaimTemplateName: &tmpl}
		}, `pod "ns/p": ResourceClaim not created yet`},
		{"template claim not owned by the pod", func(f *fixture, pod *v1.Pod) {
			tmpl, name := "tmpl", "c"
			pod.Spec.ResourceClaims[0] = v1.PodResourceClaim{Name: "rc-c", ResourceClaimTemplateName: &tmpl}
			pod.Status.ResourceClaimStatuses = []v1.PodResourceClaimStatus{{Name: "rc-c", ResourceClaimName: &name}}
			f.api.add(allocated("c", f.drv.name, pod))
		}, "ResourceClaim ns/c was not created for Pod ns/p (Pod is not owner)"},
		{"driver fails the claim", func(f *fixture, pod *v1.Pod) {
			f.api.add(allocated("c", f.drv.name, pod))
			f.drv.claimErr["c"] = "no such device"
		}, "NodePrepareResources failed for ResourceClaim c: no such device"},
		{"standalone", func(f *fixture, pod *v1.Pod) {
			f.m.claims = nil
		}, "resource claims need cluster mode"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			pod := podUsing("p", "c")
			tt.mutate(f, pod)
			_, err := f.m.Prepare(context.Background(), pod)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Prepare error = %v, want %q", err, tt.want)
			}
			if len(f.rec.events) != 1 || f.rec.events[0].Reason != "FailedPrepareDynamicResources" ||
				!strings.HasPrefix(f.rec.events[0].Message, "Failed to prepare dynamic resources: ") ||
				!strings.Contains(f.rec.events[0].Message, tt.want) {
				t.Errorf("events = %+v", f.rec.events)
			}
		})
	}
}

// A driver that died without deregistering: its pod's Prepare fails at
// once with the kubelet's event and stays retryable, the claim is not
// taken as prepared (not after a restart either), and another driver's
// pod and a pod without claims are not held up.
func TestDriverGone(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	other := startFakeDriver(t, f.root, "nic.example.com")
	if err := f.plugins.RegisterPlugin(ctx, other.name, other.socket, []string{drapb.DRAPluginService}); err != nil {
		t.Fatal(err)
	}
	dead, alive := podUsing("dead", "c"), podUsing("alive", "n")
	f.api.add(allocated("c", f.drv.name, dead))
	f.api.add(allocated("n", other.name, alive))
	f.drv.stop()

	_, err := f.m.Prepare(ctx, dead)
	if err == nil || !strings.Contains(err.Error(), "NodePrepareResources") {
		t.Fatalf("Prepare with the driver gone = %v", err)
	}
	if len(f.rec.events) != 1 || f.rec.events[0].Reason != "FailedPrepareDynamicResources" || f.rec.events[0].Type != v1.EventTypeWarning {
		t.Errorf("events = %+v", f.rec.events)
	} else {
		t.Logf("event: %s", f.rec.events[0].Message)
	}
	if _, err := f.m.Prepare(ctx, alive); err != nil {
		t.Errorf("another driver's pod: %v", err)
	}
	if _, err := f.m.Prepare(ctx, &v1.Pod{ObjectMeta: dead.ObjectMeta, Spec: v1.PodSpec{Containers: []v1.Container{{Name: "app"}}}}); err != nil {
		t.Errorf("a pod without claims: %v", err)
	}
	m2 := f.restart(t)
	m2.mu.RLock()
	info := m2.state[key("ns", "c")]
	m2.mu.RUnlock()
	if info.Prepared {
		t.Errorf("the dead driver's claim is prepared after a restart: %+v", info)
	}

	// The driver is back (a new process, a new socket): the same pod
	// prepares.
	back := startFakeDriver(t, shortDir(t), f.drv.name)
	if err := f.plugins.RegisterPlugin(ctx, back.name, back.socket, []string{drapb.DRAPluginService}); err != nil {
		t.Fatal(err)
	}
	s, err := m2.Prepare(ctx, dead)
	if err != nil {
		t.Fatal(err)
	}
	if got := cdiOf(t, s, dead, 0); !slices.Equal(got, []string{"vendor.com/dev=c"}) {
		t.Errorf("CDI devices once the driver is back = %q", got)
	}
}

func TestFailedUnprepareIsKept(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	pod := podUsing("p", "c")
	f.api.add(allocated("c", f.drv.name, pod))
	if _, err := f.m.Prepare(ctx, pod); err != nil {
		t.Fatal(err)
	}
	f.plugins.DeregisterPlugin(f.drv.name, f.drv.socket)
	if err := f.m.Cleanup(ctx, pod); err == nil || !strings.Contains(err.Error(), "DRA driver gpu.example.com is not registered") {
		t.Fatalf("Cleanup without the driver = %v", err)
	}
	if held, _ := f.restart(t).Holding(); len(held) != 1 {
		t.Fatalf("the claim must stay in the checkpoint until unprepared, holding %v", held)
	}
	if err := f.plugins.RegisterPlugin(ctx, f.drv.name, f.drv.socket, []string{drapb.DRAPluginService}); err != nil {
		t.Fatal(err)
	}
	if err := f.m.Cleanup(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if held, _ := f.m.Holding(); len(held) != 0 {
		t.Errorf("holding after cleanup: %v", held)
	}
}

func TestPodWithoutClaims(t *testing.T) {
	f := newFixture(t)
	s, err := f.m.Prepare(context.Background(), podUsing("p"))
	if err != nil || len(s.Containers) != 0 {
		t.Fatalf("Prepare = %+v, %v", s, err)
	}
	if err := f.m.Cleanup(context.Background(), podUsing("p")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(f.root, StateFile)); err == nil {
		t.Errorf("a pod without claims wrote the checkpoint")
	}
}

func TestCorruptCheckpointStopsTheManager(t *testing.T) {
	f := newFixture(t)
	pod := podUsing("p", "c")
	f.api.add(allocated("c", f.drv.name, pod))
	if _, err := f.m.Prepare(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(f.root, StateFile)
	b, _ := os.ReadFile(path)
	if err := os.WriteFile(path, []byte(strings.Replace(string(b), "uid-c", "uid-x", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := NewManager(f.root, Deps{Plugins: f.plugins, Claims: f.api, Recorder: f.rec, Log: testLog(t), Clock: clock.RealClock{}}); err == nil || !strings.Contains(err.Error(), "checksum mismatch") {
		t.Fatalf("NewManager on a corrupt checkpoint = %v", err)
	}
}

func TestRegisterPlugin(t *testing.T) {
	tests := []struct {
		name, driver, endpoint string
		versions               []string
		want                   string
	}{
		{"v1", "d.example.com", "/s.sock", []string{"v1.DRAPlugin"}, ""},
		{"v1 among others", "d.example.com", "/s.sock", []string{"v1beta1.DRAPlugin", "v1.DRAPlugin"}, ""},
		{"v1beta1 only", "d.example.com", "/s.sock", []string{"v1beta1.DRAPlugin"}, ""},
		{"unknown only", "d.example.com", "/s.sock", []string{"v1alpha4.Node", "v2.DRAPlugin"}, "none of services supported by the plugin"},
		{"no versions", "d.example.com", "/s.sock", nil, "empty list of supported gRPC services"},
		{"bad name", "a/b", "/s.sock", []string{"v1.DRAPlugin"}, `invalid DRA driver name "a/b"`},
		{"relative endpoint", "d.example.com", "s.sock", []string{"v1.DRAPlugin"}, "is not an absolute path"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := NewPlugins(clock.RealClock{}, nil)
			err := p.RegisterPlugin(context.Background(), tt.driver, tt.endpoint, tt.versions)
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if ep, _ := p.endpoint(tt.driver); ep != tt.endpoint {
					t.Errorf("endpoint = %q", ep)
				}
				p.DeregisterPlugin(tt.driver, "/other.sock")
				if _, err := p.endpoint(tt.driver); err != nil {
					t.Errorf("deregistering another endpoint dropped the driver: %v", err)
				}
				p.DeregisterPlugin(tt.driver, tt.endpoint)
				if _, err := p.endpoint(tt.driver); err == nil {
					t.Errorf("still registered after DeregisterPlugin")
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
		})
	}
}

// A claim whose preparation did not finish (the driver failed, or
// nodelet crashed before it answered) is prepared again after a restart.
func TestInterruptedPrepareIsRetriedAfterRestart(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	pod := podUsing("p", "c")
	f.api.add(allocated("c", f.drv.name, pod))
	f.drv.claimErr["c"] = "not yet"
	if _, err := f.m.Prepare(ctx, pod); err == nil {
		t.Fatal("Prepare succeeded with a failing driver")
	}
	delete(f.drv.claimErr, "c")
	m2 := f.restart(t)
	s, err := m2.Prepare(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	if got := cdiOf(t, s, pod, 0); !slices.Equal(got, []string{"vendor.com/dev=c"}) {
		t.Errorf("CDI devices = %q", got)
	}
	if prep, _ := f.drv.calls(); !slices.Equal(prep, []string{"c", "c"}) {
		t.Errorf("prepare calls %q", prep)
	}
}

func TestDynamicResourcesFor(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	pod := podUsing("p", "a", "b")
	f.api.add(allocated("a", f.drv.name, pod))
	f.api.add(allocated("b", f.drv.name, pod))
	if _, err := f.m.Prepare(ctx, pod); err != nil {
		t.Fatal(err)
	}
	got := f.m.DynamicResourcesFor(pod, &pod.Spec.Containers[0])
	if len(got) != 2 || got[0].ClaimName != "a" || got[1].ClaimName != "b" || got[0].ClaimNamespace != "ns" ||
		len(got[0].ClaimResources) != 1 || got[0].ClaimResources[0].DriverName != f.drv.name || got[0].ClaimResources[0].DeviceName != "dev-a" ||
		len(got[0].ClaimResources[0].CdiDevices) != 1 || got[0].ClaimResources[0].CdiDevices[0].Name != "vendor.com/dev=a" {
		t.Errorf("DynamicResourcesFor(app) = %v", got)
	}
	if got := f.m.DynamicResourcesFor(pod, &pod.Spec.Containers[1]); len(got) != 0 {
		t.Errorf("DynamicResourcesFor(side) = %v", got)
	}
}

// A driver that serves only v1beta1 is asked through v1beta1, its
// messages converted.
func TestV1beta1Driver(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	f.drv = startFakeDriverServing(t, f.root, "old.example.com", false)
	if err := f.plugins.RegisterPlugin(ctx, f.drv.name, f.drv.socket, []string{"v1beta1.DRAPlugin"}); err != nil {
		t.Fatal(err)
	}
	if d, _ := f.plugins.driver(f.drv.name); d.service != "v1beta1.DRAPlugin" {
		t.Fatalf("service %q, want the plugin's first that nodelet speaks", d.service)
	}
	pod := podUsing("p", "c")
	f.api.add(allocated("c", f.drv.name, pod))
	s, err := f.m.Prepare(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	if got := cdiOf(t, s, pod, 0); !slices.Equal(got, []string{"vendor.com/dev=c"}) {
		t.Errorf("CDI devices = %q", got)
	}
	if err := f.m.Cleanup(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if prep, unprep := f.drv.calls(); len(prep) != 1 || len(unprep) != 1 {
		t.Errorf("calls %q %q", prep, unprep)
	}
}

// The kubelet's DRA metrics: one operation per Prepare that had work and
// per Cleanup of a pod that held a claim, by outcome; one gRPC
// observation per driver call, by method and code.
func TestMetrics(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	pod := podUsing("p", "c")
	if _, err := f.m.Prepare(ctx, pod); err == nil {
		t.Fatal("Prepare without the claim succeeded")
	}
	f.api.add(allocated("c", f.drv.name, pod))
	for range 2 {
		if _, err := f.m.Prepare(ctx, pod); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.m.Cleanup(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if err := f.m.Cleanup(ctx, pod); err != nil {
		t.Fatal(err)
	}
	wantOps := map[string]uint64{
		"is_error=false,operation_name=PrepareResources":   1,
		"is_error=true,operation_name=PrepareResources":    1,
		"is_error=false,operation_name=UnprepareResources": 1,
	}
	if got := histogramCounts(t, f.reg, "dra_operations_duration_seconds"); !maps.Equal(got, wantOps) {
		t.Errorf("dra_operations_duration_seconds counts = %v, want %v", got, wantOps)
	}
	wantGRPC := map[string]uint64{
		"driver_name=gpu.example.com,grpc_status_code=OK,method_name=/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources":   1,
		"driver_name=gpu.example.com,grpc_status_code=OK,method_name=/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodeUnprepareResources": 1,
	}
	if got := histogramCounts(t, f.reg, "dra_grpc_operations_duration_seconds"); !maps.Equal(got, wantGRPC) {
		t.Errorf("dra_grpc_operations_duration_seconds counts = %v, want %v", got, wantGRPC)
	}
}

// histogramCounts are the sample counts of the histogram name, by its
// labels ("k=v,k=v", in name order).
func histogramCounts(t *testing.T, reg *prometheus.Registry, name string) map[string]uint64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]uint64{}
	for _, mf := range families {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			out[strings.Join(labels, ",")] = m.GetHistogram().GetSampleCount()
		}
	}
	return out
}
