package cri

import (
	"context"
	"log/slog"
	"sync"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"
)

// How long HandlerFeatures trusts the runtime's answer, and how soon it
// asks again after a failed or empty one (a runtime being restarted).
const (
	handlerFeaturesTTL   = time.Minute
	handlerFeaturesRetry = 5 * time.Second
)

// StatusReader is the RuntimeStatus call HandlerFeatures needs (*Client).
type StatusReader interface {
	Status(ctx context.Context, verbose bool) (*runtimeapi.StatusResponse, error)
}

// HandlerFeatures tells what the runtime's handlers support, from the
// runtime_handlers of RuntimeStatus, asked at most once a minute (every 5 s
// while the runtime does not answer), so that building a container costs
// no CRI call. A runtime that lists no handlers (containerd 1.x) supports
// nothing here, as the kubelet decides.
type HandlerFeatures struct {
	rt    StatusReader
	clock clock.Clock
	log   *slog.Logger

	mu       sync.Mutex
	next     time.Time // when to ask again
	handlers map[string]*runtimeapi.RuntimeHandlerFeatures
}

// NewHandlerFeatures returns a HandlerFeatures asking rt; clk and log may
// be nil.
func NewHandlerFeatures(rt StatusReader, clk clock.Clock, log *slog.Logger) *HandlerFeatures {
	if clk == nil {
		clk = clock.RealClock{}
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &HandlerFeatures{rt: rt, clock: clk, log: log}
}

// RecursiveReadOnlyMounts is whether the runtime handler named ("" the
// default) supports recursive read-only mounts.
func (h *HandlerFeatures) RecursiveReadOnlyMounts(ctx context.Context, handler string) bool {
	return h.features(ctx, handler).GetRecursiveReadOnlyMounts()
}

// features are the handler's features as last read, refreshed when due;
// nil when unknown.
func (h *HandlerFeatures) features(ctx context.Context, handler string) *runtimeapi.RuntimeHandlerFeatures {
	h.mu.Lock()
	defer h.mu.Unlock()
	if now := h.clock.Now(); !now.Before(h.next) {
		h.next = now.Add(handlerFeaturesTTL)
		resp, err := h.rt.Status(ctx, false)
		switch {
		case err != nil:
			// Keep what was known: a restarting runtime comes back with
			// the same handlers, most likely.
			h.log.Warn("Reading the runtime handlers' features", "err", err)
			h.next = now.Add(handlerFeaturesRetry)
		default:
			hs := resp.GetRuntimeHandlers()
			h.handlers = make(map[string]*runtimeapi.RuntimeHandlerFeatures, len(hs))
			for _, rh := range hs {
				h.handlers[rh.GetName()] = rh.GetFeatures()
			}
		}
	}
	f, ok := h.handlers[handler]
	if !ok && len(h.handlers) > 0 {
		h.log.Warn("Unknown runtime handler", "handler", handler)
	}
	return f
}
