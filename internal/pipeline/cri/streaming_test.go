package cri

import (
	"context"
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	apitest "k8s.io/cri-api/pkg/apis/testing"
)

// urlRuntime answers the streaming calls with fixed URLs and records the
// requests.
type urlRuntime struct {
	internalapi.RuntimeService
	exec   *runtimeapi.ExecRequest
	attach *runtimeapi.AttachRequest
	pf     *runtimeapi.PortForwardRequest
}

func (r *urlRuntime) Exec(_ context.Context, req *runtimeapi.ExecRequest) (*runtimeapi.ExecResponse, error) {
	r.exec = req
	return &runtimeapi.ExecResponse{Url: "http://127.0.0.1:1/exec/tok"}, nil
}

func (r *urlRuntime) Attach(_ context.Context, req *runtimeapi.AttachRequest) (*runtimeapi.AttachResponse, error) {
	r.attach = req
	return &runtimeapi.AttachResponse{Url: "http://127.0.0.1:1/attach/tok"}, nil
}

func (r *urlRuntime) PortForward(_ context.Context, req *runtimeapi.PortForwardRequest) (*runtimeapi.PortForwardResponse, error) {
	r.pf = req
	return &runtimeapi.PortForwardResponse{Url: "http://127.0.0.1:1/portforward/tok"}, nil
}

func TestStreamingURLs(t *testing.T) {
	rt := &urlRuntime{RuntimeService: apitest.NewFakeRuntimeService()}
	c := New(rt, apitest.NewFakeImageService(), "fake", DefaultTimeouts(), nil)
	ctx := t.Context()
	u, err := c.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: "c1", Cmd: []string{"ls"}, Stdout: true})
	if err != nil || u != "http://127.0.0.1:1/exec/tok" || rt.exec.GetContainerId() != "c1" {
		t.Errorf("Exec: %q, %v (req %v)", u, err, rt.exec)
	}
	u, err = c.Attach(ctx, &runtimeapi.AttachRequest{ContainerId: "c2", Stdout: true})
	if err != nil || u != "http://127.0.0.1:1/attach/tok" || rt.attach.GetContainerId() != "c2" {
		t.Errorf("Attach: %q, %v", u, err)
	}
	u, err = c.PortForward(ctx, &runtimeapi.PortForwardRequest{PodSandboxId: "s1", Port: []int32{80}})
	if err != nil || u != "http://127.0.0.1:1/portforward/tok" || rt.pf.GetPodSandboxId() != "s1" {
		t.Errorf("PortForward: %q, %v", u, err)
	}
}

func TestStreamingErrors(t *testing.T) {
	c, rs, _ := newFakeClient(t)
	ctx := t.Context()
	// The plain fake answers with no URL.
	if _, err := c.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: "c1"}); err == nil || !strings.Contains(err.Error(), "no streaming URL") {
		t.Errorf("Exec without URL: %v", err)
	}
	rs.InjectError("Attach", status.Error(codes.NotFound, "no such container"))
	if _, err := c.Attach(ctx, &runtimeapi.AttachRequest{ContainerId: "c2"}); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "attach to container c2") {
		t.Errorf("Attach: %v, want not found", err)
	}
	rs.InjectError("PortForward", status.Error(codes.Unavailable, "down"))
	if _, err := c.PortForward(ctx, &runtimeapi.PortForwardRequest{PodSandboxId: "s1"}); !IsUnavailable(err) {
		t.Errorf("PortForward: %v, want unavailable", err)
	}
}
