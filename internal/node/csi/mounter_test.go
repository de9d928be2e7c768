package csi

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	testclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

// fakeAPI holds CSIDriver and VolumeAttachment objects.
type fakeAPI struct {
	drivers     map[string]*storagev1.CSIDriver
	attachments map[string]*storagev1.VolumeAttachment
}

func (a *fakeAPI) CSIDriver(_ context.Context, name string) (*storagev1.CSIDriver, error) {
	return a.drivers[name], nil
}

func (a *fakeAPI) VolumeAttachment(_ context.Context, name string) (*storagev1.VolumeAttachment, error) {
	return a.attachments[name], nil
}

func csiDriver(name string, mutate func(*storagev1.CSIDriverSpec)) *storagev1.CSIDriver {
	d := &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: name}}
	d.Spec.AttachRequired = ptr.To(false)
	if mutate != nil {
		mutate(&d.Spec)
	}
	return d
}

// mounterEnv is a node root with one registered fake driver "drv".
type mounterEnv struct {
	root string
	fake *fakeDriver
	reg  *Registry
	api  *fakeAPI
}

func newMounterEnv(t *testing.T, mutate ...func(*fakeDriver)) *mounterEnv {
	root := shortDir(t)
	w, reg := newTestWatcher(t, root, nil)
	f := startFake(t, filepath.Join(root, "plugins_registry"), "drv", mutate...)
	w.Sync(t.Context())
	if _, err := reg.Driver("drv"); err != nil {
		t.Fatal(err)
	}
	f.takeCalls()
	return &mounterEnv{root: root, fake: f, reg: reg,
		api: &fakeAPI{drivers: map[string]*storagev1.CSIDriver{"drv": csiDriver("drv", nil)}}}
}

// mounter is a Mounter as a (re)started nodelet builds it.
func (e *mounterEnv) mounter(t *testing.T) *Mounter {
	m := NewMounter(e.root, "node1", e.reg, e.api, nil, testLog(t))
	m.mounted = e.fake.mounted
	return m
}

func (e *mounterEnv) volDir(uid types.UID, name string) string {
	return filepath.Join(e.root, "pods", string(uid), "volumes", PluginDir, name)
}

func testPod(uid string) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p-" + uid, Namespace: "ns", UID: types.UID(uid)},
		Spec: v1.PodSpec{ServiceAccountName: "sa"}}
}

func testPV() *v1.PersistentVolume {
	return &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv1"}, Spec: v1.PersistentVolumeSpec{
		AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
		PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{
			Driver: "drv", VolumeHandle: "vol-1", FSType: "ext4", VolumeAttributes: map[string]string{"k": "v"},
		}},
	}}
}

