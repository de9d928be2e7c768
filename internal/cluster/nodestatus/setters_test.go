package nodestatus

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (run with -update to accept):\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

func nodeYAML(t *testing.T, n *v1.Node) []byte {
	t.Helper()
	out, err := yaml.Marshal(n)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func indentJSON(t *testing.T, data []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := json.Indent(&buf, data, "", "  "); err != nil {
		t.Fatal(err)
	}
	buf.WriteByte('\n')
	return buf.Bytes()
}

var t0 = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

// testOptions are a node with every setting that shows in its Node.
func testOptions() Options {
	return Options{
		NodeName:           "node-1",
		NodeIPs:            []string{"10.0.0.5"},
		RootDir:            "/var/lib/nodelet",
		Port:               10250,
		Labels:             map[string]string{"example.com/pool": "blue", "node.kubernetes.io/instance-type": "small"},
		RegisterWithTaints: []v1.Taint{{Key: "example.com/dedicated", Value: "ci", Effect: v1.TaintEffectNoSchedule}},
		SystemReserved:     map[string]string{"cpu": "100m", "memory": "256Mi"},
		KubeReserved:       map[string]string{"memory": "256Mi", "ephemeral-storage": "1Gi"},
		Host: HostInfo{
			MachineID:     "0123456789abcdef0123456789abcdef",
			SystemUUID:    "4c4c4544-0042-3510-8052-b4c04f4e4d31",
			BootID:        "8e6a2c1f-7a57-4c2e-9a4c-1d9f8f7b6a5e",
			KernelVersion: "6.1.0-18-amd64",
			OSImage:       "Debian GNU/Linux 12 (bookworm)",
		},
	}
}

func testConfig(t *testing.T, o Options) *config {
	t.Helper()
	c, err := newConfig(o)
	if err != nil {
		t.Fatal(err)
	}
	c.goos, c.goarch = "linux", "amd64"
	return c
}

// testFacts are a healthy 4-CPU, 8 GiB node with two huge page sizes.
func testFacts(now time.Time) *Facts {
	return &Facts{
		Now:            now,
		CPUs:           4,
		MemoryBytes:    8 << 30,
		HugePages:      map[uint64]uint64{2 << 20: 4, 1 << 30: 0},
		RootFsBytes:    100 << 30,
		RuntimeVersion: "containerd://1.6.20",
		Images: []Image{
			{ID: "sha256:big", RepoTags: []string{"registry.example/app:v2", "registry.example/app:latest"},
				RepoDigests: []string{"registry.example/app@sha256:aaaa"}, Size: 300 << 20},
			{ID: "sha256:pause", RepoTags: []string{"registry.k8s.io/pause:3.10"}, Size: 320 << 10},
		},
	}
}

func TestInitialNodeGolden(t *testing.T) {
	c := testConfig(t, testOptions())
	node, evs := c.initialNode(testFacts(t0))
	golden(t, "initial-node.golden", nodeYAML(t, node))
	// A new Node's pressure conditions start Unknown: their first value
	// is a transition, with its event; Ready's first value is not.
	var reasons []string
	for _, e := range evs {
		reasons = append(reasons, e.Reason)
	}
	if got := strings.Join(reasons, " "); got != "NodeHasSufficientMemory NodeHasNoDiskPressure NodeHasSufficientPID" {
		t.Errorf("events = %s", got)
	}
}

// TestAllocatable checks the arithmetic the golden file shows, against
// the numbers worked out by hand.
func TestAllocatable(t *testing.T) {
	c := testConfig(t, testOptions())
	node, _ := c.initialNode(testFacts(t0))
	alloc := node.Status.Allocatable
	for name, want := range map[v1.ResourceName]int64{
		// 4 CPUs less 100m system-reserved.
		v1.ResourceCPU: 3900,
	} {
		if q := alloc[name]; q.MilliValue() != want {
			t.Errorf("allocatable %s = %s, want %dm", name, &q, want)
		}
	}
	for name, want := range map[v1.ResourceName]int64{
		// 8Gi less 256Mi + 256Mi reserved, 100Mi memory.available, 8Mi
		// of huge pages.
		v1.ResourceMemory: 8<<30 - 512<<20 - 100<<20 - 8<<20,
		// 100Gi less 1Gi kube-reserved and 10% nodefs.available (the
		// kubelet's float32 percentage: 0.1 is a little more than 0.1).
		v1.ResourceEphemeralStorage: 100<<30 - 1<<30 - int64(float64(100<<30)*float64(float32(0.1))),
		v1.ResourcePods:             110,
		"hugepages-2Mi":             8 << 20,
		"hugepages-1Gi":             0,
	} {
		if q := alloc[name]; q.Value() != want {
			t.Errorf("allocatable %s = %d, want %d", name, q.Value(), want)
		}
	}
}

// Without localStorageCapacityIsolation the Node has no ephemeral-storage
// capacity or allocatable, and is Ready without it; with it, a root
// filesystem that cannot be read keeps the Node not Ready, as the
// kubelet.
func TestLocalStorageCapacityIsolation(t *testing.T) {
	for _, tc := range []struct {
		name     string
		isolate  *bool
		rootFs   uint64
		capacity bool
		ready    v1.ConditionStatus
	}{
		{"default", nil, 100 << 30, true, v1.ConditionTrue},
		{"off", ptr.To(false), 100 << 30, false, v1.ConditionTrue},
		{"root filesystem unknown", nil, 0, false, v1.ConditionFalse},
		{"off, root filesystem unknown", ptr.To(false), 0, false, v1.ConditionTrue},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := testOptions()
			o.LocalStorageCapacityIsolation = tc.isolate
			f := testFacts(t0)
			f.RootFsBytes = tc.rootFs
			node, _ := testConfig(t, o).initialNode(f)
			_, inCapacity := node.Status.Capacity[v1.ResourceEphemeralStorage]
			_, inAllocatable := node.Status.Allocatable[v1.ResourceEphemeralStorage]
			if inCapacity != tc.capacity || inAllocatable != tc.capacity {
				t.Errorf("ephemeral-storage in capacity %v, allocatable %v; want %v", inCapacity, inAllocatable, tc.capacity)
			}
			ready := v1.ConditionUnknown
			for _, c := range node.Status.Conditions {
				if c.Type == v1.NodeReady {
					ready = c.Status
				}
			}
			if ready != tc.ready {
				t.Errorf("Ready %s, want %s", ready, tc.ready)
			}
		})
	}
}

