package podruntime

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critest "k8s.io/cri-api/pkg/apis/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/node/podhooks"
	"github.com/nodelet/nodelet/internal/pipeline/cri"
	"github.com/nodelet/nodelet/internal/pipeline/podworker"
	"github.com/nodelet/nodelet/internal/pipeline/statusmanager"
	"github.com/nodelet/nodelet/internal/pure/podsetup"
	"github.com/nodelet/nodelet/internal/pure/podspec"
	"github.com/nodelet/nodelet/internal/pure/podupdate"
)

// deviceHook is a per-pod resource the runtime manager knows nothing of:
// it writes a file for the pod in its own directory and gives every
// container a mount of it, a device and an annotation; Cleanup removes
// the file.
type deviceHook struct {
	dir     string
	cleaned chan string // the UIDs cleaned up
}

func (deviceHook) Name() string { return "test device" }

func (h deviceHook) Prepare(_ context.Context, pod *v1.Pod) (podsetup.Setup, error) {
	file := filepath.Join(h.dir, string(pod.UID))
	if err := os.WriteFile(file, []byte("token"), 0o600); err != nil {
		return podsetup.Setup{}, err
	}
	contribute := func(c podsetup.Container) (podsetup.Additions, error) {
		return podsetup.Additions{
			Mounts:      []*runtimeapi.Mount{{ContainerPath: "/run/device/" + c.Container.Name, HostPath: file, Readonly: true}},
			Devices:     []*runtimeapi.Device{{ContainerPath: "/dev/test0", HostPath: "/dev/null", Permissions: "rw"}},
			Env:         []*runtimeapi.KeyValue{{Key: "TEST_DEVICE", Value: []byte("test0")}},
			Annotations: map[string]string{"test.nodelet.io/device": "test0", podspec.AnnotationRestartCount: "7"},
		}, nil
	}
	return podsetup.Setup{Containers: []podsetup.Contributor{podsetup.ContributorFunc(contribute)}}, nil
}

func (h deviceHook) Cleanup(_ context.Context, pod *v1.Pod) error {
	if err := os.Remove(filepath.Join(h.dir, string(pod.UID))); err != nil && !os.IsNotExist(err) {
		return err
	}
	h.cleaned <- string(pod.UID)
	return nil
}

// createdRuntime is the cri-api fake telling of every container config it
// is given.
type createdRuntime struct {
	*critest.FakeRuntimeService
	created chan *runtimeapi.ContainerConfig
}

func (r *createdRuntime) CreateContainer(ctx context.Context, sandboxID string, cfg *runtimeapi.ContainerConfig, sandboxCfg *runtimeapi.PodSandboxConfig) (string, error) {
	id, err := r.FakeRuntimeService.CreateContainer(ctx, sandboxID, cfg, sandboxCfg)
	r.created <- cfg
	return id, err
}

// A new per-pod resource is a new hook, not a change to the runtime
// manager: the pod workers carry what it sets up to the runtime manager,
// which puts its mounts, devices, env and annotations into every container's
// config (nodelet's own annotations win), and its Cleanup runs once the
// pod is gone.
func TestNewHookContributesToEveryContainer(t *testing.T) {
	const failsafe = 10 * time.Second
	clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	log := slog.New(slog.DiscardHandler)
	rs := &createdRuntime{FakeRuntimeService: critest.NewFakeRuntimeService(), created: make(chan *runtimeapi.ContainerConfig, 4)}
	is := critest.NewFakeImageService()
	is.SetFakeImageSize(1)
	c := cri.New(rs, is, "fake", cri.DefaultTimeouts(), log)
	root := t.TempDir()
	podsDir, devDir := filepath.Join(root, "pods"), filepath.Join(root, "dev")
	if err := os.Mkdir(devDir, 0o700); err != nil {
		t.Fatal(err)
	}
	m := New(c, Options{PodLogsDir: filepath.Join(root, "logs"), PodsDir: podsDir}, Deps{Clock: clk, Log: log, Status: statusmanager.New(nil)})
	dev := deviceHook{dir: devDir, cleaned: make(chan string, 1)}
	hooks := []podworker.Hook{podhooks.PodDir{PodsDir: podsDir}, dev}
	w := podworker.New(podworker.Deps{Syncer: m, Hooks: hooks, Clock: clk, Log: log}, podworker.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	pod := testPod()
	w.UpdatePod(podworker.UpdatePodOptions{Reason: podupdate.Add, Pod: pod})
	for range pod.Spec.Containers {
		var cfg *runtimeapi.ContainerConfig
		select {
		case cfg = <-rs.created:
		case <-time.After(failsafe):
			t.Fatal("no container created")
		}
		name := cfg.GetMetadata().GetName()
		var mounted bool
		for _, mnt := range cfg.GetMounts() {
			mounted = mounted || mnt.ContainerPath == "/run/device/"+name && mnt.HostPath == filepath.Join(devDir, string(pod.UID)) && mnt.Readonly
		}
		if !mounted {
			t.Errorf("%s: mounts %v, want the hook's", name, cfg.GetMounts())
		}
		if d := cfg.GetDevices(); len(d) != 1 || d[0].ContainerPath != "/dev/test0" {
			t.Errorf("%s: devices %v, want the hook's", name, d)
		}
		// The kubelet's order: a device plugin's variables first, so the
		// pod's own env wins over one of the same name.
		if e := cfg.GetEnvs(); len(e) == 0 || e[0].Key != "TEST_DEVICE" || string(e[0].Value) != "test0" {
			t.Errorf("%s: envs %v, want the hook's first", name, e)
		}
		if a := cfg.GetAnnotations(); a["test.nodelet.io/device"] != "test0" || a[podspec.AnnotationRestartCount] != "0" {
			t.Errorf("%s: annotations %v, want the hook's beside nodelet's own", name, a)
		}
	}

	w.UpdatePod(podworker.UpdatePodOptions{Reason: podupdate.Kill, Pod: pod})
	select {
	case uid := <-dev.cleaned:
		if uid != string(pod.UID) {
			t.Errorf("cleaned up %s", uid)
		}
	case <-time.After(failsafe):
		t.Fatal("the hook was not cleaned up")
	}
	if _, err := os.Stat(filepath.Join(devDir, string(pod.UID))); !os.IsNotExist(err) {
		t.Errorf("the hook's file after Cleanup: %v", err)
	}
}