func mustPV(t *testing.T, pv *v1.PersistentVolume) Source {
	s, err := FromPV(pv)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func wantCalls(t *testing.T, f *fakeDriver, step string, want ...string) {
	t.Helper()
	if got := f.takeCalls(); !slices.Equal(got, want) {
		t.Errorf("%s: driver calls %q, want %q", step, got, want)
	}
}

// Two pods share a persistent volume: staged once, published per pod,
// unpublished per pod, unstaged after the last; a restarted nodelet calls
// nothing for what is mounted.
func TestPersistentVolumeLifecycle(t *testing.T) {
	e := newMounterEnv(t)
	m := e.mounter(t)
	ctx := t.Context()
	src := mustPV(t, testPV())
	podA, podB := testPod("a"), testPod("b")
	dirA, dirB := e.volDir("a", "pv1"), e.volDir("b", "pv1")
	staging := filepath.Join(m.stagingDir("drv", "vol-1"), "globalmount")

	if _, err := m.SetUp(ctx, podA, dirA, src); err != nil {
		t.Fatal(err)
	}
	wantCalls(t, e.fake, "first pod", "NodeStageVolume vol-1", "NodePublishVolume vol-1")
	if e.fake.lastPub.StagingTargetPath != staging || e.fake.lastPub.TargetPath != filepath.Join(dirA, "mount") {
		t.Errorf("publish paths %q %q", e.fake.lastPub.StagingTargetPath, e.fake.lastPub.TargetPath)
	}
	if got := e.fake.lastStg.VolumeCapability.GetMount().GetFsType(); got != "ext4" {
		t.Errorf("staged with fsType %q", got)
	}
	for _, p := range []string{filepath.Join(dirA, "vol_data.json"), filepath.Join(filepath.Dir(staging), "vol_data.json")} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}

	if _, err := m.SetUp(ctx, podA, dirA, src); err != nil {
		t.Fatal(err)
	}
	wantCalls(t, e.fake, "same pod again")

	if _, err := m.SetUp(ctx, podB, dirB, src); err != nil {
		t.Fatal(err)
	}
	wantCalls(t, e.fake, "second pod", "NodePublishVolume vol-1")
	if got := m.VolumesInUse(); len(got) != 0 {
		t.Errorf("volumes that need no attaching in use: %v", got)
	}

	// A restarted nodelet: a new Mounter over the same disk.
	m = e.mounter(t)
	for _, p := range []struct {
		pod *v1.Pod
		dir string
	}{{podA, dirA}, {podB, dirB}} {
		if _, err := m.SetUp(ctx, p.pod, p.dir, src); err != nil {
			t.Fatal(err)
		}
	}
	wantCalls(t, e.fake, "after a restart")

	if err := m.TearDown(ctx, dirA); err != nil {
		t.Fatal(err)
	}
	wantCalls(t, e.fake, "first pod gone", "NodeUnpublishVolume vol-1")
	if _, err := os.Lstat(dirA); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s left: %v", dirA, err)
	}
	if err := m.TearDown(ctx, dirB); err != nil {
		t.Fatal(err)
	}
	wantCalls(t, e.fake, "last pod gone", "NodeUnpublishVolume vol-1", "NodeUnstageVolume vol-1")
	if _, err := os.Lstat(filepath.Dir(staging)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("staging directory left: %v", err)
	}
	// Torn down is torn down.
	if err := m.TearDown(ctx, dirB); err != nil {
		t.Fatal(err)
	}
	wantCalls(t, e.fake, "again")
}

// A driver without STAGE_UNSTAGE_VOLUME is only published.
func TestNoStaging(t *testing.T) {
	e := newMounterEnv(t, func(f *fakeDriver) { f.stage = false })
	m := e.mounter(t)
	dir := e.volDir("a", "pv1")
	if _, err := m.SetUp(t.Context(), testPod("a"), dir, mustPV(t, testPV())); err != nil {
		t.Fatal(err)
	}
	wantCalls(t, e.fake, "set up", "NodePublishVolume vol-1")
	if e.fake.lastPub.StagingTargetPath != "" {
		t.Errorf("publish named a staging path %q", e.fake.lastPub.StagingTargetPath)
	}
	if err := m.TearDown(t.Context(), dir); err != nil {
		t.Fatal(err)
	}
	wantCalls(t, e.fake, "tear down", "NodeUnpublishVolume vol-1")
}

// An inline volume is published with the kubelet's ephemeral handle and
// the pod's identity (podInfoOnMount), never staged.
func TestInlineEphemeral(t *testing.T) {
	e := newMounterEnv(t)
	e.api.drivers["drv"] = csiDriver("drv", func(s *storagev1.CSIDriverSpec) {
		s.PodInfoOnMount = ptr.To(true)
		s.VolumeLifecycleModes = []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecycleEphemeral}
	})
	m := e.mounter(t)
	pod := testPod("uid-1")
	dir := e.volDir("uid-1", "scratch")
	src := Inline(pod, "v", &v1.CSIVolumeSource{Driver: "drv", VolumeAttributes: map[string]string{"size": "1"}})
	if _, err := m.SetUp(t.Context(), pod, dir, src); err != nil {
		t.Fatal(err)
	}
	handle := ephemeralHandle("uid-1", "scratch")
	wantCalls(t, e.fake, "set up", "NodePublishVolume "+handle)
	ctx := e.fake.lastPub.VolumeContext
	want := map[string]string{"size": "1", podInfoName: "p-uid-1", podInfoNamespace: "ns", podInfoUID: "uid-1",
		podInfoSA: "sa", podInfoEphemeral: "true"}
	for k, v := range want {
		if ctx[k] != v {
			t.Errorf("volume context %s = %q, want %q", k, ctx[k], v)
		}
	}
	if e.fake.lastPub.StagingTargetPath != "" {
		t.Error("an inline volume was given a staging path")
	}
	if err := m.TearDown(t.Context(), dir); err != nil {
		t.Fatal(err)
	}
	wantCalls(t, e.fake, "tear down", "NodeUnpublishVolume "+handle)
}

