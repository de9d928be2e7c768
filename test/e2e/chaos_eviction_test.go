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

	"github.com/nodelet/nodelet/internal/managed/registry"
	"github.com/nodelet/nodelet/internal/pure/podspec"
	"github.com/nodelet/nodelet/internal/serve/server"
	"github.com/nodelet/nodelet/internal/serve/stats"
)

// Memory pressure, as a chaos scenario: the hard threshold 1 GiB below
// what the node has available when the scenario starts (so it holds on
// any machine), five stable pods, and in each round a Burstable pod that
// fills a random 1.5 to 2.5 GiB of memory, far past its request. Each
// round the eviction manager must evict that pod, the first of the
// kubelet's ranking, and nothing else; then the invariants.
func chaosMemoryEviction(t *testing.T) {
	_, _, available, _, _, _, err := stats.NewHostMachine().NodeMemory()
	if err != nil {
		t.Fatal(err)
	}
	thresholdMiB := int64(available>>20) - 1024
	if thresholdMiB < 512 {
		t.Skipf("only %d MiB available", available>>20)
	}
	t.Cleanup(func() { removePodsWithPrefix(shared.rt, "hogmem") })
	r := newChaosRun(t, "memory-eviction", shared.rt, filepath.Join(shared.work, "manifests-chaos-mem"), "e2e")
	for range 5 {
		r.create(true, 0)
	}
	n := r.standalone(t, filepath.Join(shared.work, "chaos-mem"),
		"--eviction-hard", fmt.Sprintf("memory.available<%dMi", thresholdMiB), "--eviction-pressure-transition-period", "20s")
	r.waitConverged(2 * time.Minute)
	stable := r.stableIDs()
	t.Logf("memory available %d MiB: threshold memory.available<%d MiB", available>>20, thresholdMiB)

	for round := range size(1, 3) {
		hog := fmt.Sprintf("hogmem%d", round)
		fill := 1536 + r.rng.IntN(1024)
		file := filepath.Join(r.manifests, hog+".yaml")
		writeManifest(t, r.manifests, hog+".yaml", evictionPod(hog, fill, "", "64Mi"))
		r.runs++
		evicted := waitPod(t, n.api, hog+"-"+r.node, 3*time.Minute, "evicted", func(p *v1.Pod) error {
			if p.Status.Phase != v1.PodFailed || p.Status.Reason != "Evicted" {
				return fmt.Errorf("phase %s reason %q", p.Status.Phase, p.Status.Reason)
			}
			return nil
		})
		if !strings.HasPrefix(evicted.Status.Message, "The node was low on resource: memory. ") {
			r.violate("round %d: %s evicted with %q, want the memory eviction", round, hog, evicted.Status.Message)
		}
		t.Logf("round %d: %s (%d MiB) evicted: %s", round, hog, fill, evicted.Status.Message)
		os.Remove(file)
		r.check(stable)
	}
	if v, err := n.api.metric("/metrics", "kubelet_evictions", map[string]string{"eviction_signal": "memory.available"}); err != nil || int(v) != r.runs {
		r.violate("kubelet_evictions{memory.available} = %v (%v), want %d: a pod other than the hogs was evicted", v, err, r.runs)
	}
	r.report()
	r.finish(time.Minute)
}

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

// Disk pressure, as a chaos scenario, on a managed node whose root
// directory (its containerd's images included) is a 512 MiB tmpfs of its
// own, so that the thresholds can be exact. First the node's disk
// threshold is met by an unused 64 MiB image, which the eviction manager
// removes (the node's own garbage first) without evicting anything; then
// a pod fills its emptyDir with a random 160 to 240 MiB past the
// threshold, nothing of the node's is left to reclaim, and that pod is
// evicted (Failed, Evicted, ephemeral-storage), not the three stable pods
// nor the critical one beside it.
func chaosDiskEviction(t *testing.T) {
	const node = "chaos-disk"
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
	m := startManaged(t, node, "nlchaos3", "10.64.0.0/24", "--port", freePort(t), "--address", "127.0.0.1",
		"--file-check-frequency", "1s", "--healthz-port", "0")
	r := newChaosRun(t, "disk-eviction", m.rt, m.manifests, "e2e")
	api := m.n.api(t)
	r.api = func() *nodeAPI { return api }
	r.rss.watch(m.n.cmd.Process.Pid)
	for range 3 {
		r.create(true, 0)
	}
	writeManifest(t, m.manifests, "filler.yaml", fmt.Sprintf(diskPod, "filler", ""))
	writeManifest(t, m.manifests, "keeper.yaml", fmt.Sprintf(diskPod, "keeper", "\n  priorityClassName: system-node-critical"))
	ctx := context.Background()
	r.waitConverged(2 * time.Minute)
	filler, err := waitManagedRunning(ctx, t, m, "filler-e2e")
	if err != nil {
		t.Fatal(err)
	}
	keeper, err := waitManagedRunning(ctx, t, m, "keeper-e2e")
	if err != nil {
		t.Fatal(err)
	}
	stable := r.stableIDs()

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
	r.rss.watch(m.n.cmd.Process.Pid)
	rt := dialManaged(t, m)
	api = m.n.api(t)

	r.runs++
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
		name := c.Labels[podspec.LabelPodName]
		if now, err := runningContainer(ctx, rt, name, "main"); err != nil || now.Id != c.Id {
			r.violate("reclaiming the image stopped %s: its container %v (%v), want %s running", name, now, err, c.Id)
		}
	}
	r.check(stable)

	// Now the pod fills its emptyDir past the threshold (the eviction may
	// kill it before dd is done).
	r.runs++
	fill := 160 + r.rng.IntN(80)
	_, stderr, code, err := rt.ExecSync(ctx, filler.Id, []string{"dd", "if=/dev/urandom", "of=/data/fill", "bs=1M", fmt.Sprintf("count=%d", fill)}, time.Minute)
	t.Logf("fill %d MiB: exit %d %v %s", fill, code, err, stderr)
	evicted := waitPod(t, api, "filler-e2e", 2*time.Minute, "evicted", func(p *v1.Pod) error {
		if p.Status.Phase != v1.PodFailed || p.Status.Reason != "Evicted" {
			return fmt.Errorf("phase %s reason %q", p.Status.Phase, p.Status.Reason)
		}
		return nil
	})
	if !strings.HasPrefix(evicted.Status.Message, "The node was low on resource: ephemeral-storage. Threshold quantity: ") {
		r.violate("filler evicted with %q, want the ephemeral-storage eviction", evicted.Status.Message)
	}
	if now, err := runningContainer(ctx, rt, "keeper-e2e", "main"); err != nil || now.Id != keeper.Id {
		r.violate("critical pod's container %v (%v), want %s running", now, err, keeper.Id)
	}
	if v, err := api.metric("/metrics", "kubelet_evictions", nil); err != nil || v != 1 {
		r.violate("kubelet_evictions = %v (%v), want 1: only the filler", v, err)
	}
	r.check(stable)
	r.report()
	r.finish(time.Minute)
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
