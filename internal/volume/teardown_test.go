package volume

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
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
			if _, err := e.m.Mounts(pod, c, nil, false); err != nil {
				t.Fatal(err)
			}
		}
		return pod
	}
	keep := newPod("keep")
	newPod("gone1")
	newPod("gone2")
	// A symlink where a pod directory should be.
	if err := os.Symlink(outside, filepath.Join(e.root, "pods/gone3")); err != nil {
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
		t.Errorf("Pods() = %v, want the 4 pod directories", pods)
	}
	for _, uid := range pods {
		if uid != keep.UID {
			if err := e.m.TearDown(t.Context(), uid); err != nil {
				t.Error(err)
			}
		}
	}

	entries, err := os.ReadDir(filepath.Join(e.root, "pods"))
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, en := range entries {
		left = append(left, en.Name())
	}
	if !slices.Equal(left, []string{"keep"}) {
		t.Fatalf("pods left: %v, want [keep]", left)
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
		if !strings.HasPrefix(mi.mountPoint, e.m.podDir(keep.UID)+"/") {
			t.Errorf("mount left behind: %s", mi.mountPoint)
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

// TestRemoveAllAtStopsAtMounts: removal never descends into a mount that
// is still there (a tmpfs here, a hostPath bind in real life).
func TestRemoveAllAtStopsAtMounts(t *testing.T) {
	requireRoot(t)
	base := t.TempDir()
	mnt := filepath.Join(base, "tree/mnt")
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(mnt, unix.MNT_DETACH) })
	mustWrite(t, filepath.Join(mnt, "precious"), "P")
	mustWrite(t, filepath.Join(base, "tree/plain"), "x")

	baseFD, err := unix.Open(base, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(baseFD)
	key, err := mountKeyOf(baseFD)
	if err != nil {
		t.Fatal(err)
	}
	err = removeAllAt(baseFD, "tree", filepath.Join(base, "tree"), key)
	if err == nil || !strings.Contains(err.Error(), "on another mount") {
		t.Fatalf("removeAllAt() = %v, want a refusal", err)
	}
	if mustRead(t, filepath.Join(mnt, "precious")) != "P" {
		t.Fatal("content of the mount was removed")
	}
	if _, err := os.Stat(filepath.Join(base, "tree/plain")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("plain file beside the mount: %v, want removed", err)
	}
}
