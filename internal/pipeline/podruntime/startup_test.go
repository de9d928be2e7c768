package podruntime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critest "k8s.io/cri-api/pkg/apis/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/base/events"
	"github.com/nodelet/nodelet/internal/base/metrics"
	"github.com/nodelet/nodelet/internal/pipeline/cri"
	"github.com/nodelet/nodelet/internal/pipeline/podworker"
	"github.com/nodelet/nodelet/internal/pipeline/statusmanager"
	"github.com/nodelet/nodelet/internal/pure/podspec"
)

// slowRuntime makes the runtime's slow calls take time on the fake clock:
// the clock moves by took[call] during each.
type slowRuntime struct {
	Runtime
	clock *clocktesting.FakeClock
	took  map[string]time.Duration
}

func (r slowRuntime) RunPodSandbox(ctx context.Context, cfg *runtimeapi.PodSandboxConfig, handler string) (string, error) {
	r.clock.Step(r.took["RunPodSandbox"])
	return r.Runtime.RunPodSandbox(ctx, cfg, handler)
}

func (r slowRuntime) PullImage(ctx context.Context, image *runtimeapi.ImageSpec, auth *runtimeapi.AuthConfig, sandboxCfg *runtimeapi.PodSandboxConfig) (string, error) {
	r.clock.Step(r.took["PullImage"])
	return r.Runtime.PullImage(ctx, image, auth, sandboxCfg)
}

func (r slowRuntime) StartContainer(ctx context.Context, id string) error {
	r.clock.Step(r.took["StartContainer"])
	return r.Runtime.StartContainer(ctx, id)
}

// steps lists the pod's events as "+offset Reason: message (count)",
// the offset from t0 to the millisecond.
func steps(rec *events.Recorder, pod *v1.Pod, t0 time.Time) string {
	var out []string
	for _, e := range rec.ForPod(pod.UID) {
		count := ""
		if e.Count > 1 {
			count = fmt.Sprintf(" (x%d)", e.Count)
		}
		out = append(out, fmt.Sprintf("+%v %s: %s%s", e.FirstTime.Sub(t0), e.Reason, e.Message, count))
	}
	return strings.Join(out, "\n")
}

// The start-up steps are recorded as they complete, each once, stamped by
// the injected clock: admitted, sandbox ready, the init container's image
// pulled, started, completed, then the container's, and ready.
func TestStartupStepsAreRecordedInOrder(t *testing.T) {
	rs, is := critest.NewFakeRuntimeService(), critest.NewFakeImageService()
	is.SetFakeImageSize(1)
	log := slog.New(slog.DiscardHandler)
	clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	t0 := clk.Now()
	rec := events.New(0, clk, log)
	rt := slowRuntime{Runtime: cri.New(rs, is, "fake", cri.DefaultTimeouts(), log), clock: clk, took: map[string]time.Duration{
		"RunPodSandbox": 146 * time.Millisecond, "PullImage": 300 * time.Millisecond, "StartContainer": 20 * time.Millisecond,
	}}
	m := New(rt, Options{PodLogsDir: "/var/log/pods"}, Deps{Clock: clk, Log: log, Recorder: rec, Status: statusmanager.New(nil)})
	pod := testPod()
	pod.Spec.InitContainers = []v1.Container{{Name: "setup", Image: "busybox:1.35", ImagePullPolicy: v1.PullIfNotPresent}}
	pod.Spec.Containers = []v1.Container{{Name: "web", Image: "nginx:1.27", ImagePullPolicy: v1.PullIfNotPresent}}
	pod.Spec.DNSPolicy = v1.DNSDefault
	ctx := context.Background()

	if _, err := m.syncPod(ctx, podworker.SyncRequest{Pod: pod}); err != nil {
		t.Fatal(err)
	}
	// The init container runs for a second and exits 0.
	clk.Step(time.Second)
	setup := containerByName(&fixture{rs: rs}, "setup")
	rs.Lock()
	setup.State, setup.FinishedAt, setup.ExitCode = runtimeapi.ContainerState_CONTAINER_EXITED, clk.Now().UnixNano(), 0
	rs.Unlock()
	clk.Step(200 * time.Millisecond) // the sync that sees it comes a little later
	st, err := m.syncPod(ctx, podworker.SyncRequest{Pod: pod})
	if err != nil {
		t.Fatal(err)
	}
	if st.Phase != v1.PodRunning {
		t.Fatalf("phase %s", st.Phase)
	}
	// Later syncs record nothing again.
	clk.Step(time.Second)
	if _, err := m.syncPod(ctx, podworker.SyncRequest{Pod: pod}); err != nil {
		t.Fatal(err)
	}

	want := strings.Join([]string{
		"+0s Admitted: Pod admitted",
		"+146ms SandboxReady: Pod sandbox is ready, IP 192.168.192.168",
		`+146ms Pulling: Pulling image "busybox:1.35"`,
		`+446ms Pulled: Successfully pulled image "busybox:1.35" in 300ms (300ms including waiting). Image size: 1 bytes.`,
		"+446ms Created: Created container setup",
		"+466ms Started: Started container setup",
		"+1.666s InitContainerCompleted: Init container setup completed",
		`+1.666s Pulling: Pulling image "nginx:1.27"`,
		`+1.966s Pulled: Successfully pulled image "nginx:1.27" in 300ms (300ms including waiting). Image size: 1 bytes.`,
		"+1.966s Created: Created container web",
		"+1.986s Started: Started container web",
		"+1.986s PodReady: Pod is ready",
	}, "\n")
	if got := steps(rec, pod, t0); got != want {
		t.Errorf("events:\n%s\nwant:\n%s", got, want)
	}

	// A manager that finds the pod running (nodelet restarted) does not
	// know its start-up and records none of it.
	rec2 := events.New(0, clk, log)
	m2 := New(rt, Options{PodLogsDir: "/var/log/pods"}, Deps{Clock: clk, Log: log, Recorder: rec2, Status: statusmanager.New(nil)})
	if _, err := m2.syncPod(ctx, podworker.SyncRequest{Pod: pod}); err != nil {
		t.Fatal(err)
	}
	if got := steps(rec2, pod, t0); got != "" {
		t.Errorf("adopted pod: events\n%s\nwant none", got)
	}
}

