//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/podspec"
	"github.com/nodelet/nodelet/internal/securitycontext"
)

// BenchmarkPodStartup measures, in one run against the same containerd,
// the time from a manifest written to its container running under nodelet,
// and the floor: the same pods made by direct CRI calls (sandbox, create,
// start; concurrently for the batch). It prints both and the ratio; it
// asserts nothing (make bench).
func BenchmarkPodStartup(b *testing.B) {
	ctx := context.Background()
	image := pullBusybox(b)
	const single, batch, rounds = 11, 30, 3

	// Floor and nodelet runs alternate, so that both see the same machine.
	var floor1, floor30, nodelet1, nodelet30, teardowns []time.Duration
	_, dir := benchNodelet(b)
	for i := 0; i < single; i++ {
		floor1 = append(floor1, directPods(b, ctx, image, fmt.Sprintf("floor1-%d", i), 1))
		removeFloorPods(b)
		nodelet1 = append(nodelet1, manifestPods(b, ctx, dir, fmt.Sprintf("one%02d", i), 1))
	}
	for round := 0; round < rounds; round++ {
		floor30 = append(floor30, directPods(b, ctx, image, fmt.Sprintf("floor30r%d", round), batch))
		removeFloorPods(b)
		prefix := fmt.Sprintf("batch%d", round)
		nodelet30 = append(nodelet30, manifestPods(b, ctx, dir, prefix, batch))
		teardowns = append(teardowns, removeManifests(b, ctx, dir, prefix, batch))
		waitSandboxesStopped(b, ctx, prefix) // the next round does not compete with this teardown
	}

	f1, n1 := median(floor1), median(nodelet1)
	f30, n30 := median(floor30), median(nodelet30)
	fmt.Printf("\npod start, 1 pod (median of %d): floor %v, nodelet %v, overhead %v (target: within 15ms)\n",
		single, f1.Round(time.Millisecond), n1.Round(time.Millisecond), (n1 - f1).Round(time.Millisecond))
	fmt.Printf("pod start, %d pods (median of %d rounds): floor %v, nodelet %v, ratio %.2fx (target: 1.15x); rounds: floor %v, nodelet %v\n",
		batch, rounds, f30.Round(time.Millisecond), n30.Round(time.Millisecond), float64(n30)/float64(f30), roundAll(floor30), roundAll(nodelet30))
	fmt.Printf("tear down %d pods (manifests removed to all containers stopped), median: %v\n", batch, median(teardowns).Round(time.Millisecond))
	b.ReportMetric(float64(n1-f1)/1e6, "ms-overhead-1pod")
	b.ReportMetric(float64(n30)/float64(f30), "ratio-30pods")
	removeAllPods(shared.rt)
}

func pullBusybox(b *testing.B) string {
	ref, err := shared.rt.PullImage(context.Background(), &runtimeapi.ImageSpec{Image: "docker.io/library/busybox:1.35"}, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	return ref
}

// directPods creates count pods with direct CRI calls, concurrently, and
// returns the time until all their containers were started.
func directPods(b *testing.B, ctx context.Context, image, prefix string, count int) time.Duration {
	b.Helper()
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, count) // one per pod at most
	for i := 0; i < count; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("%s-%d", prefix, i)
			// The runtime's own cost for the same pod: the security settings
			// the kubelet (and nodelet) always sends, e.g. RuntimeDefault
			// seccomp for the sandbox and default masked paths.
			sb := &runtimeapi.PodSandboxConfig{
				Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "bench", Uid: name},
				Hostname:     name,
				LogDirectory: filepath.Join(shared.work, "bench-logs", name),
				Labels:       map[string]string{"bench": "floor"},
				Linux:        &runtimeapi.LinuxPodSandboxConfig{SecurityContext: floorSandboxSecurity(b)},
			}
			id, err := shared.rt.RunPodSandbox(ctx, sb, "")
			if err != nil {
				errs <- err
				return
			}
			cid, err := shared.rt.CreateContainer(ctx, id, &runtimeapi.ContainerConfig{
				Metadata: &runtimeapi.ContainerMetadata{Name: "main"},
				Image:    &runtimeapi.ImageSpec{Image: image},
				Command:  []string{"sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"},
				LogPath:  "main/0.log",
				Linux:    &runtimeapi.LinuxContainerConfig{SecurityContext: floorContainerSecurity(b)},
			}, sb)
			if err == nil {
				err = shared.rt.StartContainer(ctx, cid)
			}
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	return took
}

