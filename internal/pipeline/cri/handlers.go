package cri

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
// runtime_handlers of RuntimeStatus, and whether the runtime injects CDI
// devices, from the config in its verbose info; asked at most once a
// minute (every 5 s while the runtime does not answer), so that building
// a container costs no CRI call. A runtime that lists no handlers
// (containerd 1.x) supports nothing here, as the kubelet decides.
type HandlerFeatures struct {
	rt    StatusReader
	clock clock.Clock
	log   *slog.Logger

	mu       sync.Mutex
	next     time.Time // when to ask again
	handlers map[string]*runtimeapi.RuntimeHandlerFeatures
	cdi      error // why the runtime injects no CDI devices; nil if it does or is not known not to
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

// CDI is nil when the runtime injects the CDI devices of a container's
// config (CRI CDIDevices), or is not known not to; else why it does not.
// A runtime that ignores the field would start the container without
// its devices, so the caller refuses to create it instead.
func (h *HandlerFeatures) CDI(ctx context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.refresh(ctx)
	return h.cdi
}

// features are the handler's features as last read, refreshed when due;
// nil when unknown.
func (h *HandlerFeatures) features(ctx context.Context, handler string) *runtimeapi.RuntimeHandlerFeatures {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.refresh(ctx)
	f, ok := h.handlers[handler]
	if !ok && len(h.handlers) > 0 {
		h.log.Warn("Unknown runtime handler", "handler", handler)
	}
	return f
}

// refresh asks the runtime's status (verbose, for its config) when due;
// h.mu is held.
func (h *HandlerFeatures) refresh(ctx context.Context) {
	now := h.clock.Now()
	if now.Before(h.next) {
		return
	}
	h.next = now.Add(handlerFeaturesTTL)
	resp, err := h.rt.Status(ctx, true)
	if err != nil {
		// Keep what was known: a restarting runtime comes back with the
		// same handlers, most likely.
		h.log.Warn("Reading the runtime handlers' features", "err", err)
		h.next = now.Add(handlerFeaturesRetry)
		return
	}
	hs := resp.GetRuntimeHandlers()
	h.handlers = make(map[string]*runtimeapi.RuntimeHandlerFeatures, len(hs))
	for _, rh := range hs {
		h.handlers[rh.GetName()] = rh.GetFeatures()
	}
	h.cdi = CDISupport(resp.GetInfo())
}

// ErrNoCDI is what CDISupport's errors wrap.
var ErrNoCDI = errors.New("the container runtime does not inject CDI devices")

// CDISupport reads whether the runtime injects CDI devices from the info
// of its verbose status. Only containerd says: its "config" has
// enableCDI (containerd 1.7, default off; 2.x, default on), or lacks it
// (1.6 and older, which drop the CRI CDIDevices field without a word).
// Any other runtime, or no config, is taken to inject them (CRI-O has
// done so since 1.23), as the kubelet takes every runtime.
func CDISupport(info map[string]string) error {
	raw, ok := info["config"]
	if !ok || len(raw) > maxRuntimeConfig {
		return nil
	}
	var cfg struct {
		ContainerdRootDir *string `json:"containerdRootDir"`
		EnableCDI         *bool   `json:"enableCDI"`
	}
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil || cfg.ContainerdRootDir == nil {
		return nil
	}
	switch {
	case cfg.EnableCDI == nil:
		return fmt.Errorf("%w: containerd's CRI config has no enable_cdi (containerd 1.6 or older; CDI needs 1.7 with enable_cdi = true, or 2.x)", ErrNoCDI)
	case !*cfg.EnableCDI:
		return fmt.Errorf("%w: containerd's CRI plugin has enable_cdi = false", ErrNoCDI)
	}
	return nil
}

// maxRuntimeConfig bounds the runtime config CDISupport parses (containerd's
// is a few kB).
const maxRuntimeConfig = 1 << 20
