package cri

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	apitest "k8s.io/cri-api/pkg/apis/testing"
	"k8s.io/klog/v2"
	utilexec "k8s.io/utils/exec"
)

func newFakeClient(t *testing.T) (*Client, *apitest.FakeRuntimeService, *apitest.FakeImageService) {
	t.Helper()
	rs, is := apitest.NewFakeRuntimeService(), apitest.NewFakeImageService()
	return New(rs, is, "fake", DefaultTimeouts(), slog.New(slog.DiscardHandler)), rs, is
}

func TestInjectedErrorsAreClassified(t *testing.T) {
	spec := &runtimeapi.ImageSpec{Image: "busybox"}
	tests := []struct {
		method string // fake method the error is injected into
		image  bool   // on the image fake rather than the runtime fake
		code   codes.Code
		class  error
		op     string
		call   func(ctx context.Context, c *Client) error
	}{
		{"StartContainer", false, codes.NotFound, ErrNotFound, "start container c1",
			func(ctx context.Context, c *Client) error { return c.StartContainer(ctx, "c1") }},
		{"RunPodSandbox", false, codes.AlreadyExists, ErrAlreadyExists, "run pod sandbox",
			func(ctx context.Context, c *Client) error {
				_, err := c.RunPodSandbox(ctx, &runtimeapi.PodSandboxConfig{}, "")
				return err
			}},
		{"ContainerStatus", false, codes.Unavailable, ErrUnavailable, "get container status c1",
			func(ctx context.Context, c *Client) error {
				_, err := c.ContainerStatus(ctx, "c1")
				return err
			}},
		{"StopPodSandbox", false, codes.FailedPrecondition, ErrFailedPrecondition, "stop pod sandbox s1",
			func(ctx context.Context, c *Client) error { return c.StopPodSandbox(ctx, "s1") }},
		{"Status", false, codes.Unimplemented, ErrUnimplemented, "get runtime status",
			func(ctx context.Context, c *Client) error {
				_, err := c.Status(ctx, false)
				return err
			}},
		{"ListPodSandboxMetrics", false, codes.Unimplemented, ErrUnimplemented, "list pod sandbox metrics",
			func(ctx context.Context, c *Client) error {
				_, err := c.ListPodSandboxMetrics(ctx)
				return err
			}},
		{"ListMetricDescriptors", false, codes.Unimplemented, ErrUnimplemented, "list metric descriptors",
			func(ctx context.Context, c *Client) error {
				_, err := c.ListMetricDescriptors(ctx)
				return err
			}},
		{"ExecSync", false, codes.DeadlineExceeded, ErrDeadlineExceeded, "exec in container c1",
			func(ctx context.Context, c *Client) error {
				_, _, _, err := c.ExecSync(ctx, "c1", []string{"true"}, time.Second)
				return err
			}},
		{"PullImage", true, codes.ResourceExhausted, ErrResourceExhausted, "pull image busybox",
			func(ctx context.Context, c *Client) error {
				_, err := c.PullImage(ctx, spec, nil, nil)
				return err
			}},
		{"RemoveImage", true, codes.InvalidArgument, ErrInvalidArgument, "remove image busybox",
			func(ctx context.Context, c *Client) error { return c.RemoveImage(ctx, spec) }},
	}
	for _, tt := range tests {
		t.Run(tt.method, func(t *testing.T) {
			c, rs, is := newFakeClient(t)
			injected := status.Error(tt.code, "injected")
			if tt.image {
				is.InjectError(tt.method, injected)
			} else {
				rs.InjectError(tt.method, injected)
			}
			err := tt.call(t.Context(), c)
			assertOnlyClass(t, err, tt.class)
			if want := tt.op + ": " + tt.class.Error() + ": injected"; err.Error() != want {
				t.Errorf("Error() = %q, want %q", err, want)
			}
		})
	}
}

func TestPlainFakeErrorIsUnknown(t *testing.T) {
	c, _, _ := newFakeClient(t)
	_, err := c.PodSandboxStatus(t.Context(), "missing")
	assertOnlyClass(t, err, ErrUnknown)
}

func TestExecSyncExitCodeIsNotAnError(t *testing.T) {
	c, rs, _ := newFakeClient(t)
	rs.InjectError("ExecSync", utilexec.CodeExitError{Err: errors.New("exit 3"), Code: 3})
	_, _, code, err := c.ExecSync(t.Context(), "c1", []string{"false"}, 0)
	if err != nil || code != 3 {
		t.Fatalf("ExecSync = code %d, err %v; want 3, nil", code, err)
	}
}

func TestCanceledContextIsClassified(t *testing.T) {
	rec := newRecorder()
	c := New(rec, apitest.NewFakeImageService(), "fake", DefaultTimeouts(), nil)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	err := c.StartContainer(ctx, "c1")
	assertOnlyClass(t, err, ErrCanceled)
}