func benchNodelet(b *testing.B) (*nodeletProc, string) {
	dir := filepath.Join(shared.work, "bench-manifests")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	n := startNodelet(b, "--container-runtime-endpoint", shared.endpoint, "--root-dir", filepath.Join(shared.work, "bench-root"),
		"--pod-manifest-path", dir, "--hostname-override", "e2e", "--pod-logs-dir", filepath.Join(shared.work, "bench-logs"))
	time.Sleep(2 * time.Second) // let it start and report its empty source
	return n, dir
}

// manifestPods writes count manifests and returns the time until all their
// containers run.
func manifestPods(b *testing.B, ctx context.Context, dir, prefix string, count int) time.Duration {
	b.Helper()
	start := time.Now()
	for i := 0; i < count; i++ {
		name := fmt.Sprintf("%s%02d", prefix, i)
		if err := os.WriteFile(filepath.Join(dir, name+".yaml"), []byte(fmt.Sprintf(sleeperPod, name)), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	waitRunning(b, ctx, prefix, count)
	return time.Since(start)
}

func removeManifests(b *testing.B, ctx context.Context, dir, prefix string, count int) time.Duration {
	start := time.Now()
	for i := 0; i < count; i++ {
		os.Remove(filepath.Join(dir, fmt.Sprintf("%s%02d.yaml", prefix, i)))
	}
	waitRunning(b, ctx, prefix, 0)
	return time.Since(start)
}

// waitRunning polls every 2 ms until exactly want containers of pods named
// prefix* run.
func waitRunning(b *testing.B, ctx context.Context, prefix string, want int) {
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		cs, err := shared.rt.ListContainers(ctx, &runtimeapi.ContainerFilter{
			State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING}})
		if err != nil {
			b.Fatal(err)
		}
		got := 0
		for _, c := range cs {
			if len(c.Labels[podspec.LabelPodName]) > len(prefix) && c.Labels[podspec.LabelPodName][:len(prefix)] == prefix {
				got++
			}
		}
		if got == want {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
	b.Fatalf("%s: not %d running containers within 3 minutes", prefix, want)
}

func median(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond)
	}
	return out
}

// waitSandboxesStopped polls until no sandbox of pods named prefix* is
// ready any more.
func waitSandboxesStopped(b *testing.B, ctx context.Context, prefix string) {
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		sbs, err := shared.rt.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{
			State: &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY}})
		if err != nil {
			b.Fatal(err)
		}
		left := 0
		for _, sb := range sbs {
			if strings.HasPrefix(sb.GetMetadata().GetName(), prefix) {
				left++
			}
		}
		if left == 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	b.Fatalf("%s: sandboxes still ready after 3 minutes", prefix)
}

// removeFloorPods removes the pods directPods made, and only those.
func removeFloorPods(b *testing.B) {
	ctx := context.Background()
	sbs, err := shared.rt.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{"bench": "floor"}})
	if err != nil {
		b.Fatal(err)
	}
	for _, sb := range sbs {
		shared.rt.StopPodSandbox(ctx, sb.Id)
		shared.rt.RemovePodSandbox(ctx, sb.Id)
	}
}

func floorPod() *v1.Pod {
	return &v1.Pod{Spec: v1.PodSpec{Containers: []v1.Container{{Name: "main", Image: "busybox:1.35"}}}}
}

func floorSandboxSecurity(b *testing.B) *runtimeapi.LinuxSandboxSecurityContext {
	sc, _, err := securitycontext.Sandbox(floorPod(), "")
	if err != nil {
		b.Fatal(err)
	}
	return sc
}

func floorContainerSecurity(b *testing.B) *runtimeapi.LinuxContainerSecurityContext {
	pod := floorPod()
	sc, err := securitycontext.Container(pod, &pod.Spec.Containers[0], "")
	if err != nil {
		b.Fatal(err)
	}
	return sc
}
