package cri

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/go-logr/logr"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	remote "k8s.io/cri-client/pkg"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Timeouts are the per-call deadlines the Client puts on its calls, on top of
// whatever deadline the caller's context already carries. A zero or negative
// field means no deadline beyond the caller's context.
type Timeouts struct {
	Default   time.Duration // most calls (2m like the kubelet's runtime-request-timeout)
	Sandbox   time.Duration // RunPodSandbox (4m)
	Pull      time.Duration // PullImage (0 = no timeout beyond ctx)
	Handshake time.Duration // each readiness check and the Version at Dial (5s)
	StopExtra time.Duration // added to the grace period for StopContainer
	// Ready bounds how long Dial waits for a runtime that answers but is
	// not ready yet (2m, the kubelet's runtime-request-timeout).
	Ready time.Duration
}

// DefaultTimeouts returns the kubelet's defaults.
func DefaultTimeouts() Timeouts {
	return Timeouts{
		Default:   2 * time.Minute,
		Sandbox:   4 * time.Minute,
		Pull:      0,
		Handshake: 5 * time.Second,
		StopExtra: 2 * time.Minute,
		Ready:     2 * time.Minute,
	}
}

// ceiling is the connection timeout handed to cri-client. cri-client bounds
// every call except PullImage by it (RunPodSandbox by twice it), so it is the
// largest of our timeouts: ours, being shorter, are the ones that apply.
func (t Timeouts) ceiling() time.Duration {
	c := DefaultTimeouts().Sandbox
	for _, d := range []time.Duration{t.Default, t.Sandbox, t.Handshake, t.StopExtra} {
		c = max(c, d)
	}
	return c
}

// Client is a CRI runtime and image service with our timeouts, error classes
// and logging. It is safe for concurrent use.
type Client struct {
	rs       internalapi.RuntimeService
	is       internalapi.ImageManagerService
	endpoint string
	timeouts Timeouts
	log      *slog.Logger
	klog     logr.Logger
	observer Observer
}