// step is a status computation on top of the previous Node.
type step struct {
	name  string
	facts func(f *Facts)
	opts  func(o *Options)
	// changed: the status must be patched before the report period.
	changed bool
	events  string
}

// TestStatusPatchesGolden computes the status over the Node the previous
// step left, and writes each step's patch to a golden file.
func TestStatusPatchesGolden(t *testing.T) {
	c := testConfig(t, testOptions())
	node, _ := c.initialNode(testFacts(t0))
	steps := []step{
		{name: "heartbeat", changed: false},
		{name: "runtime-not-ready", changed: true, events: "NodeNotReady", facts: func(f *Facts) {
			f.NetworkErr = errors.New("container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized")
			f.RuntimeErr = fmt.Errorf("PLEG is not healthy: %w", errors.New("pleg was last seen active 3m10s ago; threshold is 3m0s"))
		}},
		{name: "still-not-ready", changed: false, facts: func(f *Facts) {
			f.NetworkErr = errors.New("container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized")
			f.RuntimeErr = fmt.Errorf("PLEG is not healthy: %w", errors.New("pleg was last seen active 3m10s ago; threshold is 3m0s"))
		}},
		{name: "ready-memory-pressure", changed: true, events: "NodeHasInsufficientMemory NodeReady", facts: func(f *Facts) {
			f.MemoryPressure = true
		}},
		{name: "new-image-and-address", changed: true, opts: func(o *Options) {
			o.NodeIPs = []string{"10.0.0.6", "fd00::6"}
		}, facts: func(f *Facts) {
			f.MemoryPressure = true
			f.Images = append([]Image{{ID: "sha256:new", RepoTags: []string{"registry.example/db:1"}, Size: 500 << 20}}, f.Images...)
		}},
		// The machine unreadable: 0 CPU and memory, as the kubelet; the
		// ephemeral-storage capacity stays from before, so still Ready.
		{name: "machine-unknown", changed: true, events: "NodeHasSufficientMemory", facts: func(f *Facts) {
			f.MachineErr = errors.New("count CPUs: no /proc")
			f.RootFsBytes = 0
			f.Images = nil
		}},
	}
	now := t0
	for _, s := range steps {
		now = now.Add(10 * time.Second)
		o := testOptions()
		if s.opts != nil {
			s.opts(&o)
		}
		c := testConfig(t, o)
		f := testFacts(now)
		if s.facts != nil {
			s.facts(f)
		}
		next, changed, evs := c.updateNode(node, f)
		if changed != s.changed {
			t.Errorf("%s: changed = %v, want %v", s.name, changed, s.changed)
		}
		var reasons []string
		for _, e := range evs {
			reasons = append(reasons, e.Reason)
		}
		if got := strings.Join(reasons, " "); got != s.events {
			t.Errorf("%s: events %q, want %q", s.name, got, s.events)
		}
		patch, err := statusPatch(node, next)
		if err != nil {
			t.Fatal(err)
		}
		golden(t, "patch-"+s.name+".golden", indentJSON(t, patch))
		node = next
	}
}

