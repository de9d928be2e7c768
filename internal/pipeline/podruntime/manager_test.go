package podruntime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critest "k8s.io/cri-api/pkg/apis/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/pipeline/cri"
	"github.com/nodelet/nodelet/internal/pipeline/podworker"
	"github.com/nodelet/nodelet/internal/pipeline/statusmanager"
	"github.com/nodelet/nodelet/internal/pure/podspec"
	"github.com/nodelet/nodelet/internal/pure/podupdate"
	"github.com/nodelet/nodelet/internal/pure/securitycontext"
)

type fixture struct {
	m     *Manager
	rs    *critest.FakeRuntimeService
	is    *critest.FakeImageService
	clock *clocktesting.FakeClock
}

// newFixture wires a Manager to the cri-api fakes through the real
// cri.Client, as the agent does with a real runtime.
func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{rs: critest.NewFakeRuntimeService(), is: critest.NewFakeImageService(),
		clock: clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))}
	f.m = newTestManager(f.rs, f.is, f.clock)
	return f
}

// newTestManager is a Manager on runtime service rs and image service is
// (its images sized 1 byte) through the real cri.Client.
func newTestManager(rs internalapi.RuntimeService, is *critest.FakeImageService, clk *clocktesting.FakeClock) *Manager {
	is.SetFakeImageSize(1)
	log := slog.New(slog.DiscardHandler)
	c := cri.New(rs, is, "fake", cri.DefaultTimeouts(), log)
	return New(c, Options{PodLogsDir: "/var/log/pods"}, Deps{Clock: clk, Log: log, Status: statusmanager.New(nil)})
}

// mutations are the runtime calls that change something, in order.
func (f *fixture) mutations() string {
	f.rs.Lock()
	defer f.rs.Unlock()
	var out []string
	for _, c := range f.rs.Called {
		if !strings.HasPrefix(c, "List") && !strings.HasSuffix(c, "Status") {
			out = append(out, c)
		}
	}
	f.rs.Called = nil
	return strings.Join(out, ",")
}

func (f *fixture) imageCalls() string {
	f.is.Lock()
	defer f.is.Unlock()
	out := strings.Join(f.is.Called, ",")
	f.is.Called = nil
	return out
}

func testPod() *v1.Pod {
	grace := int64(5)
	return &v1.Pod{
		ObjectMeta: metav1ObjectMeta("web-node", "default", "uid-1"),
		Spec: v1.PodSpec{
			RestartPolicy:                 v1.RestartPolicyAlways,
			TerminationGracePeriodSeconds: &grace,
			Containers: []v1.Container{
				{Name: "app", Image: "busybox:1.35", ImagePullPolicy: v1.PullIfNotPresent},
				{Name: "side", Image: "busybox:latest", ImagePullPolicy: v1.PullAlways},
			},
		},
	}
}

func containerByName(f *fixture, name string) *critest.FakeContainer {
	f.rs.Lock()
	defer f.rs.Unlock()
	var newest *critest.FakeContainer
	for _, c := range f.rs.Containers {
		if c.Metadata.Name == name && (newest == nil || c.CreatedAt > newest.CreatedAt) {
			newest = c
		}
	}
	return newest
}

func TestSyncPodCreatesSandboxAndContainers(t *testing.T) {
	f := newFixture(t)
	st, err := f.m.syncPod(context.Background(), podworker.SyncRequest{Pod: testPod()})
	if err != nil {
		t.Fatal(err)
	}
	if got := f.mutations(); got != "RunPodSandbox,CreateContainer,StartContainer,CreateContainer,StartContainer" {
		t.Errorf("runtime calls = %s", got)
	}
	// IfNotPresent looks first, then pulls; Always pulls without looking.
	// After each pull the image's user is read (runAsNonRoot, run_as_user).
	if got := f.imageCalls(); got != "ImageStatus,PullImage,ImageStatus,PullImage,ImageStatus" {
		t.Errorf("image calls = %s", got)
	}
	app := containerByName(f, "app")
	if app.Labels[podspec.LabelPodUID] != "uid-1" || app.Labels[podspec.LabelManagedBy] != podspec.ManagedByValue ||
		app.Annotations[podspec.AnnotationGracePeriod] != "5" || app.Annotations[podspec.AnnotationRestartCount] != "0" ||
		!strings.HasPrefix(app.Annotations[podspec.AnnotationContainerHash], "v1:") {
		t.Errorf("app labels %v annotations %v", app.Labels, app.Annotations)
	}
	if st.Phase != v1.PodRunning || len(st.ContainerStatuses) != 2 {
		t.Errorf("status phase %s, %d container statuses", st.Phase, len(st.ContainerStatuses))
	}
}

