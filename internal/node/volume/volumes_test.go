package volume

import (
	"errors"
	"github.com/nodelet/nodelet/internal/base/mountinfo"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestEmptyDir(t *testing.T) {
	e := newEnv(t)
	pod := testPod("uid-ed", emptyDirVolume("scratch"))
	if err := e.m.SetUp(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(e.root, "pods/uid-ed/volumes/kubernetes.io~empty-dir/scratch")
	fi, err := os.Stat(dir)
	if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o777 {
		t.Fatalf("emptyDir: %v %v, want a 0777 directory", fi, err)
	}
	mustWrite(t, filepath.Join(dir, "kept"), "x")
	if err := e.m.SetUp(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	if mustRead(t, filepath.Join(dir, "kept")) != "x" {
		t.Fatal("SetUp again lost the content")
	}
}

func TestEmptyDirMemory(t *testing.T) {
	requireRoot(t)
	e := newEnv(t)
	size := resource.MustParse("64Mi")
	pod := testPod("uid-mem", v1.Volume{Name: "cache", VolumeSource: v1.VolumeSource{
		EmptyDir: &v1.EmptyDirVolumeSource{Medium: v1.StorageMediumMemory, SizeLimit: &size}}})
	e.cleanupPod(pod.UID)
	for range 3 { // idempotent
		if err := e.m.SetUp(t.Context(), pod); err != nil {
			t.Fatal(err)
		}
	}
	dir := e.m.volumeDir(pod.UID, pluginEmptyDir, "cache")
	mounts := mountsUnder(t, dir)
	if len(mounts) != 1 {
		t.Fatalf("%d mounts on the emptyDir after 3 SetUps, want 1: %+v", len(mounts), mounts)
	}
	if mi := mounts[0]; mi.FsType != "tmpfs" || !strings.Contains(mi.SuperOpts, "size=65536k") {
		t.Fatalf("mount = %+v, want tmpfs with size=65536k", mi)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	if st.Type != unix.TMPFS_MAGIC || st.Blocks*uint64(st.Bsize) != 64<<20 {
		t.Fatalf("statfs: type %x, %d bytes; want tmpfs of %d bytes", st.Type, st.Blocks*uint64(st.Bsize), 64<<20)
	}
	if err := e.m.TearDown(t.Context(), pod.UID); err != nil {
		t.Fatal(err)
	}
	if n := len(mountsUnder(t, e.root)); n != 0 {
		t.Fatalf("%d mounts left after TearDown", n)
	}
	if _, err := os.Stat(filepath.Join(e.m.podDir(pod.UID), volumesDirName)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("pod volumes after TearDown: %v", err)
	}
}

func TestTmpfsSize(t *testing.T) {
	q := func(s string) *resource.Quantity { r := resource.MustParse(s); return &r }
	limited := func(mems ...string) *v1.Pod {
		pod := testPod("x")
		pod.Spec.Containers = nil
		for _, m := range mems {
			c := v1.Container{Name: "c"}
			if m != "" {
				c.Resources.Limits = v1.ResourceList{v1.ResourceMemory: *q(m)}
			}
			pod.Spec.Containers = append(pod.Spec.Containers, c)
		}
		return pod
	}
	for _, tc := range []struct {
		name      string
		pod       *v1.Pod
		sizeLimit *resource.Quantity
		want      string // "" for none
	}{
		{"nothing set", limited(""), nil, ""},
		{"sizeLimit", limited(""), q("64Mi"), "64Mi"},
		{"pod limit", limited("100Mi", "28Mi"), nil, "128Mi"},
		{"smaller sizeLimit wins", limited("100Mi"), q("64Mi"), "64Mi"},
		{"smaller pod limit wins", limited("32Mi"), q("64Mi"), "32Mi"},
		{"one container without limit", limited("32Mi", ""), q("64Mi"), "64Mi"},
		{"zero sizeLimit ignored", limited(""), q("0"), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tmpfsSize(tc.pod, tc.sizeLimit)
			switch {
			case tc.want == "" && got != nil:
				t.Fatalf("size = %v, want none", got)
			case tc.want != "" && (got == nil || got.Cmp(*q(tc.want)) != 0):
				t.Fatalf("size = %v, want %s", got, tc.want)
			}
		})
	}
}

func TestHostPathTypes(t *testing.T) {
	requireRoot(t) // mknod
	dir := t.TempDir()
	mustWrite(t, filepath.Join(dir, "file"), "x")
	if err := os.Mkdir(filepath.Join(dir, "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", filepath.Join(dir, "sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := unix.Mknod(filepath.Join(dir, "chr"), unix.S_IFCHR|0o600, int(unix.Mkdev(1, 3))); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mknod(filepath.Join(dir, "blk"), unix.S_IFBLK|0o600, int(unix.Mkdev(7, 0))); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("dir", filepath.Join(dir, "dirlink")); err != nil {
		t.Fatal(err)
	}
	p := func(name string) string { return filepath.Join(dir, name) }

	tests := []struct {
		path    string
		typ     v1.HostPathType
		wantErr string
		check   func(t *testing.T)
	}{
		{path: p("missing"), typ: v1.HostPathUnset},
		{path: p("file"), typ: v1.HostPathUnset},
		{path: p("new/dir"), typ: v1.HostPathDirectoryOrCreate, check: wantMode(p("new/dir"), os.ModeDir|0o755)},
		{path: p("dir"), typ: v1.HostPathDirectoryOrCreate},
		{path: p("file"), typ: v1.HostPathDirectoryOrCreate, wantErr: "hostPath type check failed: " + p("file") + " is not a directory, it's a File"},
		{path: p("dir"), typ: v1.HostPathDirectory},
		{path: p("dirlink"), typ: v1.HostPathDirectory},
		{path: p("file"), typ: v1.HostPathDirectory, wantErr: "is not a directory"},
		{path: p("missing"), typ: v1.HostPathDirectory, wantErr: "hostPath " + p("missing") + " doesn't exist"},
		{path: p("parents/new/file"), typ: v1.HostPathFileOrCreate, check: wantMode(p("parents/new/file"), 0o644)},
		{path: p("file"), typ: v1.HostPathFileOrCreate},
		{path: p("dir"), typ: v1.HostPathFileOrCreate, wantErr: "is not a file, it's a Directory"},
		{path: p("file"), typ: v1.HostPathFile},
		{path: p("dir"), typ: v1.HostPathFile, wantErr: "hostPath type check failed: " + p("dir") + " is not a file"},
		{path: p("missing"), typ: v1.HostPathFile, wantErr: "doesn't exist"},
		{path: p("sock"), typ: v1.HostPathSocket},
		{path: p("file"), typ: v1.HostPathSocket, wantErr: "is not a socket file"},
		{path: p("chr"), typ: v1.HostPathCharDev},
		{path: p("blk"), typ: v1.HostPathCharDev, wantErr: "is not a character device, it's a BlockDevice"},
		{path: p("blk"), typ: v1.HostPathBlockDev},
		{path: p("chr"), typ: v1.HostPathBlockDev, wantErr: "is not a block device, it's a CharDevice"},
		{path: p("missing"), typ: v1.HostPathBlockDev, wantErr: "doesn't exist"},
		{path: p("file"), typ: "Bogus", wantErr: "Bogus is an invalid volume type"},
		{path: "relative", typ: v1.HostPathUnset, wantErr: "not an absolute path"},
	}
	e := newEnv(t)
	for _, tc := range tests {
		t.Run(string(tc.typ)+"/"+filepath.Base(tc.path), func(t *testing.T) {
			pod := testPod("uid-hp", v1.Volume{Name: "host", VolumeSource: v1.VolumeSource{
				HostPath: &v1.HostPathVolumeSource{Path: tc.path, Type: ptr(tc.typ)}}})
			err := e.m.SetUp(t.Context(), pod)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), `volume "host"`) {
					t.Fatalf("SetUp() error = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.check != nil {
				tc.check(t)
			}
			// The host path itself is handed to the runtime.
			pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "host", MountPath: "/h"}}
			mounts, err := e.m.Mounts(pod, &pod.Spec.Containers[0], nil, false, nil)
			if err != nil || mounts[0].HostPath != tc.path || mounts[0].Readonly {
				t.Fatalf("Mounts() = %v, %v", mounts, err)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(e.root, "pods/uid-hp/volumes")); err == nil {
		entries, _ := os.ReadDir(filepath.Join(e.root, "pods/uid-hp/volumes"))
		if len(entries) != 0 {
			t.Fatalf("hostPath created volume directories: %v", entries)
		}
	}
}

func wantMode(path string, mode os.FileMode) func(t *testing.T) {
	return func(t *testing.T) {
		t.Helper()
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode()&(os.ModeDir|os.ModePerm) != mode {
			t.Fatalf("%s: mode %v, want %v", path, fi.Mode(), mode)
		}
	}
}

// volumeFiles reads the user-visible files of a volume directory
// (symlinks followed, bookkeeping skipped) as path → content.
func volumeFiles(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	data := filepath.Join(dir, "..data")
	err := filepath.WalkDir(data+"/", func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(data, path)
		out[rel] = mustRead(t, filepath.Join(dir, rel))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func fileMode(t *testing.T, path string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if bv, ok := b[k]; !ok || bv != v {
			return false
		}
	}
	return true
}

func TestConfigMapAndSecretVolumes(t *testing.T) {
	requireRoot(t) // secrets live on a tmpfs
	e := newEnv(t)
	e.objects.putConfigMap("cfg", map[string]string{"app.conf": "a=1", "other": "o"}, map[string][]byte{"bin": {0, 1, 2}})
	e.objects.putSecret("creds", map[string][]byte{"user": []byte("admin"), "pass": []byte("s3cret")})

	vols := []v1.Volume{
		{Name: "all", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
			LocalObjectReference: v1.LocalObjectReference{Name: "cfg"}}}},
		{Name: "items", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
			LocalObjectReference: v1.LocalObjectReference{Name: "cfg"},
			DefaultMode:          ptr[int32](0o640),
			Items: []v1.KeyToPath{
				{Key: "app.conf", Path: "conf/app.conf"},
				{Key: "bin", Path: "bin.dat", Mode: ptr[int32](0o600)},
			}}}},
		{Name: "optional-missing", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
			LocalObjectReference: v1.LocalObjectReference{Name: "nope"}, Optional: ptr(true)}}},
		{Name: "optional-missing-key", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
			LocalObjectReference: v1.LocalObjectReference{Name: "cfg"}, Optional: ptr(true),
			Items: []v1.KeyToPath{{Key: "nokey", Path: "x"}, {Key: "other", Path: "y"}}}}},
		{Name: "secret", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{
			SecretName: "creds", DefaultMode: ptr[int32](0o400)}}},
		{Name: "secret-items", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{
			SecretName: "creds", Items: []v1.KeyToPath{{Key: "pass", Path: "p", Mode: ptr[int32](0o440)}}}}},
		{Name: "secret-optional", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{
			SecretName: "nope", Optional: ptr(true)}}},
	}
	pod := testPod("uid-cm", vols...)
	e.cleanupPod(pod.UID)
	if err := e.m.SetUp(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	dir := func(plugin, name string) string { return e.m.volumeDir(pod.UID, plugin, name) }
	for _, tc := range []struct {
		dir  string
		want map[string]string
	}{
		{dir(pluginConfigMap, "all"), map[string]string{"app.conf": "a=1", "other": "o", "bin": "\x00\x01\x02"}},
		{dir(pluginConfigMap, "items"), map[string]string{"conf/app.conf": "a=1", "bin.dat": "\x00\x01\x02"}},
		{dir(pluginConfigMap, "optional-missing"), map[string]string{}},
		{dir(pluginConfigMap, "optional-missing-key"), map[string]string{"y": "o"}},
		{dir(pluginSecret, "secret"), map[string]string{"user": "admin", "pass": "s3cret"}},
		{dir(pluginSecret, "secret-items"), map[string]string{"p": "s3cret"}},
		{dir(pluginSecret, "secret-optional"), map[string]string{}},
	} {
		if got := volumeFiles(t, tc.dir); !equalMaps(got, tc.want) {
			t.Errorf("%s: files %q, want %q", filepath.Base(tc.dir), got, tc.want)
		}
	}
	for path, want := range map[string]os.FileMode{
		filepath.Join(dir(pluginConfigMap, "all"), "app.conf"):        0o644,
		filepath.Join(dir(pluginConfigMap, "items"), "conf/app.conf"): 0o640,
		filepath.Join(dir(pluginConfigMap, "items"), "bin.dat"):       0o600,
		filepath.Join(dir(pluginSecret, "secret"), "user"):            0o400,
		filepath.Join(dir(pluginSecret, "secret-items"), "p"):         0o440,
	} {
		if got := fileMode(t, path); got != want {
			t.Errorf("%s: mode %v, want %v", path, got, want)
		}
	}
	if target, _ := os.Readlink(filepath.Join(dir(pluginConfigMap, "items"), "conf")); target != "..data/conf" {
		t.Errorf("user-visible link conf -> %q, want ..data/conf", target)
	}

	// Secrets never touch the disk: their volumes are tmpfs mounts.
	for _, name := range []string{"secret", "secret-items", "secret-optional"} {
		var st unix.Statfs_t
		if err := unix.Statfs(dir(pluginSecret, name), &st); err != nil || st.Type != unix.TMPFS_MAGIC {
			t.Errorf("secret volume %s is not on a tmpfs (%v)", name, err)
		}
	}

	// An update of the object shows on the next SetUp.
	e.objects.putConfigMap("cfg", map[string]string{"app.conf": "a=2"}, map[string][]byte{"bin": {3}})
	if err := e.m.SetUp(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	if got := volumeFiles(t, dir(pluginConfigMap, "all")); !equalMaps(got, map[string]string{"app.conf": "a=2", "bin": "\x03"}) {
		t.Errorf("after update: %q", got)
	}
	if _, err := os.Lstat(filepath.Join(dir(pluginConfigMap, "all"), "other")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("removed key still visible: %v", err)
	}

	// The containers get them read-only, whatever the volumeMount says.
	c := &v1.Container{Name: "app", VolumeMounts: []v1.VolumeMount{
		{Name: "all", MountPath: "/etc/app"},
		{Name: "secret", MountPath: "/secret", SubPath: "user"},
	}}
	mounts, err := e.m.Mounts(pod, c, nil, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !mounts[0].Readonly || !mounts[1].Readonly || mounts[0].HostPath != dir(pluginConfigMap, "all") {
		t.Fatalf("mounts = %v", mounts)
	}
	if got := mustRead(t, mounts[1].HostPath); got != "admin" {
		t.Fatalf("subPath into a secret volume reads %q", got)
	}
}

func TestConfigMapAndSecretErrors(t *testing.T) {
	e := newEnv(t)
	e.objects.putConfigMap("cfg", map[string]string{"a": "1"}, nil)
	e.objects.putSecret("s", map[string][]byte{"a": []byte("1")})
	pod := testPod("uid-err",
		v1.Volume{Name: "missing-cm", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
			LocalObjectReference: v1.LocalObjectReference{Name: "nope"}}}},
		v1.Volume{Name: "missing-key", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
			LocalObjectReference: v1.LocalObjectReference{Name: "cfg"}, Items: []v1.KeyToPath{{Key: "zz", Path: "zz"}}}}},
		v1.Volume{Name: "missing-secret-key", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{
			SecretName: "s", Items: []v1.KeyToPath{{Key: "zz", Path: "zz"}}}}},
		v1.Volume{Name: "pvc", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "c"}}},
		v1.Volume{Name: "nfs", VolumeSource: v1.VolumeSource{NFS: &v1.NFSVolumeSource{Server: "x", Path: "/"}}},
		emptyDirVolume("fine"),
	)
	err := e.m.SetUp(t.Context(), pod)
	if err == nil {
		t.Fatal("SetUp succeeded")
	}
	for _, want := range []string{
		`volume "missing-cm": configMap default/nope: configmap default/nope: not found`,
		`volume "missing-key": configmap references non-existent config key: zz`,
		`volume "missing-secret-key": references non-existent secret key: zz`,
		`volume "nfs": type nfs is not supported by nodelet`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
	if !errors.Is(err, ErrObjectNotFound) {
		t.Errorf("error does not wrap ErrObjectNotFound")
	}
	// A claim no container mounts is not even resolved, as the kubelet's.
	if strings.Contains(err.Error(), `"pvc"`) {
		t.Errorf("error %q names the claim no container mounts", err)
	}
	// The other volumes are still set up; the failing ones are not.
	if _, err := os.Stat(e.m.volumeDir(pod.UID, pluginEmptyDir, "fine")); err != nil {
		t.Errorf("emptyDir beside failing volumes: %v", err)
	}
	if _, err := os.Stat(e.m.volumeDir(pod.UID, pluginConfigMap, "missing-cm")); err == nil {
		t.Errorf("a failing configMap volume got a directory")
	}
	c := &v1.Container{Name: "app", VolumeMounts: []v1.VolumeMount{{Name: "missing-cm", MountPath: "/x"}}}
	if _, err := e.m.Mounts(pod, c, nil, false, nil); err == nil || !strings.Contains(err.Error(), "not set up") {
		t.Errorf("Mounts of a failed volume: %v", err)
	}
}