func TestSetUpRefused(t *testing.T) {
	for _, tc := range []struct {
		name   string
		api    func(*fakeAPI)
		noAPI  bool
		inline bool
		driver string
		want   string
	}{
		{name: "driver not registered", driver: "gone", want: "driver name gone not found in the list of registered CSI drivers"},
		{name: "inline without CSIDriver", api: func(a *fakeAPI) { delete(a.drivers, "drv") }, inline: true,
			want: `volume mode "Ephemeral" not supported by driver drv (no CSIDriver object)`},
		{name: "inline on a persistent-only driver", inline: true, want: `volume mode "Ephemeral" not supported by driver drv (only [Persistent])`},
		{name: "persistent on an ephemeral-only driver", api: func(a *fakeAPI) {
			a.drivers["drv"].Spec.VolumeLifecycleModes = []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecycleEphemeral}
		}, want: `volume mode "Persistent" not supported by driver drv`},
		{name: "not attached yet", api: func(a *fakeAPI) { a.drivers["drv"].Spec.AttachRequired = ptr.To(true) },
			want: "volume vol-1 is not attached yet"},
		{name: "attach without an API server", noAPI: true, want: "must be attached"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newMounterEnv(t)
			if tc.api != nil {
				tc.api(e.api)
			}
			m := e.mounter(t)
			if tc.noAPI {
				m.api = nil
			}
			pod := testPod("a")
			src := mustPV(t, testPV())
			if tc.inline {
				src = Inline(pod, "v", &v1.CSIVolumeSource{Driver: "drv"})
			}
			if tc.driver != "" {
				src.Driver = tc.driver
			}
			dir := e.volDir("a", "v")
			_, err := m.SetUp(t.Context(), pod, dir, src)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("SetUp: %v, want %q", err, tc.want)
			}
			wantCalls(t, e.fake, "refused")
			if _, err := os.Lstat(dir); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("a refused volume left %s", dir)
			}
		})
	}
}

// An attached volume is published with the VolumeAttachment's metadata.
func TestAttached(t *testing.T) {
	e := newMounterEnv(t)
	e.api.drivers["drv"].Spec.AttachRequired = ptr.To(true)
	name := attachmentName("vol-1", "drv", "node1")
	e.api.attachments = map[string]*storagev1.VolumeAttachment{name: {Status: storagev1.VolumeAttachmentStatus{
		Attached: true, AttachmentMetadata: map[string]string{"dev": "/dev/x"}}}}
	m := e.mounter(t)
	if _, err := m.SetUp(t.Context(), testPod("a"), e.volDir("a", "pv1"), mustPV(t, testPV())); err != nil {
		t.Fatal(err)
	}
	if e.fake.lastPub.PublishContext["dev"] != "/dev/x" || e.fake.lastStg.PublishContext["dev"] != "/dev/x" {
		t.Errorf("publish context %v", e.fake.lastPub.PublishContext)
	}
	if got := m.VolumesInUse(); !slices.Equal(got, []v1.UniqueVolumeName{"kubernetes.io/csi/drv^vol-1"}) {
		t.Errorf("volumes in use %v", got)
	}
	// A restarted nodelet reports it again after its first SetUp.
	m = e.mounter(t)
	if got := m.VolumesInUse(); len(got) != 0 {
		t.Errorf("volumes in use before any SetUp %v", got)
	}
	if _, err := m.SetUp(t.Context(), testPod("a"), e.volDir("a", "pv1"), mustPV(t, testPV())); err != nil {
		t.Fatal(err)
	}
	if got := m.VolumesInUse(); len(got) != 1 {
		t.Errorf("volumes in use after a restart %v", got)
	}
	if err := m.TearDown(t.Context(), e.volDir("a", "pv1")); err != nil {
		t.Fatal(err)
	}
	if got := m.VolumesInUse(); len(got) != 0 {
		t.Errorf("volumes in use after tear-down %v", got)
	}
}

