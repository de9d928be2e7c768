package podhooks

import (
	"context"
	"errors"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/node/podresources"
	"github.com/nodelet/nodelet/internal/node/userns"
	"github.com/nodelet/nodelet/internal/node/volume"
	"github.com/nodelet/nodelet/internal/pure/podsetup"
	"github.com/nodelet/nodelet/internal/pure/resize"
)

type fakeVolumes struct {
	setUpErr error
	torn     []types.UID
}

func (f *fakeVolumes) SetUp(context.Context, *v1.Pod) error { return f.setUpErr }
func (f *fakeVolumes) TearDown(_ context.Context, uid types.UID) error {
	f.torn = append(f.torn, uid)
	return nil
}
func (f *fakeVolumes) Pods() ([]types.UID, error) { return []types.UID{"a"}, nil }
func (f *fakeVolumes) Mounts(_ *v1.Pod, c *v1.Container, env map[string]string, rro bool, _ map[string]*runtimeapi.ImageSpec) ([]*runtimeapi.Mount, error) {
	return []*runtimeapi.Mount{{ContainerPath: "/data", HostPath: "/vol/" + c.Name + "/" + env["SUB"], RecursiveReadOnly: rro}}, nil
}
func (f *fakeVolumes) EnvFile(*v1.Pod, string, string, int64) ([]byte, error) { return nil, nil }

type events []string

func (e *events) Event(_ *v1.Pod, eventType, reason, message string) {
	*e = append(*e, eventType+" "+reason+" "+message)
}

type fakeCgroups struct {
	removed []string
	set     []resize.Step
}

func (f *fakeCgroups) EnsurePod(*v1.Pod) (string, error) { return "/kubepods/podx", nil }
func (f *fakeCgroups) RemovePod(uid types.UID, qos v1.PodQOSClass) error {
	f.removed = append(f.removed, string(uid)+"/"+string(qos))
	return nil
}
func (f *fakeCgroups) Pods() ([]types.UID, error) { return nil, nil }
func (f *fakeCgroups) PodCgroupNow(*v1.Pod) (resize.PodCgroup, error) {
	return resize.PodCgroup{CPUShares: 2, CPUQuota: -1}, nil
}
func (f *fakeCgroups) PodMemoryUsage(*v1.Pod) (uint64, error) { return 7, nil }
func (f *fakeCgroups) SetPodCgroup(_ *v1.Pod, s resize.Step) error {
	f.set = append(f.set, s)
	return nil
}
func (f *fakeCgroups) ContainerUnified(_ *v1.Pod, c *v1.Container) map[string]string {
	return map[string]string{"memory.high": "for-" + c.Name}
}

// A volume that cannot be set up is the kubelet's FailedMount event, in
// one line, and an error wrapping the cause.
func TestVolumesPrepareFailure(t *testing.T) {
	cause := errors.New("configmap \"a\" not found\nand another")
	ev := &events{}
	h := Volumes{Volumes: &fakeVolumes{setUpErr: cause}, Recorder: ev}
	_, err := h.Prepare(context.Background(), &v1.Pod{})
	if !errors.Is(err, cause) {
		t.Fatalf("Prepare = %v", err)
	}
	if len(*ev) != 1 || (*ev)[0] != `Warning FailedMount Unable to attach or mount volumes: configmap "a" not found and another` {
		t.Errorf("events %q", *ev)
	}
}

// A volume that failed is an event of its own, worded as the kubelet's
// volume manager words it.
func TestVolumesPrepareFailurePerVolume(t *testing.T) {
	cm := &volume.SetUpError{Volume: "cm", Err: errors.New(`configmap "a" not found`)}
	sec := &volume.SetUpError{Volume: "sec", Err: errors.New(`secret "b" not found`)}
	ev := &events{}
	h := Volumes{Volumes: &fakeVolumes{setUpErr: errors.Join(cm, sec)}, Recorder: ev}
	if _, err := h.Prepare(context.Background(), &v1.Pod{}); !errors.Is(err, sec.Err) {
		t.Fatalf("Prepare = %v", err)
	}
	want := []string{
		`Warning FailedMount MountVolume.SetUp failed for volume "cm" : configmap "a" not found`,
		`Warning FailedMount MountVolume.SetUp failed for volume "sec" : secret "b" not found`,
	}
	if strings.Join(*ev, "\n") != strings.Join(want, "\n") {
		t.Errorf("events:\n%s\nwant:\n%s", strings.Join(*ev, "\n"), strings.Join(want, "\n"))
	}
}

