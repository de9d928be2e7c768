package volume

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
)

// snapshot lists every path below dir (symlinks not followed) with its
// content for files and target for symlinks.
func snapshot(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		switch {
		case d.Type()&os.ModeSymlink != 0:
			target, _ := os.Readlink(path)
			out = append(out, rel+" -> "+target)
		case d.Type().IsRegular():
			out = append(out, rel+" = "+mustRead(t, path))
		default:
			out = append(out, rel+"/")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestTearDownOrphans(t *testing.T) {
	requireRoot(t)
	e := newEnv(t)
	outside := t.TempDir()
	mustWrite(t, filepath.Join(outside, "secrets/key"), "K")
	mustWrite(t, filepath.Join(outside, "file"), "F")
	mustWrite(t, filepath.Join(e.root, "not-pods/keepme"), "root dir content")
	outsideBefore := snapshot(t, outside)

	size := resource.MustParse("8Mi")
	newPod := func(uid string) *v1.Pod {
		pod := testPod(uid, emptyDirVolume("data"),
			v1.Volume{Name: "mem", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{Medium: v1.StorageMediumMemory, SizeLimit: &size}}})
		e.cleanupPod(pod.UID)
		if err := e.m.SetUp(t.Context(), pod); err != nil {
			t.Fatal(err)
		}
		// A container planted symlinks to the outside, and has a
		// subPath mount on each volume.
		for _, vol := range []string{"data", "mem"} {
			dir := e.m.volumeDir(pod.UID, pluginEmptyDir, vol)
			mustWrite(t, filepath.Join(dir, "sub/own"), "own")
			for name, target := range map[string]string{"to-dir": filepath.Join(outside, "secrets"), "to-file": filepath.Join(outside, "file"), "to-root": "/"} {
				if err := os.Symlink(target, filepath.Join(dir, "sub", name)); err != nil {
					t.Fatal(err)
				}
			}
			c := &v1.Container{Name: "app", VolumeMounts: []v1.VolumeMount{{Name: vol, MountPath: "/x", SubPath: "sub"}}}
			if _, err := e.m.Mounts(pod, c, nil, false, nil); err != nil {
				t.Fatal(err)
			}
		}
		return pod
	}
	keep := newPod("keep")
	newPod("gone1")
	newPod("gone2")
	// A symlink where a pod directory should be, one where a pod's
	// volumes should be, and a file of the pod beside its volumes (its
	// /etc/hosts): none of them the volumes'.
	if err := os.Symlink(outside, filepath.Join(e.root, "pods/gone3")); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(e.root, "pods/gone1/etc-hosts"), "hosts")
	if err := os.MkdirAll(filepath.Join(e.root, "pods/gone4"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(e.root, "pods/gone4/volumes")); err != nil {
		t.Fatal(err)
	}
	keepBefore := snapshot(t, e.m.podDir(keep.UID))
	if n := len(mountsUnder(t, e.root)); n != 9 {
		t.Fatalf("%d mounts before cleanup, want 9 (a tmpfs and 2 subPath binds per pod)", n)
	}

	pods, err := e.m.Pods()
	if err != nil {
		t.Fatal(err)
	}
	if len(pods) != 4 {
		t.Errorf("Pods() = %v, want the 4 pod directories holding volumes", pods)
	}
	for _, uid := range pods {
		if uid != keep.UID {
			if err := e.m.TearDown(t.Context(), uid); err != nil {
				t.Error(err)
			}
		}
	}

	// The pod directories stay (the pod directory hook's), with what is
	// not the volumes'.
	left := snapshot(t, filepath.Join(e.root, "pods"))
	want := []string{"./", "gone1/", "gone1/etc-hosts = hosts", "gone2/", "gone3 -> " + outside, "gone4/"}
	for _, p := range left {
		if !strings.HasPrefix(p, "keep") && !slices.Contains(want, p) {
			t.Errorf("left behind: %s", p)
		}
	}
	for _, p := range want {
		if !slices.Contains(left, p) {
			t.Errorf("removed: %s", p)
		}
	}
	if got := snapshot(t, outside); !slices.Equal(got, outsideBefore) {
		t.Fatalf("outside changed:\n%q\nwas\n%q", got, outsideBefore)
	}
	if got := snapshot(t, e.m.podDir(keep.UID)); !slices.Equal(got, keepBefore) {
		t.Fatalf("active pod changed:\n%q\nwas\n%q", got, keepBefore)
	}
	if mustRead(t, filepath.Join(e.root, "not-pods/keepme")) != "root dir content" {
		t.Fatal("content beside pods/ changed")
	}
	for _, mi := range mountsUnder(t, e.root) {
		if !strings.HasPrefix(mi.MountPoint, e.m.podDir(keep.UID)+"/") {
			t.Errorf("mount left behind: %s", mi.MountPoint)
		}
	}

	// TearDown of the last pod; a second TearDown and one of an unknown
	// pod are no-ops.
	for range 2 {
		if err := e.m.TearDown(t.Context(), keep.UID); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.m.TearDown(t.Context(), "never-existed"); err != nil {
		t.Fatal(err)
	}
	if n := len(mountsUnder(t, e.root)); n != 0 {
		t.Fatalf("%d mounts left", n)
	}
	if got := snapshot(t, outside); !slices.Equal(got, outsideBefore) {
		t.Fatalf("outside changed by TearDown")
	}
	for _, bad := range []types.UID{"", "..", "a/../../x", "."} {
		if err := e.m.TearDown(t.Context(), bad); err == nil {
			t.Errorf("TearDown(%q) accepted", bad)
		}
	}
}
