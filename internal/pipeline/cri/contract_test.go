package cri

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/cri-client/pkg/fake"
)

var (
	criEndpoint  = flag.String("cri-endpoint", "", "also run the contract suite against the CRI runtime at this endpoint (unix:///...)")
	busyboxImage = flag.String("busybox-image", "docker.io/library/busybox:1.35", "image used by the contract suite")
)

// startFakeRuntime serves cri-client's fake CRI gRPC server on a unix
// socket in a temporary directory and returns its endpoint.
func startFakeRuntime(t *testing.T) (*fake.RemoteRuntime, string) {
	t.Helper()
	f := fake.NewFakeRemoteRuntime()
	ep := "unix://" + filepath.Join(t.TempDir(), "cri.sock")
	if err := f.Start(ep); err != nil {
		t.Fatalf("start fake CRI server: %v", err)
	}
	t.Cleanup(f.Stop)
	return f, ep
}

func dialForTest(t *testing.T, ep string) *Client {
	t.Helper()
	c, err := Dial(t.Context(), ep, DefaultTimeouts(), slog.New(slog.NewTextHandler(testWriter{t}, nil)))
	if err != nil {
		t.Fatalf("Dial(%s): %v", ep, err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return c
}

// testWriter sends log lines to t.Log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

func TestContractFakeServer(t *testing.T) {
	f, ep := startFakeRuntime(t)
	// cri-client rejects an image status whose size is 0, the fake's default.
	f.ImageService.SetFakeImageSize(1 << 20)
	runContract(t, dialForTest(t, ep), false)
}

func TestContractRealRuntime(t *testing.T) {
	if *criEndpoint == "" {
		t.Skip("no -cri-endpoint given")
	}
	runContract(t, dialForTest(t, *criEndpoint), true)
}

// TestFakeServerErrorsOverGRPC checks translation of statuses that really
// crossed the wire, including the fake's plain (code Unknown) errors.
func TestFakeServerErrorsOverGRPC(t *testing.T) {
	f, ep := startFakeRuntime(t)
	c := dialForTest(t, ep)
	f.RuntimeService.InjectError("ContainerStatus", status.Error(codes.NotFound, `container "c1" not found`))
	_, err := c.ContainerStatus(t.Context(), "c1")
	assertOnlyClass(t, err, ErrNotFound)
	if want := `get container status c1: not found: container "c1" not found`; err.Error() != want {
		t.Errorf("Error() = %q, want %q", err, want)
	}
	f.ImageService.InjectError("PullImage", status.Error(codes.ResourceExhausted, "no space left"))
	_, err = c.PullImage(t.Context(), &runtimeapi.ImageSpec{Image: "x"}, nil, nil)
	assertOnlyClass(t, err, ErrResourceExhausted)
	_, err = c.PodSandboxStatus(t.Context(), "missing")
	assertOnlyClass(t, err, ErrUnknown)
}

// runContract drives one pod through its whole life. real enables the
// assertions that cri-client's fake server cannot honour.
func runContract(t *testing.T, c *Client, real bool) {
	ctx := t.Context()
	checkVersionAndStatus(t, ctx, c, real)
	imageRef := pullImage(t, ctx, c)
	sbCfg := sandboxConfig(t)
	sandboxID := runSandbox(t, ctx, c, sbCfg)
	containerID := createAndStart(t, ctx, c, sandboxID, sbCfg, imageRef)
	checkExec(t, ctx, c, containerID, real)
	stopAndRemoveContainer(t, ctx, c, containerID, real)
	stopAndRemoveSandbox(t, ctx, c, sandboxID, real)
}

func checkVersionAndStatus(t *testing.T, ctx context.Context, c *Client, real bool) {
	t.Helper()
	v, err := c.Version(ctx)
	if err != nil {
		t.Fatalf("Version: %v", err)
	}
	if v.GetRuntimeName() == "" {
		t.Errorf("Version: empty runtime name")
	}
	if real && v.GetRuntimeApiVersion() != "v1" {
		t.Errorf("Version: API version %q, want v1", v.GetRuntimeApiVersion())
	}
	st, err := c.Status(ctx, false)
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	if !conditionTrue(st.GetStatus(), runtimeapi.RuntimeReady) {
		t.Errorf("Status: RuntimeReady not true: %v", st.GetStatus())
	}
}

func conditionTrue(st *runtimeapi.RuntimeStatus, typ string) bool {
	for _, c := range st.GetConditions() {
		if c.GetType() == typ {
			return c.GetStatus()
		}
	}
	return false
}

func pullImage(t *testing.T, ctx context.Context, c *Client) string {
	t.Helper()
	spec := &runtimeapi.ImageSpec{Image: *busyboxImage}
	ref, err := c.PullImage(ctx, spec, nil, nil)
	if err != nil {
		t.Fatalf("PullImage: %v", err)
	}
	if ref == "" {
		t.Fatal("PullImage: empty image ref")
	}
	st, err := c.ImageStatus(ctx, spec)
	if err != nil {
		t.Fatalf("ImageStatus: %v", err)
	}
	if st.GetImage() == nil {
		t.Fatalf("ImageStatus: %s not present after pull", *busyboxImage)
	}
	return ref
}

func sandboxConfig(t *testing.T) *runtimeapi.PodSandboxConfig {
	t.Helper()
	uid := randomID(t)
	return &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{
			Name: "contract-" + uid[:8], Namespace: "nodelet-test", Uid: uid,
		},
		LogDirectory: t.TempDir(),
		Labels:       map[string]string{"nodelet.test/contract": "true"},
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			CgroupParent: "",
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				// Host network: the suite must not depend on CNI.
				NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE},
			},
		},
	}
}