func TestImagesCapped(t *testing.T) {
	o := testOptions()
	o.NodeStatusMaxImages = ptr.To[int32](2)
	c := testConfig(t, o)
	f := testFacts(t0)
	f.Images = []Image{
		{ID: "a", RepoDigests: []string{"d1", "d2", "d3"}, RepoTags: []string{"t1", "t2", "t3"}, Size: 3},
		{ID: "b", RepoTags: []string{"b"}, Size: 2},
		{ID: "c", RepoTags: []string{"c"}, Size: 1},
	}
	node, _ := c.initialNode(f)
	got := node.Status.Images
	if len(got) != 2 || strings.Join(got[0].Names, ",") != "d1,d2,d3,t1,t2" || got[1].Names[0] != "b" {
		t.Errorf("images = %+v", got)
	}
	o.NodeStatusMaxImages = ptr.To[int32](-1)
	node, _ = testConfig(t, o).initialNode(f)
	if len(node.Status.Images) != 3 {
		t.Errorf("no cap: %d images", len(node.Status.Images))
	}
}

func TestPodsPerCore(t *testing.T) {
	o := testOptions()
	o.PodsPerCore, o.MaxPods = 10, 30
	node, _ := testConfig(t, o).initialNode(testFacts(t0)) // 4 CPUs
	if q := node.Status.Capacity[v1.ResourcePods]; q.Value() != 30 {
		t.Errorf("pods = %s, want 30 (maxPods below 4×10)", &q)
	}
	o.PodsPerCore = 5
	node, _ = testConfig(t, o).initialNode(testFacts(t0))
	if q := node.Status.Capacity[v1.ResourcePods]; q.Value() != 20 {
		t.Errorf("pods = %s, want 20", &q)
	}
}

// The kubelet keeps capacity others advertise (extended resources) and
// drops from allocatable an extended resource no longer in capacity.
func TestExtendedResourcesKept(t *testing.T) {
	c := testConfig(t, testOptions())
	node, _ := c.initialNode(testFacts(t0))
	node.Status.Capacity["example.com/gpu"] = resource.MustParse("2")
	node.Status.Allocatable["example.com/fpga"] = resource.MustParse("1")
	next, _, _ := c.updateNode(node, testFacts(t0.Add(time.Minute)))
	if q := next.Status.Allocatable["example.com/gpu"]; q.Value() != 2 {
		t.Errorf("allocatable gpu = %s", &q)
	}
	if _, ok := next.Status.Allocatable["example.com/fpga"]; ok {
		t.Error("allocatable fpga kept without capacity")
	}
}

func TestRebootEvent(t *testing.T) {
	c := testConfig(t, testOptions())
	node, _ := c.initialNode(testFacts(t0))
	node.Status.NodeInfo.BootID = "old-boot"
	_, _, evs := c.updateNode(node, testFacts(t0.Add(time.Minute)))
	if len(evs) != 1 || evs[0].Reason != "Rebooted" || evs[0].Type != v1.EventTypeWarning ||
		evs[0].Message != "Node node-1 has been rebooted, boot id: 8e6a2c1f-7a57-4c2e-9a4c-1d9f8f7b6a5e" {
		t.Errorf("events = %+v", evs)
	}
}