// Claimed volumes are worded as the kubelet's: a claim that does not
// resolve is the volume manager's one "Unable to attach or mount volumes"
// with the volumes it could not process, a PersistentVolume that fails to
// mount is named by the PV, with the step that failed.
func TestFailedMountMessagesOfClaims(t *testing.T) {
	err := errors.Join(
		&volume.SetUpError{Volume: "web", Unprocessed: true, Err: errors.New("error processing PVC default/web: PVC is not bound")},
		&volume.SetUpError{Volume: "cm", Err: errors.New(`configmap "a" not found`)},
		&volume.SetUpError{Volume: "data", PersistentVolume: "pv-local", Step: "MountVolume.NewMounter initialization failed", Err: errors.New(`path "/mnt/x" does not exist`)},
		&volume.SetUpError{Volume: "cache", Unprocessed: true, Err: errors.New("PVC default/p-cache was not created for pod default/p (pod is not owner)")},
	)
	want := []string{
		`MountVolume.SetUp failed for volume "cm" : configmap "a" not found`,
		`MountVolume.NewMounter initialization failed for volume "pv-local" : path "/mnt/x" does not exist`,
		`Unable to attach or mount volumes: unmounted volumes=[cache cm data web], unattached volumes=[], failed to process volumes=[cache web]: ` +
			`error processing PVC default/web: PVC is not bound; PVC default/p-cache was not created for pod default/p (pod is not owner)`,
	}
	if got := FailedMountMessages(err); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("messages:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// Cleanup releases by UID alone: an orphan's spec, and so its QoS tier,
// is unknown.
func TestCleanupNeedsOnlyTheUID(t *testing.T) {
	orphan := &v1.Pod{}
	orphan.UID = "u1"
	vols, cgs := &fakeVolumes{}, &fakeCgroups{}
	if err := (Volumes{Volumes: vols}).Cleanup(context.Background(), orphan); err != nil || len(vols.torn) != 1 || vols.torn[0] != "u1" {
		t.Errorf("volumes: %v %v", err, vols.torn)
	}
	if err := (Cgroup{Cgroups: cgs}).Cleanup(context.Background(), orphan); err != nil || len(cgs.removed) != 1 || cgs.removed[0] != "u1/" {
		t.Errorf("cgroup: %v %v", err, cgs.removed)
	}
}

type fakeRegistry struct{ calls []string }

func (f *fakeRegistry) RegisterPod(p *v1.Pod) { f.calls = append(f.calls, "register "+string(p.UID)) }
func (f *fakeRegistry) UnregisterPod(p *v1.Pod) {
	f.calls = append(f.calls, "unregister "+string(p.UID))
}

// The Objects hook registers on every Prepare and unregisters on Cleanup;
// neither fails.
func TestObjectsRegistersAndUnregisters(t *testing.T) {
	reg := &fakeRegistry{}
	h := Objects{Registry: reg}
	pod := &v1.Pod{}
	pod.UID = "u1"
	for range 2 {
		if _, err := h.Prepare(context.Background(), pod); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.Cleanup(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(reg.calls, ", "); got != "register u1, register u1, unregister u1" {
		t.Errorf("calls: %s", got)
	}
}

type fakeUserns struct {
	err       error
	allocated []types.UID
	released  []types.UID
}

func (f *fakeUserns) Allocate(_ context.Context, pod *v1.Pod) (userns.Mapping, error) {
	f.allocated = append(f.allocated, pod.UID)
	return userns.Mapping{HostID: 65536, Length: 65536}, f.err
}
func (f *fakeUserns) CheckRuntime(context.Context, string) error { return nil }
func (f *fakeUserns) Release(uid types.UID) error {
	f.released = append(f.released, uid)
	return nil
}
func (f *fakeUserns) Pods() ([]types.UID, error) { return []types.UID{"u"}, nil }

// Only a pod with hostUsers: false gets a block; one that cannot is the
// kubelet's FailedCreatePodSandBox event, in one line; Cleanup releases by
// UID alone (an orphan's spec is unknown).
func TestUserNamespaces(t *testing.T) {
	mk := func(uid string, hostUsers *bool) *v1.Pod {
		p := &v1.Pod{Spec: v1.PodSpec{HostUsers: hostUsers}}
		p.UID = types.UID(uid)
		return p
	}
	no, yes := false, true
	f, ev := &fakeUserns{}, &events{}
	h := UserNamespaces{Manager: f, Recorder: ev}
	for _, p := range []*v1.Pod{mk("default", nil), mk("host", &yes), mk("own", &no)} {
		if _, err := h.Prepare(context.Background(), p); err != nil {
			t.Fatal(err)
		}
	}
	if len(f.allocated) != 1 || f.allocated[0] != "own" || len(*ev) != 0 {
		t.Errorf("allocated %v, events %q", f.allocated, *ev)
	}
	f.err = errors.New("can't set `spec.hostUsers: false`, runtime does not support user namespaces\n(more)")
	if _, err := h.Prepare(context.Background(), mk("refused", &no)); !errors.Is(err, f.err) {
		t.Fatalf("Prepare = %v", err)
	}
	want := "Warning FailedCreatePodSandBox Failed to create pod sandbox: can't set `spec.hostUsers: false`, runtime does not support user namespaces (more)"
	if len(*ev) != 1 || (*ev)[0] != want {
		t.Errorf("events %q\nwant %q", *ev, want)
	}
	if err := h.Cleanup(context.Background(), mk("orphan", nil)); err != nil || len(f.released) != 1 || f.released[0] != "orphan" {
		t.Errorf("cleanup: %v %v", err, f.released)
	}
	if held, err := h.Holding(); err != nil || len(held) != 1 {
		t.Errorf("holding %v %v", held, err)
	}
}

// Each hook hands back what it set up: the pod cgroup's parent and every
// container's resources (with the cgroup manager's Unified map, and
// without a cgroup manager still the resources), the user namespace with
// its runtime check, the volumes' env files and mounts, the probe results.
func TestHooksHandBackWhatTheySetUp(t *testing.T) {
	ctx := context.Background()
	no := false
	pod := &v1.Pod{Spec: v1.PodSpec{HostUsers: &no, Containers: []v1.Container{{Name: "app"}}}}
	pod.UID = "u1"
	c := podsetup.Container{Pod: pod, Container: &pod.Spec.Containers[0], Env: map[string]string{"SUB": "x"}, RecursiveReadOnlyMounts: true}

	cg, err := (Cgroup{Cgroups: &fakeCgroups{}, NodeMemoryCapacity: 1 << 30}).Prepare(ctx, pod)
	if err != nil || cg.CgroupParent != "/kubepods/podx" {
		t.Fatalf("cgroup: %+v %v", cg, err)
	}
	add, err := cg.Apply(c)
	if err != nil || add.Resources.GetUnified()["memory.high"] != "for-app" || add.Resources.GetOomScoreAdj() == 0 {
		t.Errorf("cgroup's container resources %v %v", add.Resources, err)
	}
	// The pod cgroup as a resize sees it: read and written through the
	// manager, wanted as podresources.PodConfig (a BestEffort pod: 2
	// shares, no quota, no memory limit).
	if cg.PodCgroup == nil || cg.ContainerResources == nil {
		t.Fatal("cgroup: no PodCgroup or ContainerResources handed back")
	}
	if r := cg.ContainerResources(pod, c.Container); r.GetUnified()["memory.high"] != "for-app" || r.GetOomScoreAdj() != add.Resources.GetOomScoreAdj() {
		t.Errorf("ContainerResources = %v, want what the container's creation gets (%v)", r, add.Resources)
	}
	if u, err := cg.PodCgroup.MemoryUsage(); err != nil || u != 7 {
		t.Errorf("PodCgroup.MemoryUsage = %d, %v", u, err)
	}
	if now, err := cg.PodCgroup.Now(); err != nil || now.CPUShares != 2 {
		t.Errorf("PodCgroup.Now = %+v %v", now, err)
	}
	if want := cg.PodCgroup.Want(); want != (resize.PodCgroup{CPUShares: podresources.MinShares}) {
		t.Errorf("PodCgroup.Want = %+v, want only the minimum shares", want)
	}
	fc := &fakeCgroups{}
	cg2, _ := (Cgroup{Cgroups: fc}).Prepare(ctx, pod)
	if err := cg2.PodCgroup.Set(resize.Step{Kind: resize.SetPodCPUShares, Value: 512}); err != nil || len(fc.set) != 1 || fc.set[0].Value != 512 {
		t.Errorf("PodCgroup.Set: %v, manager got %+v", err, fc.set)
	}
	// The swap limit comes after the manager's Unified map (cgroup v2:
	// memory.swap.max; v1: memory+swap is the memory limit).
	cg, _ = (Cgroup{Cgroups: &fakeCgroups{}, NodeMemoryCapacity: 1 << 30, Swap: podresources.Swap{Controller: true, V2: true}}).Prepare(ctx, pod)
	if add, err := cg.Apply(c); err != nil || add.Resources.GetUnified()["memory.high"] != "for-app" || add.Resources.GetUnified()["memory.swap.max"] != "0" {
		t.Errorf("swap on v2: %v %v", add.Resources, err)
	}
	limited := pod.DeepCopy()
	limited.Spec.Containers[0].Resources.Limits = v1.ResourceList{v1.ResourceMemory: resource.MustParse("64Mi")}
	cg, _ = (Cgroup{NodeMemoryCapacity: 1 << 30, Swap: podresources.Swap{Controller: true}}).Prepare(ctx, limited)
	if add, err := cg.Apply(podsetup.Container{Pod: limited, Container: &limited.Spec.Containers[0]}); err != nil || add.Resources.GetMemorySwapLimitInBytes() != 64<<20 {
		t.Errorf("swap on v1: %v %v", add.Resources, err)
	}
	bare, err := (Cgroup{NodeMemoryCapacity: 1 << 30}).Prepare(ctx, pod)
	if err != nil || bare.CgroupParent != "" || bare.PodCgroup != nil {
		t.Fatalf("cgroup without a manager: %+v %v", bare, err)
	}
	if add, err := bare.Apply(c); err != nil || add.Resources == nil || add.Resources.Unified != nil {
		t.Errorf("resources without a cgroup manager %v %v", add.Resources, err)
	}

	us, err := (UserNamespaces{Manager: &fakeUserns{}, Recorder: &events{}}).Prepare(ctx, pod)
	if err != nil || us.UserNamespace.GetUids()[0].GetHostId() != 65536 || len(us.SandboxChecks) != 1 {
		t.Errorf("user namespace: %+v %v", us, err)
	}

	vols := &fakeVolumes{}
	vs, err := (Volumes{Volumes: vols, Recorder: &events{}}).Prepare(ctx, pod)
	if err != nil || vs.Files == nil {
		t.Fatalf("volumes: %+v %v", vs, err)
	}
	add, err = vs.Apply(c)
	if err != nil || len(add.Mounts) != 1 || add.Mounts[0].HostPath != "/vol/app/x" || !add.Mounts[0].RecursiveReadOnly {
		t.Errorf("volume mounts %v %v", add.Mounts, err)
	}
}
