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

// TestNewPodReadsTheView: a new pod's first sync takes "nothing in the
// runtime" from a relist that shows nothing of it, and makes its sandbox
// with no look; a pod created again with the same UID while its first
// life's objects are there looks, as long as the latest relist began
// before its last change, or shows those objects.
func TestNewPodReadsTheView(t *testing.T) {
	f := newFixture(t)
	v := &fakeView{}
	f.m.SetView(v)
	ctx := context.Background()
	pod := onePod()
	add := podworker.SyncRequest{Reason: podupdate.Add, Pod: pod}
	lists := func(calls string) bool {
		return strings.Contains(calls, "ListPodSandbox") || strings.Contains(calls, "ListContainers")
	}

	v.relist(t, f)
	f.clock.Step(time.Second)
	f.runtimeCalls()
	st, err := f.m.syncPod(ctx, add)
	if err != nil {
		t.Fatal(err)
	}
	if got := f.runtimeCalls(); lists(got) || !strings.Contains(got, "RunPodSandbox×I") {
		t.Errorf("first sync of a new pod asked %q, want its sandbox made with no list", got)
	}
	if len(st.ContainerStatuses) != 1 || st.ContainerStatuses[0].State.Running == nil {
		t.Errorf("status after the first sync: %+v", st.ContainerStatuses)
	}

	// The pod stops and its worker is done; its objects stay. The same
	// UID comes back before any relist: the view (from before the pod
	// was made) shows nothing, and must not be read.
	if err := f.m.SyncTerminatingPod(ctx, podworker.TerminatingRequest{Pod: pod, GracePeriod: time.Second}); err != nil {
		t.Fatal(err)
	}
	if err := f.m.SyncTerminatedPod(ctx, podworker.TerminatedRequest{Pod: pod}); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := f.m.newFromView(pod.UID, pod.Name, pod.Namespace); ok {
		t.Error("read a relist older than the pod's last change")
	}
	// A relist after the change shows the stopped objects: still a look.
	f.clock.Step(time.Millisecond)
	v.relist(t, f)
	if _, _, ok := f.m.newFromView(pod.UID, pod.Name, pod.Namespace); ok {
		t.Error("read a relist that shows objects of the pod")
	}
	f.clock.Step(time.Second)
	f.runtimeCalls()
	if _, err := f.m.syncPod(ctx, add); err != nil {
		t.Fatal(err)
	}
	if got := f.runtimeCalls(); !lists(got) {
		t.Errorf("first sync of a pod with objects in the runtime asked %q, want a look", got)
	}
	f.rs.Lock()
	attempts := 0
	for _, sb := range f.rs.Sandboxes {
		if sb.Metadata.Uid == string(pod.UID) {
			attempts++
		}
	}
	f.rs.Unlock()
	if attempts != 2 {
		t.Errorf("sandboxes of the pod: %d, want the stopped one and a new one", attempts)
	}

	// Once a relist that began after the last change finds nothing of
	// the pod, the view is read again.
	f.rs.Lock()
	clear(f.rs.Containers)
	clear(f.rs.Sandboxes)
	f.rs.Unlock()
	f.clock.Step(time.Millisecond)
	v.relist(t, f)
	if _, _, ok := f.m.newFromView(pod.UID, pod.Name, pod.Namespace); !ok {
		t.Error("did not read a relist after the last change that shows nothing of the pod")
	}
	// Not when the PLEG cannot vouch for its view.
	v.pods = nil
	if _, _, ok := f.m.newFromView(pod.UID, pod.Name, pod.Namespace); ok {
		t.Error("read a view the PLEG does not vouch for")
	}
}

// TestObservedFactsKeepTheLastChange: a look or relist that found nothing
// of a pod forgets it only when it began after the pod's last change; one
// that began before may have missed what the change made.
func TestObservedFactsKeepTheLastChange(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	var o observedFacts
	o.touch("u", t0)
	o.set("u", podFacts{}, t0.Add(-time.Millisecond))
	if f, ok := o.lookup("u"); !ok || !f.changedAt.Equal(t0) {
		t.Errorf("an empty look that began before the change: %+v, %v; want the change kept", f, ok)
	}
	o.keepOnly(nil, t0)
	if _, ok := o.lookup("u"); !ok {
		t.Error("a relist that began as the pod changed forgot it")
	}
	o.set("u", podFacts{}, t0.Add(time.Millisecond))
	if f, ok := o.lookup("u"); ok {
		t.Errorf("an empty look that began after the change kept %+v", f)
	}
	o.touch("u", t0)
	o.drop("u")
	if f, ok := o.lookup("u"); !ok || !f.changedAt.Equal(t0) || f.complete {
		t.Errorf("dropped: %+v, %v; want the change's time alone", f, ok)
	}
	o.keepOnly(nil, t0.Add(time.Millisecond))
	if _, ok := o.lookup("u"); ok {
		t.Error("a relist that began after the change and found nothing kept the pod")
	}
	o.drop("never-changed")
	if _, ok := o.lookup("never-changed"); ok {
		t.Error("drop of a pod never changed left an entry")
	}
}
