package volume

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/internal/node/csi"
)

// fakeCSI records the calls of the volume manager and publishes a
// directory (no mount).
type fakeCSI struct {
	last     csi.Source
	calls    []string
	failUp   error
	failDown error
}

func (f *fakeCSI) SetUp(_ context.Context, pod *v1.Pod, dir string, src csi.Source) (csi.SetUpResult, error) {
	f.last = src
	f.calls = append(f.calls, "SetUp "+filepath.Base(dir)+" "+src.Driver+" "+string(src.Mode))
	if f.failUp != nil {
		return csi.SetUpResult{}, f.failUp
	}
	return csi.SetUpResult{}, os.MkdirAll(csi.TargetPath(dir), 0o750)
}

func (f *fakeCSI) TearDown(_ context.Context, dir string) error {
	f.calls = append(f.calls, "TearDown "+filepath.Base(dir))
	if f.failDown != nil {
		return f.failDown
	}
	return os.RemoveAll(dir)
}

func TestCSIVolume(t *testing.T) {
	root := t.TempDir()
	f := &fakeCSI{}
	m := New(root, newFakeObjects(), nil, testLogger(t), WithCSI(f))
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default", UID: "u1"}, Spec: v1.PodSpec{
		Volumes:    []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{CSI: &v1.CSIVolumeSource{Driver: "drv", ReadOnly: ptr(true)}}}},
		Containers: []v1.Container{{Name: "c", VolumeMounts: []v1.VolumeMount{{Name: "data", MountPath: "/data"}}}},
	}}
	if err := m.SetUp(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	mounts, err := m.Mounts(pod, &pod.Spec.Containers[0], nil, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(root, "pods/u1/volumes/kubernetes.io~csi/data/mount")
	if len(mounts) != 1 || mounts[0].HostPath != want || !mounts[0].Readonly {
		t.Errorf("mounts = %v, want %s read-only", mounts, want)
	}

	// The driver cannot unpublish: nothing is removed, the error says why.
	f.failDown = errors.New("driver name drv not found in the list of registered CSI drivers")
	if err := m.TearDown(t.Context(), pod.UID); err == nil || !strings.Contains(err.Error(), "not found in the list") {
		t.Fatalf("TearDown: %v", err)
	}
	if _, err := os.Stat(want); err != nil {
		t.Errorf("the volume went without its driver: %v", err)
	}
	f.failDown = nil
	if err := m.TearDown(t.Context(), pod.UID); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(f.calls, []string{"SetUp data drv Ephemeral", "TearDown data", "TearDown data"}) {
		t.Errorf("calls %q", f.calls)
	}
	if _, err := os.Lstat(filepath.Join(root, "pods/u1/volumes")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("volumes left: %v", err)
	}
}

func TestCSIVolumeWithoutDrivers(t *testing.T) {
	m := New(t.TempDir(), newFakeObjects(), nil, testLogger(t))
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "u1"}, Spec: v1.PodSpec{
		Volumes: []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{CSI: &v1.CSIVolumeSource{Driver: "drv"}}}}}}
	if err := m.SetUp(t.Context(), pod); err == nil {
		t.Fatal("SetUp of a csi volume without CSI succeeded")
	}
}
