package podruntime

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critest "k8s.io/cri-api/pkg/apis/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/pipeline/cri"
	"github.com/nodelet/nodelet/internal/pipeline/podworker"
	"github.com/nodelet/nodelet/internal/pipeline/statusmanager"
	"github.com/nodelet/nodelet/internal/pure/podspec"
)

// configRecorder is the fake runtime keeping each created container's
// config (the fake itself drops the Linux part).
type configRecorder struct {
	*critest.FakeRuntimeService
	mu      sync.Mutex
	configs map[string]*runtimeapi.ContainerConfig
}

func (r *configRecorder) CreateContainer(ctx context.Context, sandboxID string, cfg *runtimeapi.ContainerConfig, sandboxCfg *runtimeapi.PodSandboxConfig) (string, error) {
	id, err := r.FakeRuntimeService.CreateContainer(ctx, sandboxID, cfg, sandboxCfg)
	if err == nil {
		r.mu.Lock()
		r.configs[cfg.GetMetadata().GetName()] = cfg
		r.mu.Unlock()
	}
	return id, err
}

func (r *configRecorder) config(name string) *runtimeapi.ContainerConfig {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.configs[name]
}

func newRecordingFixture(t *testing.T) (*fixture, *configRecorder) {
	t.Helper()
	f := &fixture{rs: critest.NewFakeRuntimeService(), is: critest.NewFakeImageService(),
		clock: clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))}
	f.is.SetFakeImageSize(1)
	rec := &configRecorder{FakeRuntimeService: f.rs, configs: map[string]*runtimeapi.ContainerConfig{}}
	log := slog.New(slog.DiscardHandler)
	c := cri.New(rec, f.is, "fake", cri.DefaultTimeouts(), log)
	f.m = New(c, Options{PodLogsDir: "/var/log/pods"}, Deps{Clock: f.clock, Log: log, Status: statusmanager.New(nil)})
	return f, rec
}

func withEphemeral(pod *v1.Pod, name, target string) *v1.Pod {
	pod = pod.DeepCopy()
	pod.Spec.EphemeralContainers = append(pod.Spec.EphemeralContainers, v1.EphemeralContainer{
		EphemeralContainerCommon: v1.EphemeralContainerCommon{
			Name: name, Image: "busybox:1.35", ImagePullPolicy: v1.PullIfNotPresent,
			Command: []string{"sh", "-c", "echo $GREETING; sleep 3600"},
			Env:     []v1.EnvVar{{Name: "GREETING", Value: "hello"}},
		},
		TargetContainerName: target,
	})
	return pod
}