func TestSyncPodIsIdempotent(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if _, err := f.m.syncPod(ctx, podworker.SyncRequest{Pod: testPod()}); err != nil {
		t.Fatal(err)
	}
	f.mutations()
	f.imageCalls()
	if _, err := f.m.syncPod(ctx, podworker.SyncRequest{Pod: testPod()}); err != nil {
		t.Fatal(err)
	}
	if got := f.mutations(); got != "" {
		t.Errorf("second sync changed something: %s", got)
	}
	if got := f.imageCalls(); got != "" {
		t.Errorf("second sync touched images: %s", got)
	}
}

// An exited container under Always is restarted once, with restartCount 1
// and its log at <name>/1.log; a crash right after waits for the back-off.
func TestSyncPodRestartsExitedContainerWithBackoff(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	pod := testPod()
	pod.Spec.Containers = pod.Spec.Containers[:1]
	if _, err := f.m.syncPod(ctx, podworker.SyncRequest{Pod: pod}); err != nil {
		t.Fatal(err)
	}
	exit := func() {
		c := containerByName(f, "app")
		f.rs.Lock()
		c.State = runtimeapi.ContainerState_CONTAINER_EXITED
		c.StartedAt, c.FinishedAt, c.ExitCode = f.clock.Now().Add(-time.Second).UnixNano(), f.clock.Now().UnixNano(), 1
		f.rs.Unlock()
	}
	exit()
	f.mutations()
	if _, err := f.m.syncPod(ctx, podworker.SyncRequest{Pod: pod}); err != nil {
		t.Fatal(err)
	}
	if got := f.mutations(); got != "CreateContainer,StartContainer" {
		t.Fatalf("restart calls = %s", got)
	}
	second := containerByName(f, "app")
	if second.Annotations[podspec.AnnotationRestartCount] != "1" || second.LogPath != "" && !strings.HasSuffix(second.LogPath, "1.log") {
		t.Errorf("restarted instance annotations %v log %q", second.Annotations, second.LogPath)
	}
	exit()
	st, _ := f.m.syncPod(ctx, podworker.SyncRequest{Pod: pod})
	if got := f.mutations(); got != "" {
		t.Fatalf("restarted inside the back-off: %s", got)
	}
	if w := st.ContainerStatuses[0].State.Waiting; w == nil || w.Reason != "CrashLoopBackOff" {
		t.Errorf("status state %+v, want CrashLoopBackOff", st.ContainerStatuses[0].State)
	}
	f.clock.Step(11 * time.Second)
	if _, err := f.m.syncPod(ctx, podworker.SyncRequest{Pod: pod}); err != nil {
		t.Fatal(err)
	}
	if got := f.mutations(); got != "CreateContainer,StartContainer" {
		t.Errorf("after the back-off: %s", got)
	}
}

// A failed pull is ErrImagePull; until its back-off ends the next syncs say
// ImagePullBackOff without pulling again.
func TestSyncPodImagePullBackoff(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	pod := testPod()
	pod.Spec.Containers = pod.Spec.Containers[1:]
	f.is.InjectError("PullImage", errors.New("registry down"))
	st, err := f.m.syncPod(ctx, podworker.SyncRequest{Pod: pod})
	if err == nil || !strings.Contains(err.Error(), "registry down") {
		t.Fatalf("err = %v", err)
	}
	if w := st.ContainerStatuses[0].State.Waiting; w == nil || w.Reason != "ErrImagePull" {
		t.Fatalf("state %+v, want ErrImagePull", st.ContainerStatuses[0].State)
	}
	f.imageCalls()
	st, _ = f.m.syncPod(ctx, podworker.SyncRequest{Pod: pod})
	if w := st.ContainerStatuses[0].State.Waiting; w == nil || w.Reason != "ImagePullBackOff" {
		t.Fatalf("state %+v, want ImagePullBackOff", st.ContainerStatuses[0].State)
	}
	if strings.Contains(f.imageCalls(), "PullImage") {
		t.Error("pulled again inside the back-off")
	}
	f.clock.Step(11 * time.Second)
	if _, err := f.m.syncPod(ctx, podworker.SyncRequest{Pod: pod}); err != nil {
		t.Fatalf("after the back-off: %v", err)
	}
}

