//go:build e2e

package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/pipeline/cri"
	"github.com/nodelet/nodelet/internal/pure/podspec"
)

// imageVolumeRef is an image of data only (no program), stored in the
// local registry by imageVolumeImage.
const imageVolumeRef = "docker.io/e2e/imagevolume:v1"

// imageVolumeImage stores a one-layer image holding data/hello.txt and
// data/nested/deep.txt.
func imageVolumeImage(t *testing.T) {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range []struct {
		name string
		body string
	}{{"data/", ""}, {"data/hello.txt", "hello from the image volume\n"}, {"data/nested/", ""}, {"data/nested/deep.txt", "deep\n"}} {
		h := &tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.body)), Typeflag: tar.TypeReg, ModTime: time.Unix(0, 0)}
		if strings.HasSuffix(f.name, "/") {
			h.Mode, h.Typeflag = 0o755, tar.TypeDir
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(tw, f.body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	data := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err == nil {
		img, err = mutate.ConfigFile(img, &v1.ConfigFile{Architecture: "amd64", OS: "linux",
			RootFS: v1.RootFS{Type: "layers", DiffIDs: mustDiffIDs(t, layer)}})
	}
	if err != nil {
		t.Fatal(err)
	}
	if _, err := shared.store.Put(imageVolumeRef, img); err != nil {
		t.Fatal(err)
	}
}

func mustDiffIDs(t *testing.T, layers ...v1.Layer) []v1.Hash {
	t.Helper()
	var out []v1.Hash
	for _, l := range layers {
		d, err := l.DiffID()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, d)
	}
	return out
}

// imageVolumePod mounts an image volume of ref with policy in container
// main, whole at /vol and its data/nested directory at /sub (subPath).
const imageVolumePod = `apiVersion: v1
kind: Pod
metadata: {name: %s}
spec:
  terminationGracePeriodSeconds: 1
  volumes:
  - name: img
    image: {reference: %q, pullPolicy: %s}
  containers:
  - name: main
    image: busybox:1.35
    command: ["sleep", "3600"]
    volumeMounts:
    - {name: img, mountPath: /vol}
    - {name: img, mountPath: /sub, subPath: data/nested}
`

