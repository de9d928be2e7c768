package pleg

import (
	"context"
	"errors"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
)

// ErrNoEvents is what a Watcher returns when the runtime has no container
// event stream; the PLEG then keeps relisting every period.
var ErrNoEvents = errors.New("the runtime does not stream container events")

// errStreamClosed stands for a stream that ended without an error.
var errStreamClosed = errors.New("container event stream closed")

// Watcher reports container events from the runtime. Watch opens the
// stream, calls connected once it is open, then changed for every event
// (created: when the runtime created it, zero if it does not say) until
// ctx ends or the stream fails. connected is called before any changed,
// never at the same time, and Watch returns only after its last call of
// either.
type Watcher interface {
	Watch(ctx context.Context, connected func(), changed func(created time.Time)) error
}

// StreamMetrics is told how the event stream fares; *metrics.Metrics
// implements it with the kubelet's evented PLEG metrics.
type StreamMetrics interface {
	// ObserveEventStreamConnected counts a stream opened
	// (kubelet_evented_pleg_connection_success_count).
	ObserveEventStreamConnected()
	// ObserveEventStreamError counts a stream that failed to open or
	// ended (kubelet_evented_pleg_connection_error_count).
	ObserveEventStreamError()
	// ObserveEventLatency records how long after the runtime created an
	// event it reached nodelet
	// (kubelet_evented_pleg_connection_latency_seconds).
	ObserveEventLatency(d time.Duration)
	// SetEventedPLEG says whether the PLEG follows the event stream (true)
	// or relists every period (false).
	SetEventedPLEG(on bool)
}

// NodeEvents records events about the node (events.Recorder).
type NodeEvents interface {
	NodeEvent(node, eventType, reason, message string)
}

// Reasons of the node events RunEvented records. The kubelet records none
// for its event stream; these follow its style (ContainerGCFailed, ...).
const (
	// EventReasonEventedPLEGFailed (Warning): the event stream broke and
	// the PLEG relists every period until it is back.
	EventReasonEventedPLEGFailed = "EventedPLEGFailed"
	// EventReasonEventedPLEGRecovered (Normal): the event stream is back.
	EventReasonEventedPLEGRecovered = "EventedPLEGRecovered"
)

// Reconnect back-off of the event stream: the first retry after
// watchRetryMin, doubling up to watchRetryMax. It starts again from
// watchRetryMin after a stream that stayed up watchRetryMax or longer.
const (
	watchRetryMin = time.Second
	watchRetryMax = 30 * time.Second
)

// WithStreamMetrics has RunEvented report the event stream to m.
func WithStreamMetrics(m StreamMetrics) Option {
	return func(g *Generic) { g.streamMetrics = m }
}

// WithEventSettle has RunEvented relist once the events have stopped for
// d, and at the latest max after the first of them, instead of at each
// event. A pod's start sends four events in a quarter of a second (its
// sandbox created and started, its container created and started), each
// caused by nodelet's own calls; relisting at each put two list calls
// beside every call of the start, in the runtime that serves both. The
// cost is d more before a container that exits is seen (the kubelet's
// relisting PLEG: up to a second).
func WithEventSettle(d, max time.Duration) Option {
	return func(g *Generic) { g.settle, g.settleMax = d, max }
}

// WithNodeEvents has RunEvented record on node, through r, that it falls
// back to relisting when the event stream breaks (Warning) and that the
// stream is back (Normal).
func WithNodeEvents(node string, r NodeEvents) Option {
	return func(g *Generic) { g.nodeName, g.nodeEvents = node, r }
}

// RunEvented runs like Run, but relists whenever w reports a container
// event, at once or once the events settle (WithEventSettle), so that an
// exit reaches the sync loop within milliseconds or the settle time;
// while the stream is open the periodic relist slows to slowPeriod and
// stays only as a safety net. When the stream breaks it relists every
// period, says so (log, metrics, a node event) and reopens the stream
// with back-off; once it is back it relists at once, to catch up on what
// the stream missed. When the runtime has no event stream (ErrNoEvents),
// or w is nil, it relists every period as Run does.
func (g *Generic) RunEvented(ctx context.Context, w Watcher, slowPeriod time.Duration) {
	if w == nil {
		g.Run(ctx)
		return
	}
	kick := make(chan struct{}, 1) // one pending relist request is enough
	watching := make(chan struct{})
	go func() { defer close(watching); g.watch(ctx, w, kick, slowPeriod) }()
	defer func() { <-watching }() // the stream goroutine does not outlive Run

	ticker := g.clk.NewTicker(g.period)
	defer ticker.Stop()
	for {
		if err := g.Relist(ctx); err != nil && ctx.Err() == nil {
			g.log.Error("PLEG relist failed", "err", err)
		}
		lastRelist := g.clk.Now()
		for waiting := true; waiting; {
			select {
			case <-ctx.Done():
				return
			case <-kick:
				waiting = false
				if g.settle > 0 && !g.settled(ctx, kick) {
					return
				}
			case <-ticker.C():
				waiting = !relistOnTick(g.streaming.Load(), g.clk.Since(lastRelist), slowPeriod)
			}
		}
	}
}

