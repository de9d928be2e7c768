package cri

import (
	"context"
	"errors"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

type statusCalls struct {
	calls    int
	err      error
	handlers []*runtimeapi.RuntimeHandler
}

func (s *statusCalls) Status(context.Context, bool) (*runtimeapi.StatusResponse, error) {
	s.calls++
	if s.err != nil {
		return nil, s.err
	}
	return &runtimeapi.StatusResponse{RuntimeHandlers: s.handlers}, nil
}

func rroHandler(name string, rro bool) *runtimeapi.RuntimeHandler {
	return &runtimeapi.RuntimeHandler{Name: name, Features: &runtimeapi.RuntimeHandlerFeatures{RecursiveReadOnlyMounts: rro}}
}

func TestHandlerFeatures(t *testing.T) {
	ctx := t.Context()
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	rt := &statusCalls{handlers: []*runtimeapi.RuntimeHandler{rroHandler("", true), rroHandler("kata", false)}}
	h := NewHandlerFeatures(rt, clk, nil)

	if !h.RecursiveReadOnlyMounts(ctx, "") || h.RecursiveReadOnlyMounts(ctx, "kata") || h.RecursiveReadOnlyMounts(ctx, "gone") {
		t.Errorf("default supports, kata and an unknown handler do not: got otherwise")
	}
	if rt.calls != 1 {
		t.Errorf("%d Status calls for 3 questions within a minute, want 1", rt.calls)
	}

	// A minute later the runtime (restarted, say) is asked again.
	rt.handlers = []*runtimeapi.RuntimeHandler{rroHandler("", false)}
	clk.Step(59 * time.Second)
	if !h.RecursiveReadOnlyMounts(ctx, "") || rt.calls != 1 {
		t.Errorf("before a minute: asked again (%d calls) or lost the answer", rt.calls)
	}
	clk.Step(time.Second)
	if h.RecursiveReadOnlyMounts(ctx, "") || rt.calls != 2 {
		t.Errorf("after a minute: %d calls, or the new answer not taken", rt.calls)
	}

	// A failing runtime keeps the last answer and is asked again soon.
	rt.err = errors.New("unavailable")
	rt.handlers = []*runtimeapi.RuntimeHandler{rroHandler("", true)}
	clk.Step(time.Minute)
	if h.RecursiveReadOnlyMounts(ctx, "") || rt.calls != 3 {
		t.Errorf("failing: %d calls, or the last answer lost", rt.calls)
	}
	rt.err = nil
	clk.Step(4 * time.Second)
	h.RecursiveReadOnlyMounts(ctx, "")
	if rt.calls != 3 {
		t.Errorf("asked again %d times within the retry interval", rt.calls-3)
	}
	clk.Step(time.Second)
	if !h.RecursiveReadOnlyMounts(ctx, "") || rt.calls != 4 {
		t.Errorf("after the retry interval: %d calls, or the answer not taken", rt.calls)
	}

	// A runtime listing no handlers (containerd 1.x) supports nothing.
	rt.handlers = nil
	clk.Step(time.Minute)
	if h.RecursiveReadOnlyMounts(ctx, "") {
		t.Errorf("no handlers listed: RRO supported")
	}
}
