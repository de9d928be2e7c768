package volume

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
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
			mounts, err := w.m.Mounts(w.pod, c, tc.env)
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
			if ok, err := isMountPoint(hostPath); err != nil || !ok {
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
		if _, err := w.m.Mounts(w.pod, c, nil); err != nil {
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
	if _, err := w.m.Mounts(w.pod, c, nil); err != nil {
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
// the volume, Mounts is called 1000 times. Every host path it returns must
// show the file inside the volume, never the one outside.
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

	stop := startSwapping(t, [][3]any{{volFD, "a", "alink"}, {aFD, "b", "blink"}})
	const calls = 1000
	var ok, refused int
	for i := range calls {
		c := w.container(fmt.Sprintf("c%d", i), v1.VolumeMount{SubPath: "a/b"})
		mounts, err := w.m.Mounts(w.pod, c, nil)
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
	swaps := stop()
	t.Logf("%d calls: %d safe mounts, %d refused, 0 escaped; %d swaps", calls, ok, refused, swaps)
	if ok == 0 {
		t.Fatal("no call succeeded: the race test tested nothing")
	}

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

// startSwapping starts one goroutine per {dirFD, name, link} that keeps
// exchanging name and link in the directory; the returned stop ends them
// and returns the number of swaps.
func startSwapping(t *testing.T, pairs [][3]any) (stop func() int64) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	var swaps atomic.Int64
	for _, p := range pairs {
		dirFD, name, link := p[0].(int), p[1].(string), p[2].(string)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				// Swap out and back, then let others run: the victim
				// meets both states.
				for range 2 {
					if err := unix.Renameat2(dirFD, name, dirFD, link, unix.RENAME_EXCHANGE); err != nil {
						t.Errorf("exchange %s: %v", name, err)
						return
					}
					swaps.Add(1)
				}
				runtime.Gosched()
			}
		}()
	}
	return func() int64 {
		close(done)
		wg.Wait()
		if swaps.Load() < 100 {
			t.Errorf("only %d swaps: the attackers did not run", swaps.Load())
		}
		return swaps.Load()
	}
}

// TestWalkBeneathSymlinkRace attacks the fallback walk (used where
// openat2 is missing) the same way: every file it opens is the one inside.
func TestWalkBeneathSymlinkRace(t *testing.T) {
	root, outside := t.TempDir(), t.TempDir()
	mustWrite(t, filepath.Join(root, "a/b/marker"), "INSIDE")
	mustWrite(t, filepath.Join(outside, "b/marker"), "OUTSIDE")
	// One symlink climbs out relatively, the other is absolute.
	for name, target := range map[string]string{"alink": strings.Repeat("../", 16) + outside, "a/blink": filepath.Join(outside, "b")} {
		if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	var inside unix.Stat_t
	if err := unix.Stat(filepath.Join(root, "a/b/marker"), &inside); err != nil {
		t.Fatal(err)
	}
	rootFD, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(rootFD)
	aFD, err := unix.Open(filepath.Join(root, "a"), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(aFD)

	stop := startSwapping(t, [][3]any{{rootFD, "a", "alink"}, {aFD, "b", "blink"}})
	var ok int
	for range 1000 {
		fd, err := walkBeneath(rootFD, "a/b/marker", false)
		if err != nil {
			continue
		}
		ok++
		var got unix.Stat_t
		err = unix.Fstat(fd, &got)
		unix.Close(fd)
		if err != nil || got.Dev != inside.Dev || got.Ino != inside.Ino {
			t.Fatalf("walk escaped: %v", err)
		}
	}
	swaps := stop()
	t.Logf("1000 walks: %d inside, 0 escaped; %d swaps", ok, swaps)
	if ok == 0 {
		t.Fatal("no walk succeeded: the race test tested nothing")
	}
}

// TestResolveBeneath runs the same table against openat2 and the
// fallback walk.
func TestResolveBeneath(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	mustWrite(t, filepath.Join(root, "d/f"), "f")
	mustWrite(t, filepath.Join(outside, "x"), "x")
	for name, target := range map[string]string{
		"d/up":    "..",         // the root
		"d/upup":  "../..",      // above the root
		"abs":     outside,      // absolute
		"rel":     "d/f",        // a file inside
		"chain":   "rel",        // a symlink to a symlink
		"loop":    "loop",       // itself
		"dirlink": "d",          // a directory inside
		"magic":   "/proc/self", // a magic link's parent
	} {
		if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	rootFD, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(rootFD)

	tests := []struct {
		rel        string
		noSymlinks bool
		want       string // path below root the result must be, "" for an error
		wantErr    error
	}{
		{rel: "d/f", want: "d/f"},
		{rel: ".", want: "."},
		{rel: "", want: "."},
		{rel: "d/..", want: "."},
		{rel: "..", wantErr: unix.EXDEV},
		{rel: "d/../..", wantErr: unix.EXDEV},
		{rel: "d/up/d/f", want: "d/f"},
		{rel: "d/upup/x", wantErr: unix.EXDEV},
		{rel: "abs/x", wantErr: unix.EXDEV},
		{rel: "abs", wantErr: unix.EXDEV},
		{rel: "rel", want: "d/f"},
		{rel: "chain", want: "d/f"},
		{rel: "dirlink/f", want: "d/f"},
		{rel: "loop", wantErr: unix.ELOOP},
		{rel: "magic/fd", wantErr: unix.EXDEV},
		{rel: "missing", wantErr: unix.ENOENT},
		{rel: "d/f/x", wantErr: unix.ENOTDIR},
		{rel: "d/f", noSymlinks: true, want: "d/f"},
		{rel: "rel", noSymlinks: true, wantErr: unix.ELOOP},
		{rel: "dirlink/f", noSymlinks: true, wantErr: unix.ELOOP},
	}
	impls := map[string]func(int, string, bool) (int, error){
		"openat2": openBeneath,
		"walk":    walkBeneath,
	}
	for implName, open := range impls {
		for _, tc := range tests {
			t.Run(fmt.Sprintf("%s/%s/nosymlinks=%v", implName, tc.rel, tc.noSymlinks), func(t *testing.T) {
				fd, err := open(rootFD, tc.rel, tc.noSymlinks)
				if tc.wantErr != nil {
					if err == nil {
						unix.Close(fd)
					}
					if !errors.Is(err, tc.wantErr) {
						t.Fatalf("error = %v, want %v", err, tc.wantErr)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				defer unix.Close(fd)
				var got, want unix.Stat_t
				if err := unix.Fstat(fd, &got); err != nil {
					t.Fatal(err)
				}
				if err := unix.Stat(filepath.Join(root, tc.want), &want); err != nil {
					t.Fatal(err)
				}
				if got.Ino != want.Ino || got.Dev != want.Dev {
					t.Fatalf("resolved to another file than %s", tc.want)
				}
			})
		}
	}
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
	mounts, err := e.m.Mounts(pod, c, map[string]string{"POD": "p"})
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
