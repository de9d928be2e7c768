package volume

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/internal/base/beneath"
	"github.com/nodelet/nodelet/internal/pure/envvars"
)

// EnvFile reads the file a container wrote into an emptyDir, and nothing a
// container could point it at instead.
func TestEnvFile(t *testing.T) {
	e := newEnv(t)
	pod := testPod("uid-env", emptyDirVolume("config"),
		v1.Volume{Name: "host", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: e.root}}},
		emptyDirVolume("unset"))
	if err := e.m.SetUp(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	dir := e.m.volumeDir(pod.UID, pluginEmptyDir, "config")
	if err := os.Remove(e.m.volumeDir(pod.UID, pluginEmptyDir, "unset")); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(e.root, "host-secret")
	mustWrite(t, secret, "S='host secret'\n")
	mustWrite(t, filepath.Join(dir, "config.env"), "A='1'\n")
	mustWrite(t, filepath.Join(dir, "sub/deep.env"), "B='2'\n")
	mustWrite(t, filepath.Join(dir, "big.env"), strings.Repeat("#", 101))
	mustWrite(t, filepath.Join(dir, "limit.env"), strings.Repeat("#", 100))
	for name, target := range map[string]string{
		"abs.env":    secret,                    // absolute: outside
		"escape.env": "../../../../host-secret", // climbs out
		"inside.env": "config.env",              // stays inside, still refused
	} {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Dir(secret), filepath.Join(dir, "linkdir")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		volume, path string
		want         string
		is           error  // errors.Is
		err          string // the message, when is is nil
	}{
		{volume: "config", path: "config.env", want: "A='1'\n"},
		{volume: "config", path: "sub/deep.env", want: "B='2'\n"},
		{volume: "config", path: "/config.env", want: "A='1'\n"},
		{volume: "config", path: "sub/../config.env", want: "A='1'\n"},
		{volume: "config", path: "../../config.env", want: "A='1'\n"}, // lexically inside
		{volume: "config", path: "limit.env", want: strings.Repeat("#", 100)},
		{volume: "config", path: "big.env", err: "the file is larger than 100 bytes"},
		{volume: "config", path: "missing.env", is: os.ErrNotExist},
		{volume: "config", path: "abs.env", is: beneath.ErrSymlink},
		{volume: "config", path: "escape.env", is: beneath.ErrSymlink},
		{volume: "config", path: "inside.env", is: beneath.ErrSymlink},
		{volume: "config", path: "linkdir/host-secret", is: beneath.ErrSymlink},
		{volume: "config", path: "fifo", is: beneath.ErrNotRegular},
		{volume: "config", path: "sub", is: beneath.ErrNotRegular},
		{volume: "config", path: "", is: beneath.ErrNotRegular},
		{volume: "nope", path: "config.env", is: envvars.ErrVolumeNotFound},
		{volume: "unset", path: "config.env", is: envvars.ErrVolumeNotFound},
		{volume: "host", path: "host-secret", err: `volume "host" is a hostPath volume: env files are read from emptyDir volumes only`},
	} {
		t.Run(tc.volume+"/"+tc.path, func(t *testing.T) {
			got, err := e.m.EnvFile(pod, tc.volume, tc.path, 100)
			switch {
			case tc.is != nil:
				if !errors.Is(err, tc.is) {
					t.Fatalf("err = %v, want one wrapping %v", err, tc.is)
				}
				if strings.Contains(err.Error(), e.root) {
					t.Errorf("error %q names the host path", err)
				}
			case tc.err != "":
				if err == nil || err.Error() != tc.err {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
			case err != nil:
				t.Fatal(err)
			case string(got) != tc.want:
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}
