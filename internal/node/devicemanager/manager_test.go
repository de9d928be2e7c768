package devicemanager

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/pure/podsetup"
)

const res = "example.com/fake"

func newClock() *clocktesting.FakeClock {
	return clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
}

// startWithPlugin runs a manager in dir with a registered fake plugin
// listing health.
func startWithPlugin(t *testing.T, dir string, clk *clocktesting.FakeClock, opts *pluginapi.DevicePluginOptions, health map[string]string) (*harness, *fakePlugin) {
	t.Helper()
	h := startManager(t, dir, clk)
	p := servePlugin(t, dir, res, "fake.sock")
	p.opts = opts
	p.devices <- devices(health)
	// The options that count are those GetDevicePluginOptions answers.
	if err := register(dir, &pluginapi.RegisterRequest{Version: pluginapi.Version, Endpoint: "fake.sock", ResourceName: res}); err != nil {
		t.Fatalf("Register: %v", err)
	}
	var healthy int64
	for _, s := range health {
		if s == pluginapi.Healthy {
			healthy++
		}
	}
	h.waitFor(t, res, int64(len(health)), healthy)
	return h, p
}

func contribution(t *testing.T, setup podsetup.Setup, pod podsetup.Container) podsetup.Additions {
	t.Helper()
	add, err := setup.Apply(pod)
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	return add
}

