package podruntime

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critest "k8s.io/cri-api/pkg/apis/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/pipeline/podworker"
	"github.com/nodelet/nodelet/internal/pure/podupdate"
)

// lookUpFirst is a runtime whose RunPodSandbox returns once the image
// service has been asked about an image (or after 10 s): a sync that
// looks the image up only after the sandbox is made finds lookedUp false.
type lookUpFirst struct {
	*critest.FakeRuntimeService
	is       *critest.FakeImageService
	lookedUp bool
}

func (r *lookUpFirst) RunPodSandbox(ctx context.Context, cfg *runtimeapi.PodSandboxConfig, handler string) (string, error) {
	_ = wait.PollUntilContextTimeout(ctx, time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		r.is.Lock()
		defer r.is.Unlock()
		r.lookedUp = slices.Contains(r.is.Called, "ImageStatus")
		return r.lookedUp, nil
	})
	return r.FakeRuntimeService.RunPodSandbox(ctx, cfg, handler)
}

// TestFirstImageLookedUpWhileTheSandboxIsMade: the image of the container
// a new sandbox starts first is looked up while the runtime makes the
// sandbox, and that look-up is the container's: one ImageStatus in all.
// A container whose pull policy is Always pulls without one, as before.
func TestFirstImageLookedUpWhileTheSandboxIsMade(t *testing.T) {
	rt := &lookUpFirst{FakeRuntimeService: critest.NewFakeRuntimeService(), is: critest.NewFakeImageService()}
	m := newTestManager(rt, rt.is, clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0)))
	pod := onePod() // busybox:1.35, IfNotPresent
	rt.is.SetFakeImages([]string{"busybox:1.35"})
	st, err := m.syncPod(context.Background(), podworker.SyncRequest{Reason: podupdate.Add, Pod: pod})
	if err != nil {
		t.Fatal(err)
	}
	if !rt.lookedUp {
		t.Error("the sandbox was made before the first container's image was looked up")
	}
	rt.is.Lock()
	calls := strings.Join(rt.is.Called, ",")
	rt.is.Unlock()
	if calls != "ImageStatus" {
		t.Errorf("image calls %q, want the one look-up made ahead", calls)
	}
	if len(st.ContainerStatuses) != 1 || st.ContainerStatuses[0].State.Running == nil {
		t.Errorf("status: %+v", st.ContainerStatuses)
	}

	// Not present when looked up ahead: pulled, as a look-up then would.
	f := newFixture(t)
	pod = onePod()
	pod.Spec.Containers[0].Image = "busybox:absent"
	if _, err := f.m.syncPod(context.Background(), podworker.SyncRequest{Reason: podupdate.Add, Pod: pod}); err != nil {
		t.Fatal(err)
	}
	if calls := f.imageCalls(); !strings.HasPrefix(calls, "ImageStatus,PullImage") || strings.Count(calls, "ImageStatus") > 2 {
		t.Errorf("image calls %q, want the look-up made ahead, then the pull", calls)
	}

	// Always: no look-up ahead, the pull first.
	f = newFixture(t)
	pod = onePod()
	pod.Spec.Containers[0].ImagePullPolicy = v1.PullAlways
	if _, err := f.m.syncPod(context.Background(), podworker.SyncRequest{Reason: podupdate.Add, Pod: pod}); err != nil {
		t.Fatal(err)
	}
	if calls := f.imageCalls(); !strings.HasPrefix(calls, "PullImage") {
		t.Errorf("image calls %q for pull policy Always, want the pull first", calls)
	}
}