// An ephemeral container added to a running pod (the API's update of
// spec.ephemeralContainers) is created in its sandbox once, labelled as
// one, in the target's PID namespace, logging under its name; the
// regular containers are left alone; a second one added later starts too;
// an exited one is not restarted.
func TestEphemeralContainersStartOnceInTheTargetsPIDNamespace(t *testing.T) {
	f, rec := newRecordingFixture(t)
	ctx := context.Background()
	pod := testPod()
	if _, err := f.m.syncPod(ctx, podworker.SyncRequest{Pod: pod}); err != nil {
		t.Fatal(err)
	}
	f.mutations()
	app := containerByName(f, "app")

	pod = withEphemeral(pod, "debugger", "app")
	st, err := f.m.syncPod(ctx, podworker.SyncRequest{Pod: pod})
	if err != nil {
		t.Fatal(err)
	}
	if got := f.mutations(); got != "CreateContainer,StartContainer" {
		t.Errorf("runtime calls = %s, want one ephemeral container created and started", got)
	}
	cfg := rec.config("debugger")
	if cfg == nil {
		t.Fatal("debugger not created")
	}
	if cfg.Labels[podspec.LabelContainerKind] != podspec.KindEphemeral || cfg.Labels[podspec.LabelContainerName] != "debugger" ||
		cfg.Labels[podspec.LabelPodUID] != "uid-1" || cfg.Labels[podspec.LabelManagedBy] != podspec.ManagedByValue {
		t.Errorf("labels %v", cfg.Labels)
	}
	if cfg.LogPath != "debugger/0.log" {
		t.Errorf("log path %q", cfg.LogPath)
	}
	ns := cfg.GetLinux().GetSecurityContext().GetNamespaceOptions()
	if ns.GetPid() != runtimeapi.NamespaceMode_TARGET || ns.GetTargetId() != app.Id {
		t.Errorf("pid namespace %v target %q, want TARGET %q", ns.GetPid(), ns.GetTargetId(), app.Id)
	}
	if len(cfg.Envs) == 0 || len(cfg.Command) != 3 || cfg.Command[2] != "echo $GREETING; sleep 3600" {
		t.Errorf("env %v command %v", cfg.Envs, cfg.Command)
	}
	if rec.config("app").GetLabels()[podspec.LabelContainerKind] != "" {
		t.Error("a regular container is labelled with a kind")
	}
	if len(st.EphemeralContainerStatuses) != 1 || st.EphemeralContainerStatuses[0].State.Running == nil || st.EphemeralContainerStatuses[0].Ready {
		t.Errorf("ephemeral statuses %+v", st.EphemeralContainerStatuses)
	}
	if len(st.ContainerStatuses) != 2 || st.Phase != v1.PodRunning {
		t.Errorf("pod status changed: %s %d", st.Phase, len(st.ContainerStatuses))
	}

	// Steady: nothing more.
	if _, err := f.m.syncPod(ctx, podworker.SyncRequest{Pod: pod}); err != nil {
		t.Fatal(err)
	}
	if got := f.mutations(); got != "" {
		t.Errorf("steady sync changed %s", got)
	}

	// It exits: not restarted. A second one without a target gets its own
	// PID namespace.
	dbg := containerByName(f, "debugger")
	f.rs.Lock()
	dbg.State = runtimeapi.ContainerState_CONTAINER_EXITED
	dbg.ExitCode = 1
	dbg.FinishedAt = f.clock.Now().UnixNano()
	f.rs.Unlock()
	pod = withEphemeral(pod, "debugger2", "")
	st, err = f.m.syncPod(ctx, podworker.SyncRequest{Pod: pod})
	if err != nil {
		t.Fatal(err)
	}
	if got := f.mutations(); got != "CreateContainer,StartContainer" {
		t.Errorf("runtime calls = %s, want only debugger2", got)
	}
	if ns := rec.config("debugger2").GetLinux().GetSecurityContext().GetNamespaceOptions(); ns.GetPid() != runtimeapi.NamespaceMode_CONTAINER || ns.GetTargetId() != "" {
		t.Errorf("debugger2 pid namespace %v target %q", ns.GetPid(), ns.GetTargetId())
	}
	if n := len(st.EphemeralContainerStatuses); n != 2 || st.EphemeralContainerStatuses[0].State.Terminated == nil ||
		st.EphemeralContainerStatuses[1].State.Running == nil {
		t.Errorf("ephemeral statuses %+v", st.EphemeralContainerStatuses)
	}
}

// A target that does not exist is a config error of the ephemeral
// container only, shown in its status.
func TestEphemeralContainerUnknownTarget(t *testing.T) {
	f, _ := newRecordingFixture(t)
	ctx := context.Background()
	pod := testPod()
	if _, err := f.m.syncPod(ctx, podworker.SyncRequest{Pod: pod}); err != nil {
		t.Fatal(err)
	}
	f.mutations()
	st, err := f.m.syncPod(ctx, podworker.SyncRequest{Pod: withEphemeral(pod, "debugger", "nope")})
	if err == nil {
		t.Error("no error for a missing target")
	}
	if got := f.mutations(); got != "" {
		t.Errorf("runtime calls = %s", got)
	}
	if len(st.EphemeralContainerStatuses) != 1 || st.EphemeralContainerStatuses[0].State.Waiting == nil ||
		st.EphemeralContainerStatuses[0].State.Waiting.Reason != "CreateContainerConfigError" {
		t.Errorf("ephemeral statuses %+v", st.EphemeralContainerStatuses)
	}
}
