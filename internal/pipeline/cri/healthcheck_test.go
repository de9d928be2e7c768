package cri

import (
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// serveGRPC starts a gRPC server on a local port, with the health service
// ("" SERVING, "down" NOT_SERVING) when withHealth.
func serveGRPC(t *testing.T, withHealth bool) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	if withHealth {
		hs := health.NewServer()
		hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
		hs.SetServingStatus("down", healthpb.HealthCheckResponse_NOT_SERVING)
		healthpb.RegisterHealthServer(s, hs)
	}
	go func() { _ = s.Serve(ln) }()
	t.Cleanup(s.Stop)
	return ln.Addr().String()
}

func TestHealthChecker(t *testing.T) {
	addr := serveGRPC(t, true)
	closed := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		a := ln.Addr().String()
		_ = ln.Close()
		return a
	}()
	tests := []struct {
		name, addr, service string
		serving             bool
		errHas              string
	}{
		{name: "serving", addr: addr, serving: true},
		{name: "not serving", addr: addr, service: "down", errHas: `service unhealthy (responded with "NOT_SERVING")`},
		{name: "unknown service", addr: addr, service: "nope", errHas: "error: health rpc probe failed"},
		{name: "no health service", addr: serveGRPC(t, false), errHas: "does not implement the grpc health protocol"},
		{name: "nothing listening", addr: closed, errHas: "timeout: failed to connect service"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			serving, err := HealthChecker{}.Check(t.Context(), tt.addr, tt.service, 500*time.Millisecond)
			if serving != tt.serving {
				t.Fatalf("serving = %v, want %v (err %v)", serving, tt.serving, err)
			}
			if tt.errHas == "" && err != nil || tt.errHas != "" && (err == nil || !strings.Contains(err.Error(), tt.errHas)) {
				t.Fatalf("err = %v, want one containing %q", err, tt.errHas)
			}
		})
	}
}