func TestDownwardAPIAndProjected(t *testing.T) {
	requireRoot(t) // projected volumes live on a tmpfs
	e := newEnv(t)
	e.objects.putConfigMap("cfg", map[string]string{"a": "1"}, nil)
	e.objects.putSecret("s", map[string][]byte{"token": []byte("t")})
	pod := testPod("uid-dw",
		v1.Volume{Name: "podinfo", VolumeSource: v1.VolumeSource{DownwardAPI: &v1.DownwardAPIVolumeSource{
			Items: []v1.DownwardAPIVolumeFile{
				{Path: "name", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}},
				{Path: "labels", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.labels"}, Mode: ptr[int32](0o600)},
				{Path: "mem", ResourceFieldRef: &v1.ResourceFieldSelector{ContainerName: "app", Resource: "limits.memory"}},
			}}}},
		v1.Volume{Name: "all-in-one", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{
			DefaultMode: ptr[int32](0o440),
			Sources: []v1.VolumeProjection{
				{ConfigMap: &v1.ConfigMapProjection{LocalObjectReference: v1.LocalObjectReference{Name: "cfg"}}},
				{Secret: &v1.SecretProjection{LocalObjectReference: v1.LocalObjectReference{Name: "s"},
					Items: []v1.KeyToPath{{Key: "token", Path: "secret/token", Mode: ptr[int32](0o400)}}}},
				{Secret: &v1.SecretProjection{LocalObjectReference: v1.LocalObjectReference{Name: "absent"}, Optional: ptr(true)}},
				{DownwardAPI: &v1.DownwardAPIProjection{Items: []v1.DownwardAPIVolumeFile{
					{Path: "podname", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}},
			}}}},
	)
	e.cleanupPod(pod.UID)
	if err := e.m.SetUp(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	dw := e.m.volumeDir(pod.UID, pluginDownwardAPI, "podinfo")
	if got, want := volumeFiles(t, dw), map[string]string{"name": "pod-uid-dw", "labels": `app="web"`, "mem": "67108864"}; !equalMaps(got, want) {
		t.Errorf("downwardAPI files %q, want %q", got, want)
	}
	if got := fileMode(t, filepath.Join(dw, "labels")); got != 0o600 {
		t.Errorf("labels mode %v", got)
	}
	pj := e.m.volumeDir(pod.UID, pluginProjected, "all-in-one")
	if got, want := volumeFiles(t, pj), map[string]string{"a": "1", "secret/token": "t", "podname": "pod-uid-dw"}; !equalMaps(got, want) {
		t.Errorf("projected files %q, want %q", got, want)
	}
	if got := fileMode(t, filepath.Join(pj, "a")); got != 0o440 {
		t.Errorf("projected defaultMode: %v", got)
	}
	if got := fileMode(t, filepath.Join(pj, "secret/token")); got != 0o400 {
		t.Errorf("projected item mode: %v", got)
	}
	if ok, _ := mountinfo.IsMountPoint(pj); !ok {
		t.Errorf("projected volume is not a tmpfs mount")
	}

	// A label change is written on the next SetUp.
	pod.Labels["tier"] = "front"
	if err := e.m.SetUp(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	if got := mustRead(t, filepath.Join(dw, "labels")); !strings.Contains(got, `tier="front"`) {
		t.Errorf("labels after update: %q", got)
	}

	bad := testPod("uid-dw-bad",
		v1.Volume{Name: "token", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{
			Sources: []v1.VolumeProjection{{ServiceAccountToken: &v1.ServiceAccountTokenProjection{Path: "token"}}}}}},
		v1.Volume{Name: "field", VolumeSource: v1.VolumeSource{DownwardAPI: &v1.DownwardAPIVolumeSource{
			Items: []v1.DownwardAPIVolumeFile{{Path: "x", FieldRef: &v1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}}}}},
	)
	e.cleanupPod(bad.UID)
	err := e.m.SetUp(t.Context(), bad)
	for _, want := range []string{`volume "token": projected source 0: serviceAccountToken projection is not supported by nodelet`,
		`volume "field": downwardAPI item "x": unsupported fieldPath "spec.nodeName"`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("SetUp error %v, want %q", err, want)
		}
	}
}

func TestFSGroup(t *testing.T) {
	requireRoot(t) // chown
	e := newEnv(t)
	e.objects.putConfigMap("cfg", map[string]string{"a": "1"}, nil)
	outside := filepath.Join(t.TempDir(), "outside")
	mustWrite(t, outside, "x")
	if err := os.Chmod(outside, 0o600); err != nil {
		t.Fatal(err)
	}
	pod := testPod("uid-fsg", emptyDirVolume("data"),
		v1.Volume{Name: "cfg", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
			LocalObjectReference: v1.LocalObjectReference{Name: "cfg"}, DefaultMode: ptr[int32](0o400)}}})
	pod.Spec.SecurityContext = &v1.PodSecurityContext{FSGroup: ptr[int64](4321)}
	if err := e.m.SetUp(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	check := func(path string, wantMode os.FileMode) {
		t.Helper()
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if gid := fi.Sys().(*syscall.Stat_t).Gid; gid != 4321 {
			t.Errorf("%s: gid %d, want 4321", path, gid)
		}
		if got := fi.Mode() & (os.ModePerm | os.ModeSetgid); got != wantMode {
			t.Errorf("%s: mode %v, want %v", path, got, wantMode)
		}
	}
	data := e.m.volumeDir(pod.UID, pluginEmptyDir, "data")
	check(data, os.ModeSetgid|0o777)
	cfg := e.m.volumeDir(pod.UID, pluginConfigMap, "cfg")
	check(filepath.Join(cfg, "a"), 0o440) // defaultMode 0400 plus g+r
	check(filepath.Join(cfg, "..data"), os.ModeSetgid|0o755)

	// A second SetUp finds the content unchanged: no rewrite.
	before, _ := os.Readlink(filepath.Join(cfg, "..data"))
	if err := e.m.SetUp(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.Readlink(filepath.Join(cfg, "..data")); after != before {
		t.Errorf("unchanged configMap with fsGroup was rewritten")
	}

	// ApplyFSGroup does not follow symlinks out of the directory.
	mustWrite(t, filepath.Join(data, "sub/file"), "x")
	if err := os.Symlink(outside, filepath.Join(data, "sub/link")); err != nil {
		t.Fatal(err)
	}
	if err := ApplyFSGroup(data, 1234); err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(filepath.Join(data, "sub/file"))
	if fi.Sys().(*syscall.Stat_t).Gid != 1234 || fi.Mode().Perm()&0o060 != 0o060 {
		t.Errorf("file below: %v gid %d", fi.Mode(), fi.Sys().(*syscall.Stat_t).Gid)
	}
	fi, _ = os.Stat(outside)
	if fi.Sys().(*syscall.Stat_t).Gid == 1234 || fi.Mode().Perm() != 0o600 {
		t.Errorf("ApplyFSGroup followed a symlink: outside file is now %v gid %d", fi.Mode(), fi.Sys().(*syscall.Stat_t).Gid)
	}
}

func TestMountsOptions(t *testing.T) {
	e := newEnv(t)
	pod := testPod("uid-opts", emptyDirVolume("data"),
		v1.Volume{Name: "host", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: "/var/log/"}}})
	if err := e.m.SetUp(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	prop := func(m v1.MountPropagationMode) *v1.MountPropagationMode { return &m }
	c := &v1.Container{Name: "app", VolumeMounts: []v1.VolumeMount{
		{Name: "data", MountPath: "/data"},
		{Name: "data", MountPath: "/ro", ReadOnly: true, MountPropagation: prop(v1.MountPropagationNone)},
		{Name: "host", MountPath: "/logs", MountPropagation: prop(v1.MountPropagationHostToContainer), BindMountOptions: []string{"noexec"}},
		{Name: "data", MountPath: "relative/dir"}, // valid for the API server; the kubelet makes it absolute
	}}
	mounts, err := e.m.Mounts(pod, c, nil, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	data := e.m.volumeDir(pod.UID, pluginEmptyDir, "data")
	want := []*runtimeapi.Mount{
		{ContainerPath: "/data", HostPath: data, Propagation: runtimeapi.MountPropagation_PROPAGATION_PRIVATE},
		{ContainerPath: "/ro", HostPath: data, Readonly: true, Propagation: runtimeapi.MountPropagation_PROPAGATION_PRIVATE},
		{ContainerPath: "/logs", HostPath: "/var/log", Propagation: runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER, MountOptions: []string{"noexec"}},
		{ContainerPath: "/relative/dir", HostPath: data, Propagation: runtimeapi.MountPropagation_PROPAGATION_PRIVATE},
	}
	if len(mounts) != len(want) {
		t.Fatalf("%d mounts, want %d", len(mounts), len(want))
	}
	for i := range want {
		if mounts[i].String() != want[i].String() {
			t.Errorf("mount %d = %v, want %v", i, mounts[i], want[i])
		}
	}

	for _, tc := range []struct {
		name    string
		c       v1.Container
		wantErr string
	}{
		{"undefined volume", v1.Container{Name: "a", VolumeMounts: []v1.VolumeMount{{Name: "nope", MountPath: "/x"}}},
			`volumeMount "nope" of container "a": volume "nope" is not defined by the pod`},
		{"bidirectional unprivileged", v1.Container{Name: "a", VolumeMounts: []v1.VolumeMount{{Name: "data", MountPath: "/x", MountPropagation: prop(v1.MountPropagationBidirectional)}}},
			"only to privileged containers"},
		{"bad propagation", v1.Container{Name: "a", VolumeMounts: []v1.VolumeMount{{Name: "data", MountPath: "/x", MountPropagation: prop("Sideways")}}},
			`invalid MountPropagation mode: "Sideways"`},
	} {
		if _, err := e.m.Mounts(pod, &tc.c, nil, false, nil); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.wantErr)
		}
	}
	priv := v1.Container{Name: "a", SecurityContext: &v1.SecurityContext{Privileged: ptr(true)},
		VolumeMounts: []v1.VolumeMount{{Name: "data", MountPath: "/x", MountPropagation: prop(v1.MountPropagationBidirectional)}}}
	if m, err := e.m.Mounts(pod, &priv, nil, false, nil); err != nil || m[0].Propagation != runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL {
		t.Errorf("bidirectional privileged: %v %v", m, err)
	}
}

