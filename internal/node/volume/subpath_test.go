package volume

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/internal/base/mountinfo"
	"github.com/nodelet/nodelet/internal/base/testutil"
)

// subPathWorld is a pod with an emptyDir "vol" whose directory holds:
//
//	dir/marker         "inside"
//	data/file          "inside-file"
//	alias -> dir       (relative, stays inside)
//	evil -> <outside>  (absolute, leads out)
//	evil2 -> ../../../../../../../../..  (relative, climbs out)
//	root -> /
//	link -> <outside>/secret  (final component leading out)
//
// and a directory outside the volume with "secret" and "dir/marker".
type subPathWorld struct {
	*env
	pod     *v1.Pod
	vol     string // the volume directory
	outside string
}

func newSubPathWorld(t *testing.T) *subPathWorld {
	t.Helper()
	requireRoot(t)
	w := &subPathWorld{env: newEnv(t), outside: t.TempDir()}
	w.pod = testPod("uid-subpath", emptyDirVolume("vol"))
	w.cleanupPod(w.pod.UID)
	if err := w.m.SetUp(t.Context(), w.pod); err != nil {
		t.Fatal(err)
	}
	w.vol = w.m.volumeDir(w.pod.UID, pluginEmptyDir, "vol")
	mustWrite(t, filepath.Join(w.vol, "dir/marker"), "inside")
	mustWrite(t, filepath.Join(w.vol, "data/file"), "inside-file")
	mustWrite(t, filepath.Join(w.outside, "secret"), "OUTSIDE")
	mustWrite(t, filepath.Join(w.outside, "dir/marker"), "OUTSIDE")
	for name, target := range map[string]string{
		"alias": "dir",
		"evil":  w.outside,
		"evil2": strings.Repeat("../", 12),
		"root":  "/",
		"link":  filepath.Join(w.outside, "secret"),
	} {
		if err := os.Symlink(target, filepath.Join(w.vol, name)); err != nil {
			t.Fatal(err)
		}
	}
	return w
}

func (w *subPathWorld) container(name string, vm v1.VolumeMount) *v1.Container {
	vm.Name = "vol"
	vm.MountPath = "/mnt"
	return &v1.Container{Name: name, VolumeMounts: []v1.VolumeMount{vm}}
}