func randomID(t *testing.T) string {
	t.Helper()
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatalf("read random: %v", err)
	}
	return hex.EncodeToString(b)
}

func runSandbox(t *testing.T, ctx context.Context, c *Client, cfg *runtimeapi.PodSandboxConfig) string {
	t.Helper()
	id, err := c.RunPodSandbox(ctx, cfg, "")
	if err != nil {
		t.Fatalf("RunPodSandbox: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			removeSandboxQuietly(c, id)
		}
	})
	st, err := c.PodSandboxStatus(ctx, id)
	if err != nil {
		t.Fatalf("PodSandboxStatus: %v", err)
	}
	if got := st.GetStatus().GetState(); got != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Fatalf("sandbox state %s, want SANDBOX_READY", got)
	}
	list, err := c.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{Id: id})
	if err != nil || len(list) != 1 {
		t.Fatalf("ListPodSandbox(id=%s) = %d sandboxes, %v; want 1", id, len(list), err)
	}
	return id
}

// removeSandboxQuietly cleans up after a failed run; the test context is
// already canceled when cleanups run.
func removeSandboxQuietly(c *Client, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_ = c.StopPodSandbox(ctx, id)
	_ = c.RemovePodSandbox(ctx, id)
}

func createAndStart(t *testing.T, ctx context.Context, c *Client, sandboxID string, sbCfg *runtimeapi.PodSandboxConfig, imageRef string) string {
	t.Helper()
	cfg := &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "sleeper"},
		Image:    &runtimeapi.ImageSpec{Image: imageRef, UserSpecifiedImage: *busyboxImage},
		Command:  []string{"sh", "-c", "sleep 3600"},
		LogPath:  "sleeper.log",
		Linux:    &runtimeapi.LinuxContainerConfig{},
	}
	id, err := c.CreateContainer(ctx, sandboxID, cfg, sbCfg)
	if err != nil {
		t.Fatalf("CreateContainer: %v", err)
	}
	if err := c.StartContainer(ctx, id); err != nil {
		t.Fatalf("StartContainer: %v", err)
	}
	expectContainerState(t, ctx, c, id, runtimeapi.ContainerState_CONTAINER_RUNNING)
	list, err := c.ListContainers(ctx, &runtimeapi.ContainerFilter{PodSandboxId: sandboxID})
	if err != nil || len(list) != 1 || list[0].GetId() != id {
		t.Fatalf("ListContainers(sandbox=%s) = %v, %v; want just %s", sandboxID, list, err, id)
	}
	return id
}

func expectContainerState(t *testing.T, ctx context.Context, c *Client, id string, want runtimeapi.ContainerState) {
	t.Helper()
	st, err := c.ContainerStatus(ctx, id)
	if err != nil {
		t.Fatalf("ContainerStatus: %v", err)
	}
	if got := st.GetStatus().GetState(); got != want {
		t.Fatalf("container state %s, want %s", got, want)
	}
}

func checkExec(t *testing.T, ctx context.Context, c *Client, id string, real bool) {
	t.Helper()
	stdout, _, code, err := c.ExecSync(ctx, id, []string{"echo", "hi"}, 10*time.Second)
	if err != nil || code != 0 {
		t.Fatalf("ExecSync(echo hi) = exit %d, %v; want 0, nil", code, err)
	}
	if real && string(stdout) != "hi\n" {
		t.Errorf("ExecSync(echo hi) stdout %q, want %q", stdout, "hi\n")
	}
}

func stopAndRemoveContainer(t *testing.T, ctx context.Context, c *Client, id string, real bool) {
	t.Helper()
	if err := c.StopContainer(ctx, id, time.Second); err != nil {
		t.Fatalf("StopContainer: %v", err)
	}
	expectContainerState(t, ctx, c, id, runtimeapi.ContainerState_CONTAINER_EXITED)
	if err := c.RemoveContainer(ctx, id); err != nil {
		t.Fatalf("RemoveContainer: %v", err)
	}
	_, err := c.ContainerStatus(ctx, id)
	expectGone(t, "ContainerStatus after RemoveContainer", err, real)
}

func stopAndRemoveSandbox(t *testing.T, ctx context.Context, c *Client, id string, real bool) {
	t.Helper()
	if err := c.StopPodSandbox(ctx, id); err != nil {
		t.Fatalf("StopPodSandbox: %v", err)
	}
	if err := c.RemovePodSandbox(ctx, id); err != nil {
		t.Fatalf("RemovePodSandbox: %v", err)
	}
	_, err := c.PodSandboxStatus(ctx, id)
	expectGone(t, "PodSandboxStatus after RemovePodSandbox", err, real)
}

// expectGone wants ErrNotFound from a real runtime; the fake server answers
// "not found" with a plain error, i.e. code Unknown.
func expectGone(t *testing.T, what string, err error, real bool) {
	t.Helper()
	switch {
	case err == nil:
		t.Errorf("%s: no error", what)
	case real && !IsNotFound(err):
		t.Errorf("%s: %v, want class %v", what, err, ErrNotFound)
	case !real && !IsUnknown(err):
		t.Errorf("%s: %v, want the fake's class %v", what, err, ErrUnknown)
	}
}