func TestMountsRecursiveReadOnly(t *testing.T) {
	e := newEnv(t)
	pod := testPod("uid-rro", emptyDirVolume("data"))
	if err := e.m.SetUp(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	c := &v1.Container{Name: "app", VolumeMounts: []v1.VolumeMount{
		{Name: "data", MountPath: "/rro", ReadOnly: true, RecursiveReadOnly: ptr(v1.RecursiveReadOnlyEnabled)},
		{Name: "data", MountPath: "/if-possible", ReadOnly: true, RecursiveReadOnly: ptr(v1.RecursiveReadOnlyIfPossible)},
		{Name: "data", MountPath: "/disabled", ReadOnly: true, RecursiveReadOnly: ptr(v1.RecursiveReadOnlyDisabled)},
		{Name: "data", MountPath: "/ro", ReadOnly: true},
		{Name: "data", MountPath: "/rw"},
	}}
	type got struct{ ro, rro bool }
	mounts, err := e.m.Mounts(pod, c, nil, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []got{{true, true}, {true, true}, {true, false}, {true, false}, {false, false}}
	for i, m := range mounts {
		if (got{m.Readonly, m.RecursiveReadOnly}) != want[i] {
			t.Errorf("supported: mount %s: readonly %v rro %v, want %+v", m.ContainerPath, m.Readonly, m.RecursiveReadOnly, want[i])
		}
	}

	// Without runtime support, IfPossible is plain read-only and Enabled
	// fails with the kubelet's message.
	_, err = e.m.Mounts(pod, c, nil, false, nil)
	const msg = `volumeMount "data" of container "app": failed to resolve recursive read-only mode: ` +
		`volume "data" requested recursive read-only mode, but it is not supported by the runtime`
	if err == nil || err.Error() != msg {
		t.Errorf("unsupported Enabled: error %v, want %q", err, msg)
	}
	c.VolumeMounts = c.VolumeMounts[1:]
	mounts, err = e.m.Mounts(pod, c, nil, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	want = []got{{true, false}, {true, false}, {true, false}, {false, false}}
	for i, m := range mounts {
		if (got{m.Readonly, m.RecursiveReadOnly}) != want[i] {
			t.Errorf("unsupported: mount %s: readonly %v rro %v, want %+v", m.ContainerPath, m.Readonly, m.RecursiveReadOnly, want[i])
		}
	}
}
