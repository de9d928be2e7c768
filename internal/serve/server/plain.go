// Package server is beside the pipeline: the kubelet's HTTP endpoints.
// The plain ones are the healthz endpoint (--healthz-port, loopback only,
// serves only /healthz) and the read-only port (--read-only-port, off by
// default) with /healthz and the Prometheus metrics. The secure API
// (--port, HTTPS) serves /healthz, /pods, /runningpods/, /stats/summary,
// /metrics*, /containerLogs, /events, /configz, /debug/pprof/, /logs/ and the
// streaming endpoints (exec, attach, portForward, run: not implemented
// yet), all behind the kubelet's authentication (client certificates
// against --client-ca-file and a local admin CA, bearer tokens from
// --token-auth-file or a TokenReview client, optional anonymous) and
// authorization (NodeletGroups: admins and readers by group; Webhook:
// SubjectAccessReviews on subresources of nodes/<name>; AlwaysAllow). It
// also makes the serving certificate and the local admin credentials.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"
)

// HealthCheck reports whether a part of nodelet is healthy.
type HealthCheck struct {
	Name  string
	Check func() error
}

// Metrics are the Prometheus registries served by the read-only port and
// the secure port.
type Metrics struct {
	// Kubelet is served at /metrics.
	Kubelet prometheus.Gatherer
	// Probes is served at /metrics/probes.
	Probes prometheus.Gatherer
	// Resource is served at /metrics/resource (secure port only).
	Resource prometheus.Gatherer
	// Cadvisor is served at /metrics/cadvisor (secure port only); an
	// OptionalGatherer may answer 404 while it has nothing to serve.
	Cadvisor prometheus.Gatherer
}

// HealthzHandler serves /healthz and nothing else: "ok", or 500 with the
// failing checks.
func HealthzHandler(checks []HealthCheck) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		var failed []error
		for _, c := range checks {
			if err := c.Check(); err != nil {
				failed = append(failed, fmt.Errorf("%s: %w", c.Name, err))
			}
		}
		if err := errors.Join(failed...); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		fmt.Fprint(w, "ok")
	})
	return mux
}

// ReadOnlyHandler serves the read-only port (readOnlyPort) as the kubelet
// does: without authentication, and only what reads the node's state:
// /healthz, /pods, /stats/summary, /metrics, /metrics/probes,
// /metrics/resource and /metrics/cadvisor. Logs, exec, attach,
// port-forward, /configz, /events and pprof stay on the secure port.
func ReadOnlyHandler(deps Deps) http.Handler {
	if deps.Log == nil {
		deps.Log = slog.New(slog.DiscardHandler)
	}
	if deps.Clock == nil {
		deps.Clock = clock.RealClock{}
	}
	s := &secureServer{deps: deps, log: deps.Log, mux: http.NewServeMux()}
	s.handle("GET /healthz", HealthzHandler(deps.Health))
	s.handle("GET /pods", http.HandlerFunc(s.getPods))
	s.handle("GET /stats/summary", http.HandlerFunc(s.getSummary))
	s.handle("POST /stats/summary", http.HandlerFunc(s.getSummary))
	s.handle("GET /metrics", gathererHandler(deps.Metrics.Kubelet))
	s.handle("GET /metrics/probes", gathererHandler(deps.Metrics.Probes))
	s.handle("GET /metrics/resource", gathererHandler(deps.Metrics.Resource))
	s.handle("GET /metrics/cadvisor", gathererHandler(deps.Metrics.Cadvisor))
	return s.mux
}

// Serve listens on addr and serves h until ctx ends, within
// DefaultLimits.
func Serve(ctx context.Context, addr string, h http.Handler, log *slog.Logger) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	return serve(ctx, ln, h, nil, DefaultLimits(), log)
}
