package main

import (
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func dial(t *testing.T, path string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// Two runtimes of one process are independent: a pod started on one is
// running there and absent from the other; the event stream is
// Unimplemented.
func TestRuntimes(t *testing.T) {
	dir := t.TempDir()
	var rts []*runtime
	for _, name := range []string{"a.sock", "b.sock"} {
		rt, err := listen(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(rt.stop)
		rts = append(rts, rt)
	}
	ctx := context.Background()
	a := runtimeapi.NewRuntimeServiceClient(dial(t, rts[0].path))
	b := runtimeapi.NewRuntimeServiceClient(dial(t, rts[1].path))
	img := runtimeapi.NewImageServiceClient(dial(t, rts[0].path))
	if _, err := img.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: "busybox"}}); err != nil {
		t.Fatal(err)
	}
	is, err := img.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: "busybox"}})
	if err != nil {
		t.Fatal(err)
	}
	if is.GetImage().GetId() == "" || is.GetImage().GetSize() == 0 {
		t.Errorf("image status %v: no id or no size", is.GetImage())
	}
	sbConfig := &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Name: "p", Namespace: "ns", Uid: "u1"}}
	sb, err := a.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: sbConfig})
	if err != nil {
		t.Fatal(err)
	}
	c, err := a.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: sb.PodSandboxId, SandboxConfig: sbConfig,
		Config: &runtimeapi.ContainerConfig{Metadata: &runtimeapi.ContainerMetadata{Name: "c"}, Image: &runtimeapi.ImageSpec{Image: "busybox"}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: c.ContainerId}); err != nil {
		t.Fatal(err)
	}
	st, err := a.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: c.ContainerId})
	if err != nil {
		t.Fatal(err)
	}
	if got := st.GetStatus().GetState(); got != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Errorf("container state %v, want running", got)
	}
	list, err := b.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(list.Containers); n != 0 {
		t.Errorf("the other runtime lists %d containers, want none", n)
	}
	stream, err := a.GetContainerEvents(ctx, &runtimeapi.GetEventsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); status.Code(err) != codes.Unimplemented || err == io.EOF {
		t.Errorf("event stream: %v, want Unimplemented", err)
	}
	rts[0].trimCalls()
	if n := len(rts[0].RuntimeService.Called); n != 0 {
		t.Errorf("%d calls logged after trimCalls", n)
	}
}

func TestListenRefuses(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := listen(file); err == nil {
		t.Error("listen over a regular file: no error")
	}
	open := filepath.Join(dir, "open")
	if err := os.Mkdir(open, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := listen(filepath.Join(open, "x.sock")); err == nil {
		t.Error("listen in a world-writable directory: no error")
	}
	// A socket left by an earlier run is replaced.
	stale := filepath.Join(dir, "stale.sock")
	l, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	rt2, err := listen(stale)
	if err != nil {
		t.Fatalf("listen over a stale socket: %v", err)
	}
	rt2.stop()
}