// The os and arch labels are put back when missing, and that alone is a
// change to patch.
func TestUpdateNodeRestoresLabels(t *testing.T) {
	c := testConfig(t, testOptions())
	node, _ := c.initialNode(testFacts(t0))
	delete(node.Labels, v1.LabelArchStable)
	next, changed, _ := c.updateNode(node, testFacts(t0.Add(10*time.Second)))
	if !changed || next.Labels[v1.LabelArchStable] != "amd64" {
		t.Errorf("changed %v, labels %v", changed, next.Labels)
	}
	patch, err := statusPatch(node, next)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(patch), `"labels":{"kubernetes.io/arch":"amd64"}`) {
		t.Errorf("patch %s", patch)
	}
}

func TestReconcileExisting(t *testing.T) {
	c := testConfig(t, testOptions())
	initial, _ := c.initialNode(testFacts(t0))

	same := initial.DeepCopy()
	if reconcileExisting(initial, same) {
		t.Error("a Node as nodelet would create it needs reconciling")
	}

	existing := initial.DeepCopy()
	existing.Labels[v1.LabelHostname] = "old-name"
	delete(existing.Labels, labelOSBeta)
	existing.Labels["example.com/pool"] = "green" // changed by someone: kept
	delete(existing.Annotations, annotationAttachDetach)
	existing.Spec.Taints = nil // removed by someone: kept
	delete(existing.Status.Capacity, "hugepages-1Gi")
	existing.Status.Capacity["hugepages-32Mi"] = resource.MustParse("0")
	existing.Status.Allocatable["hugepages-32Mi"] = resource.MustParse("0")
	if !reconcileExisting(initial, existing) {
		t.Fatal("not reconciled")
	}
	if existing.Labels[v1.LabelHostname] != "node-1" || existing.Labels[labelOSBeta] != "linux" ||
		existing.Labels["example.com/pool"] != "green" || existing.Annotations[annotationAttachDetach] != "true" ||
		existing.Spec.Taints != nil {
		t.Errorf("reconciled metadata %+v, taints %v", existing.ObjectMeta, existing.Spec.Taints)
	}
	if _, ok := existing.Status.Capacity["hugepages-1Gi"]; !ok {
		t.Error("hugepages-1Gi not added back")
	}
	if _, ok := existing.Status.Capacity["hugepages-32Mi"]; ok {
		t.Error("hugepages-32Mi kept")
	}
}

func TestStatusChangedIgnoresHeartbeatAndOrder(t *testing.T) {
	c := testConfig(t, testOptions())
	a, _ := c.initialNode(testFacts(t0))
	b := a.DeepCopy()
	for i := range b.Status.Conditions {
		b.Status.Conditions[i].LastHeartbeatTime.Time = t0.Add(time.Hour)
	}
	b.Status.Conditions[0], b.Status.Conditions[3] = b.Status.Conditions[3], b.Status.Conditions[0]
	if statusChanged(&a.Status, &b.Status) {
		t.Error("heartbeat and order count as a change")
	}
	b.Status.Conditions[0].Message = "other"
	if !statusChanged(&a.Status, &b.Status) {
		t.Error("a message change is not a change")
	}
}

// Features a kubelet declared before nodelet replaced it are not
// nodelet's: they go.
func TestDeclaredFeaturesReplaced(t *testing.T) {
	c := testConfig(t, testOptions())
	node, _ := c.initialNode(testFacts(t0))
	node.Status.DeclaredFeatures = []string{"InPlacePodResize"}
	next, changed, _ := c.updateNode(node, testFacts(t0.Add(10*time.Second)))
	if !changed || next.Status.DeclaredFeatures != nil {
		t.Errorf("changed %v, declared %v", changed, next.Status.DeclaredFeatures)
	}
	o := testOptions()
	o.DeclaredFeatures = []string{"RestartAllContainers"}
	next, _, _ = testConfig(t, o).updateNode(node, testFacts(t0.Add(10*time.Second)))
	if strings.Join(next.Status.DeclaredFeatures, ",") != "RestartAllContainers" {
		t.Errorf("declared %v", next.Status.DeclaredFeatures)
	}
}

// While the node shuts down, Ready is false with the kubelet's message.
func TestReadyWhileShuttingDown(t *testing.T) {
	c := testConfig(t, testOptions())
	node, _ := c.initialNode(testFacts(t0))
	f := testFacts(t0.Add(10 * time.Second))
	f.ShutdownErr = errors.New("node is shutting down")
	next, changed, evs := c.updateNode(node, f)
	cond, _ := findCondition(next, v1.NodeReady)
	if !changed || cond.Status != v1.ConditionFalse || cond.Reason != "KubeletNotReady" || cond.Message != "node is shutting down" {
		t.Fatalf("changed %v, Ready %+v: want False KubeletNotReady \"node is shutting down\"", changed, cond)
	}
	if len(evs) != 1 || evs[0].Reason != "NodeNotReady" {
		t.Errorf("events %+v, want NodeNotReady", evs)
	}
}

