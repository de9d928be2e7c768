package podruntime

import (
	"context"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critest "k8s.io/cri-api/pkg/apis/testing"

	"github.com/nodelet/nodelet/internal/pipeline/podworker"
	"github.com/nodelet/nodelet/internal/pure/observed"
	"github.com/nodelet/nodelet/internal/pure/podupdate"
)

// fakeView is a PLEG view set by relist.
type fakeView struct {
	pods map[types.UID]*observed.PodStatus
	at   time.Time
}

func (v *fakeView) CurrentAt() (map[types.UID]*observed.PodStatus, time.Time, bool) {
	return v.pods, v.at, v.pods != nil
}

// relist reads the runtime into v, as the PLEG does, at the fixture's now.
func (v *fakeView) relist(t *testing.T, f *fixture) {
	t.Helper()
	pods, err := f.m.ListPods(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	v.pods, v.at = pods, f.clock.Now()
}

// startWithView is a fixture whose manager reads v as its PLEG view,
// with pod started (a first sync, no relist yet).
func startWithView(t *testing.T, pod *v1.Pod) (*fixture, *fakeView) {
	t.Helper()
	f := newFixture(t)
	v := &fakeView{}
	f.m.SetView(v)
	if _, err := f.m.syncPod(context.Background(), podworker.SyncRequest{Reason: podupdate.Add, Pod: pod}); err != nil {
		t.Fatal(err)
	}
	return f, v
}

// TestResyncReadsTheView: a periodic resync of a steady pod reads it from
// the PLEG's view, with no runtime call, from the first after its start
// (which records what it made as a look would); when the view shows something the manager's last look did not (a
// container exited), the resync looks at the runtime and acts on it.
func TestResyncReadsTheView(t *testing.T) {
	pod := testPod()
	f, v := startWithView(t, pod)
	ctx := context.Background()
	resync := podworker.SyncRequest{Reason: podupdate.Resync, Pod: pod}
	f.clock.Step(time.Second)
	v.relist(t, f)
	f.runtimeCalls()

	f.clock.Step(time.Minute)
	st, err := f.m.syncPod(ctx, resync)
	if err != nil {
		t.Fatal(err)
	}
	if got := f.runtimeCalls(); got != "" {
		t.Errorf("resync of a steady pod asked the runtime %q, want nothing", got)
	}
	if len(st.ContainerStatuses) != 2 || st.PodIP == "" {
		t.Errorf("status from the view: %+v", st)
	}
	for _, c := range st.ContainerStatuses {
		if c.State.Running == nil {
			t.Errorf("%s from the view: %+v, want running", c.Name, c.State)
		}
	}

	// app exits; the next relist shows it, and the resync looks and
	// restarts it.
	app := containerByName(f, "app")
	f.rs.Lock()
	app.State = runtimeapi.ContainerState_CONTAINER_EXITED
	app.FinishedAt, app.ExitCode = f.clock.Now().UnixNano(), 1
	f.rs.Unlock()
	f.clock.Step(time.Second)
	v.relist(t, f)
	f.runtimeCalls()
	f.clock.Step(time.Minute)
	if _, err := f.m.syncPod(ctx, resync); err != nil {
		t.Fatal(err)
	}
	if got := f.runtimeCalls(); !strings.Contains(got, "ContainerStatus") || !strings.Contains(got, "StartContainer") {
		t.Errorf("resync after app exited asked %q, want a look and a restart", got)
	}
}

// TestViewGuards: the view is read only when it began after the manager
// last changed the pod and shows what the last look found.
func TestViewGuards(t *testing.T) {
	pod := testPod()
	f, v := startWithView(t, pod)
	ctx := context.Background()
	if _, err := f.m.Observe(ctx, pod.UID, pod.Name, pod.Namespace); err != nil {
		t.Fatal(err)
	}
	read := func() bool {
		_, _, ok := f.m.lookFromView(pod.UID, pod.Name, pod.Namespace)
		return ok
	}
	if read() {
		t.Error("read with no relist yet")
	}
	v.relist(t, f)
	// The relist began at the same instant as the last change: not after.
	f.m.observed.touch(pod.UID, f.clock.Now())
	if read() {
		t.Error("read a relist that did not begin after the last change")
	}
	f.clock.Step(time.Millisecond)
	v.relist(t, f)
	if !read() {
		t.Error("did not read a relist after the last change that shows the last look")
	}
	// A container the last look did not see.
	v.pods[pod.UID].Containers = append(v.pods[pod.UID].Containers, observed.Container{ID: "new", State: observed.ContainerRunning})
	if read() {
		t.Error("read a view with a container the last look did not see")
	}
	v.relist(t, f)
	v.pods[pod.UID].Sandboxes[0].State = observed.SandboxNotReady
	if read() {
		t.Error("read a view whose sandbox changed state")
	}
	v.relist(t, f)
	delete(v.pods, pod.UID)
	if read() {
		t.Error("read a view without the pod")
	}

	// Exited containers whose sandbox is gone (removed before them), as
	// the last look found them: read, with no sandbox and no IP.
	f.rs.Lock()
	clear(f.rs.Sandboxes)
	for _, c := range f.rs.Containers {
		c.State = runtimeapi.ContainerState_CONTAINER_EXITED
		c.FinishedAt = f.clock.Now().UnixNano()
	}
	f.rs.Unlock()
	if _, err := f.m.Observe(ctx, pod.UID, pod.Name, pod.Namespace); err != nil {
		t.Fatal(err)
	}
	f.clock.Step(time.Millisecond)
	v.relist(t, f)
	st, _, ok := f.m.lookFromView(pod.UID, pod.Name, pod.Namespace)
	if !ok || len(st.Sandboxes) != 0 || len(st.IPs) != 0 || len(st.Containers) != 2 {
		t.Errorf("containers without a sandbox from the view: %+v, %v", st, ok)
	}
}

// TestHostNetworkSandboxKept: a ready sandbox on the host's network, for
// which the runtime reports no IP, is kept as a pod network's with its
// IPs: the next look asks no PodSandboxStatus, and a resync of the steady
// pod reads the view.
func TestHostNetworkSandboxKept(t *testing.T) {
	saved := critest.FakePodSandboxIPs
	critest.FakePodSandboxIPs = []string{""} // containerd's answer for a host-network sandbox
	t.Cleanup(func() { critest.FakePodSandboxIPs = saved })
	pod := testPod()
	pod.Spec.HostNetwork = true
	f, v := startWithView(t, pod)
	ctx := context.Background()
	f.clock.Step(time.Second)
	v.relist(t, f)
	f.runtimeCalls()
	if _, err := f.m.Observe(ctx, pod.UID, pod.Name, pod.Namespace); err != nil {
		t.Fatal(err)
	}
	if got := f.runtimeCalls(); got != "ListContainers×I,ListPodSandbox×I" {
		t.Errorf("look at a steady host-network pod asked %q, want only the lists", got)
	}
	f.clock.Step(time.Minute)
	if _, err := f.m.syncPod(ctx, podworker.SyncRequest{Reason: podupdate.Resync, Pod: pod}); err != nil {
		t.Fatal(err)
	}
	if got := f.runtimeCalls(); got != "" {
		t.Errorf("resync of a steady host-network pod asked the runtime %q, want nothing", got)
	}
}
