package volume

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// An image volume has nothing on the node: SetUp leaves no directory, and
// every volumeMount of it is a mount by the runtime of the image the
// runtime manager pulled, read-only whatever the volumeMount says, its
// subPath (subPathExpr expanded) resolved by the runtime inside the image.
func TestImageVolumeMounts(t *testing.T) {
	e := newEnv(t)
	pod := testPod("uid-image",
		v1.Volume{Name: "tools", VolumeSource: v1.VolumeSource{Image: &v1.ImageVolumeSource{
			Reference: "example.com/tools:1", PullPolicy: v1.PullIfNotPresent}}},
		emptyDirVolume("scratch"),
	)
	e.cleanupPod(pod.UID)
	if err := e.m.SetUp(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(filepath.Join(e.m.podDir(pod.UID), volumesDirName))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range entries {
		if d.Name() != pluginEmptyDir {
			t.Errorf("SetUp of an image volume made %s in the pod's volumes", d.Name())
		}
	}
	pulled := map[string]*runtimeapi.ImageSpec{"tools": {
		Image: "sha256:abc", UserSpecifiedImage: "example.com/tools:1", RuntimeHandler: "kata",
		Annotations: map[string]string{"a": "b"}}}
	hostToContainer := v1.MountPropagationHostToContainer
	base := v1.VolumeMount{Name: "tools", MountPath: "/tools"}
	for _, tc := range []struct {
		name   string
		mutate func(*v1.VolumeMount)
		env    map[string]string
		want   func(*runtimeapi.Mount) bool
	}{
		{"plain", func(*v1.VolumeMount) {}, nil, func(m *runtimeapi.Mount) bool {
			return m.ContainerPath == "/tools" && m.HostPath == "" && m.Readonly && m.ImageSubPath == ""
		}},
		{"readOnly false is still read-only", func(vm *v1.VolumeMount) { vm.ReadOnly = false }, nil,
			func(m *runtimeapi.Mount) bool { return m.Readonly }},
		{"relative mountPath", func(vm *v1.VolumeMount) { vm.MountPath = "tools" }, nil,
			func(m *runtimeapi.Mount) bool { return m.ContainerPath == "/tools" }},
		{"subPath", func(vm *v1.VolumeMount) { vm.SubPath = "etc/conf" }, nil,
			func(m *runtimeapi.Mount) bool { return m.ImageSubPath == "etc/conf" && m.HostPath == "" }},
		{"subPathExpr", func(vm *v1.VolumeMount) { vm.SubPathExpr = "dir/$(POD)" }, map[string]string{"POD": "p1"},
			func(m *runtimeapi.Mount) bool { return m.ImageSubPath == "dir/p1" }},
		{"propagation", func(vm *v1.VolumeMount) { vm.MountPropagation = &hostToContainer }, nil,
			func(m *runtimeapi.Mount) bool {
				return m.Propagation == runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vm := base
			tc.mutate(&vm)
			c := &v1.Container{Name: "app", VolumeMounts: []v1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}, vm}}
			mounts, err := e.m.Mounts(pod, c, tc.env, false, pulled)
			if err != nil {
				t.Fatal(err)
			}
			if len(mounts) != 2 || mounts[0].ContainerPath != "/scratch" || mounts[0].Image != nil {
				t.Fatalf("mounts %v: want the emptyDir first, without an image", mounts)
			}
			m := mounts[1]
			img := m.GetImage()
			if img.GetImage() != "sha256:abc" || img.GetUserSpecifiedImage() != "example.com/tools:1" ||
				img.GetRuntimeHandler() != "kata" || img.GetAnnotations()["a"] != "b" {
				t.Errorf("image %v", img)
			}
			if img == pulled["tools"] {
				t.Error("the mount shares the caller's ImageSpec")
			}
			if !tc.want(m) {
				t.Errorf("mount %v", m)
			}
		})
	}
	// The subPath rules are those of every volume, and a volume whose
	// image was not pulled is an error, not a mount without an image.
	for _, tc := range []struct {
		vm     v1.VolumeMount
		images map[string]*runtimeapi.ImageSpec
		want   string
	}{
		{v1.VolumeMount{Name: "tools", MountPath: "/t", SubPath: "../etc"}, pulled, "must not contain '..'"},
		{v1.VolumeMount{Name: "tools", MountPath: "/t", SubPath: "/etc"}, pulled, "must not be an absolute path"},
		{v1.VolumeMount{Name: "tools", MountPath: "/t", SubPathExpr: "$(UNSET)"}, pulled, "subPathExpr"},
		{v1.VolumeMount{Name: "tools", MountPath: "/t"}, nil, `image volume "tools": its image "example.com/tools:1" has not been pulled`},
	} {
		c := &v1.Container{Name: "app", VolumeMounts: []v1.VolumeMount{tc.vm}}
		if _, err := e.m.Mounts(pod, c, nil, false, tc.images); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want %q", tc.vm, err, tc.want)
		}
	}
}