// recorder is a RuntimeService that records what each call's context carried
// and fails with the context's error if it is already done.
type recorder struct {
	internalapi.RuntimeService
	mu        sync.Mutex
	deadlines map[string]time.Duration // remaining time; -1: no deadline
}

func newRecorder() *recorder {
	return &recorder{RuntimeService: apitest.NewFakeRuntimeService(), deadlines: map[string]time.Duration{}}
}

func (r *recorder) record(ctx context.Context, name string) error {
	remaining := time.Duration(-1)
	if dl, ok := ctx.Deadline(); ok {
		remaining = time.Until(dl)
	}
	r.mu.Lock()
	r.deadlines[name] = remaining
	r.mu.Unlock()
	klog.FromContext(ctx).Info("probe from cri-client's side", "call", name)
	return ctx.Err()
}

func (r *recorder) deadline(name string) (time.Duration, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	d, ok := r.deadlines[name]
	return d, ok
}

func (r *recorder) RunPodSandbox(ctx context.Context, _ *runtimeapi.PodSandboxConfig, _ string) (string, error) {
	return "s1", r.record(ctx, "RunPodSandbox")
}

func (r *recorder) StartContainer(ctx context.Context, _ string) error {
	return r.record(ctx, "StartContainer")
}

func (r *recorder) StopContainer(ctx context.Context, _ string, grace int64) error {
	if grace != 3 {
		return status.Errorf(codes.InvalidArgument, "grace %d, want 3", grace)
	}
	return r.record(ctx, "StopContainer")
}

func (r *recorder) ExecSync(ctx context.Context, _ string, _ []string, timeout time.Duration) ([]byte, []byte, error) {
	if timeout != 2*time.Second {
		return nil, nil, status.Errorf(codes.InvalidArgument, "timeout %s, want 2s", timeout)
	}
	return []byte("out"), nil, r.record(ctx, "ExecSync")
}

func (r *recorder) Version(ctx context.Context, _ string) (*runtimeapi.VersionResponse, error) {
	return &runtimeapi.VersionResponse{RuntimeApiVersion: "v1"}, r.record(ctx, "Version")
}

// imageRecorder records the deadline of PullImage.
type imageRecorder struct {
	internalapi.ImageManagerService
	rec *recorder
}

func (i imageRecorder) PullImage(ctx context.Context, img *runtimeapi.ImageSpec, _ *runtimeapi.AuthConfig, _ *runtimeapi.PodSandboxConfig) (string, error) {
	return img.GetImage(), i.rec.record(ctx, "PullImage")
}

func TestPerCallTimeouts(t *testing.T) {
	// Distinct, long timeouts: a call's remaining time identifies its timeout.
	tm := Timeouts{Default: 11 * time.Minute, Sandbox: 13 * time.Minute, Pull: 0, Handshake: time.Second, StopExtra: 17 * time.Minute}
	calls := []struct {
		name string
		want time.Duration // -1: no deadline
		do   func(ctx context.Context, c *Client) error
	}{
		{"RunPodSandbox", tm.Sandbox, func(ctx context.Context, c *Client) error {
			_, err := c.RunPodSandbox(ctx, &runtimeapi.PodSandboxConfig{}, "")
			return err
		}},
		{"StartContainer", tm.Default, func(ctx context.Context, c *Client) error { return c.StartContainer(ctx, "c1") }},
		{"StopContainer", 3*time.Second + tm.StopExtra, func(ctx context.Context, c *Client) error {
			return c.StopContainer(ctx, "c1", 2500*time.Millisecond) // rounded up to 3s
		}},
		{"ExecSync", 2*time.Second + tm.Default, func(ctx context.Context, c *Client) error {
			_, _, _, err := c.ExecSync(ctx, "c1", []string{"true"}, 1500*time.Millisecond) // rounded up to 2s
			return err
		}},
		{"Version", tm.Default, func(ctx context.Context, c *Client) error {
			_, err := c.Version(ctx)
			return err
		}},
		{"PullImage", -1, func(ctx context.Context, c *Client) error {
			_, err := c.PullImage(ctx, &runtimeapi.ImageSpec{Image: "busybox"}, nil, nil)
			return err
		}},
	}
	var logs bytes.Buffer
	rec := newRecorder()
	c := New(rec, imageRecorder{apitest.NewFakeImageService(), rec}, "fake", tm,
		slog.New(slog.NewTextHandler(&logs, nil)))
	for _, call := range calls {
		t.Run(call.name, func(t *testing.T) {
			if err := call.do(t.Context(), c); err != nil {
				t.Fatalf("call: %v", err)
			}
			got, ok := rec.deadline(call.name)
			if !ok {
				t.Fatal("call not recorded")
			}
			assertRemaining(t, got, call.want)
		})
	}
	if n := strings.Count(logs.String(), "probe from cri-client's side"); n != len(calls) {
		t.Errorf("klog.FromContext logs reaching our slog handler: %d, want %d:\n%s", n, len(calls), logs.String())
	}
}

