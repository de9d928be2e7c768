package podcidr

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

type fakeRuntime struct {
	pushed    []string
	pushErr   error
	sandboxes map[string]runtimeapi.NamespaceMode // ready sandboxes by ID
	listErr   error
}

func (f *fakeRuntime) UpdateRuntimeConfig(_ context.Context, cfg *runtimeapi.RuntimeConfig) error {
	if f.pushErr != nil {
		return f.pushErr
	}
	f.pushed = append(f.pushed, cfg.GetNetworkConfig().GetPodCidr())
	return nil
}

func (f *fakeRuntime) ListPodSandbox(_ context.Context, filter *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error) {
	if filter.GetState().GetState() != runtimeapi.PodSandboxState_SANDBOX_READY {
		panic("want only ready sandboxes")
	}
	var out []*runtimeapi.PodSandbox
	for id := range f.sandboxes {
		out = append(out, &runtimeapi.PodSandbox{Id: id})
	}
	return out, f.listErr
}

func (f *fakeRuntime) PodSandboxStatus(_ context.Context, id string) (*runtimeapi.PodSandboxStatusResponse, error) {
	return &runtimeapi.PodSandboxStatusResponse{Status: &runtimeapi.PodSandboxStatus{Id: id, Linux: &runtimeapi.LinuxPodSandboxStatus{
		Namespaces: &runtimeapi.Namespace{Options: &runtimeapi.NamespaceOption{Network: f.sandboxes[id]}}}}}, nil
}

type fakeNetwork struct {
	cidrs []string
	sets  [][]string
}

func (f *fakeNetwork) SetPodCIDRs(c []string) (bool, error) {
	f.cidrs = c
	f.sets = append(f.sets, c)
	return true, nil
}
func (f *fakeNetwork) PodCIDRs() []string { return f.cidrs }

type fakeEvents struct{ got []string }

func (f *fakeEvents) NodeEvent(node, typ, reason, msg string) {
	f.got = append(f.got, node+" "+typ+" "+reason+": "+msg)
}

type fixture struct {
	rt  *fakeRuntime
	net *fakeNetwork
	ev  *fakeEvents
	reg *prometheus.Registry
	m   *Manager
}

func newFixture(t *testing.T, network bool) *fixture {
	t.Helper()
	f := &fixture{rt: &fakeRuntime{sandboxes: map[string]runtimeapi.NamespaceMode{}}, ev: &fakeEvents{}, reg: prometheus.NewRegistry()}
	d := Deps{Runtime: f.rt, NodeName: "n1", Events: f.ev, Registerer: f.reg}
	if network {
		f.net = &fakeNetwork{}
		d.Network = f.net
	}
	f.m = New(d)
	return f
}

func (f *fixture) apply(t *testing.T, cidrs ...string) {
	t.Helper()
	if err := f.m.Apply(context.Background(), cidrs); err != nil {
		t.Fatalf("Apply(%q): %v", cidrs, err)
	}
}

func (f *fixture) refusals() float64 { return testutil.ToFloat64(f.m.refused) }

func TestFirstPushThenSame(t *testing.T) {
	f := newFixture(t, true)
	f.apply(t) // a Node without CIDRs yet
	f.apply(t, "10.244.1.0/24", "fd00::/64")
	f.apply(t, "10.244.1.0/24", "fd00::/64")
	if !slices.Equal(f.rt.pushed, []string{"10.244.1.0/24,fd00::/64"}) {
		t.Errorf("pushed %q, want one dual-stack push", f.rt.pushed)
	}
	if len(f.net.sets) != 1 || !slices.Equal(f.net.cidrs, []string{"10.244.1.0/24", "fd00::/64"}) {
		t.Errorf("network set %q", f.net.sets)
	}
	if got := f.m.PodCIDRs(); !slices.Equal(got, []string{"10.244.1.0/24", "fd00::/64"}) {
		t.Errorf("PodCIDRs = %q", got)
	}
}

