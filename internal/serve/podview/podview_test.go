package podview

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/base/logs"
	"github.com/nodelet/nodelet/internal/pure/observed"
	"github.com/nodelet/nodelet/internal/serve/server"
)

type fakeSources []*v1.Pod

func (f fakeSources) Pods() []*v1.Pod {
	out := make([]*v1.Pod, len(f))
	for i, p := range f {
		out[i] = p.DeepCopy()
	}
	return out
}

type fakeStatuses map[types.UID]v1.PodStatus

func (f fakeStatuses) Get(uid types.UID) (v1.PodStatus, bool) { st, ok := f[uid]; return st, ok }

type fakePods map[types.UID]*observed.PodStatus

func (f fakePods) Observe(_ context.Context, uid types.UID, _, _ string) (*observed.PodStatus, error) {
	if st, ok := f[uid]; ok {
		return st, nil
	}
	return &observed.PodStatus{UID: uid}, nil
}

func (f fakePods) ListPods(context.Context) (map[types.UID]*observed.PodStatus, error) { return f, nil }

type fakeCRI struct{ logs map[string]string }

func (f fakeCRI) ContainerStatus(_ context.Context, id string) (*runtimeapi.ContainerStatusResponse, error) {
	return &runtimeapi.ContainerStatusResponse{Status: &runtimeapi.ContainerStatus{Id: id, LogPath: f.logs[id],
		State: runtimeapi.ContainerState_CONTAINER_EXITED}}, nil
}
func (fakeCRI) Exec(context.Context, *runtimeapi.ExecRequest) (string, error) { return "exec", nil }
func (fakeCRI) Attach(context.Context, *runtimeapi.AttachRequest) (string, error) {
	return "attach", nil
}
func (fakeCRI) PortForward(context.Context, *runtimeapi.PortForwardRequest) (string, error) {
	return "pf", nil
}

func view(t *testing.T) *View {
	dir := t.TempDir()
	for _, f := range []string{"new.log", "old.log", "debugger.log"} {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", UID: "u1"}}
	return New(Deps{
		Sources:  fakeSources{pod},
		Statuses: fakeStatuses{"u1": {Phase: v1.PodRunning}},
		Pods: fakePods{"u1": {UID: "u1", Name: "web", Namespace: "default",
			Sandboxes: []observed.Sandbox{{ID: "sb", State: observed.SandboxReady}},
			Containers: []observed.Container{ // newest first
				{ID: "e1", Name: "debugger", State: observed.ContainerRunning},
				{ID: "c2", Name: "app", State: observed.ContainerRunning},
				{ID: "c1", Name: "app", State: observed.ContainerExited},
			}}},
		CRI: fakeCRI{logs: map[string]string{"c2": filepath.Join(dir, "new.log"), "c1": filepath.Join(dir, "old.log"), "e1": filepath.Join(dir, "debugger.log")}},
	})
}

func TestPodsCarryTheirStatus(t *testing.T) {
	pods := view(t).Pods()
	if len(pods) != 1 || pods[0].Status.Phase != v1.PodRunning {
		t.Fatalf("Pods() = %+v", pods)
	}
}

func TestLogPathAndStreamingFindKnownPodsOnly(t *testing.T) {
	v := view(t)
	ctx := context.Background()
	if path, id, err := v.LogPath(ctx, "default", "web", "app", false); err != nil || id != "c2" || filepath.Base(path) != "new.log" {
		t.Errorf("current log: %s %s %v", path, id, err)
	}
	if path, id, err := v.LogPath(ctx, "default", "web", "app", true); err != nil || id != "c1" || filepath.Base(path) != "old.log" {
		t.Errorf("previous log: %s %s %v", path, id, err)
	}
	if _, _, err := v.LogPath(ctx, "default", "other", "app", false); !errors.Is(err, logs.ErrNotFound) {
		t.Errorf("unknown pod's log: %v", err)
	}
	if id, err := v.ContainerID(ctx, "default", "web", "", "app"); err != nil || id != "c2" {
		t.Errorf("ContainerID = %s %v", id, err)
	}
	if _, err := v.ContainerID(ctx, "default", "web", "wrong-uid", "app"); !errors.Is(err, server.ErrNotFound) {
		t.Errorf("ContainerID with another UID: %v", err)
	}
	// Ephemeral containers are found by name as the others, for logs,
	// exec and attach.
	if path, id, err := v.LogPath(ctx, "default", "web", "debugger", false); err != nil || id != "e1" || filepath.Base(path) != "debugger.log" {
		t.Errorf("ephemeral container's log: %s %s %v", path, id, err)
	}
	if id, err := v.ContainerID(ctx, "default", "web", "u1", "debugger"); err != nil || id != "e1" {
		t.Errorf("ContainerID of the ephemeral container = %s %v", id, err)
	}
	if id, err := v.SandboxID(ctx, "default", "web", "u1"); err != nil || id != "sb" {
		t.Errorf("SandboxID = %s %v", id, err)
	}
}