// A driver that went away: tearing down fails with the kubelet's words and
// removes nothing, then succeeds once the driver is back.
func TestTearDownDriverGone(t *testing.T) {
	e := newMounterEnv(t)
	m := e.mounter(t)
	dir := e.volDir("a", "pv1")
	if _, err := m.SetUp(t.Context(), testPod("a"), dir, mustPV(t, testPV())); err != nil {
		t.Fatal(err)
	}
	e.fake.takeCalls()
	d, _ := e.reg.Driver("drv")
	e.reg.remove("drv", d.Endpoint)
	err := m.TearDown(t.Context(), dir)
	if err == nil || !strings.Contains(err.Error(), "driver name drv not found in the list of registered CSI drivers") {
		t.Fatalf("TearDown: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "vol_data.json")); err != nil {
		t.Errorf("vol_data.json: %v", err)
	}
	e.reg.set(d)
	if err := m.TearDown(t.Context(), dir); err != nil {
		t.Fatal(err)
	}
	wantCalls(t, e.fake, "driver back", "NodeUnpublishVolume vol-1", "NodeUnstageVolume vol-1")
}

func TestPlanSetUp(t *testing.T) {
	for _, tc := range []struct {
		f    setUpFacts
		want setUpSteps
	}{
		{setUpFacts{Published: true, StageUnstage: true}, setUpSteps{}},
		{setUpFacts{StageUnstage: true}, setUpSteps{Stage: true, Publish: true}},
		{setUpFacts{StageUnstage: true, Staged: true}, setUpSteps{Publish: true}},
		{setUpFacts{StageUnstage: true, Ephemeral: true}, setUpSteps{Publish: true}},
		{setUpFacts{}, setUpSteps{Publish: true}},
	} {
		if got := planSetUp(tc.f); got != tc.want {
			t.Errorf("planSetUp(%+v) = %+v, want %+v", tc.f, got, tc.want)
		}
	}
}

func TestPlanTearDown(t *testing.T) {
	for _, tc := range []struct {
		f    tearDownFacts
		want tearDownSteps
	}{
		{tearDownFacts{StageUnstage: true, StagingData: true}, tearDownSteps{Unpublish: true, Unstage: true, RemoveStaging: true}},
		{tearDownFacts{StageUnstage: true, StagingData: true, OtherUsers: true}, tearDownSteps{Unpublish: true}},
		{tearDownFacts{StagingData: true}, tearDownSteps{Unpublish: true, RemoveStaging: true}},
		{tearDownFacts{StageUnstage: true, Ephemeral: true}, tearDownSteps{Unpublish: true}},
		{tearDownFacts{StageUnstage: true}, tearDownSteps{Unpublish: true}},
	} {
		if got := planTearDown(tc.f); got != tc.want {
			t.Errorf("planTearDown(%+v) = %+v, want %+v", tc.f, got, tc.want)
		}
	}
}

// The stats of a published volume come from the driver, under the pod's
// name of the volume and its claim; a torn-down volume has none.
func TestVolumeStats(t *testing.T) {
	e := newMounterEnv(t)
	m := e.mounter(t)
	src := mustPV(t, testPV())
	src.PodVolume, src.Claim = "data", "claim1"
	dir := e.volDir("a", "pv1")
	if _, err := m.SetUp(t.Context(), testPod("a"), dir, src); err != nil {
		t.Fatal(err)
	}
	if got := m.PodVolumeStats("a"); len(got) != 0 {
		t.Errorf("stats before the driver was asked: %+v", got)
	}
	m.refreshStats(t.Context(), testclock.NewFakePassiveClock(time.Unix(100, 0)))
	got := m.PodVolumeStats("a")
	if len(got) != 1 {
		t.Fatalf("stats %+v", got)
	}
	s := got[0]
	if s.Name != "data" || s.PVCRef == nil || s.PVCRef.Name != "claim1" || s.PVCRef.Namespace != "ns" ||
		*s.CapacityBytes != 1000 || *s.AvailableBytes != 600 || *s.UsedBytes != 400 ||
		*s.Inodes != 100 || *s.InodesFree != 90 || *s.InodesUsed != 10 || s.Time.Unix() != 100 {
		t.Errorf("stats %+v", s)
	}
	if c := m.ClaimVolumeStats(); len(c) != 1 || c[0].PVCRef.Name != "claim1" {
		t.Errorf("claim stats %+v", c)
	}
	if calls := e.fake.takeCalls(); !slices.Contains(calls, "NodeGetVolumeStats vol-1") {
		t.Errorf("calls %q", calls)
	}

	// A restarted nodelet knows the volume again at its first SetUp.
	m = e.mounter(t)
	if _, err := m.SetUp(t.Context(), testPod("a"), dir, src); err != nil {
		t.Fatal(err)
	}
	m.refreshStats(t.Context(), testclock.NewFakePassiveClock(time.Unix(200, 0)))
	if got := m.PodVolumeStats("a"); len(got) != 1 || got[0].Time.Unix() != 200 {
		t.Errorf("stats after a restart %+v", got)
	}
	if err := m.TearDown(t.Context(), dir); err != nil {
		t.Fatal(err)
	}
	if got := m.PodVolumeStats("a"); len(got) != 0 {
		t.Errorf("stats of a torn-down volume: %+v", got)
	}
}

func TestFSGroupSupported(t *testing.T) {
	withGroup := testPod("a")
	withGroup.Spec.SecurityContext = &v1.PodSecurityContext{FSGroup: ptr.To[int64](2000)}
	pv := func(mutate func(*Source)) Source {
		s := mustPV(t, testPV()) // ext4, ReadWriteOnce
		if mutate != nil {
			mutate(&s)
		}
		return s
	}
	inline := func(fsType string) Source {
		s := Inline(withGroup, "v", &v1.CSIVolumeSource{Driver: "drv"})
		s.FSType = fsType
		return s
	}
	rwo, file, none := storagev1.ReadWriteOnceWithFSTypeFSGroupPolicy, storagev1.FileFSGroupPolicy, storagev1.NoneFSGroupPolicy
	for _, tc := range []struct {
		name   string
		policy storagev1.FSGroupPolicy
		src    Source
		pod    *v1.Pod
		want   bool
	}{
		{"default policy, ext4 RWO PV", rwo, pv(nil), withGroup, true},
		{"no fsGroup", rwo, pv(nil), testPod("b"), false},
		{"read-only", file, pv(func(s *Source) { s.ReadOnly = true }), withGroup, false},
		{"None", none, pv(nil), withGroup, false},
		{"File without fsType", file, pv(func(s *Source) { s.FSType = "" }), withGroup, true},
		{"default policy without fsType", rwo, pv(func(s *Source) { s.FSType = "" }), withGroup, false},
		{"default policy, RWX PV", rwo, pv(func(s *Source) { s.RWO = false }), withGroup, false},
		{"default policy, inline with fsType", rwo, inline("ext4"), withGroup, true},
		{"default policy, inline without fsType", rwo, inline(""), withGroup, false},
	} {
		if got := fsGroupSupported(tc.policy, tc.src, tc.pod); got != tc.want {
			t.Errorf("%s: fsGroupSupported = %v, want %v", tc.name, got, tc.want)
		}
	}
	if applyFSGroup(file, pv(nil), nodeCaps{mountGroup: true}, withGroup) {
		t.Error("nodelet applies the fsGroup a VOLUME_MOUNT_GROUP driver applied")
	}
	capability := volumeCapability(pv(nil), nodeCaps{mountGroup: true}, withGroup, driverInfo{fsGroupPolicy: file})
	if got := capability.GetMount().GetVolumeMountGroup(); got != "2000" {
		t.Errorf("volume_mount_group %q, want 2000", got)
	}
}