func TestChangeWithPodsRunningIsRefusedThenAppliedWhenTheyAreGone(t *testing.T) {
	f := newFixture(t, true)
	f.apply(t, "10.244.1.0/24")
	f.rt.sandboxes["pod"] = runtimeapi.NamespaceMode_POD
	f.rt.sandboxes["hostnet"] = runtimeapi.NamespaceMode_NODE
	f.apply(t, "10.244.2.0/24")
	f.apply(t, "10.244.2.0/24") // reported once
	if !slices.Equal(f.rt.pushed, []string{"10.244.1.0/24"}) || !slices.Equal(f.net.cidrs, []string{"10.244.1.0/24"}) {
		t.Fatalf("applied under a running pod: pushed %q, network %q", f.rt.pushed, f.net.cidrs)
	}
	if len(f.ev.got) != 1 || !strings.Contains(f.ev.got[0], "n1 Warning PodCIDRChangeRefused: pod CIDR changed from 10.244.1.0/24 to 10.244.2.0/24 while 1 pod(s)") {
		t.Errorf("events %q", f.ev.got)
	}
	if f.refusals() != 1 {
		t.Errorf("refusals = %v, want 1", f.refusals())
	}
	delete(f.rt.sandboxes, "pod") // the host-network pod does not hold it back
	f.apply(t, "10.244.2.0/24")
	if !slices.Equal(f.rt.pushed, []string{"10.244.1.0/24", "10.244.2.0/24"}) || !slices.Equal(f.net.cidrs, []string{"10.244.2.0/24"}) {
		t.Errorf("after the pods left: pushed %q, network %q", f.rt.pushed, f.net.cidrs)
	}
}

// TestRestartKeepsTheNetworksCIDRs: a new nodelet reads what the managed
// network has; the same CIDRs are pushed again (the runtime is told), a
// change with pods running is refused.
func TestRestartKeepsTheNetworksCIDRs(t *testing.T) {
	f := newFixture(t, true)
	f.net.cidrs = []string{"10.244.1.0/24"}
	f.rt.sandboxes["pod"] = runtimeapi.NamespaceMode_POD
	f.apply(t, "10.244.3.0/24")
	if len(f.rt.pushed) != 0 || len(f.net.sets) != 0 || f.refusals() != 1 {
		t.Fatalf("pushed %q, network set %q, refusals %v", f.rt.pushed, f.net.sets, f.refusals())
	}
	f.apply(t, "10.244.1.0/24")
	if !slices.Equal(f.rt.pushed, []string{"10.244.1.0/24"}) {
		t.Errorf("pushed %q, want the network's CIDR once", f.rt.pushed)
	}
}

func TestInvalidCIDRIsReportedNotPushed(t *testing.T) {
	f := newFixture(t, false)
	f.apply(t, "10.244.1.0/24")
	f.apply(t, "10.244.1.7/24")
	f.apply(t, "10.244.1.7/24")
	if !slices.Equal(f.rt.pushed, []string{"10.244.1.0/24"}) {
		t.Errorf("pushed %q", f.rt.pushed)
	}
	if len(f.ev.got) != 1 || !strings.Contains(f.ev.got[0], "InvalidPodCIDR") {
		t.Errorf("events %q", f.ev.got)
	}
	if f.refusals() != 0 {
		t.Errorf("an invalid CIDR counted as a refused change")
	}
}

func TestFailuresAreRetried(t *testing.T) {
	f := newFixture(t, false)
	f.rt.pushErr = errors.New("unavailable")
	if err := f.m.Apply(context.Background(), []string{"10.244.1.0/24"}); err == nil {
		t.Fatal("Apply hid the runtime's error")
	}
	f.rt.pushErr = nil
	f.apply(t, "10.244.1.0/24")
	f.rt.sandboxes["pod"] = runtimeapi.NamespaceMode_POD
	f.rt.listErr = errors.New("unavailable")
	if err := f.m.Apply(context.Background(), []string{"10.244.2.0/24"}); err == nil {
		t.Fatal("a change was decided without knowing the pods")
	}
	if !slices.Equal(f.rt.pushed, []string{"10.244.1.0/24"}) {
		t.Errorf("pushed %q", f.rt.pushed)
	}
}
