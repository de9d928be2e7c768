package cri

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// HealthChecker makes grpc.health.v1.Health/Check calls for gRPC probes,
// with the kubelet's semantics (pkg/probe/grpc): plain text (no TLS: probe
// credentials are not supported), a "kube-probe/<major>.<minor>" user agent,
// connect and call both within the probe's timeout, and SERVING as the only
// healthy answer. It implements prober.GRPCChecker; its zero value is ready.
type HealthChecker struct{}

// probeUserAgent is the kubelet's probe user agent (prober.userAgent).
const probeUserAgent = "kube-probe/1.37"

// Check calls Health/Check for service ("" for the server as a whole) at
// addr ("host:port"), within timeout. serving is true on SERVING. Every
// other outcome is an error whose text is the kubelet's probe output:
// could not connect in time, the server lacks the health service, the call
// failed or timed out, or the server answered another status.
func (HealthChecker) Check(ctx context.Context, addr, service string, timeout time.Duration) (serving bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	conn, err := grpc.NewClient("passthrough:///"+addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUserAgent(probeUserAgent),
	)
	if err != nil {
		return false, fmt.Errorf("error: failed to connect service at %q: %w", addr, err)
	}
	defer func() { _ = conn.Close() }()

	// The kubelet dials blocking: it keeps trying to connect until the
	// timeout, then reports that as a connect timeout, not a failed call.
	conn.Connect()
	for state := conn.GetState(); state != connectivity.Ready; state = conn.GetState() {
		if !conn.WaitForStateChange(ctx, state) {
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return false, fmt.Errorf("timeout: failed to connect service %q within %v: %w", addr, timeout, ctx.Err())
			}
			return false, fmt.Errorf("error: failed to connect service at %q: %w", addr, ctx.Err())
		}
	}

	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		switch status.Code(err) {
		case codes.Unimplemented:
			return false, fmt.Errorf("error: this server does not implement the grpc health protocol (grpc.health.v1.Health): %s",
				status.Convert(err).Message())
		case codes.DeadlineExceeded:
			return false, fmt.Errorf("timeout: health rpc did not complete within %v", timeout)
		}
		return false, fmt.Errorf("error: health rpc probe failed: %w", err)
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return false, fmt.Errorf("service unhealthy (responded with %q)", resp.GetStatus().String())
	}
	return true, nil
}