type stageLog map[string][]time.Duration

func (l stageLog) ObservePodStartStage(stage string, took time.Duration) {
	l[stage] = append(l[stage], took)
}

// A pod's start is cut into stages, each observed once, with the injected
// clock: the wait from config.seen to the first sync, observe, plan, the
// sandbox, the containers (pull and start) and the status that says
// Running. Later syncs observe nothing.
func TestStartupStagesObservedOnce(t *testing.T) {
	rs, is := critest.NewFakeRuntimeService(), critest.NewFakeImageService()
	is.SetFakeImageSize(1)
	log := slog.New(slog.DiscardHandler)
	clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	rt := slowRuntime{Runtime: cri.New(rs, is, "fake", cri.DefaultTimeouts(), log), clock: clk, took: map[string]time.Duration{
		"RunPodSandbox": 146 * time.Millisecond, "PullImage": 300 * time.Millisecond, "StartContainer": 20 * time.Millisecond,
	}}
	stages := stageLog{}
	m := New(rt, Options{PodLogsDir: "/var/log/pods"}, Deps{Clock: clk, Log: log, Status: statusmanager.New(nil), PodStartStages: stages})
	pod := testPod()
	pod.Spec.Containers = pod.Spec.Containers[:1]
	pod.Annotations = map[string]string{podspec.AnnotationConfigSeen: clk.Now().Add(-40 * time.Millisecond).Format(time.RFC3339Nano)}
	ctx := context.Background()
	for range 2 {
		if _, err := m.syncPod(ctx, podworker.SyncRequest{Pod: pod}); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]time.Duration{
		metrics.PodStartStageDispatch: 40 * time.Millisecond, metrics.PodStartStageObserve: 0, metrics.PodStartStagePlan: 0,
		metrics.PodStartStageSandbox: 146 * time.Millisecond, metrics.PodStartStageContainers: 320 * time.Millisecond,
		metrics.PodStartStageStatus: 0,
	}
	for stage, d := range want {
		if got := stages[stage]; len(got) != 1 || got[0] != d {
			t.Errorf("stage %s observed %v, want once %v", stage, got, d)
		}
	}
	if len(stages) != len(want) {
		t.Errorf("stages %v, want %d", stages, len(want))
	}
}

// startCounts records what a StartCounter is told.
type startCounts []string

func (c *startCounts) CountPodStart(failed bool) {
	*c = append(*c, fmt.Sprintf("pod failed=%v", failed))
}

func (c *startCounts) CountContainerStart(containerType, code string) {
	*c = append(*c, containerType+" "+code)
}

// Every sandbox and container start is counted, as the kubelet's SyncPod
// counts them (kubelet_started_*_total), with its error code when it
// fails: here the init container's image cannot be pulled, so nothing
// after it starts; once it can, the init container and then both
// containers start.
func TestStartsCounted(t *testing.T) {
	f := newFixture(t)
	var counts startCounts
	f.m.starts = &counts
	pod := testPod()
	pod.Spec.InitContainers = []v1.Container{{Name: "init", Image: "busybox:1.35", ImagePullPolicy: v1.PullIfNotPresent}}
	f.is.InjectError("PullImage", errors.New("not found"))
	if _, err := f.m.syncPod(t.Context(), podworker.SyncRequest{Pod: pod}); err == nil {
		t.Fatal("the first sync started the init container without its image")
	}
	want := "pod failed=false\ninit_container ErrImagePull"
	if got := strings.Join(counts, "\n"); got != want {
		t.Errorf("first sync counted:\n%s\nwant:\n%s", got, want)
	}
	counts = nil
	f.clock.Step(time.Minute) // past the pull back-off
	if _, err := f.m.syncPod(t.Context(), podworker.SyncRequest{Pod: pod}); err != nil {
		t.Fatal(err)
	}
	// The init container exits 0; the next sync starts the containers.
	f.clock.Step(time.Second)
	init := containerByName(f, "init")
	f.rs.Lock()
	init.State, init.FinishedAt, init.ExitCode = runtimeapi.ContainerState_CONTAINER_EXITED, f.clock.Now().UnixNano(), 0
	f.rs.Unlock()
	if _, err := f.m.syncPod(t.Context(), podworker.SyncRequest{Pod: pod}); err != nil {
		t.Fatal(err)
	}
	want = "init_container \ncontainer \ncontainer "
	if got := strings.Join(counts, "\n"); got != want {
		t.Errorf("later syncs counted:\n%s\nwant:\n%s", got, want)
	}
}
