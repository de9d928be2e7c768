//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/managed/registry"
	"github.com/nodelet/nodelet/internal/pipeline/cri"
)

// Image garbage collection by disk usage, on a managed node (its own
// containerd, so no other test's images are at stake): with the high
// threshold set below the image filesystem's current usage, an image no
// container uses is removed, while the sandbox image and the image of a
// running pod stay; the removal is counted and, the disk still over the
// low threshold, a FreeDiskSpaceFailed node event tells it.
func TestImageGCByDiskUsage(t *testing.T) {
	port := freePort(t)
	m := startManaged(t, "imagegc", "nle2eig", "10.65.0.0/24", "--port", port, "--address", "127.0.0.1")
	writeManifest(t, m.manifests, "sleeper.yaml", fmt.Sprintf(sleeperPod, "imagegc"))
	ctx := context.Background()
	var running *runtimeapi.Container
	eventually(t, 90*time.Second, "pod running", func() (err error) {
		running, err = runningContainer(ctx, m.rt, "imagegc-e2e", "main")
		return err
	})

	// An image no container uses, pulled through CRI.
	const unusedRef = "example.com/e2e/imagegc-unused:v1"
	base, err := shared.registryImage(registry.BusyboxRef)
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.Config(base, withCmd(base, []string{"true"}))
	if err != nil {
		t.Fatal(err)
	}
	unusedID := importAndPull(ctx, t, m, unusedRef, img)
	pause := imageID(t, m.rt, registry.PauseRef)
	if pause == "" || running.ImageRef == "" {
		t.Fatalf("pause image %q, running container's image %q: want both", pause, running.ImageRef)
	}

	// Thresholds below the current usage of the image filesystem.
	usage := imageFsUsagePercent(t, m.rt)
	high := max(1, usage-5)
	t.Logf("image filesystem %d%% used: --image-gc-high-threshold %d", usage, high)
	if err := m.n.signalAndWait(t, syscall.SIGTERM, 60*time.Second); err != nil {
		t.Fatalf("nodelet exit: %v\n%s", err, m.n.stderr.String())
	}
	m.n = startNodelet(t, append(m.args, "--image-gc-high-threshold", strconv.Itoa(high),
		"--image-gc-low-threshold", strconv.Itoa(high-1), "--minimum-image-gc-age", "0s")...)
	rt := dialManaged(t, m)

	// The runtime removes an image's references one at a time: its tag
	// can be gone while its ID still resolves, until RemoveImage returns.
	eventually(t, 60*time.Second, "unused image removed", func() error {
		if id := imageID(t, rt, unusedRef); id != "" {
			return fmt.Errorf("%s (%s) still there", unusedRef, id)
		}
		if imageID(t, rt, unusedID) != "" {
			return fmt.Errorf("image %s still there", unusedID)
		}
		return nil
	})
	if imageID(t, rt, pause) == "" {
		t.Errorf("sandbox image %s removed", registry.PauseRef)
	}
	if imageID(t, rt, running.ImageRef) == "" {
		t.Errorf("image %s of the running container removed", running.ImageRef)
	}
	if c, err := runningContainer(ctx, rt, "imagegc-e2e", "main"); err != nil || c.Id != running.Id {
		t.Errorf("pod's container %v (%v), want %s still running", c, err, running.Id)
	}
	api := m.n.api(t)
	eventually(t, 30*time.Second, "the removal counted and the node event recorded", func() error {
		n, err := api.metric("/metrics", "kubelet_image_garbage_collected_total", map[string]string{"reason": "space"})
		if err != nil || n < 1 {
			return fmt.Errorf("kubelet_image_garbage_collected_total{reason=space} = %v (%v), want at least 1", n, err)
		}
		evs, err := api.events()
		if err != nil {
			return err
		}
		for _, e := range evs {
			if e.Reason == "FreeDiskSpaceFailed" && e.Type == "Warning" && strings.Contains(e.Message, "Insufficient free disk space") {
				return nil
			}
		}
		return fmt.Errorf("no FreeDiskSpaceFailed event in %d events", len(evs))
	})
}

// imageID is the ID of the image ref names on rt; "" when it has none.
func imageID(t *testing.T, rt *cri.Client, ref string) string {
	t.Helper()
	st, err := rt.ImageStatus(context.Background(), &runtimeapi.ImageSpec{Image: ref})
	if err != nil {
		t.Fatalf("image status %s: %v", ref, err)
	}
	return st.GetImage().GetId()
}

// imageFsUsagePercent is the image filesystem's usage as the kubelet
// computes it: 100 - available*100/capacity.
func imageFsUsagePercent(t *testing.T, rt *cri.Client) int {
	t.Helper()
	resp, err := rt.ImageFsInfo(context.Background())
	if err != nil || len(resp.GetImageFilesystems()) == 0 {
		t.Fatalf("image filesystem: %v %v", resp, err)
	}
	var st syscall.Statfs_t
	mp := resp.GetImageFilesystems()[0].GetFsId().GetMountpoint()
	if err := syscall.Statfs(mp, &st); err != nil {
		t.Fatal(err)
	}
	return 100 - int(st.Bavail*100/st.Blocks)
}

// dialManaged connects to the managed node's containerd once the nodelet
// started again has it answering.
func dialManaged(t *testing.T, m *managedNode) *cri.Client {
	t.Helper()
	var rt *cri.Client
	eventually(t, 60*time.Second, "managed containerd answers again", func() (err error) {
		rt, err = cri.Dial(context.Background(), m.cfg.Endpoint(), cri.DefaultTimeouts(), nil)
		return err
	})
	t.Cleanup(func() { rt.Close() })
	return rt
}

// importAndPull stores img under ref in the managed node's image store
// (`nodelet images import`) and pulls it through CRI, as a user on an
// air-gapped machine would; it returns the image's ID.
func importAndPull(ctx context.Context, t *testing.T, m *managedNode, ref string, img v1.Image) string {
	t.Helper()
	tag, err := name.NewTag(ref)
	if err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(shared.work, strings.NewReplacer("/", "_", ":", "_").Replace(ref)+".tar")
	if err := tarball.WriteToFile(archive, tag, img); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(archive)
	if out, err := exec.Command(shared.nodelet, "images", "import", archive, "--root-dir", m.root).CombinedOutput(); err != nil {
		t.Fatalf("import: %v\n%s", err, out)
	}
	id, err := m.rt.PullImage(ctx, &runtimeapi.ImageSpec{Image: ref}, nil, nil)
	if err != nil {
		t.Fatalf("pull %s: %v", ref, err)
	}
	return id
}