// settled waits until no kick has come for g.settle, or g.settleMax has
// passed since it was called (the first kick); false when ctx ended.
func (g *Generic) settled(ctx context.Context, kick <-chan struct{}) bool {
	deadline := g.clk.Now().Add(g.settleMax)
	for {
		wait := min(g.settle, deadline.Sub(g.clk.Now()))
		if wait <= 0 {
			return true
		}
		timer := g.clk.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return false
		case <-kick:
			timer.Stop()
		case <-timer.C():
			return true
		}
	}
}

// watch keeps the event stream open, re-opening it with back-off after
// failures, and gives up for good when the runtime has none.
func (g *Generic) watch(ctx context.Context, w Watcher, kick chan<- struct{}, slowPeriod time.Duration) {
	relistNow := func() {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
	retry := watchRetryMin
	wasUp := false // a stream was open before, and broke
	for ctx.Err() == nil {
		var upAt time.Time // set by connected, read after Watch returned
		err := w.Watch(ctx, func() {
			upAt = g.clk.Now()
			g.streaming.Store(true)
			g.observeStream(func(m StreamMetrics) { m.ObserveEventStreamConnected(); m.SetEventedPLEG(true) })
			if wasUp {
				g.log.Info("container event stream is back; relisting only as a safety net", "period", slowPeriod)
				g.nodeEvent(v1.EventTypeNormal, EventReasonEventedPLEGRecovered,
					"The container runtime's event stream is back; pod lifecycle events follow it again")
			} else {
				g.log.Info("following the container event stream; relisting only as a safety net", "period", slowPeriod)
			}
			relistNow() // what happened while the stream was down
		}, func(created time.Time) {
			if !created.IsZero() {
				g.observeStream(func(m StreamMetrics) { m.ObserveEventLatency(g.clk.Since(created)) })
			}
			relistNow()
		})
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			err = errStreamClosed
		}
		up := g.streaming.Swap(false)
		g.observeStream(func(m StreamMetrics) { m.ObserveEventStreamError(); m.SetEventedPLEG(false) })
		if up && g.clk.Since(upAt) >= watchRetryMax {
			retry = watchRetryMin
		}
		noEvents := errors.Is(err, ErrNoEvents)
		switch {
		case noEvents && !wasUp:
			// The runtime never had the stream (containerd before 1.7):
			// relisting is the design, not a failure.
			g.log.Info("runtime has no container event stream; relisting", "period", g.period)
		case up || noEvents:
			wasUp = true
			g.log.Warn("container event stream broke; relisting every period until it is back",
				"err", err, "period", g.period, "retryIn", retry)
			g.nodeEvent(v1.EventTypeWarning, EventReasonEventedPLEGFailed, fmt.Sprintf(
				"The container runtime's event stream broke (%v); relisting every %v until it is back", err, g.period))
		default:
			g.log.Debug("container event stream did not open", "err", err, "retryIn", retry)
		}
		if up {
			relistNow() // events may have been lost with the stream
		}
		if noEvents {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-g.clk.After(retry):
		}
		retry = min(2*retry, watchRetryMax)
	}
}

func (g *Generic) observeStream(f func(StreamMetrics)) {
	if g.streamMetrics != nil {
		f(g.streamMetrics)
	}
}

func (g *Generic) nodeEvent(eventType, reason, message string) {
	if g.nodeEvents != nil {
		g.nodeEvents.NodeEvent(g.nodeName, eventType, reason, message)
	}
}

// relistOnTick decides whether a periodic tick relists: always without an
// event stream, and only as a slow safety net with one.
func relistOnTick(streaming bool, sinceLast, slowPeriod time.Duration) bool {
	return !streaming || sinceLast >= slowPeriod
}
