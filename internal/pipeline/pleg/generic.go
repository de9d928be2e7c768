package pleg

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/pure/observed"
)

const (
	// DefaultRelistPeriod is how often Run relists when New is given no
	// period (the kubelet's genericPlegRelistPeriod).
	DefaultRelistPeriod = time.Second
	// RelistThreshold is how old the last successful relist may be before
	// Healthy reports a failure (the kubelet's genericPlegRelistThreshold).
	RelistThreshold = 3 * time.Minute
	// EventedRelistThreshold replaces RelistThreshold while the runtime's
	// event stream is open (the kubelet's eventedPlegRelistThreshold):
	// then relists come with events, or every slow period as a safety
	// net, so on a node where nothing happens the last relist is up to
	// that period old.
	EventedRelistThreshold = 10 * time.Minute
	// eventCapacity is the Events buffer (the kubelet's plegChannelCapacity).
	eventCapacity = 1000
)

// Lister lists every pod the runtime knows with its full status. It is
// implemented over CRI elsewhere.
type Lister interface {
	ListPods(ctx context.Context) (map[types.UID]*observed.PodStatus, error)
}

// Generic is a relisting PLEG: every period it lists all pods, diffs the
// result against the previous successful listing and sends the events on
// Events.
//
// Like the kubelet's GenericPLEG it assumes a container is not created,
// stopped and removed within one relist period; such a container produces
// no event. The sync loop's periodic resync is the safety net.
type Generic struct {
	lister Lister
	period time.Duration
	clk    clock.WithTicker
	log    *slog.Logger

	// relistObserver, when set, is called after every relist, successful
	// or not, with its duration (WithRelistObserver).
	relistObserver func(d time.Duration)

	// streamMetrics and nodeEvents, when set, are told how RunEvented's
	// event stream fares (WithStreamMetrics, WithNodeEvents).
	streamMetrics StreamMetrics
	nodeName      string
	nodeEvents    NodeEvents
	// settle: RunEvented's relist waits until the events have stopped
	// for settle (at most settleMax after the first), WithEventSettle.
	settle, settleMax time.Duration

	// events is buffered (unlike most channels here) because the consumer,
	// the sync loop, also serves other sources: a relist must never wait
	// for it. The capacity is the kubelet's; on overflow events are dropped
	// and counted, the periodic resync covers them.
	events  chan Event
	dropped atomic.Uint64

	// relistMu serialises relists; it guards last.
	relistMu sync.Mutex
	last     map[types.UID]*observed.PodStatus
	// current is last and when its relist began (LastRelist), for readers
	// that must not wait for a relist (Current, CurrentAt); nil before the
	// first successful relist. failed: the latest relist failed.
	current atomic.Pointer[relisted]
	failed  atomic.Bool
	// streaming: RunEvented follows the runtime's open event stream.
	streaming atomic.Bool
}

// Option changes a Generic built by New.
type Option func(*Generic)

// WithRelistObserver has f called after every relist, successful or not,
// with its duration (for kubelet_pleg_relist_duration_seconds); f must not
// block.
func WithRelistObserver(f func(d time.Duration)) Option {
	return func(g *Generic) { g.relistObserver = f }
}

// New returns a PLEG over lister that relists every period (DefaultRelistPeriod
// when period <= 0). It starts nothing; call Run.
func New(lister Lister, period time.Duration, clk clock.WithTicker, log *slog.Logger, opts ...Option) *Generic {
	return newGeneric(lister, period, clk, log, eventCapacity, opts...)
}

func newGeneric(lister Lister, period time.Duration, clk clock.WithTicker, log *slog.Logger, capacity int, opts ...Option) *Generic {
	if period <= 0 {
		period = DefaultRelistPeriod
	}
	g := &Generic{
		lister: lister,
		period: period,
		clk:    clk,
		log:    log,
		events: make(chan Event, capacity),
		last:   map[types.UID]*observed.PodStatus{},
	}
	for _, o := range opts {
		o(g)
	}
	return g
}

