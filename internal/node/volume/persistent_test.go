package volume

import (
	"context"
	"errors"
	"fmt"
	"github.com/nodelet/nodelet/internal/base/mountinfo"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// fakeClaims is an in-memory Claims that counts its calls.
type fakeClaims struct {
	mu     sync.Mutex
	claims map[string]*v1.PersistentVolumeClaim
	pvs    map[string]*v1.PersistentVolume
	calls  int
}

func newFakeClaims() *fakeClaims {
	return &fakeClaims{claims: map[string]*v1.PersistentVolumeClaim{}, pvs: map[string]*v1.PersistentVolume{}}
}

func (f *fakeClaims) PersistentVolumeClaim(_ context.Context, ns, name string) (*v1.PersistentVolumeClaim, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if c, ok := f.claims[ns+"/"+name]; ok {
		return c.DeepCopy(), nil
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "persistentvolumeclaims"}, name)
}

func (f *fakeClaims) PersistentVolume(_ context.Context, name string) (*v1.PersistentVolume, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if pv, ok := f.pvs[name]; ok {
		return pv.DeepCopy(), nil
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "persistentvolumes"}, name)
}

// bind puts a claim default/<claim> bound to PV pv of source src.
func (f *fakeClaims) bind(claim, pv string, src v1.PersistentVolumeSource) (*v1.PersistentVolumeClaim, *v1.PersistentVolume) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: claim, UID: types.UID("uid-" + claim)},
		Spec:       v1.PersistentVolumeClaimSpec{VolumeName: pv},
		Status:     v1.PersistentVolumeClaimStatus{Phase: v1.ClaimBound},
	}
	p := &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: pv},
		Spec: v1.PersistentVolumeSpec{PersistentVolumeSource: src,
			ClaimRef: &v1.ObjectReference{Namespace: "default", Name: claim, UID: c.UID}},
	}
	f.claims["default/"+claim], f.pvs[pv] = c, p
	return c, p
}

func claimVolume(name, claim string, readOnly bool) v1.Volume {
	return v1.Volume{Name: name, VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: claim, ReadOnly: readOnly}}}
}

func ephemeralVolume(name string) v1.Volume {
	return v1.Volume{Name: name, VolumeSource: v1.VolumeSource{Ephemeral: &v1.EphemeralVolumeSource{
		VolumeClaimTemplate: &v1.PersistentVolumeClaimTemplate{}}}}
}

// mounting makes the pod's one container mount each named volume at
// /mnt/<name>.
func mounting(pod *v1.Pod, names ...string) *v1.Pod {
	for _, n := range names {
		pod.Spec.Containers[0].VolumeMounts = append(pod.Spec.Containers[0].VolumeMounts, v1.VolumeMount{Name: n, MountPath: "/mnt/" + n})
	}
	return pod
}

func newClaimsEnv(t *testing.T, opts ...Option) (*env, *fakeClaims) {
	t.Helper()
	e := newEnv(t)
	fc := newFakeClaims()
	e.m = New(e.root, e.objects, fakeDownward{}, testLogger(t), append([]Option{WithClaims(fc)}, opts...)...)
	return e, fc
}