func TestPullTimeout(t *testing.T) {
	tm := DefaultTimeouts()
	tm.Pull = 19 * time.Minute
	rec := newRecorder()
	c := New(rec, imageRecorder{apitest.NewFakeImageService(), rec}, "fake", tm, nil)
	if _, err := c.PullImage(t.Context(), &runtimeapi.ImageSpec{Image: "busybox"}, nil, nil); err != nil {
		t.Fatal(err)
	}
	got, _ := rec.deadline("PullImage")
	assertRemaining(t, got, tm.Pull)
}

// assertRemaining checks that a recorded remaining time matches want: no
// deadline for -1, otherwise at most want and not much less.
func assertRemaining(t *testing.T, got, want time.Duration) {
	t.Helper()
	switch {
	case want < 0 && got >= 0:
		t.Errorf("deadline in %s, want none", got)
	case want >= 0 && (got > want || got < want-time.Minute):
		t.Errorf("deadline in %s, want about %s", got, want)
	}
}

func TestTimeoutsCeiling(t *testing.T) {
	tm := Timeouts{Default: 10 * time.Minute, StopExtra: 20 * time.Minute}
	if got := tm.ceiling(); got != 20*time.Minute {
		t.Errorf("ceiling = %s, want 20m", got)
	}
	if got := (Timeouts{}).ceiling(); got != DefaultTimeouts().Sandbox {
		t.Errorf("ceiling of zero Timeouts = %s, want %s", got, DefaultTimeouts().Sandbox)
	}
}

func TestNormalizeEndpoint(t *testing.T) {
	tests := []struct{ in, want string }{
		{"unix:///run/containerd/containerd.sock", "unix:///run/containerd/containerd.sock"},
		{"/run/containerd/containerd.sock", "unix:///run/containerd/containerd.sock"},
		{"tcp://localhost:1234", ""},
		{"unix://relative.sock", ""},
		{"unix:///", ""},
		{"relative.sock", ""},
		{"", ""},
	}
	for _, tt := range tests {
		got, err := normalizeEndpoint(tt.in)
		if tt.want == "" {
			if !IsInvalidArgument(err) {
				t.Errorf("normalizeEndpoint(%q) = %q, %v; want invalid argument", tt.in, got, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("normalizeEndpoint(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

func TestObserverGetsKubeletOperationNames(t *testing.T) {
	rs, is := apitest.NewFakeRuntimeService(), apitest.NewFakeImageService()
	var ops []string
	c := New(rs, is, "fake", DefaultTimeouts(), nil, WithObserver(func(op string, _ time.Duration, err error) {
		ops = append(ops, fmt.Sprintf("%s:%v", op, err != nil))
	}))
	ctx := context.Background()
	_, _ = c.ListPodSandbox(ctx, nil)
	rs.InjectError("StartContainer", errors.New("boom"))
	_ = c.StartContainer(ctx, "abc123")
	_, _, _, _ = c.ExecSync(ctx, "abc123", []string{"true"}, time.Second)
	_, _ = c.ListMetricDescriptors(ctx)
	_, _ = c.ListPodSandboxMetrics(ctx)
	want := "list_podsandbox:false start_container:true exec_sync:false list_metric_descriptors:false list_podsandbox_metrics:false"
	if got := strings.Join(ops, " "); got != want {
		t.Errorf("observed %q, want %q", got, want)
	}
	if got := operationName("frobnicate widget 42"); got != "frobnicate_widget_42" {
		t.Errorf("unknown operation name %q", got)
	}
}

func TestPodSandboxMetrics(t *testing.T) {
	c, rs, _ := newFakeClient(t)
	ctx := t.Context()
	rs.SetFakeSandboxes([]*apitest.FakePodSandbox{{PodSandboxStatus: runtimeapi.PodSandboxStatus{Id: "sb1"}}})
	rs.FakeMetricDescriptors = map[string]*runtimeapi.MetricDescriptor{
		"container_threads": {Name: "container_threads", Help: "threads", LabelKeys: []string{"container"}},
	}
	rs.SetFakePodSandboxMetrics([]*runtimeapi.PodSandboxMetrics{{PodSandboxId: "sb1", ContainerMetrics: []*runtimeapi.ContainerMetrics{{
		ContainerId: "c1",
		Metrics:     []*runtimeapi.Metric{{Name: "container_threads", MetricType: runtimeapi.MetricType_GAUGE, LabelValues: []string{"app"}, Value: &runtimeapi.UInt64Value{Value: 3}}},
	}}}})
	descs, err := c.ListMetricDescriptors(ctx)
	if err != nil || len(descs) != 1 || descs[0].GetName() != "container_threads" {
		t.Errorf("ListMetricDescriptors = %v, %v", descs, err)
	}
	ms, err := c.ListPodSandboxMetrics(ctx)
	if err != nil || len(ms) != 1 || ms[0].GetContainerMetrics()[0].GetMetrics()[0].GetValue().GetValue() != 3 {
		t.Errorf("ListPodSandboxMetrics = %v, %v", ms, err)
	}
}
