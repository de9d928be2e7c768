package cri

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

type statusCalls struct {
	calls    int
	err      error
	handlers []*runtimeapi.RuntimeHandler
	info     map[string]string // answered to a verbose call only
}

func (s *statusCalls) Status(_ context.Context, verbose bool) (*runtimeapi.StatusResponse, error) {
	s.calls++
	if s.err != nil {
		return nil, s.err
	}
	resp := &runtimeapi.StatusResponse{RuntimeHandlers: s.handlers}
	if verbose {
		resp.Info = s.info
	}
	return resp, nil
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

// Trimmed verbose-status configs of the runtimes, as they send them.
const (
	containerd16Config  = `{"containerd":{"snapshotter":"overlayfs","defaultRuntimeName":"runc"},"cni":{"binDir":"/usr/lib/cni"},"enableSelinux":false,"sandboxImage":"registry.k8s.io/pause:3.6","containerdRootDir":"/var/lib/containerd","containerdEndpoint":"/run/containerd/containerd.sock","rootDir":"/var/lib/containerd/io.containerd.grpc.v1.cri","stateDir":"/run/containerd/io.containerd.grpc.v1.cri"}`
	containerd17Config  = `{"containerd":{"snapshotter":"overlayfs"},"enableCDI":false,"cdiSpecDirs":["/etc/cdi","/var/run/cdi"],"containerdRootDir":"/var/lib/containerd","containerdEndpoint":"/run/containerd/containerd.sock"}`
	containerd2xConfig  = `{"containerd":{"defaultRuntimeName":"runc"},"enableCDI":true,"cdiSpecDirs":["/tmp/rt/containerd/cdi"],"containerdRootDir":"/tmp/rt/containerd/root","containerdEndpoint":"/tmp/rt/containerd/containerd.sock","rootDir":"/tmp/rt/containerd/root/io.containerd.grpc.v1.cri"}`
	otherRuntimeConfig  = `{"runtime":"crun","enableCDI":false}`
	containerd2xNoField = `{"containerdRootDir":"/var/lib/containerd","enableCDI":true,"unknownLater":{"x":1}}`
)

func TestCDISupport(t *testing.T) {
	for _, tc := range []struct {
		name string
		info map[string]string
		want string // "" for supported (or not known not to be)
	}{
		{"containerd 1.6: no enable_cdi", map[string]string{"config": containerd16Config}, "containerd's CRI config has no enable_cdi (containerd 1.6 or older"},
		{"containerd 1.7, enable_cdi off", map[string]string{"config": containerd17Config}, "enable_cdi = false"},
		{"containerd 2.x, enable_cdi on", map[string]string{"config": containerd2xConfig}, ""},
		{"containerd, later fields", map[string]string{"config": containerd2xNoField}, ""},
		{"another runtime", map[string]string{"config": otherRuntimeConfig}, ""},
		{"no config", map[string]string{"golang": `"go1.22"`}, ""},
		{"no info", nil, ""},
		{"not JSON", map[string]string{"config": "{"}, ""},
		{"oversized", map[string]string{"config": `{"containerdRootDir":"/x","pad":"` + strings.Repeat("a", maxRuntimeConfig) + `"}`}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CDISupport(tc.info)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("got %v, want supported", err)
			case tc.want != "" && (err == nil || !errors.Is(err, ErrNoCDI) || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("got %v, want an ErrNoCDI saying %q", err, tc.want)
			}
		})
	}
}

// HandlerFeatures.CDI reads the verdict from the same status call as the
// handlers' features, refreshed on the same schedule.
func TestHandlerFeaturesCDI(t *testing.T) {
	ctx := t.Context()
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	rt := &statusCalls{handlers: []*runtimeapi.RuntimeHandler{rroHandler("", true)}, info: map[string]string{"config": containerd16Config}}
	h := NewHandlerFeatures(rt, clk, nil)
	if err := h.CDI(ctx); !errors.Is(err, ErrNoCDI) {
		t.Errorf("containerd 1.6: CDI() = %v, want ErrNoCDI", err)
	}
	if !h.RecursiveReadOnlyMounts(ctx, "") || rt.calls != 1 {
		t.Errorf("%d Status calls for both questions, want 1", rt.calls)
	}
	rt.info = map[string]string{"config": containerd2xConfig}
	clk.Step(time.Minute)
	if err := h.CDI(ctx); err != nil || rt.calls != 2 {
		t.Errorf("after the runtime's upgrade: CDI() = %v after %d calls", err, rt.calls)
	}
}