// An image volume, pulled from the local registry, is mounted read-only
// through the runtime (containerd 2.2's CRI): the container reads the
// image's files, whole and through a subPath, and cannot write there. An
// image missing under pull policy Never leaves its container waiting with
// ErrImageNeverPull, and one the registry does not have with ErrImagePull,
// then ImagePullBackOff, with the kubelet's events; a runtime that cannot
// mount image volumes (Debian's containerd 1.6) gets a container waiting
// with CreateContainerError that says so.
func TestImageVolume(t *testing.T) {
	imageVolumeImage(t)
	v, err := shared.rt.Version(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	unsupported := cri.ImageVolumeSupport(v.GetRuntimeName(), v.GetRuntimeVersion(), true)
	n, dir, _ := lifecycleNodelet(t, "imagevolume")
	writeManifest(t, dir, "vol.yaml", fmt.Sprintf(imageVolumePod, "vol", imageVolumeRef, "IfNotPresent"))
	writeManifest(t, dir, "never.yaml", fmt.Sprintf(imageVolumePod, "never", "docker.io/e2e/imagevolume-absent:v1", "Never"))
	// The local mirror does not have it, and the registry it names is a
	// closed port of 127.0.0.1: the pull fails without leaving the machine.
	const missing = "127.0.0.1:1/e2e/imagevolume-missing:v1"
	writeManifest(t, dir, "missing.yaml", fmt.Sprintf(imageVolumePod, "missing", missing, "IfNotPresent"))
	api := n.api(t)

	waitingWith := func(pod, reason, message string) {
		t.Helper()
		waitPod(t, api, pod, 90*time.Second, "main waiting "+reason, func(p *corev1.Pod) error {
			if p.Status.Phase != corev1.PodPending {
				return fmt.Errorf("phase %s", p.Status.Phase)
			}
			for _, cs := range p.Status.ContainerStatuses {
				if w := cs.State.Waiting; cs.Name == "main" && w != nil && w.Reason == reason && strings.Contains(w.Message, message) {
					return nil
				}
			}
			return fmt.Errorf("container statuses %+v", p.Status.ContainerStatuses)
		})
	}

	waitingWith("never-e2e", "ErrImageNeverPull", `Container image "docker.io/e2e/imagevolume-absent:v1" is not present with pull policy of Never`)
	waitEvent(t, api, 30*time.Second, "ErrImageNeverPull event", podEvent("never-e2e", "Warning", "ErrImageNeverPull",
		`Container image "docker.io/e2e/imagevolume-absent:v1" is not present with pull policy of Never`))
	waitEvent(t, api, 30*time.Second, "missing image's pull failure", podEvent("missing-e2e", "Warning", "Failed",
		fmt.Sprintf("Failed to pull image %q", missing)))
	waitEvent(t, api, 30*time.Second, "missing image's container event", podEvent("missing-e2e", "Warning", "Failed", "Error: ErrImagePull"))
	waitingWith("missing-e2e", "ImagePullBackOff", fmt.Sprintf("Back-off pulling image %q", missing))
	waitEvent(t, api, 30*time.Second, "missing image's back-off", podEvent("missing-e2e", "Normal", "BackOff",
		fmt.Sprintf("Back-off pulling image %q", missing)))
	for _, pod := range []string{"never-e2e", "missing-e2e"} {
		if c, err := runningContainer(context.Background(), shared.rt, pod, "main"); err == nil {
			t.Errorf("%s: container %s runs without its image volume", pod, c.Id)
		}
	}

	if unsupported != nil {
		t.Logf("runtime %s %s: %v", v.GetRuntimeName(), v.GetRuntimeVersion(), unsupported)
		// One event per mount; the status shows the last.
		waitingWith("vol-e2e", "CreateContainerError", fmt.Sprintf(`image volume "img": %v`, unsupported))
		waitEvent(t, api, 30*time.Second, "unsupported runtime", podEvent("vol-e2e", "Warning", "Failed",
			fmt.Sprintf(`Error: image volume "img": %v`, cri.ImageVolumeSupport(v.GetRuntimeName(), v.GetRuntimeVersion(), false))))
		return
	}
	waitContainerRunning(t, 90*time.Second, "vol-e2e", "main")
	if got := execOut(t, "vol-e2e", "main", "cat", "/vol/data/hello.txt"); got != "hello from the image volume\n" {
		t.Errorf("/vol/data/hello.txt: %q", got)
	}
	if got := execOut(t, "vol-e2e", "main", "cat", "/sub/deep.txt"); got != "deep\n" {
		t.Errorf("/sub/deep.txt (subPath data/nested): %q", got)
	}
	out := execOut(t, "vol-e2e", "main", "sh", "-c", "touch /vol/data/new 2>&1 || echo refused; grep -E ' /(vol|sub) ' /proc/mounts")
	if !strings.Contains(out, "refused") || strings.Count(out, " ro,") != 2 {
		t.Errorf("the image volume is not read-only:\n%s", out)
	}
	t.Logf("in the container:\n%s", out)
	waitEvent(t, api, 30*time.Second, "pulled", podEvent("vol-e2e", "Normal", "Pulled", imageVolumeRef))
	// What image garbage collection keeps: the image's ID, as the runtime
	// knows it.
	c, err := runningContainer(context.Background(), shared.rt, "vol-e2e", "main")
	if err != nil {
		t.Fatal(err)
	}
	st, err := shared.rt.ImageStatus(context.Background(), &runtimeapi.ImageSpec{Image: imageVolumeRef})
	if err != nil || st.GetImage() == nil {
		t.Fatalf("image status of %s: %v", imageVolumeRef, err)
	}
	if got := c.GetAnnotations()[podspec.AnnotationImageVolumes]; got != st.GetImage().GetId() {
		t.Errorf("container's %s annotation %q, want the image's ID %s", podspec.AnnotationImageVolumes, got, st.GetImage().GetId())
	}
}
