package podruntime

import (
	"context"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/pipeline/podworker"
	"github.com/nodelet/nodelet/internal/pure/observed"
)

// statusCalls are the runtime's status calls since the last look, in order.
func (f *fixture) statusCalls() string {
	f.rs.Lock()
	defer f.rs.Unlock()
	var out []string
	for _, c := range f.rs.Called {
		if strings.HasSuffix(c, "Status") {
			out = append(out, c)
		}
	}
	f.rs.Called = nil
	return strings.Join(out, ",")
}

// TestObserveAsksStatusOncePerObject: once a pod's sandbox is ready and
// its containers run, looking at it again costs only the lists, with the
// same answer; a container that stopped is asked about again, once, and
// its exit details are the runtime's.
func TestObserveAsksStatusOncePerObject(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	pod := testPod()
	if _, err := f.m.syncPod(ctx, podworker.SyncRequest{Pod: pod}); err != nil {
		t.Fatal(err)
	}
	f.statusCalls()
	first, err := f.m.Observe(ctx, pod.UID, pod.Name, pod.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	f.statusCalls() // the sync's own look may not have seen the containers running
	again, err := f.m.Observe(ctx, pod.UID, pod.Name, pod.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	if got := f.statusCalls(); got != "" {
		t.Errorf("second look at a running pod asked %s", got)
	}
	if len(again.Containers) != 2 || len(first.IPs) == 0 && len(again.IPs) != 0 {
		t.Fatalf("second look: %+v", again)
	}
	for i := range first.Containers {
		if first.Containers[i] != again.Containers[i] {
			t.Errorf("container %d: first %+v, again %+v", i, first.Containers[i], again.Containers[i])
		}
	}

	app := containerByName(f, "app")
	f.rs.Lock()
	app.State = runtimeapi.ContainerState_CONTAINER_EXITED
	app.FinishedAt, app.ExitCode, app.Reason = app.StartedAt+1, 3, "Error"
	f.rs.Unlock()
	after, err := f.m.Observe(ctx, pod.UID, pod.Name, pod.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	if got := f.statusCalls(); got != "ContainerStatus" {
		t.Errorf("look after app stopped asked %q, want one ContainerStatus", got)
	}
	if c := after.Newest("app"); c == nil || c.State != observed.ContainerExited || c.ExitCode != 3 {
		t.Errorf("app after it stopped: %+v", c)
	}

	// An exited container's details are final: the next look asks nothing
	// and tells the same.
	later, err := f.m.Observe(ctx, pod.UID, pod.Name, pod.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	if got := f.statusCalls(); got != "" {
		t.Errorf("second look at the stopped app asked %s", got)
	}
	if a, b := after.Newest("app"), later.Newest("app"); a == nil || b == nil || *a != *b {
		t.Errorf("stopped app: first %+v, again %+v", a, b)
	}

	// Done with the pod, the manager keeps nothing of it.
	if err := f.m.SyncTerminatedPod(ctx, podworker.TerminatedRequest{Pod: pod}); err != nil {
		t.Fatal(err)
	}
	if got := f.m.observed.get(pod.UID); got.sandboxID != "" || len(got.containers) != 0 {
		t.Errorf("kept after the pod was done: %+v", got)
	}
}

// TestRelistForgetsPodsGone: what a look kept of a pod goes once a relist
// finds nothing of it in the runtime, whoever looked last.
func TestRelistForgetsPodsGone(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	pod := testPod()
	if _, err := f.m.syncPod(ctx, podworker.SyncRequest{Pod: pod}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.m.Observe(ctx, pod.UID, pod.Name, pod.Namespace); err != nil {
		t.Fatal(err)
	}
	if _, err := f.m.ListPods(ctx); err != nil {
		t.Fatal(err)
	}
	if got := f.m.observed.get(pod.UID); len(got.containers) == 0 {
		t.Fatalf("nothing kept of a running pod after a relist: %+v", got)
	}
	f.rs.Lock()
	clear(f.rs.Containers)
	clear(f.rs.Sandboxes)
	f.rs.Unlock()
	// A relist that began when the pod last changed may have missed the
	// change: the entry stays, with nothing but that time.
	if _, err := f.m.ListPods(ctx); err != nil {
		t.Fatal(err)
	}
	got, ok := f.m.observed.lookup(pod.UID)
	if got.sandboxID != "" || len(got.containers) != 0 {
		t.Errorf("kept after the runtime lost the pod: %+v", got)
	}
	if !ok || got.changedAt.IsZero() {
		t.Errorf("a relist that began as the pod changed forgot the change: %+v (entry: %v)", got, ok)
	}
	f.clock.Step(time.Millisecond)
	if _, err := f.m.ListPods(ctx); err != nil {
		t.Fatal(err)
	}
	if got, ok := f.m.observed.lookup(pod.UID); ok {
		t.Errorf("kept after a relist that began after the change found nothing: %+v", got)
	}
}

// TestObserveReadsResources: what the runtime reports a container runs
// with (ContainerStatus.resources.linux) is observed, for the status's
// containerStatuses[].resources.
func TestObserveReadsResources(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	pod := testPod()
	if _, err := f.m.syncPod(ctx, podworker.SyncRequest{Pod: pod}); err != nil {
		t.Fatal(err)
	}
	app := containerByName(f, "app")
	f.rs.Lock()
	app.State = runtimeapi.ContainerState_CONTAINER_EXITED // asked about again
	app.Resources = &runtimeapi.ContainerResources{Linux: &runtimeapi.LinuxContainerResources{
		CpuShares: 102, CpuQuota: 20000, CpuPeriod: 100000, MemoryLimitInBytes: 128 << 20,
	}}
	f.rs.Unlock()
	got, err := f.m.Observe(ctx, pod.UID, pod.Name, pod.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	c := got.Newest("app")
	want := observed.Resources{CPUShares: 102, CPUQuota: 20000, CPUPeriod: 100000, MemoryLimit: 128 << 20}
	if c == nil || c.Resources == nil || *c.Resources != want {
		t.Fatalf("app: %+v, want resources %+v", c, want)
	}
}