func TestCheckClaim(t *testing.T) {
	now := metav1.Now()
	base := func() *v1.PersistentVolumeClaim {
		return &v1.PersistentVolumeClaim{Spec: v1.PersistentVolumeClaimSpec{VolumeName: "pv"}, Status: v1.PersistentVolumeClaimStatus{Phase: v1.ClaimBound}}
	}
	for _, tc := range []struct {
		name   string
		mutate func(*v1.PersistentVolumeClaim)
		want   string
	}{
		{"bound", func(*v1.PersistentVolumeClaim) {}, ""},
		{"pending", func(c *v1.PersistentVolumeClaim) { c.Status.Phase = v1.ClaimPending }, "PVC is not bound"},
		{"lost", func(c *v1.PersistentVolumeClaim) { c.Status.Phase = v1.ClaimLost }, "PVC is not bound"},
		{"no volume name", func(c *v1.PersistentVolumeClaim) { c.Spec.VolumeName = "" }, "PVC has empty pvc.Spec.VolumeName"},
		{"deleted, unprotected", func(c *v1.PersistentVolumeClaim) { c.DeletionTimestamp = &now }, "PVC is being deleted"},
		{"deleted, pending, unprotected", func(c *v1.PersistentVolumeClaim) {
			c.DeletionTimestamp, c.Status.Phase = &now, v1.ClaimPending
		}, "PVC is being deleted"},
		{"deleted, protected", func(c *v1.PersistentVolumeClaim) {
			c.DeletionTimestamp, c.Finalizers = &now, []string{"other", "kubernetes.io/pvc-protection"}
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := base()
			tc.mutate(c)
			err := checkClaim(c)
			if got := fmt.Sprint(err); (tc.want == "" && err != nil) || (tc.want != "" && got != tc.want) {
				t.Fatalf("checkClaim = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestCheckPersistentVolume(t *testing.T) {
	for _, tc := range []struct {
		name string
		ref  *v1.ObjectReference
		want string
	}{
		{"bound to the claim", &v1.ObjectReference{UID: "c1"}, ""},
		{"not bound", nil, "found PV object pv1 but it has a nil pv.Spec.ClaimRef indicating it is not yet bound to the claim"},
		{"bound elsewhere", &v1.ObjectReference{UID: "c2"}, "found PV object pv1 but its pv.Spec.ClaimRef.UID c2 does not point to claim.UID c1"},
		{"pre-bound by name only", &v1.ObjectReference{Name: "claim"}, "found PV object pv1 but its pv.Spec.ClaimRef.UID  does not point to claim.UID c1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pv := &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv1"}, Spec: v1.PersistentVolumeSpec{ClaimRef: tc.ref}}
			err := checkPersistentVolume(pv, "c1")
			if got := fmt.Sprint(err); (tc.want == "" && err != nil) || (tc.want != "" && got != tc.want) {
				t.Fatalf("checkPersistentVolume = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestCheckVolumeMode(t *testing.T) {
	fs, block := v1.PersistentVolumeFilesystem, v1.PersistentVolumeBlock
	for _, tc := range []struct {
		name            string
		mode            *v1.PersistentVolumeMode
		mounted, device bool
		want            string
	}{
		{"default mode mounted", nil, true, false, ""},
		{"filesystem mounted", &fs, true, false, ""},
		{"block mounted", &block, true, false, "volume data has volumeMode Block, but is specified in volumeMounts"},
		{"filesystem as a device", &fs, false, true, "volume data has volumeMode Filesystem, but is specified in volumeDevices"},
		{"block as a device", &block, false, true, "volume data: raw block volumes (volumeDevices) are not supported by nodelet"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pv := &v1.PersistentVolume{Spec: v1.PersistentVolumeSpec{VolumeMode: tc.mode}}
			err := checkVolumeMode("data", pv, tc.mounted, tc.device)
			if got := fmt.Sprint(err); (tc.want == "" && err != nil) || (tc.want != "" && got != tc.want) {
				t.Fatalf("checkVolumeMode = %v, want %q", err, tc.want)
			}
		})
	}
}

// TestResolveClaim runs resolve against claims and volumes in every state
// the kubelet tells apart, with its messages.
func TestResolveClaim(t *testing.T) {
	hostPath := v1.PersistentVolumeSource{HostPath: &v1.HostPathVolumeSource{Path: "/srv"}}
	for _, tc := range []struct {
		name   string
		vol    v1.Volume
		static bool
		setup  func(f *fakeClaims, pod *v1.Pod)
		want   string // error; "" for success
	}{
		{name: "bound", vol: claimVolume("data", "c", false),
			setup: func(f *fakeClaims, _ *v1.Pod) { f.bind("c", "pv-c", hostPath) }},
		{name: "missing claim", vol: claimVolume("data", "c", false), setup: func(*fakeClaims, *v1.Pod) {},
			want: `error processing PVC default/c: failed to fetch PVC from API server: persistentvolumeclaims "c" not found`},
		{name: "unbound claim", vol: claimVolume("data", "c", false),
			setup: func(f *fakeClaims, _ *v1.Pod) {
				c, _ := f.bind("c", "pv-c", hostPath)
				c.Status.Phase, c.Spec.VolumeName = v1.ClaimPending, ""
			},
			want: "error processing PVC default/c: PVC is not bound"},
		{name: "missing volume", vol: claimVolume("data", "c", false),
			setup: func(f *fakeClaims, _ *v1.Pod) { f.bind("c", "pv-c", hostPath); delete(f.pvs, "pv-c") },
			want:  `error processing PVC default/c: failed to fetch PV pv-c from API server: persistentvolumes "pv-c" not found`},
		{name: "volume bound to another claim", vol: claimVolume("data", "c", false),
			setup: func(f *fakeClaims, _ *v1.Pod) {
				_, pv := f.bind("c", "pv-c", hostPath)
				pv.Spec.ClaimRef.UID = "someone-else"
			},
			want: "error processing PVC default/c: found PV object pv-c but its pv.Spec.ClaimRef.UID someone-else does not point to claim.UID uid-c"},
		{name: "ephemeral, owned by the pod", vol: ephemeralVolume("scratch"),
			setup: func(f *fakeClaims, pod *v1.Pod) {
				c, _ := f.bind(pod.Name+"-scratch", "pv-e", hostPath)
				c.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID, Controller: ptr(true)}}
			}},
		{name: "ephemeral, not owned", vol: ephemeralVolume("scratch"),
			setup: func(f *fakeClaims, pod *v1.Pod) { f.bind(pod.Name+"-scratch", "pv-e", hostPath) },
			want:  "PVC default/pod-p1-scratch was not created for pod default/pod-p1 (pod is not owner)"},
		{name: "ephemeral, owned by a former pod of that name", vol: ephemeralVolume("scratch"),
			setup: func(f *fakeClaims, pod *v1.Pod) {
				c, _ := f.bind(pod.Name+"-scratch", "pv-e", hostPath)
				c.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: "old-uid", Controller: ptr(true)}}
			},
			want: "PVC default/pod-p1-scratch was not created for pod default/pod-p1 (pod is not owner)"},
		{name: "ephemeral, not yet created", vol: ephemeralVolume("scratch"), setup: func(*fakeClaims, *v1.Pod) {},
			want: `error processing PVC default/pod-p1-scratch: failed to fetch PVC from API server: persistentvolumeclaims "pod-p1-scratch" not found`},
		{name: "static pod", vol: claimVolume("data", "c", false), static: true,
			setup: func(f *fakeClaims, _ *v1.Pod) { f.bind("c", "pv-c", hostPath) },
			want:  "error processing PVC default/c: static pods may not reference persistentvolumeclaims"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeClaims()
			m := New(t.TempDir(), nil, nil, testLogger(t), WithClaims(f))
			pod := testPod("p1", tc.vol)
			if tc.static {
				pod.Annotations = map[string]string{"kubernetes.io/config.source": "file"}
			}
			tc.setup(f, pod)
			ref, ok := claimOf(pod, &pod.Spec.Volumes[0])
			if !ok {
				t.Fatal("claimOf: not a claimed volume")
			}
			p, err := m.resolve(t.Context(), pod, ref)
			if tc.want != "" {
				if fmt.Sprint(err) != tc.want {
					t.Fatalf("resolve = %v, want %q", err, tc.want)
				}
				return
			}
			if err != nil || p.PV == nil || p.Claim == nil || p.Claim.Spec.VolumeName != p.PV.Name {
				t.Fatalf("resolve = %+v, %v", p, err)
			}
		})
	}
}

// TestClaimStandalone: without Claims a claimed volume fails, saying why,
// as unprocessed, and the pod's other volumes are still set up.
func TestClaimStandalone(t *testing.T) {
	e := newEnv(t)
	pod := mounting(testPod("uid-sa", claimVolume("data", "c", false), ephemeralVolume("scratch"), emptyDirVolume("fine")), "data", "scratch", "fine")
	err := e.m.SetUp(t.Context(), pod)
	failed := SetUpErrors(err)
	if len(failed) != 2 {
		t.Fatalf("SetUp = %v, want two failed volumes", err)
	}
	for i, want := range []string{
		"error processing PVC default/c: persistent volume claims are not supported by nodelet in standalone mode: there is no API server to resolve them",
		"error processing PVC default/pod-uid-sa-scratch: persistent volume claims are not supported by nodelet in standalone mode: there is no API server to resolve them",
	} {
		if !failed[i].Unprocessed || failed[i].Err.Error() != want {
			t.Errorf("failure %d = %+v, want unprocessed %q", i, failed[i], want)
		}
	}
	if _, err := os.Stat(e.m.volumeDir(pod.UID, pluginEmptyDir, "fine")); err != nil {
		t.Errorf("emptyDir beside failing claims: %v", err)
	}
	if _, err := e.m.Mounts(pod, &pod.Spec.Containers[0], nil, false, nil); err == nil || !strings.Contains(err.Error(), `volume "data" is not set up`) {
		t.Errorf("Mounts = %v, want the claim not set up", err)
	}
}

// TestHostPathPersistentVolume: a hostPath PV is mounted from its host
// path, read-only when the claim says so, its type checked, and a claim
// that goes unbound is resolved again at the next SetUp.
func TestHostPathPersistentVolume(t *testing.T) {
	e, fc := newClaimsEnv(t)
	host := t.TempDir()
	typ := v1.HostPathDirectoryOrCreate
	fc.bind("rw", "pv-rw", v1.PersistentVolumeSource{HostPath: &v1.HostPathVolumeSource{Path: host + "/rw", Type: &typ}})
	fc.bind("ro", "pv-ro", v1.PersistentVolumeSource{HostPath: &v1.HostPathVolumeSource{Path: host}})
	pod := mounting(testPod("uid-hp", claimVolume("a", "rw", false), claimVolume("b", "ro", true)), "a", "b")
	if err := e.m.SetUp(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(host + "/rw"); err != nil || !fi.IsDir() {
		t.Fatalf("DirectoryOrCreate did not create the directory: %v", err)
	}
	mounts, err := e.m.Mounts(pod, &pod.Spec.Containers[0], nil, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(mounts) != 2 || mounts[0].HostPath != host+"/rw" || mounts[0].Readonly || mounts[1].HostPath != host || !mounts[1].Readonly {
		t.Fatalf("mounts = %v, want %s read-write and %s read-only", mounts, host+"/rw", host)
	}
	if n := len(mountsUnder(t, e.m.podDir(pod.UID))); n != 0 {
		t.Fatalf("%d mounts in the pod directory for hostPath volumes", n)
	}

	// The claim is unbound meanwhile: the next SetUp fails, and Mounts
	// no longer hands out the volume.
	fc.mu.Lock()
	fc.claims["default/rw"].Status.Phase = v1.ClaimPending
	fc.mu.Unlock()
	err = e.m.SetUp(t.Context(), pod)
	if failed := SetUpErrors(err); len(failed) != 1 || failed[0].Volume != "a" || !failed[0].Unprocessed ||
		failed[0].Err.Error() != "error processing PVC default/rw: PVC is not bound" {
		t.Fatalf("SetUp with the claim unbound = %v", err)
	}
	if _, err := e.m.Mounts(pod, &pod.Spec.Containers[0], nil, false, nil); err == nil {
		t.Fatal("Mounts handed out the volume of an unbound claim")
	}

	// A type that does not match: MountVolume.SetUp failed, by PV name.
	file := v1.HostPathFile
	fc.bind("rw", "pv-rw", v1.PersistentVolumeSource{HostPath: &v1.HostPathVolumeSource{Path: host, Type: &file}})
	err = e.m.SetUp(t.Context(), pod)
	failed := SetUpErrors(err)
	if len(failed) != 1 || failed[0].Unprocessed || failed[0].EventVolume() != "pv-rw" || failed[0].Step != "MountVolume.SetUp failed" ||
		!strings.Contains(failed[0].Err.Error(), "is not a file") {
		t.Fatalf("SetUp with a type mismatch = %+v", failed)
	}
}

// TestClaimedVolumeTypes: PVs nodelet does not mount are refused, saying
// so, as unprocessed (CSI ones too without CSI drivers); with the CSI
// mounter a CSI PV is published in the pod's kubernetes.io~csi/<pv>
// directory.
func TestClaimedVolumeTypes(t *testing.T) {
	e, fc := newClaimsEnv(t)
	fc.bind("nfs", "pv-nfs", v1.PersistentVolumeSource{NFS: &v1.NFSVolumeSource{Server: "s", Path: "/"}})
	fc.bind("csi", "pv-csi", v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: "hostpath.csi.k8s.io", VolumeHandle: "h"}})
	pod := mounting(testPod("uid-types", claimVolume("n", "nfs", false), claimVolume("c", "csi", false)), "n", "c")
	failed := SetUpErrors(e.m.SetUp(t.Context(), pod))
	if len(failed) != 2 ||
		failed[0].Err.Error() != "PersistentVolume pv-nfs: type nfs is not supported by nodelet" || !failed[0].Unprocessed ||
		failed[1].Err.Error() != "PersistentVolume pv-csi: CSI volumes (driver hostpath.csi.k8s.io) are not supported without CSI drivers" || !failed[1].Unprocessed {
		t.Fatalf("failures = %+v", failed)
	}

	csi := &fakeCSI{}
	e.m = New(e.root, e.objects, fakeDownward{}, testLogger(t), WithClaims(fc), WithCSI(csi))
	pod = mounting(testPod("uid-csi", claimVolume("c", "csi", true)), "c")
	if err := e.m.SetUp(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	if want := []string{"SetUp pv-csi hostpath.csi.k8s.io Persistent"}; !slices.Equal(csi.calls, want) {
		t.Fatalf("the CSI mounter got %q, want %q", csi.calls, want)
	}
	if l := csi.last; l.VolumeHandle != "h" || l.PodVolume != "c" || l.Claim != "csi" || !l.ReadOnly {
		t.Errorf("the CSI mounter got %+v, want handle h, volume c, claim csi, read-only", l)
	}
	want := filepath.Join(e.root, "pods/uid-csi/volumes/kubernetes.io~csi/pv-csi/mount")
	mounts, err := e.m.Mounts(pod, &pod.Spec.Containers[0], nil, false, nil)
	if err != nil || len(mounts) != 1 || mounts[0].HostPath != want || !mounts[0].Readonly {
		t.Fatalf("mounts = %v, %v", mounts, err)
	}
	csi.failUp = errors.New("driver gone")
	failed = SetUpErrors(e.m.SetUp(t.Context(), pod))
	if len(failed) != 1 || failed[0].Unprocessed || failed[0].EventVolume() != "pv-csi" || failed[0].Err.Error() != "driver gone" {
		t.Fatalf("failures = %+v", failed)
	}
}

// TestUnusedClaimSkipped: a claim no container mounts is not even
// fetched.
func TestUnusedClaimSkipped(t *testing.T) {
	e, fc := newClaimsEnv(t)
	pod := testPod("uid-unused", claimVolume("data", "nope", false))
	if err := e.m.SetUp(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	if fc.calls != 0 {
		t.Fatalf("%d API calls for a claim no container mounts", fc.calls)
	}
}

// TestLocalPersistentVolume mounts a local PV into the pod directory,
// applies the fsGroup once, leaves the mount on later SetUps and unmounts
// it at TearDown without touching the data.
func TestLocalPersistentVolume(t *testing.T) {
	requireRoot(t)
	e, fc := newClaimsEnv(t)
	data := t.TempDir()
	mustWrite(t, filepath.Join(data, "sub/file"), "kept")
	fc.bind("local", "pv-local", v1.PersistentVolumeSource{Local: &v1.LocalVolumeSource{Path: data}})
	pod := mounting(testPod("uid-local", claimVolume("data", "local", false)), "data")
	pod.Spec.SecurityContext = &v1.PodSecurityContext{FSGroup: ptr[int64](4321)}
	e.cleanupPod(pod.UID)
	for range 2 {
		if err := e.m.SetUp(t.Context(), pod); err != nil {
			t.Fatal(err)
		}
	}
	dir := e.m.volumeDir(pod.UID, pluginLocal, "pv-local")
	if n := len(mountsUnder(t, dir)); n != 1 {
		t.Fatalf("%d mounts on %s after two SetUps, want 1", n, dir)
	}
	mounts, err := e.m.Mounts(pod, &pod.Spec.Containers[0], nil, false, nil)
	if err != nil || len(mounts) != 1 || mounts[0].HostPath != dir || mounts[0].Readonly {
		t.Fatalf("mounts = %v, %v; want %s read-write", mounts, err, dir)
	}
	for _, p := range []string{data, filepath.Join(data, "sub"), filepath.Join(data, "sub/file")} {
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			t.Fatal(err)
		}
		if st.Gid != 4321 || st.Mode&0o060 != 0o060 {
			t.Errorf("%s: gid %d mode %o, want group 4321 with g+rw", p, st.Gid, st.Mode&0o7777)
		}
	}
	if mustRead(t, filepath.Join(dir, "sub/file")) != "kept" {
		t.Fatal("the pod directory does not show the local volume")
	}
	if err := e.m.TearDown(t.Context(), pod.UID); err != nil {
		t.Fatal(err)
	}
	if n := len(mountsUnder(t, e.m.podDir(pod.UID))); n != 0 {
		t.Fatalf("%d mounts left after TearDown", n)
	}
	if mustRead(t, filepath.Join(data, "sub/file")) != "kept" {
		t.Fatal("TearDown touched the local volume's data")
	}
}

// TestLocalPersistentVolumeReadOnly: a read-only claim of a local PV is
// a read-only bind mount, its ownership left alone.
func TestLocalPersistentVolumeReadOnly(t *testing.T) {
	requireRoot(t)
	e, fc := newClaimsEnv(t)
	data := t.TempDir()
	fc.bind("local", "pv-local", v1.PersistentVolumeSource{Local: &v1.LocalVolumeSource{Path: data}})
	fc.pvs["pv-local"].Spec.MountOptions = []string{"noexec", "vers=4"}
	pod := mounting(testPod("uid-local-ro", claimVolume("data", "local", true)), "data")
	pod.Spec.SecurityContext = &v1.PodSecurityContext{FSGroup: ptr[int64](4321)}
	e.cleanupPod(pod.UID)
	if err := e.m.SetUp(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	dir := e.m.volumeDir(pod.UID, pluginLocal, "pv-local")
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	if st.Flags&unix.ST_RDONLY == 0 || st.Flags&unix.ST_NOEXEC == 0 {
		t.Fatalf("mount flags %#x, want read-only and noexec", st.Flags)
	}
	if err := os.WriteFile(filepath.Join(dir, "x"), nil, 0o644); !errors.Is(err, unix.EROFS) {
		t.Fatalf("writing to the read-only mount: %v, want EROFS", err)
	}
	var ost unix.Stat_t
	if err := unix.Stat(data, &ost); err != nil || ost.Gid == 4321 {
		t.Fatalf("fsGroup applied to a read-only volume: gid %d, %v", ost.Gid, err)
	}
	mounts, err := e.m.Mounts(pod, &pod.Spec.Containers[0], nil, false, nil)
	if err != nil || len(mounts) != 1 || !mounts[0].Readonly {
		t.Fatalf("mounts = %v, %v; want read-only", mounts, err)
	}
}

// TestLocalPersistentVolumeMissing: a local PV whose path is missing or
// not a directory is refused with the kubelet's words, and nothing is
// mounted.
func TestLocalPersistentVolumeMissing(t *testing.T) {
	e, fc := newClaimsEnv(t)
	missing := filepath.Join(t.TempDir(), "gone")
	file := filepath.Join(t.TempDir(), "file")
	mustWrite(t, file, "")
	fc.bind("a", "pv-a", v1.PersistentVolumeSource{Local: &v1.LocalVolumeSource{Path: missing}})
	fc.bind("b", "pv-b", v1.PersistentVolumeSource{Local: &v1.LocalVolumeSource{Path: file}})
	pod := mounting(testPod("uid-local-missing", claimVolume("a", "a", false), claimVolume("b", "b", false)), "a", "b")
	failed := SetUpErrors(e.m.SetUp(t.Context(), pod))
	if len(failed) != 2 {
		t.Fatalf("failures = %+v", failed)
	}
	for i, want := range []string{fmt.Sprintf("path %q does not exist", missing), "only directory and block device are supported"} {
		if f := failed[i]; f.Step != "MountVolume.NewMounter initialization failed" || f.Err.Error() != want || f.Unprocessed {
			t.Errorf("failure %d = %+v, want NewMounter %q", i, f, want)
		}
	}
	if _, err := os.Stat(filepath.Join(e.m.podDir(pod.UID), volumesDirName, pluginLocal)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused local volume got a directory: %v", err)
	}
}

// TestSetVolumeOwnershipPolicy: Always changes every file; OnRootMismatch
// nothing when the root already matches, everything when it does not.
func TestSetVolumeOwnershipPolicy(t *testing.T) {
	requireRoot(t)
	gid := ptr[int64](4242)
	always, onRoot := v1.FSGroupChangeAlways, v1.FSGroupChangeOnRootMismatch
	setup := func(t *testing.T, rootMatches bool) string {
		dir := t.TempDir()
		mustWrite(t, filepath.Join(dir, "f"), "")
		if rootMatches {
			if err := os.Chown(dir, -1, 4242); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(dir, 0o770|os.ModeSetgid); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	gidOf := func(t *testing.T, p string) int64 {
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			t.Fatal(err)
		}
		return int64(st.Gid)
	}
	for _, tc := range []struct {
		name        string
		policy      *v1.PodFSGroupChangePolicy
		rootMatches bool
		fileChanged bool
	}{
		{"no policy", nil, true, true},
		{"Always", &always, true, true},
		{"OnRootMismatch, root matches", &onRoot, true, false},
		{"OnRootMismatch, root differs", &onRoot, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := setup(t, tc.rootMatches)
			if err := setVolumeOwnership(dir, gid, tc.policy); err != nil {
				t.Fatal(err)
			}
			if changed := gidOf(t, filepath.Join(dir, "f")) == *gid; changed != tc.fileChanged {
				t.Fatalf("file's group changed: %v, want %v", changed, tc.fileChanged)
			}
			if gidOf(t, dir) != *gid {
				t.Fatal("root's group not the fsGroup")
			}
		})
	}
	if err := setVolumeOwnership(t.TempDir(), nil, &always); err != nil {
		t.Fatalf("no fsGroup: %v", err)
	}
}

func TestRootOwnershipMatches(t *testing.T) {
	const dir, file = unix.S_IFDIR, unix.S_IFREG
	for _, tc := range []struct {
		name  string
		mode  uint32
		group uint32
		want  bool
	}{
		{"matching", dir | unix.S_ISGID | 0o770, 7, true},
		{"superset", dir | unix.S_ISGID | 0o775, 7, true},
		{"other group", dir | unix.S_ISGID | 0o770, 8, false},
		{"no setgid", dir | 0o770, 7, false},
		{"no group write", dir | unix.S_ISGID | 0o750, 7, false},
		{"no owner exec", dir | unix.S_ISGID | 0o670, 7, false},
		{"a file", file | unix.S_ISGID | 0o770, 7, false},
	} {
		if got := rootOwnershipMatches(tc.mode, tc.group, 7); got != tc.want {
			t.Errorf("%s: rootOwnershipMatches(%o) = %v, want %v", tc.name, tc.mode, got, tc.want)
		}
	}
}

func TestBindFlags(t *testing.T) {
	for _, tc := range []struct {
		readOnly bool
		options  []string
		want     uintptr
		ignored  []string
	}{
		{false, nil, 0, nil},
		{true, nil, unix.MS_RDONLY, nil},
		{false, []string{"ro"}, unix.MS_RDONLY, nil},
		{false, []string{"nosuid", "nodev", "noexec", "noatime", "rw"}, unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC | unix.MS_NOATIME, nil},
		{true, []string{"vers=4", "discard"}, unix.MS_RDONLY, []string{"vers=4", "discard"}},
	} {
		got, ignored := bindFlags(tc.readOnly, tc.options)
		if got != tc.want || fmt.Sprint(ignored) != fmt.Sprint(tc.ignored) {
			t.Errorf("bindFlags(%v, %q) = %#x, %q; want %#x, %q", tc.readOnly, tc.options, got, ignored, tc.want, tc.ignored)
		}
	}
}

func TestCheckNoBacksteps(t *testing.T) {
	for path, ok := range map[string]bool{"/srv/data": true, "/srv/..data": true, "/srv/../etc": false, "..": false, "/a/b/..": false} {
		if err := checkNoBacksteps(path); (err == nil) != ok {
			t.Errorf("checkNoBacksteps(%q) = %v", path, err)
		}
	}
}

func TestOtherMounts(t *testing.T) {
	mounts, err := mountinfo.Parse([]byte(`1 0 8:1 / / rw - ext4 /dev/sda1 rw
2 1 8:1 /srv/data /r/pods/a/volumes/kubernetes.io~local-volume/pv rw - ext4 /dev/sda1 rw
3 1 8:1 /srv/data /r/pods/b/volumes/kubernetes.io~local-volume/pv rw - ext4 /dev/sda1 rw
4 1 8:1 /srv/data /elsewhere rw - ext4 /dev/sda1 rw
5 1 8:1 /srv/other /r/pods/c/volumes/kubernetes.io~local-volume/pv2 rw - ext4 /dev/sda1 rw
6 1 8:2 /srv/data /r/pods/d/volumes/kubernetes.io~local-volume/pv3 rw - ext4 /dev/sdb1 rw
`))
	if err != nil {
		t.Fatal(err)
	}
	for mp, want := range map[string]int{
		"/r/pods/a/volumes/kubernetes.io~local-volume/pv":  1, // b's; not /elsewhere, not other sources
		"/r/pods/c/volumes/kubernetes.io~local-volume/pv2": 0,
		"/r/pods/d/volumes/kubernetes.io~local-volume/pv3": 0, // same path, other device
		"/not/mounted": 0,
	} {
		if got := otherMounts(mounts, mp, "/r/pods"); got != want {
			t.Errorf("otherMounts(%s) = %d, want %d", mp, got, want)
		}
	}
}

// TestLocalPersistentVolumeShared: a second pod mounting a local volume
// another pod has mounted leaves its ownership as the first made it.
func TestLocalPersistentVolumeShared(t *testing.T) {
	requireRoot(t)
	e, fc := newClaimsEnv(t)
	data := t.TempDir()
	fc.bind("local", "pv-local", v1.PersistentVolumeSource{Local: &v1.LocalVolumeSource{Path: data}})
	first := mounting(testPod("uid-first", claimVolume("data", "local", false)), "data")
	first.Spec.SecurityContext = &v1.PodSecurityContext{FSGroup: ptr[int64](1111)}
	second := mounting(testPod("uid-second", claimVolume("data", "local", false)), "data")
	second.Spec.SecurityContext = &v1.PodSecurityContext{FSGroup: ptr[int64](2222)}
	e.cleanupPod(first.UID)
	e.cleanupPod(second.UID)
	gid := func() uint32 {
		var st unix.Stat_t
		if err := unix.Stat(data, &st); err != nil {
			t.Fatal(err)
		}
		return st.Gid
	}
	if err := e.m.SetUp(t.Context(), first); err != nil {
		t.Fatal(err)
	}
	if g := gid(); g != 1111 {
		t.Fatalf("group after the first pod: %d, want 1111", g)
	}
	if err := e.m.SetUp(t.Context(), second); err != nil {
		t.Fatal(err)
	}
	if g := gid(); g != 1111 {
		t.Fatalf("group after the second pod: %d, want the first pod's 1111", g)
	}
	// Once the first is gone, a pod mounting it anew applies its own.
	if err := e.m.TearDown(t.Context(), first.UID); err != nil {
		t.Fatal(err)
	}
	if err := e.m.TearDown(t.Context(), second.UID); err != nil {
		t.Fatal(err)
	}
	if err := e.m.SetUp(t.Context(), second); err != nil {
		t.Fatal(err)
	}
	if g := gid(); g != 2222 {
		t.Fatalf("group after the second pod alone: %d, want 2222", g)
	}
}
