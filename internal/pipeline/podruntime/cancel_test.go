package podruntime

import (
	"context"
	"sync"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critest "k8s.io/cri-api/pkg/apis/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/pipeline/podworker"
)

// lateStarts is a runtime whose StartContainer behaves as containerd's
// when its caller gives up: the call returns the caller's context error,
// and the container starts anyway a moment later (startLate). Each call
// first runs onStart, which cancels the sync under test: the pod was asked
// to stop while its container was being started.
type lateStarts struct {
	*critest.FakeRuntimeService
	onStart func()

	mu      sync.Mutex
	pending []string
}

func (r *lateStarts) StartContainer(ctx context.Context, id string) error {
	if r.onStart != nil {
		r.onStart()
	}
	if err := ctx.Err(); err != nil {
		r.mu.Lock()
		r.pending = append(r.pending, id)
		r.mu.Unlock()
		return err
	}
	return r.FakeRuntimeService.StartContainer(ctx, id)
}

// startLate starts the containers whose start the caller gave up on.
func (r *lateStarts) startLate(t *testing.T) {
	r.mu.Lock()
	ids := r.pending
	r.pending = nil
	r.mu.Unlock()
	for _, id := range ids {
		if err := r.FakeRuntimeService.StartContainer(context.Background(), id); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCancelledSyncFinishesItsStart: a pod asked to stop while its
// container is being started (the worker cancels the sync) ends with
// nothing running. The start is not given up half-way: it finishes, so
// the kill that follows sees the container and stops it. Given up, the
// runtime would start the container after the kill's look, and it would
// run on in a pod nodelet considers stopped, holding the pod's cgroup (as
// TestTwoNodeletsSideBySide once saw, on containerd).
func TestCancelledSyncFinishesItsStart(t *testing.T) {
	rs := &lateStarts{FakeRuntimeService: critest.NewFakeRuntimeService()}
	m := newTestManager(rs, critest.NewFakeImageService(), clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0)))

	ctx, cancel := context.WithCancel(context.Background())
	rs.onStart = cancel
	pod := onePod()
	// The sync may end with the cancellation's error; what it leaves in
	// the runtime is what counts.
	_, _ = m.syncPod(ctx, podworker.SyncRequest{Pod: pod})
	rs.onStart = nil
	if err := m.SyncTerminatingPod(context.Background(), podworker.TerminatingRequest{Pod: pod, GracePeriod: time.Second}); err != nil {
		t.Fatal(err)
	}
	// The runtime finishes what the client gave up on, after the kill
	// looked at the pod.
	rs.startLate(t)

	rs.Lock()
	defer rs.Unlock()
	if len(rs.Containers) == 0 {
		t.Fatal("no container was created: the test did not reach the start")
	}
	for id, c := range rs.Containers {
		if c.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
			t.Errorf("container %s (%s) runs after the pod was stopped", id, c.Metadata.Name)
		}
	}
	for id, s := range rs.Sandboxes {
		if s.State == runtimeapi.PodSandboxState_SANDBOX_READY {
			t.Errorf("sandbox %s is ready after the pod was stopped", id)
		}
	}
}