// status.volumesInUse is what the volume manager reports; without a
// reporter it is left as it is.
func TestVolumesInUse(t *testing.T) {
	c := testConfig(t, testOptions())
	node, _ := c.initialNode(testFacts(t0))
	f := testFacts(t0.Add(time.Minute))
	f.VolumesInUse = []v1.UniqueVolumeName{"kubernetes.io/csi/drv^vol-1"}
	next, _, _ := c.updateNode(node, f)
	if got := next.Status.VolumesInUse; len(got) != 1 || got[0] != "kubernetes.io/csi/drv^vol-1" {
		t.Errorf("volumesInUse = %v", got)
	}
	kept, _, _ := c.updateNode(next, testFacts(t0.Add(2*time.Minute)))
	if len(kept.Status.VolumesInUse) != 1 {
		t.Errorf("volumesInUse without a reporter = %v", kept.Status.VolumesInUse)
	}
	f = testFacts(t0.Add(3 * time.Minute))
	f.VolumesInUse = []v1.UniqueVolumeName{}
	gone, _, _ := c.updateNode(kept, f)
	if len(gone.Status.VolumesInUse) != 0 {
		t.Errorf("volumesInUse after the volume went = %v", gone.Status.VolumesInUse)
	}
}

// The node's swap is reported as the kubelet's NodeSwap reports it: only
// when there is some (the API server refuses a capacity of 0: "must be
// greater than zero"); none or unknown, not at all.
func TestSwapCapacity(t *testing.T) {
	o := testOptions()
	node, _ := testConfig(t, o).initialNode(testFacts(t0))
	if node.Status.NodeInfo.Swap != nil {
		t.Errorf("swap unknown: got %+v", node.Status.NodeInfo.Swap)
	}
	none := int64(0)
	o.SwapCapacity = &none
	if node, _ = testConfig(t, o).initialNode(testFacts(t0)); node.Status.NodeInfo.Swap != nil {
		t.Errorf("no swap: got %+v, want none reported", node.Status.NodeInfo.Swap)
	}
	some := int64(4 << 30)
	o.SwapCapacity = &some
	node, _ = testConfig(t, o).initialNode(testFacts(t0))
	if s := node.Status.NodeInfo.Swap; s == nil || s.Capacity == nil || *s.Capacity != some {
		t.Errorf("swap %d: got %+v", some, s)
	}
}

// The device plugins' resources are capacity (every device) and
// allocatable (the healthy ones), as the kubelet's MachineInfo setter puts
// them; a removed plugin's resource stays at zero.
func TestDevicePluginResources(t *testing.T) {
	c := testConfig(t, testOptions())
	f := testFacts(t0)
	f.DeviceCapacity = v1.ResourceList{"example.com/gpu": resource.MustParse("2"), "example.com/gone": resource.MustParse("0")}
	f.DeviceAllocatable = v1.ResourceList{"example.com/gpu": resource.MustParse("1"), "example.com/gone": resource.MustParse("0")}
	node, _ := c.initialNode(f)
	for name, want := range map[v1.ResourceName][2]int64{"example.com/gpu": {2, 1}, "example.com/gone": {0, 0}} {
		capacity, alloc := node.Status.Capacity[name], node.Status.Allocatable[name]
		if _, ok := node.Status.Capacity[name]; !ok || capacity.Value() != want[0] || alloc.Value() != want[1] {
			t.Errorf("%s: capacity %s allocatable %s, want %d and %d", name, &capacity, &alloc, want[0], want[1])
		}
	}
	f = testFacts(t0.Add(time.Minute))
	f.DeviceCapacity = v1.ResourceList{"example.com/gpu": resource.MustParse("2")}
	f.DeviceAllocatable = v1.ResourceList{"example.com/gpu": resource.MustParse("0")}
	next, changed, _ := c.updateNode(node, f)
	if q := next.Status.Allocatable["example.com/gpu"]; !changed || q.Value() != 0 {
		t.Errorf("after the plugin died: allocatable gpu %s, changed %v; want 0, true", &q, changed)
	}
}