func TestPullNeverWithoutImage(t *testing.T) {
	f := newFixture(t)
	pod := testPod()
	pod.Spec.Containers = pod.Spec.Containers[:1]
	pod.Spec.Containers[0].ImagePullPolicy = v1.PullNever
	st, err := f.m.syncPod(context.Background(), podworker.SyncRequest{Pod: pod})
	if err == nil || st.ContainerStatuses[0].State.Waiting.Reason != "ErrImageNeverPull" {
		t.Fatalf("err = %v, state %+v", err, st.ContainerStatuses[0].State)
	}
	if strings.Contains(f.imageCalls(), "PullImage") {
		t.Error("pulled although the policy is Never")
	}
}

func TestHostNetworkPodHasNoHostname(t *testing.T) {
	pod := testPod()
	pod.Spec.HostNetwork = true
	sc, _, err := securitycontext.Sandbox(pod, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := sandboxConfig(pod, "/logs", 0, sandboxNet{hostname: "web-node", security: sc})
	if cfg.Hostname != "" || cfg.Linux.SecurityContext.NamespaceOptions.Network != runtimeapi.NamespaceMode_NODE {
		t.Errorf("hostname %q network %v", cfg.Hostname, cfg.Linux.SecurityContext.NamespaceOptions.Network)
	}
	cfg = sandboxConfig(testPod(), "/var/log/pods", 2, sandboxNet{hostname: "web-node"})
	if cfg.LogDirectory != "/var/log/pods/default_web-node_uid-1" || cfg.Hostname != "web-node" || cfg.Metadata.Attempt != 2 {
		t.Errorf("sandbox config %v", cfg)
	}
}

func TestSyncTerminatingPodStopsContainersThenSandbox(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if _, err := f.m.syncPod(ctx, podworker.SyncRequest{Pod: testPod()}); err != nil {
		t.Fatal(err)
	}
	f.mutations()
	if err := f.m.SyncTerminatingPod(ctx, podworker.TerminatingRequest{Pod: testPod(), GracePeriod: 3 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if got := f.mutations(); got != "StopContainer,StopContainer,StopPodSandbox" {
		t.Errorf("calls = %s", got)
	}
	running, err := f.m.RunningPods(ctx)
	if err != nil || hasRunningFake(running) {
		t.Errorf("still running after termination: %v %v", running, err)
	}
	// The final status: every container terminated, the phase terminal
	// though the restart policy is Always (the pod goes for good).
	st, _ := f.m.status.Get(testPod().UID)
	for _, c := range st.ContainerStatuses {
		if c.State.Terminated == nil {
			t.Errorf("container %s after termination: %+v, want terminated", c.Name, c.State)
		}
	}
	if st.Phase != v1.PodSucceeded && st.Phase != v1.PodFailed {
		t.Errorf("phase after termination %s, want Succeeded or Failed", st.Phase)
	}
}

func TestSyncTerminatingPodKeepsSandboxWhenAContainerWillNotStop(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if _, err := f.m.syncPod(ctx, podworker.SyncRequest{Pod: testPod()}); err != nil {
		t.Fatal(err)
	}
	f.mutations()
	f.rs.InjectError("StopContainer", errors.New("stuck"))
	if err := f.m.SyncTerminatingPod(ctx, podworker.TerminatingRequest{Pod: testPod(), GracePeriod: time.Second}); err == nil {
		t.Fatal("no error although a container did not stop")
	}
	if strings.Contains(f.mutations(), "StopPodSandbox") {
		t.Error("sandbox stopped while a container may still run")
	}
}

// A missing ConfigMap key is CreateContainerConfigError with the kubelet's
// message, and nothing is created for the container.
func TestEnvConfigError(t *testing.T) {
	f := newFixture(t)
	pod := testPod()
	pod.Spec.Containers = pod.Spec.Containers[:1]
	pod.Spec.Containers[0].Env = []v1.EnvVar{{Name: "GREETING", ValueFrom: &v1.EnvVarSource{
		ConfigMapKeyRef: &v1.ConfigMapKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "cm"}, Key: "greeting"}}}}
	st, err := f.m.syncPod(context.Background(), podworker.SyncRequest{Pod: pod})
	if err == nil {
		t.Fatal("no error")
	}
	w := st.ContainerStatuses[0].State.Waiting
	if w == nil || w.Reason != "CreateContainerConfigError" || !strings.Contains(w.Message, "no kubeClient") && !strings.Contains(w.Message, "not found") {
		t.Errorf("state %+v", st.ContainerStatuses[0].State)
	}
	if strings.Contains(f.mutations(), "CreateContainer") {
		t.Error("container created although its config failed")
	}
}

// A pod its hooks could not prepare gets nothing started, still has its
// status published (pending) and fails the sync with the hook's reason.
func TestSyncPodUnpreparedStartsNothing(t *testing.T) {
	f := newFixture(t)
	notMounted := errors.New("configmap \"settings\" not found")
	pod := testPod()
	res, err := f.m.SyncPod(context.Background(), podworker.SyncRequest{Reason: podupdate.Add, Pod: pod, Unprepared: notMounted})
	if !errors.Is(err, notMounted) {
		t.Fatalf("SyncPod = %v, want the hook's error", err)
	}
	if got := f.mutations(); got != "" {
		t.Errorf("runtime calls = %s, want none", got)
	}
	if res.Terminal {
		t.Error("an unprepared pod reported terminal")
	}
	if st, ok := f.m.status.Get(pod.UID); !ok || st.Phase != v1.PodPending {
		t.Errorf("status %v (known %v), want Pending", st.Phase, ok)
	}
}

// The result asks for a sync when activeDeadlineSeconds runs out, and says
// terminal once the pod failed it.
func TestSyncPodResultFollowsTheDeadline(t *testing.T) {
	f := newFixture(t)
	pod := testPod()
	deadline := int64(30)
	pod.Spec.ActiveDeadlineSeconds = &deadline
	res, err := f.m.SyncPod(context.Background(), podworker.SyncRequest{Reason: podupdate.Add, Pod: pod})
	if err != nil {
		t.Fatal(err)
	}
	// startTime has whole seconds; the sync is asked for a second after.
	if res.Terminal || res.RequeueAfter < 30*time.Second || res.RequeueAfter > 32*time.Second {
		t.Errorf("result %+v, want a requeue about 31s ahead", res)
	}
	f.clock.Step(40 * time.Second)
	res, err = f.m.SyncPod(context.Background(), podworker.SyncRequest{Reason: podupdate.Resync, Pod: pod})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Terminal || res.RequeueAfter != 0 {
		t.Errorf("result after the deadline %+v, want terminal", res)
	}
}

// countingRuntime counts the RunPodSandbox calls in flight, holding each
// until release is closed.
type countingRuntime struct {
	Runtime
	mu            sync.Mutex
	inFlight, max int
	entered       chan struct{}
	release       chan struct{}
}

func (r *countingRuntime) RunPodSandbox(ctx context.Context, cfg *runtimeapi.PodSandboxConfig, handler string) (string, error) {
	r.mu.Lock()
	r.inFlight++
	r.max = max(r.max, r.inFlight)
	r.mu.Unlock()
	r.entered <- struct{}{}
	<-r.release
	r.mu.Lock()
	r.inFlight--
	r.mu.Unlock()
	return r.Runtime.RunPodSandbox(ctx, cfg, handler)
}

// MaxParallelSandboxes bounds the sandboxes being created at once; the
// other pods wait their turn and all start.
func TestSandboxCreationIsBounded(t *testing.T) {
	f := newFixture(t)
	log := slog.New(slog.DiscardHandler)
	rt := &countingRuntime{Runtime: cri.New(f.rs, f.is, "fake", cri.DefaultTimeouts(), log),
		entered: make(chan struct{}, 10), release: make(chan struct{})}
	m := New(rt, Options{PodLogsDir: "/var/log/pods", MaxParallelSandboxes: 2}, Deps{Clock: f.clock, Log: log, Status: statusmanager.New(nil)})
	var wg sync.WaitGroup
	for i := range 5 {
		pod := testPod()
		pod.Name, pod.UID = fmt.Sprintf("web-%d", i), types.UID(fmt.Sprintf("uid-%d", i))
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := m.syncPod(context.Background(), podworker.SyncRequest{Pod: pod}); err != nil {
				t.Error(err)
			}
		}()
	}
	<-rt.entered
	<-rt.entered
	close(rt.release)
	wg.Wait()
	if rt.max != 2 {
		t.Errorf("at most %d sandboxes created at once, want 2", rt.max)
	}
	if got := len(f.rs.Sandboxes); got != 5 {
		t.Errorf("%d sandboxes, want 5", got)
	}
}

