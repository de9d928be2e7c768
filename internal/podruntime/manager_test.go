package podruntime

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	critest "k8s.io/cri-api/pkg/apis/testing"

	"github.com/nodelet/nodelet/internal/cri"
)

// newTestManager wires a Manager to the cri-api fakes through the real
// cri.Client, as the agent does with a real runtime.
func newTestManager(t *testing.T) (*Manager, *critest.FakeRuntimeService, *critest.FakeImageService) {
	t.Helper()
	rs, is := critest.NewFakeRuntimeService(), critest.NewFakeImageService()
	is.SetFakeImageSize(1)
	c := cri.New(rs, is, "fake", cri.DefaultTimeouts(), slog.New(slog.DiscardHandler))
	return New(c, "/var/log/pods", slog.New(slog.DiscardHandler)), rs, is
}

func testPod() *v1.Pod {
	grace := int64(5)
	return &v1.Pod{
		ObjectMeta: metav1ObjectMeta("web-node", "default", "uid-1"),
		Spec: v1.PodSpec{
			TerminationGracePeriodSeconds: &grace,
			Containers: []v1.Container{
				{Name: "app", Image: "busybox:1.35", ImagePullPolicy: v1.PullIfNotPresent},
				{Name: "side", Image: "busybox:latest", ImagePullPolicy: v1.PullAlways},
			},
		},
	}
}

func TestSyncPodCreatesSandboxAndContainers(t *testing.T) {
	m, rs, is := newTestManager(t)
	if err := m.SyncPod(context.Background(), testPod()); err != nil {
		t.Fatal(err)
	}
	want := []string{"ListPodSandbox", "RunPodSandbox", "ListContainers",
		"CreateContainer", "StartContainer", "CreateContainer", "StartContainer"}
	if err := rs.AssertCalls(want); err != nil {
		t.Error(err)
	}
	// IfNotPresent looks first, then pulls; Always pulls without looking.
	if got := strings.Join(imageCalls(is), ","); got != "ImageStatus,PullImage,PullImage" {
		t.Errorf("image calls = %s", got)
	}
	for _, c := range rs.Containers {
		if c.Labels[LabelPodUID] != "uid-1" || c.Labels[LabelManagedBy] != managedByValue ||
			c.Annotations[AnnotationGracePeriod] != "5" {
			t.Errorf("container %s: labels %v annotations %v", c.Metadata.Name, c.Labels, c.Annotations)
		}
	}
	pod := testPod()
	if got := containerConfig(pod, &pod.Spec.Containers[0], "sha256:x").LogPath; got != "app/0.log" {
		t.Errorf("log path %q, want app/0.log (CRI layout <container>/<restart>.log)", got)
	}
	for _, s := range rs.Sandboxes {
		if s.Labels[LabelPodUID] != "uid-1" || s.Labels[LabelManagedBy] != managedByValue {
			t.Errorf("sandbox labels %v", s.Labels)
		}
	}
	cfg := sandboxConfig(testPod(), "/var/log/pods")
	if cfg.LogDirectory != "/var/log/pods/default_web-node_uid-1" || cfg.Hostname != "web-node" {
		t.Errorf("sandbox log dir %q hostname %q", cfg.LogDirectory, cfg.Hostname)
	}
}

func TestSyncPodIsIdempotent(t *testing.T) {
	m, rs, is := newTestManager(t)
	ctx := context.Background()
	if err := m.SyncPod(ctx, testPod()); err != nil {
		t.Fatal(err)
	}
	resetCalls(rs, is)
	if err := m.SyncPod(ctx, testPod()); err != nil {
		t.Fatal(err)
	}
	if err := rs.AssertCalls([]string{"ListPodSandbox", "ListContainers"}); err != nil {
		t.Errorf("second sync changed something: %v", err)
	}
	if len(imageCalls(is)) != 0 {
		t.Errorf("second sync touched images: %v", imageCalls(is))
	}
}

func TestSyncPodStopsAtFirstFailure(t *testing.T) {
	m, rs, is := newTestManager(t)
	is.InjectError("PullImage", errors.New("registry down"))
	err := m.SyncPod(context.Background(), testPod())
	if err == nil || !strings.Contains(err.Error(), `container "app"`) || !strings.Contains(err.Error(), "registry down") {
		t.Fatalf("err = %v", err)
	}
	if err := rs.AssertCalls([]string{"ListPodSandbox", "RunPodSandbox", "ListContainers"}); err != nil {
		t.Error(err)
	}
}

func TestPullNeverWithoutImage(t *testing.T) {
	m, _, is := newTestManager(t)
	pod := testPod()
	pod.Spec.Containers = pod.Spec.Containers[:1]
	pod.Spec.Containers[0].ImagePullPolicy = v1.PullNever
	err := m.SyncPod(context.Background(), pod)
	if err == nil || !strings.Contains(err.Error(), "imagePullPolicy is Never") {
		t.Fatalf("err = %v", err)
	}
	if strings.Contains(strings.Join(imageCalls(is), ","), "PullImage") {
		t.Error("pulled although the policy is Never")
	}
}

func TestHostNetworkPodHasNoHostname(t *testing.T) {
	pod := testPod()
	pod.Spec.HostNetwork = true
	cfg := sandboxConfig(pod, "/logs")
	if cfg.Hostname != "" || cfg.Linux.SecurityContext.NamespaceOptions.Network.String() != "NODE" {
		t.Errorf("hostname %q network %v", cfg.Hostname, cfg.Linux.SecurityContext.NamespaceOptions.Network)
	}
}

func TestKillPodStopsContainersThenSandbox(t *testing.T) {
	m, rs, is := newTestManager(t)
	ctx := context.Background()
	if err := m.SyncPod(ctx, testPod()); err != nil {
		t.Fatal(err)
	}
	running, err := m.RunningPods(ctx)
	if err != nil || running["uid-1"] != "default/web-node" {
		t.Fatalf("RunningPods = %v, %v", running, err)
	}
	resetCalls(rs, is)
	if err := m.KillPod(ctx, "uid-1"); err != nil {
		t.Fatal(err)
	}
	want := []string{"ListContainers", "StopContainer", "RemoveContainer", "StopContainer", "RemoveContainer",
		"ListPodSandbox", "StopPodSandbox", "RemovePodSandbox"}
	if err := rs.AssertCalls(want); err != nil {
		t.Error(err)
	}
	if running, _ := m.RunningPods(ctx); len(running) != 0 {
		t.Errorf("pods left: %v", running)
	}
}

func TestKillPodKeepsSandboxWhenAContainerWillNotStop(t *testing.T) {
	m, rs, _ := newTestManager(t)
	ctx := context.Background()
	if err := m.SyncPod(ctx, testPod()); err != nil {
		t.Fatal(err)
	}
	rs.InjectError("StopContainer", errors.New("stuck"))
	if err := m.KillPod(ctx, "uid-1"); err == nil {
		t.Fatal("KillPod succeeded although a container did not stop")
	}
	for _, c := range rs.GetCalls() {
		if c == "StopPodSandbox" || c == "RemovePodSandbox" {
			t.Errorf("sandbox touched while a container may still run: %v", rs.GetCalls())
		}
	}
}