func TestSubPathSafety(t *testing.T) {
	w := newSubPathWorld(t)
	tests := []struct {
		name    string
		vm      v1.VolumeMount
		env     map[string]string
		wantErr string
		check   func(t *testing.T, hostPath string) // for the good cases
	}{
		{name: "directory", vm: v1.VolumeMount{SubPath: "dir"},
			check: wantFile("marker", "inside")},
		{name: "file", vm: v1.VolumeMount{SubPath: "data/file"},
			check: wantFile("", "inside-file")},
		{name: "symlink staying inside", vm: v1.VolumeMount{SubPath: "alias"},
			check: wantFile("marker", "inside")},
		{name: "dot elements", vm: v1.VolumeMount{SubPath: "./dir/."},
			check: wantFile("marker", "inside")},
		{name: "missing directories are created with the volume's mode", vm: v1.VolumeMount{SubPath: "new/deep"},
			check: func(t *testing.T, hostPath string) {
				fi, err := os.Stat(filepath.Join(w.vol, "new/deep"))
				if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o777 {
					t.Fatalf("created subPath: %v, %v", fi, err)
				}
				mustWrite(t, filepath.Join(hostPath, "through-mount"), "x")
				if got := mustRead(t, filepath.Join(w.vol, "new/deep/through-mount")); got != "x" {
					t.Fatalf("mount does not show the subPath directory")
				}
			}},
		{name: "subPathExpr expanded with env", vm: v1.VolumeMount{SubPathExpr: "$(POD_NAME)/logs"},
			env: map[string]string{"POD_NAME": "web-0"},
			check: func(t *testing.T, hostPath string) {
				if fi, err := os.Stat(filepath.Join(w.vol, "web-0/logs")); err != nil || !fi.IsDir() {
					t.Fatalf("subPathExpr directory: %v, %v", fi, err)
				}
			}},
		{name: "subPathExpr escape", vm: v1.VolumeMount{SubPathExpr: "dir$$x"},
			check: func(t *testing.T, _ string) {
				if _, err := os.Stat(filepath.Join(w.vol, "dir$x")); err != nil {
					t.Fatal(err)
				}
			}},
		{name: "subPathExpr with a missing variable", vm: v1.VolumeMount{SubPathExpr: "$(NOPE)/x"},
			wantErr: "missing value for NOPE"},
		{name: "subPathExpr expanding to dot-dot", vm: v1.VolumeMount{SubPathExpr: "$(UP)/secret"},
			env: map[string]string{"UP": ".."}, wantErr: "must not contain '..'"},
		{name: "dot-dot", vm: v1.VolumeMount{SubPath: "../../.."}, wantErr: "must not contain '..'"},
		{name: "dot-dot in the middle", vm: v1.VolumeMount{SubPath: "dir/../../x"}, wantErr: "must not contain '..'"},
		{name: "absolute", vm: v1.VolumeMount{SubPath: "/etc"}, wantErr: "must not be an absolute path"},
		{name: "absolute symlink component leading out", vm: v1.VolumeMount{SubPath: "evil/dir"}, wantErr: "outside of the volume"},
		{name: "relative symlink component climbing out", vm: v1.VolumeMount{SubPath: "evil2/etc"}, wantErr: "outside of the volume"},
		{name: "symlink to / as component", vm: v1.VolumeMount{SubPath: "root/etc"}, wantErr: "outside of the volume"},
		{name: "final symlink leading out", vm: v1.VolumeMount{SubPath: "link"}, wantErr: "outside of the volume"},
		{name: "final symlink to a directory outside", vm: v1.VolumeMount{SubPath: "evil"}, wantErr: "outside of the volume"},
		{name: "missing directory below a symlink leading out", vm: v1.VolumeMount{SubPath: "evil/new"}, wantErr: "outside of the volume"},
		{name: "subPath and subPathExpr", vm: v1.VolumeMount{SubPath: "a", SubPathExpr: "b"}, wantErr: "mutually exclusive"},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := w.container(fmt.Sprintf("c%d", i), tc.vm)
			mounts, err := w.m.Mounts(w.pod, c, tc.env, false, nil)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Mounts() error = %v, want %q", err, tc.wantErr)
				}
				if _, err := os.Stat(filepath.Join(w.outside, "new")); err == nil {
					t.Fatal("a directory was created outside the volume")
				}
				return
			}
			if err != nil {
				t.Fatalf("Mounts(): %v", err)
			}
			hostPath := mounts[0].HostPath
			want := w.m.subPathTarget(w.pod.UID, "vol", c.Name, 0)
			if hostPath != want {
				t.Fatalf("host path = %s, want %s", hostPath, want)
			}
			if ok, err := mountinfo.IsMountPoint(hostPath); err != nil || !ok {
				t.Fatalf("host path is not a mount point: %v %v", ok, err)
			}
			tc.check(t, hostPath)
		})
	}
	if mustRead(t, filepath.Join(w.outside, "secret")) != "OUTSIDE" {
		t.Fatal("outside file changed")
	}
}

func wantFile(rel, content string) func(t *testing.T, hostPath string) {
	return func(t *testing.T, hostPath string) {
		t.Helper()
		if got := mustRead(t, filepath.Join(hostPath, rel)); got != content {
			t.Fatalf("content through the mount = %q, want %q", got, content)
		}
	}
}