// Events returns the channel of lifecycle events. ContainerChanged events
// are not sent. The channel is never closed.
func (g *Generic) Events() <-chan Event { return g.events }

// Dropped returns how many events were dropped because Events was full.
func (g *Generic) Dropped() uint64 { return g.dropped.Load() }

// Run relists at once and then every period until ctx ends. Failures are
// logged; the previous snapshot stays in force.
func (g *Generic) Run(ctx context.Context) {
	// The ticker exists before the first relist, so a tick is never missed
	// by a caller that waits for the first relist and then advances a clock.
	ticker := g.clk.NewTicker(g.period)
	defer ticker.Stop()
	for {
		if err := g.Relist(ctx); err != nil && ctx.Err() == nil {
			g.log.Error("PLEG relist failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C():
		}
	}
}

// Relist lists the pods once and sends the events. On error nothing
// changes: the old snapshot stays, no event is
// sent, LastRelist does not advance. Relists are serialised.
func (g *Generic) Relist(ctx context.Context) error {
	g.relistMu.Lock()
	defer g.relistMu.Unlock()

	start := g.clk.Now()
	if g.relistObserver != nil {
		defer func() { g.relistObserver(g.clk.Since(start)) }()
	}

	pods, err := g.lister.ListPods(ctx)
	g.failed.Store(err != nil)
	if err != nil {
		return fmt.Errorf("pleg relist: %w", err)
	}
	if pods == nil {
		pods = map[types.UID]*observed.PodStatus{}
	}

	events := Diff(g.last, pods)
	g.last = pods
	g.current.Store(&relisted{pods: pods, at: start})

	var dropped int
	for _, ev := range events {
		if ev.Type == ContainerChanged {
			continue
		}
		ev.ObservedAt = start
		select {
		case g.events <- ev:
		default:
			dropped++
		}
	}
	if dropped > 0 {
		g.dropped.Add(uint64(dropped))
		g.log.Warn("PLEG event channel is full, dropped events of this relist",
			"dropped", dropped, "capacity", cap(g.events))
	}
	return nil
}

// LastRelist returns the start time of the last successful relist, zero
// before the first.
func (g *Generic) LastRelist() time.Time {
	if r := g.current.Load(); r != nil {
		return r.at
	}
	return time.Time{}
}

// Current returns the pods of the last successful relist when they are
// what the runtime holds now, give or take one relist: the latest relist
// succeeded, and the runtime's event stream is open (every change relists
// at once) or that relist is at most two periods old. The map is shared;
// callers must not change it.
func (g *Generic) Current() (map[types.UID]*observed.PodStatus, bool) {
	pods, _, ok := g.CurrentAt()
	return pods, ok
}

// CurrentAt is Current with the start time of the relist its pods come
// from, read together.
func (g *Generic) CurrentAt() (map[types.UID]*observed.PodStatus, time.Time, bool) {
	snap := g.current.Load()
	if snap == nil || g.failed.Load() {
		return nil, time.Time{}, false
	}
	if !g.streaming.Load() && g.clk.Since(snap.at) > 2*g.period {
		return nil, time.Time{}, false
	}
	return snap.pods, snap.at, true
}

// relisted is a successful relist's pods and its start time.
type relisted struct {
	pods map[types.UID]*observed.PodStatus
	at   time.Time
}

// Healthy reports whether a relist succeeded within RelistThreshold, or
// EventedRelistThreshold while the event stream is open.
func (g *Generic) Healthy() (bool, error) {
	last := g.LastRelist()
	if last.IsZero() {
		return false, errors.New("pleg has yet to be successful")
	}
	threshold := RelistThreshold
	if g.streaming.Load() {
		threshold = EventedRelistThreshold
	}
	if elapsed := g.clk.Since(last); elapsed > threshold {
		return false, fmt.Errorf("pleg was last seen active %v ago; threshold is %v", elapsed, threshold)
	}
	return true, nil
}
