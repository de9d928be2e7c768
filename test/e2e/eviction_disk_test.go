//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/types"
	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/registry"
	"github.com/nodelet/nodelet/internal/server"
)

const diskPod = `apiVersion: v1
kind: Pod
metadata: {name: %s}
spec:
  terminationGracePeriodSeconds: 1%s
  containers:
  - name: main
    image: busybox:1.35
    command: ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"]
    volumeMounts: [{name: data, mountPath: /data}]
  volumes:
  - name: data
    emptyDir: {}
`

// Disk pressure on a managed node whose root directory (its containerd's
// images included) is a 512 MiB tmpfs of the test's own, so that the
// thresholds can be exact: first the node's disk threshold is met by an
// unused 64 MiB image, which the eviction manager removes (reclaiming the
// node's own garbage first) without evicting anything; then a pod fills
// its emptyDir past the threshold, nothing of the node's is left to
// reclaim, and that pod is evicted (Failed, Evicted, ephemeral-storage)
// while the critical pod beside it keeps running.
func TestEvictionDiskPressure(t *testing.T) {
	const node = "evictdisk"
	root := filepath.Join(shared.work, node)
	if err := os.MkdirAll(root, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", root, "tmpfs", 0, "size=512m,mode=0700"); err != nil {
		t.Fatal(err)
	}
	// Registered first, so it runs after the managed node's clean-up.
	t.Cleanup(func() {
		if err := syscall.Unmount(root, syscall.MNT_DETACH); err != nil {
			t.Logf("unmount %s: %v", root, err)
		}
	})
	port := freePort(t)
	m := startManaged(t, node, "nle2eev", "10.62.0.0/24", "--port", port, "--address", "127.0.0.1")
	writeManifest(t, m.manifests, "filler.yaml", fmt.Sprintf(diskPod, "filler", ""))
	writeManifest(t, m.manifests, "keeper.yaml", fmt.Sprintf(diskPod, "keeper", "\n  priorityClassName: system-node-critical"))
	ctx := context.Background()
	filler, err := waitManagedRunning(ctx, t, m, "filler-e2e")
	if err != nil {
		t.Fatal(err)
	}
	keeper, err := waitManagedRunning(ctx, t, m, "keeper-e2e")
	if err != nil {
		t.Fatal(err)
	}

	// A 64 MiB image no container uses (random, so it does not compress).
	const unusedRef = "example.com/e2e/evict-unused:v1"
	base, err := shared.registryImage(registry.BusyboxRef)
	if err != nil {
		t.Fatal(err)
	}
	layer, err := random.Layer(64<<20, types.DockerLayer)
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(base, layer)
	if err != nil {
		t.Fatal(err)
	}
	importAndPull(ctx, t, m, unusedRef, img)

	// The threshold: 32 MiB more than is available now. Removing the image
	// frees its blob and its unpacked layer (about 128 MiB).
	var st syscall.Statfs_t
	if err := syscall.Statfs(root, &st); err != nil {
		t.Fatal(err)
	}
	available := int64(st.Bavail) * st.Bsize
	threshold := available + 32<<20
	t.Logf("%s: %d MiB available, eviction threshold nodefs/imagefs.available<%d MiB", root, available>>20, threshold>>20)
	if err := m.n.signalAndWait(t, syscall.SIGTERM, 60*time.Second); err != nil {
		t.Fatalf("nodelet exit: %v\n%s", err, m.n.stderr.String())
	}
	m.n = startNodelet(t, append(m.args, "--eviction-hard", fmt.Sprintf("nodefs.available<%d,imagefs.available<%d", threshold, threshold),
		"--minimum-image-gc-age", "0s", "--eviction-pressure-transition-period", "30s")...)
	rt := dialManaged(t, m)
	api := m.n.api(t)

	eventually(t, 90*time.Second, "the unused image reclaimed", func() error {
		if id := imageID(t, rt, unusedRef); id != "" {
			return fmt.Errorf("%s (%s) still there", unusedRef, id)
		}
		return nil
	})
	waitEvent(t, api, 30*time.Second, "EvictionThresholdMet", func(e server.EventItem) bool {
		return e.Reason == "EvictionThresholdMet" && e.Message == "Attempting to reclaim ephemeral-storage"
	})
	for _, c := range []*runtimeapi.Container{filler, keeper} {
		if now, err := runningContainer(ctx, rt, c.Labels["io.kubernetes.pod.name"], "main"); err != nil || now.Id != c.Id {
			t.Fatalf("after reclaiming the image: %s's container %v (%v), want %s running", c.Labels["io.kubernetes.pod.name"], now, err, c.Id)
		}
	}

	// Now the pod fills its emptyDir past the threshold (the eviction may
	// kill it before dd is done).
	_, stderr, code, err := rt.ExecSync(ctx, filler.Id, []string{"dd", "if=/dev/urandom", "of=/data/fill", "bs=1M", "count=200"}, time.Minute)
	t.Logf("fill: exit %d %v %s", code, err, stderr)
	evicted := waitPod(t, api, "filler-e2e", 2*time.Minute, "evicted", func(p *v1.Pod) error {
		if p.Status.Phase != v1.PodFailed || p.Status.Reason != "Evicted" {
			return fmt.Errorf("phase %s reason %q", p.Status.Phase, p.Status.Reason)
		}
		return nil
	})
	if !strings.HasPrefix(evicted.Status.Message, "The node was low on resource: ephemeral-storage. Threshold quantity: ") {
		t.Errorf("message %q", evicted.Status.Message)
	}
	if now, err := runningContainer(ctx, rt, "keeper-e2e", "main"); err != nil || now.Id != keeper.Id {
		t.Errorf("critical pod's container %v (%v), want %s running", now, err, keeper.Id)
	}
	if v, err := api.metric("/metrics", "kubelet_evictions", nil); err != nil || v != 1 {
		t.Errorf("kubelet_evictions = %v (%v), want 1", v, err)
	}
}

// waitManagedRunning waits until the managed node runs the pod's main container.
func waitManagedRunning(ctx context.Context, t *testing.T, m *managedNode, pod string) (c *runtimeapi.Container, err error) {
	t.Helper()
	eventually(t, 90*time.Second, pod+" running", func() error {
		c, err = runningContainer(ctx, m.rt, pod, "main")
		return err
	})
	return c, err
}