// A pod whose init container failed under restartPolicy Never is Failed
// with no reason of its own, as the kubelet reports it.
func TestInitContainerFailureHasNoPodReason(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	pod := testPod()
	pod.Spec.RestartPolicy = v1.RestartPolicyNever
	pod.Spec.InitContainers = []v1.Container{{Name: "init", Image: "busybox:1.35", ImagePullPolicy: v1.PullIfNotPresent}}
	if _, err := f.m.syncPod(ctx, podworker.SyncRequest{Pod: pod}); err != nil {
		t.Fatal(err)
	}
	c := containerByName(f, "init")
	f.rs.Lock()
	c.State = runtimeapi.ContainerState_CONTAINER_EXITED
	c.StartedAt, c.FinishedAt, c.ExitCode = f.clock.Now().Add(-time.Second).UnixNano(), f.clock.Now().UnixNano(), 1
	f.rs.Unlock()
	st, err := f.m.syncPod(ctx, podworker.SyncRequest{Pod: pod})
	if err != nil {
		t.Fatal(err)
	}
	if st.Phase != v1.PodFailed || st.Reason != "" || st.Message != "" {
		t.Errorf("phase %s reason %q message %q, want Failed without a reason", st.Phase, st.Reason, st.Message)
	}
}

// A pod deleted before its sandbox ever ran ends Failed, its containers
// terminated with an unknown status, as the kubelet's TerminatePod leaves
// it; a rejected pod's status stays as it was.
func TestTerminatingPodThatNeverRan(t *testing.T) {
	f := newFixture(t)
	pod := testPod()
	pod.Annotations = nil // an API pod, not a static one
	if err := f.m.SyncTerminatingPod(context.Background(), podworker.TerminatingRequest{Pod: pod, GracePeriod: time.Second}); err != nil {
		t.Fatal(err)
	}
	st, ok := f.m.status.Get(pod.UID)
	if !ok || st.Phase != v1.PodFailed {
		t.Fatalf("status %+v, want Failed", st)
	}
	if term := st.ContainerStatuses[0].State.Terminated; term == nil || term.ExitCode != 137 {
		t.Errorf("container state %+v", st.ContainerStatuses[0].State)
	}
}

// A started container gets the kubelet's /var/log/containers link to its
// log, beside the pod logs directory.
func TestLegacyLogLink(t *testing.T) {
	f := newFixture(t)
	logs := filepath.Join(t.TempDir(), "pods")
	f.m.opts.PodLogsDir, f.m.opts.LegacyLogLinks = logs, true
	pod := testPod()
	pod.Spec.Containers = pod.Spec.Containers[:1]
	if _, err := f.m.syncPod(context.Background(), podworker.SyncRequest{Pod: pod}); err != nil {
		t.Fatal(err)
	}
	c := containerByName(f, "app")
	link := podspec.LegacyLogLink(logs, pod.Name, pod.Namespace, "app", c.Id)
	target, err := os.Readlink(link)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(PodLogDir(logs, pod), "app", "0.log"); target != want {
		t.Errorf("link to %s, want %s", target, want)
	}
}