// New wraps a runtime and an image service, real or fake. endpoint is only
// used for Endpoint and messages. A nil log discards logs.
func New(rs internalapi.RuntimeService, is internalapi.ImageManagerService, endpoint string, t Timeouts, log *slog.Logger, opts ...Option) *Client {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Client{
		rs:       rs,
		is:       is,
		endpoint: endpoint,
		timeouts: t,
		log:      log,
		klog:     logr.FromSlogHandler(demoted{log.Handler()}),
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

// Dial connects to the CRI runtime at endpoint ("unix:///path" or a bare
// absolute path), waits for it to become ready and performs a version
// handshake, each step bounded by t.Handshake and ctx.
//
// When nothing answers, the error satisfies errors.Is(err, ErrUnavailable)
// and reads "no CRI runtime at <endpoint>: is containerd running?". A
// runtime that answers "not ready yet" is asked again with a bounded
// back-off, each attempt logged, for up to t.Ready.
func Dial(ctx context.Context, endpoint string, t Timeouts, log *slog.Logger, opts ...Option) (*Client, error) {
	return dialWith(ctx, endpoint, t, log, clock.RealClock{}, opts...)
}

func dialWith(ctx context.Context, endpoint string, t Timeouts, log *slog.Logger, clk clock.Clock, opts ...Option) (*Client, error) {
	ep, err := normalizeEndpoint(endpoint)
	if err != nil {
		return nil, err
	}
	c, err := dial(ctx, ep, t, log, clk)
	if err != nil {
		return nil, dialError(ctx, ep, err, log)
	}
	for _, o := range opts {
		o(c)
	}
	return c, nil
}

// dial waits for the runtime, builds both services and shakes hands;
// errors are translated.
func dial(ctx context.Context, ep string, t Timeouts, log *slog.Logger, clk clock.Clock) (*Client, error) {
	c := New(nil, nil, ep, t, log)
	pctx, cancel := c.callCtx(ctx, t.Handshake)
	err := probe(pctx, ep)
	cancel()
	if err != nil {
		return nil, err
	}
	if err := waitReady(ctx, ep, t, c.log, clk); err != nil {
		return nil, err
	}
	hctx, cancel := c.callCtx(ctx, t.Handshake)
	defer cancel()
	if err := c.connect(hctx, t.ceiling()); err != nil {
		return nil, err
	}
	if err := c.handshake(hctx); err != nil {
		_ = c.Close()
		return nil, err
	}
	return c, nil
}

// connect builds cri-client's runtime and image services; each checks its
// own API (Version, ImageFsInfo) on the way.
func (c *Client) connect(ctx context.Context, connTimeout time.Duration) error {
	rs, err := remote.NewRemoteRuntimeServiceBuilder().WithEndpoint(c.endpoint).
		WithConnectionTimeout(connTimeout).WithTracerProvider(nil).
		WithUseStreaming(false).Build(ctx)
	if err != nil {
		return translate(err, "connect to runtime service")
	}
	is, err := remote.NewRemoteImageServiceBuilder().WithEndpoint(c.endpoint).
		WithConnectionTimeout(connTimeout).WithTracerProvider(nil).
		WithUseStreaming(false).Build(ctx)
	if err != nil {
		_ = rs.Close(ctx)
		return translate(err, "connect to image service")
	}
	c.rs, c.is = rs, is
	return nil
}

// probe connects to the socket once, so that a missing runtime is reported
// before any gRPC connection exists: cri-client's Build does not close its
// connection when its own handshake fails, and Dial is retried in a loop
// while the runtime starts.
func probe(ctx context.Context, ep string) error {
	conn, err := (&net.Dialer{}).DialContext(ctx, "unix", strings.TrimPrefix(ep, "unix://"))
	if err != nil {
		if ctx.Err() != nil {
			return translate(ctx.Err(), "probe socket")
		}
		return fmt.Errorf("probe socket: %w: %s", ErrUnavailable, err)
	}
	return conn.Close()
}

// handshake asks the runtime for its version and logs it.
func (c *Client) handshake(ctx context.Context) error {
	v, err := c.Version(ctx)
	if err != nil {
		return err
	}
	c.log.Info("connected to CRI runtime", "endpoint", c.endpoint,
		"runtime", v.GetRuntimeName(), "version", v.GetRuntimeVersion(),
		"apiVersion", v.GetRuntimeApiVersion())
	if v.GetRuntimeApiVersion() != "v1" {
		c.log.Warn("CRI runtime reports an unexpected API version",
			"endpoint", c.endpoint, "apiVersion", v.GetRuntimeApiVersion())
	}
	return nil
}

// dialError turns "nothing answered" into one clear line; a caller's
// cancellation and any other failure are returned as they are.
func dialError(ctx context.Context, ep string, err error, log *slog.Logger) error {
	if _, ok := errors.AsType[*notReadyError](err); ok {
		return err
	}
	if ctx.Err() != nil || !(IsUnavailable(err) || IsDeadlineExceeded(err)) {
		return fmt.Errorf("dial CRI runtime at %s: %w", ep, err)
	}
	if log != nil {
		log.Debug("CRI handshake failed", "endpoint", ep, "err", err)
	}
	return &unreachableError{endpoint: ep, cause: err}
}

// normalizeEndpoint accepts "unix:///path" or "/path" and returns the former.
func normalizeEndpoint(endpoint string) (string, error) {
	const scheme = "unix://"
	switch {
	case strings.HasPrefix(endpoint, scheme+"/") && len(endpoint) > len(scheme)+1:
		return endpoint, nil
	case strings.HasPrefix(endpoint, "/") && len(endpoint) > 1:
		return scheme + endpoint, nil
	}
	return "", fmt.Errorf("parse CRI endpoint %q: %w: want unix:///path or an absolute path",
		endpoint, ErrInvalidArgument)
}

// Endpoint returns the endpoint the client talks to.
func (c *Client) Endpoint() string { return c.endpoint }

// Close closes the connections to the runtime.
func (c *Client) Close() error {
	ctx := klog.NewContext(context.Background(), c.klog)
	var errs []error
	if c.rs != nil {
		errs = append(errs, c.rs.Close(ctx))
	}
	if c.is != nil {
		errs = append(errs, c.is.Close(ctx))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("close CRI client for %s: %w", c.endpoint, err)
	}
	return nil
}

// callCtx derives the context of one call: our logr for cri-client's klog
// and, if d is positive, a deadline d from now.
func (c *Client) callCtx(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	ctx = klog.NewContext(ctx, c.klog)
	if d <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, d)
}

// call runs f under a call context and translates its error as op.
func call[T any](ctx context.Context, c *Client, d time.Duration, op string, f func(context.Context) (T, error)) (T, error) {
	ctx, cancel := c.callCtx(ctx, d)
	defer cancel()
	start := time.Now()
	v, err := f(ctx)
	c.observe(op, start, err)
	if err != nil {
		var zero T
		return zero, translate(err, op)
	}
	return v, nil
}

// callErr is call for functions that return only an error.
func callErr(ctx context.Context, c *Client, d time.Duration, op string, f func(context.Context) error) error {
	ctx, cancel := c.callCtx(ctx, d)
	defer cancel()
	start := time.Now()
	err := f(ctx)
	c.observe(op, start, err)
	return translate(err, op)
}

// Version returns the runtime's name and versions.
func (c *Client) Version(ctx context.Context) (*runtimeapi.VersionResponse, error) {
	return call(ctx, c, c.timeouts.Default, "get runtime version",
		func(ctx context.Context) (*runtimeapi.VersionResponse, error) {
			return c.rs.Version(ctx, string(remote.CRIVersionV1))
		})
}

// Status returns the runtime's conditions.
func (c *Client) Status(ctx context.Context, verbose bool) (*runtimeapi.StatusResponse, error) {
	return call(ctx, c, c.timeouts.Default, "get runtime status",
		func(ctx context.Context) (*runtimeapi.StatusResponse, error) {
			return c.rs.Status(ctx, verbose)
		})
}

// RuntimeConfig returns the runtime's configuration (e.g. its cgroup driver).
func (c *Client) RuntimeConfig(ctx context.Context) (*runtimeapi.RuntimeConfigResponse, error) {
	return call(ctx, c, c.timeouts.Default, "get runtime config", c.rs.RuntimeConfig)
}

// UpdateRuntimeConfig pushes runtime configuration (e.g. the pod CIDR).
func (c *Client) UpdateRuntimeConfig(ctx context.Context, cfg *runtimeapi.RuntimeConfig) error {
	return callErr(ctx, c, c.timeouts.Default, "update runtime config",
		func(ctx context.Context) error { return c.rs.UpdateRuntimeConfig(ctx, cfg) })
}