// TestSubPathMountIsReused checks that a second Mounts call for the same
// container keeps the bind mount when the subPath still resolves to the
// same file, and replaces it when it resolves elsewhere.
func TestSubPathMountIsReused(t *testing.T) {
	w := newSubPathWorld(t)
	c := w.container("app", v1.VolumeMount{SubPath: "dir"})
	for range 3 {
		if _, err := w.m.Mounts(w.pod, c, nil, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	target := w.m.subPathTarget(w.pod.UID, "vol", "app", 0)
	if n := len(mountsUnder(t, target)); n != 1 {
		t.Fatalf("%d mounts on the target after 3 calls, want 1", n)
	}
	// The directory is replaced by another one: the mount follows.
	if err := os.Rename(filepath.Join(w.vol, "dir"), filepath.Join(w.vol, "old")); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(w.vol, "dir/marker"), "new")
	if _, err := w.m.Mounts(w.pod, c, nil, false, nil); err != nil {
		t.Fatal(err)
	}
	if got := mustRead(t, filepath.Join(target, "marker")); got != "new" {
		t.Fatalf("marker = %q after the subPath changed, want new", got)
	}
	if n := len(mountsUnder(t, target)); n != 1 {
		t.Fatalf("%d mounts on the target, want 1", n)
	}
}

// TestSubPathSymlinkRace: while two goroutines keep exchanging (renameat2
// RENAME_EXCHANGE, so the name always exists) a directory component and
// the final component of the subPath with symlinks to a directory outside
// the volume, Mounts is called 1000 times, each call once both attackers
// have made progress. Every host path it returns must show the file inside
// the volume, never the one outside. Then each of the four states is
// checked on its own, whatever the calls under attack happened to meet.
func TestSubPathSymlinkRace(t *testing.T) {
	w := newSubPathWorld(t)
	mustWrite(t, filepath.Join(w.vol, "a/b/marker"), "INSIDE")
	mustWrite(t, filepath.Join(w.outside, "b/marker"), "OUTSIDE")
	if err := os.Symlink(w.outside, filepath.Join(w.vol, "alink")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(w.outside, "b"), filepath.Join(w.vol, "a/blink")); err != nil {
		t.Fatal(err)
	}
	var inside unix.Stat_t
	if err := unix.Stat(filepath.Join(w.vol, "a/b/marker"), &inside); err != nil {
		t.Fatal(err)
	}
	// The real "a", held open so the second attacker works inside it
	// whatever "a" names at the moment.
	aFD, err := unix.Open(filepath.Join(w.vol, "a"), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(aFD)
	volFD, err := unix.Open(w.vol, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(volFD)

	att := startAttackers(t, []swapPair{{volFD, "a", "alink"}, {aFD, "b", "blink"}})
	const calls = 1000
	var ok, refused int
	for i := range calls {
		att.WaitProgress()
		c := w.container(fmt.Sprintf("c%d", i), v1.VolumeMount{SubPath: "a/b"})
		mounts, err := w.m.Mounts(w.pod, c, nil, false, nil)
		if err != nil {
			refused++
			continue
		}
		ok++
		// The returned path is a bind mount: the attackers can no longer
		// change what it shows.
		var got unix.Stat_t
		marker := filepath.Join(mounts[0].HostPath, "marker")
		if err := unix.Stat(marker, &got); err != nil {
			t.Fatalf("call %d: stat %s: %v", i, marker, err)
		}
		if got.Dev != inside.Dev || got.Ino != inside.Ino || mustRead(t, marker) != "INSIDE" {
			t.Fatalf("call %d: %s escaped the volume (content %q)", i, mounts[0].HostPath, mustRead(t, marker))
		}
	}
	att.Stop()
	t.Logf("%d calls under attack: %d safe mounts, %d refused, 0 escaped", calls, ok, refused)
	// Which state each call met is up to the scheduler, so neither count
	// is asserted; the states themselves are covered one by one here.
	for _, state := range []struct{ a, b bool }{{false, false}, {true, false}, {false, true}, {true, true}} {
		setSwapped(t, volFD, "a", "alink", state.a)
		setSwapped(t, aFD, "b", "blink", state.b)
		c := w.container(fmt.Sprintf("s%v%v", state.a, state.b), v1.VolumeMount{SubPath: "a/b"})
		mounts, err := w.m.Mounts(w.pod, c, nil, false, nil)
		if state.a || state.b {
			if err == nil || !strings.Contains(err.Error(), "outside of the volume") {
				t.Fatalf("a swapped=%v, b swapped=%v: Mounts() = %v, %v; want refused", state.a, state.b, mounts, err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if got := mustRead(t, filepath.Join(mounts[0].HostPath, "marker")); got != "INSIDE" {
			t.Fatalf("unattacked subPath shows %q", got)
		}
	}
	setSwapped(t, volFD, "a", "alink", false)
	setSwapped(t, aFD, "b", "blink", false)

	// Put things back, then tear down: every bind mount goes, nothing
	// outside is touched.
	if err := w.m.TearDown(t.Context(), w.pod.UID); err != nil {
		t.Fatal(err)
	}
	if n := mountsUnder(t, w.root); len(n) != 0 {
		t.Fatalf("%d mounts left after TearDown", len(n))
	}
	if mustRead(t, filepath.Join(w.outside, "b/marker")) != "OUTSIDE" {
		t.Fatal("outside content changed")
	}
}

// setSwapped exchanges name and link in dir if name is (swapped) or is not
// (not swapped) the symlink, so that it ends up as asked.
func setSwapped(t *testing.T, dir int, name, link string, swapped bool) {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		t.Fatal(err)
	}
	if isLink := st.Mode&unix.S_IFMT == unix.S_IFLNK; isLink != swapped {
		if err := unix.Renameat2(dir, name, dir, link, unix.RENAME_EXCHANGE); err != nil {
			t.Fatal(err)
		}
	}
}

// swapPair is one exchange: name and link in the directory open as dir.
type swapPair struct {
	dir        int
	name, link string
}

// startAttackers keeps exchanging (renameat2 RENAME_EXCHANGE) every pair's
// names, out and back.
func startAttackers(t *testing.T, pairs []swapPair) *testutil.Attackers {
	attacks := make([]func() error, len(pairs))
	for i, p := range pairs {
		attacks[i] = func() error {
			if err := unix.Renameat2(p.dir, p.name, p.dir, p.link, unix.RENAME_EXCHANGE); err != nil {
				return fmt.Errorf("exchange %s: %w", p.name, err)
			}
			return nil
		}
	}
	return testutil.StartAttackers(t, attacks...)
}

// TestHostPathSubPath: a subPath of a hostPath volume is created with the
// host directory's mode and bind-mounted like any other.
func TestHostPathSubPath(t *testing.T) {
	requireRoot(t)
	e := newEnv(t)
	host := filepath.Join(t.TempDir(), "host")
	pod := testPod("uid-hsp", v1.Volume{Name: "host", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{
		Path: host, Type: ptr(v1.HostPathDirectoryOrCreate)}}})
	e.cleanupPod(pod.UID)
	if err := e.m.SetUp(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	c := &v1.Container{Name: "app", VolumeMounts: []v1.VolumeMount{{Name: "host", MountPath: "/x", SubPathExpr: "logs/$(POD)", ReadOnly: true}}}
	mounts, err := e.m.Mounts(pod, c, map[string]string{"POD": "p"}, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if m := mounts[0]; m.HostPath != e.m.subPathTarget(pod.UID, "host", "app", 0) || !m.Readonly {
		t.Fatalf("mount = %v", m)
	}
	if fi, err := os.Stat(filepath.Join(host, "logs/p")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("created subPath: %v %v", fi, err)
	}
	mustWrite(t, filepath.Join(host, "logs/p/f"), "via host")
	if got := mustRead(t, filepath.Join(mounts[0].HostPath, "f")); got != "via host" {
		t.Fatalf("through the mount: %q", got)
	}
	if err := e.m.TearDown(t.Context(), pod.UID); err != nil {
		t.Fatal(err)
	}
	if mustRead(t, filepath.Join(host, "logs/p/f")) != "via host" {
		t.Fatal("TearDown touched the host path")
	}
}