// A registered plugin's devices are the node's capacity (all) and
// allocatable (healthy); a pod's container gets healthy devices, and the
// plugin's answer (devices, mounts, env, annotations, CDI names) reaches
// the runtime after PreStartContainer.
func TestAllocateAndContribute(t *testing.T) {
	dir := t.TempDir()
	h, p := startWithPlugin(t, dir, newClock(), &pluginapi.DevicePluginOptions{PreStartRequired: true},
		map[string]string{"d0": pluginapi.Unhealthy, "d1": pluginapi.Healthy, "d2": pluginapi.Healthy})
	pod := podWith("uid-1", map[string]int64{res: 1, "cpu": 1})
	setup, err := h.m.Prepare(context.Background(), pod)
	if err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	allocated, _ := p.calls()
	if !slices.EqualFunc(allocated, [][]string{{"d1"}}, slices.Equal) {
		t.Fatalf("Allocate calls %v, want [[d1]] (d0 is unhealthy)", allocated)
	}
	add := contribution(t, setup, podsetup.Container{Pod: pod, Container: &pod.Spec.Containers[0]})
	if len(add.Devices) != 1 || add.Devices[0].ContainerPath != "/dev/d1" || add.Devices[0].Permissions != "rw" {
		t.Errorf("devices %v", add.Devices)
	}
	if len(add.Mounts) != 1 || add.Mounts[0].HostPath != "/tmp/fake-d1" || !add.Mounts[0].Readonly {
		t.Errorf("mounts %v", add.Mounts)
	}
	if len(add.Env) != 1 || add.Env[0].Key != "FAKE_DEVICES" || string(add.Env[0].Value) != "d1" {
		t.Errorf("env %v", add.Env)
	}
	if add.Annotations["fake.example.com/devices"] != "d1" {
		t.Errorf("annotations %v", add.Annotations)
	}
	if len(add.CDIDevices) != 1 || add.CDIDevices[0].Name != "example.com/fake=d1" {
		t.Errorf("CDI devices %v", add.CDIDevices)
	}
	if _, pre := p.calls(); !slices.EqualFunc(pre, [][]string{{"d1"}}, slices.Equal) {
		t.Errorf("PreStartContainer calls %v, want [[d1]]", pre)
	}
	if err := testutil.GatherAndCompare(h.reg, strings.NewReader(`
# HELP kubelet_device_plugin_registration_total Cumulative number of device plugin registrations. Broken down by resource name.
# TYPE kubelet_device_plugin_registration_total counter
kubelet_device_plugin_registration_total{resource_name="example.com/fake"} 1
`), "kubelet_device_plugin_registration_total"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(h.reg, "kubelet_device_plugin_alloc_duration_seconds"); n != 1 {
		t.Errorf("%d alloc duration series, want 1", n)
	}

	// Preparing again (every sync does) allocates nothing new.
	if _, err := h.m.Prepare(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	if allocated, _ := p.calls(); len(allocated) != 1 {
		t.Errorf("Allocate calls %v after a second Prepare, want still one", allocated)
	}
	// The other healthy device goes to the next pod; then none is left.
	if err := h.m.Allocate(context.Background(), podWith("uid-2", map[string]int64{res: 1})); err != nil {
		t.Fatal(err)
	}
	err = h.m.Allocate(context.Background(), podWith("uid-3", map[string]int64{res: 1}))
	if err == nil || err.Error() != "requested number of devices unavailable for example.com/fake. Requested: 1, Available: 0" {
		t.Fatalf("a third pod: %v, want the kubelet's error", err)
	}
	if got, _ := h.m.Holding(); !slices.Equal(got, []types.UID{"uid-1", "uid-2"}) {
		t.Errorf("Holding = %v", got)
	}
	// Cleanup of the first pod frees d1 for the third.
	if err := h.m.Cleanup(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	if err := h.m.Allocate(context.Background(), podWith("uid-3", map[string]int64{res: 1})); err != nil {
		t.Fatalf("after the first pod's cleanup: %v", err)
	}
	if got := h.m.DevicesFor("uid-3", "app"); len(got) != 1 || !slices.Equal(got[0].DeviceIds, []string{"d1"}) || got[0].ResourceName != res {
		t.Errorf("DevicesFor uid-3 = %v, want d1", got)
	}
	if got := h.m.AllocatableDevices(); len(got) != 1 || !slices.Equal(got[0].DeviceIds, []string{"d0", "d1", "d2"}) {
		t.Errorf("AllocatableDevices = %v", got)
	}
}

// A pod asking for a resource no plugin serves is not the device
// manager's business (admission's): nothing to allocate, no error.
func TestAllocateIgnoresOtherResources(t *testing.T) {
	h := startManager(t, t.TempDir(), newClock())
	if err := h.m.Allocate(context.Background(), podWith("uid-1", map[string]int64{"example.com/other": 2})); err != nil {
		t.Fatal(err)
	}
}

// An init container's devices go to the app container first; the plugin's
// preference decides among the rest.
func TestInitContainerDevicesReusedAndPreferred(t *testing.T) {
	h, p := startWithPlugin(t, t.TempDir(), newClock(), &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true},
		map[string]string{"d0": pluginapi.Healthy, "d1": pluginapi.Healthy, "d2": pluginapi.Healthy, "d3": pluginapi.Healthy})
	p.prefer = []string{"d3", "d2"}
	pod := podWith("uid-1", map[string]int64{res: 2}, map[string]int64{res: 1})
	if err := h.m.Allocate(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	allocated, _ := p.calls()
	want := [][]string{{"d3"}, {"d3", "d2"}}
	if !slices.EqualFunc(allocated, want, slices.Equal) {
		t.Errorf("Allocate calls %v, want %v", allocated, want)
	}
}

// A container whose limit changed after its allocation is refused with
// the kubelet's error.
func TestChangedRequest(t *testing.T) {
	h, _ := startWithPlugin(t, t.TempDir(), newClock(), nil, map[string]string{"d0": pluginapi.Healthy, "d1": pluginapi.Healthy})
	if err := h.m.Allocate(context.Background(), podWith("uid-1", map[string]int64{res: 1})); err != nil {
		t.Fatal(err)
	}
	err := h.m.Allocate(context.Background(), podWith("uid-1", map[string]int64{res: 2}))
	if err == nil || !strings.Contains(err.Error(), `changed request for resource "example.com/fake" from 1 to 2`) {
		t.Fatalf("err %v", err)
	}
}

// A plugin that dies leaves its devices unhealthy: allocatable drops to
// zero at once, capacity stays for the grace period and then drops to
// zero too; the plugin registering again brings them back.
func TestPluginDeathMarksDevicesUnhealthy(t *testing.T) {
	dir := t.TempDir()
	clk := newClock()
	h, p := startWithPlugin(t, dir, clk, nil, map[string]string{"d0": pluginapi.Healthy, "d1": pluginapi.Healthy})
	p.srv.Stop()
	h.waitFor(t, res, 2, 0)
	if err := h.m.Allocate(context.Background(), podWith("uid-1", map[string]int64{res: 1})); err == nil {
		t.Error("allocated a device of a dead plugin")
	}
	clk.Step(EndpointStopGracePeriod)
	h.waitFor(t, res, 2, 0)
	clk.Step(time.Second)
	h.waitFor(t, res, 0, 0)
	if got := h.m.Resources(); len(got) != 0 {
		t.Errorf("resources %v after the grace period", got)
	}
	p2 := servePlugin(t, dir, res, "fake.sock")
	p2.devices <- devices(map[string]string{"d0": pluginapi.Healthy})
	if err := register(dir, &pluginapi.RegisterRequest{Version: pluginapi.Version, Endpoint: "fake.sock", ResourceName: res}); err != nil {
		t.Fatal(err)
	}
	h.waitFor(t, res, 1, 1)
}

// Allocations survive a restart of nodelet: the restarted manager reports
// the checkpoint's devices (unhealthy) until the plugin is back, keeps the
// allocated pod's devices without asking the plugin again, and gives them
// to no other pod.
func TestCheckpointAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	clk := newClock()
	h, p := startWithPlugin(t, dir, clk, nil, map[string]string{"d0": pluginapi.Healthy, "d1": pluginapi.Healthy})
	pod := podWith("uid-1", map[string]int64{res: 1})
	if err := h.m.Allocate(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	h.stop()
	p.srv.Stop()

	h2 := startManager(t, dir, clk)
	h2.waitFor(t, res, 2, 0)
	setup, err := h2.m.Prepare(context.Background(), pod)
	if err != nil {
		t.Fatalf("Prepare after the restart, plugin away: %v", err)
	}
	if add := contribution(t, setup, podsetup.Container{Pod: pod, Container: &pod.Spec.Containers[0]}); len(add.Devices) != 1 || add.Devices[0].ContainerPath != "/dev/d0" {
		t.Errorf("devices after restart %v, want the checkpointed d0", add.Devices)
	}
	p2 := servePlugin(t, dir, res, "fake.sock")
	p2.devices <- devices(map[string]string{"d0": pluginapi.Healthy, "d1": pluginapi.Healthy})
	if err := register(dir, &pluginapi.RegisterRequest{Version: pluginapi.Version, Endpoint: "fake.sock", ResourceName: res}); err != nil {
		t.Fatal(err)
	}
	h2.waitFor(t, res, 2, 2)
	if err := h2.m.Allocate(context.Background(), podWith("uid-2", map[string]int64{res: 1})); err != nil {
		t.Fatal(err)
	}
	if allocated, _ := p2.calls(); !slices.EqualFunc(allocated, [][]string{{"d1"}}, slices.Equal) {
		t.Errorf("Allocate calls after the restart %v, want only the new pod's, of d1", allocated)
	}
}

// A corrupt checkpoint is reported and replaced; the manager starts.
func TestCorruptCheckpoint(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, CheckpointFile), []byte(`{"Data":{"PodDeviceEntries":null},"Checksum":"x"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, _ = startWithPlugin(t, dir, newClock(), nil, map[string]string{"d0": pluginapi.Healthy})
	if _, _, err := readCheckpoint(filepath.Join(dir, CheckpointFile)); err != nil {
		t.Errorf("the checkpoint was not replaced: %v", err)
	}
}

func TestRegistrationRefused(t *testing.T) {
	dir := t.TempDir()
	startManager(t, dir, newClock())
	for _, tc := range []struct {
		req  *pluginapi.RegisterRequest
		want string
	}{
		{&pluginapi.RegisterRequest{Version: "v1alpha", Endpoint: "a.sock", ResourceName: res}, `requested API version "v1alpha" is not supported by kubelet`},
		{&pluginapi.RegisterRequest{Version: pluginapi.Version, Endpoint: "a.sock", ResourceName: "cpu"}, `the ResourceName "cpu" is invalid`},
		{&pluginapi.RegisterRequest{Version: pluginapi.Version, Endpoint: "a.sock", ResourceName: "kubernetes.io/gpu"}, `the ResourceName "kubernetes.io/gpu" is invalid`},
		{&pluginapi.RegisterRequest{Version: pluginapi.Version, Endpoint: "../a.sock", ResourceName: res}, `invalid name of device plugin socket`},
		{&pluginapi.RegisterRequest{Version: pluginapi.Version, Endpoint: SocketName, ResourceName: res}, `invalid name of device plugin socket`},
	} {
		err := register(dir, tc.req)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Register(%v) = %v, want %q", tc.req, err, tc.want)
		}
	}
}

// A plugin whose GetDevicePluginOptions fails is refused with the
// kubelet's error and never asked for its devices; the node does not
// get its resource.
func TestGetDevicePluginOptionsFails(t *testing.T) {
	dir := t.TempDir()
	h := startManager(t, dir, newClock())
	p := servePlugin(t, dir, res, "fake.sock")
	p.optsErr = errors.New("GetDevicePluginOptions failed")
	err := register(dir, &pluginapi.RegisterRequest{Version: pluginapi.Version, Endpoint: "fake.sock", ResourceName: res})
	if err == nil || !strings.Contains(err.Error(), "failed to get device plugin options") || !strings.Contains(err.Error(), "GetDevicePluginOptions failed") {
		t.Fatalf("Register = %v", err)
	}
	p.mu.Lock()
	listed := p.listed
	p.mu.Unlock()
	if listed != 0 {
		t.Errorf("ListAndWatch called %d times", listed)
	}
	if c, _ := h.m.Capacity(); len(c) != 0 {
		t.Errorf("capacity %v, want none", c)
	}
}

// A plugin whose ListAndWatch fails at once gives the node its resource
// with no device at all, and is not asked again.
func TestListAndWatchFailsAtOnce(t *testing.T) {
	dir := t.TempDir()
	h := startManager(t, dir, newClock())
	p := servePlugin(t, dir, res, "fake.sock")
	p.srvErr = errors.New("ListAndWatch failed")
	if err := register(dir, &pluginapi.RegisterRequest{Version: pluginapi.Version, Endpoint: "fake.sock", ResourceName: res}); err != nil {
		t.Fatal(err)
	}
	h.waitFor(t, res, 0, 0)
	deadline := time.After(failsafe)
	for {
		h.m.mu.Lock()
		r := h.m.resources[res]
		gone := r != nil && r.plugin == nil
		h.m.mu.Unlock()
		if gone {
			break
		}
		select {
		case <-h.changed:
		case <-deadline:
			t.Fatal("the failed stream did not end the plugin")
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.listed != 1 {
		t.Errorf("ListAndWatch called %d times, want once", p.listed)
	}
}

// A device the plugin reports unhealthy leaves allocatable, not
// capacity, and comes back when it is healthy again (the kubelet's
// Device Plugin Failures specs).
func TestDeviceHealthChanges(t *testing.T) {
	h, p := startWithPlugin(t, t.TempDir(), newClock(), nil, map[string]string{"d0": pluginapi.Healthy, "d1": pluginapi.Healthy})
	p.devices <- devices(map[string]string{"d0": pluginapi.Healthy, "d1": pluginapi.Unhealthy})
	h.waitFor(t, res, 2, 1)
	err := h.m.Allocate(context.Background(), podWith("uid-1", map[string]int64{res: 2}))
	if err == nil || !strings.Contains(err.Error(), "Requested: 2, Available: 1") {
		t.Errorf("two devices with one healthy: %v", err)
	}
	p.devices <- devices(map[string]string{"d0": pluginapi.Healthy, "d1": pluginapi.Healthy})
	h.waitFor(t, res, 2, 2)
	if fi, err := os.Stat(filepath.Join(h.dir, SocketName)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("registration socket %v, %v: want mode 0600", fi, err)
	}
}

// Admission counts against the healthy devices, raised to the devices
// pods hold (the kubelet's sanitizeNodeAllocatable): a pod given the one
// healthy device, beside a pod whose device went unhealthy, fits.
func TestAdmissionAllocatable(t *testing.T) {
	h, p := startWithPlugin(t, t.TempDir(), newClock(), nil, map[string]string{"d0": pluginapi.Healthy, "d1": pluginapi.Healthy})
	ctx := context.Background()
	if err := h.m.Allocate(ctx, podWith("uid-1", map[string]int64{res: 1})); err != nil {
		t.Fatal(err)
	}
	held, _ := p.calls()
	healthy := map[string]string{"d0": pluginapi.Healthy, "d1": pluginapi.Healthy}
	healthy[held[0][0]] = pluginapi.Unhealthy
	p.devices <- devices(healthy)
	h.waitFor(t, res, 2, 1)
	if got := h.m.AdmissionAllocatable()[res]; got.Value() != 1 {
		t.Errorf("admission's allocatable %s with one device held, one healthy: want 1", got.String())
	}
	if err := h.m.Allocate(ctx, podWith("uid-2", map[string]int64{res: 1})); err != nil {
		t.Fatal(err)
	}
	if got := h.m.AdmissionAllocatable()[res]; got.Value() != 2 {
		t.Errorf("admission's allocatable %s with two devices held, one healthy: want 2", got.String())
	}
	if _, a := h.m.Capacity(); a.Name(res, resource.DecimalSI).Value() != 1 {
		t.Errorf("the Node's allocatable %v, want the one healthy device", a)
	}
}

// A plugin's socket whose path in a deep --root-dir is too long for a
// socket address (upstream's test plugin names its socket after the test
// namespace) is still reached, through the directory's descriptor.
func TestLongPluginSocketPath(t *testing.T) {
	dir := t.TempDir()
	// kubelet.sock still fits a socket address; the plugin's does not.
	dir = filepath.Join(dir, strings.Repeat("d", maxSocketPath-len(dir)-len("/"+SocketName)-2))
	if err := os.Mkdir(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	const endpoint = "test-device-plugin-device-plugin-failures-502.sock"
	if len(filepath.Join(dir, endpoint)) <= maxSocketPath {
		t.Fatalf("%s fits a socket address", filepath.Join(dir, endpoint))
	}
	h := startManager(t, dir, newClock())
	p := servePlugin(t, dir, res, endpoint)
	p.devices <- devices(map[string]string{"d0": pluginapi.Healthy})
	if err := register(dir, &pluginapi.RegisterRequest{Version: pluginapi.Version, Endpoint: endpoint, ResourceName: res}); err != nil {
		t.Fatalf("Register: %v", err)
	}
	h.waitFor(t, res, 1, 1)
	if err := h.m.Allocate(context.Background(), podWith("uid-1", map[string]int64{res: 1})); err != nil {
		t.Errorf("Allocate over the long socket path: %v", err)
	}
}

// As an admission allocator the manager refuses a pod it cannot give
// devices with the kubelet's reason and message, and RemovePod frees what
// a pod admitted here holds.
func TestAdmitAndRemovePod(t *testing.T) {
	h, _ := startWithPlugin(t, t.TempDir(), newClock(), nil, map[string]string{"d0": pluginapi.Healthy, "d1": pluginapi.Unhealthy})
	ctx := context.Background()
	ok, reason, message := h.m.Admit(ctx, podWith("uid-1", map[string]int64{res: 2}))
	if ok || reason != ReasonUnexpectedAdmissionError ||
		message != "Allocate failed due to requested number of devices unavailable for example.com/fake. Requested: 2, Available: 1, which is unexpected" {
		t.Errorf("Admit of two devices with one healthy: %v %q %q", ok, reason, message)
	}
	if ok, reason, message := h.m.Admit(ctx, podWith("uid-2", map[string]int64{res: 1})); !ok {
		t.Fatalf("Admit of one device: %q %q", reason, message)
	}
	if ok, _, _ := h.m.Admit(ctx, podWith("uid-3", map[string]int64{res: 1})); ok {
		t.Error("admitted a pod to a device another pod holds")
	}
	if err := h.m.RemovePod("uid-2"); err != nil {
		t.Fatal(err)
	}
	if ok, reason, message := h.m.Admit(ctx, podWith("uid-3", map[string]int64{res: 1})); !ok {
		t.Errorf("Admit after the holder was removed: %q %q", reason, message)
	}
}
