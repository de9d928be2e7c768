package pleg

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// ErrNoEvents is what a Watcher returns when the runtime has no container
// event stream; the PLEG then keeps relisting every period.
var ErrNoEvents = errors.New("the runtime does not stream container events")

// Watcher reports container events from the runtime: Watch calls changed
// for every event until ctx ends or the stream fails.
type Watcher interface {
	Watch(ctx context.Context, changed func()) error
}

// watchRetry is how long after a broken event stream it is opened again.
const watchRetry = 5 * time.Second

// RunEvented runs like Run, but relists at once whenever w reports a
// container event, so that an exit reaches the sync loop within
// milliseconds; while the stream is up the periodic relist slows to
// slowPeriod and stays only as a safety net. When the runtime has no event
// stream (ErrNoEvents), it relists every period as Run does.
func (g *Generic) RunEvented(ctx context.Context, w Watcher, slowPeriod time.Duration) {
	kick := make(chan struct{}, 1) // one pending relist request is enough
	var streaming atomic.Bool
	var watching sync.WaitGroup
	watching.Add(1)
	go func() { defer watching.Done(); g.watch(ctx, w, kick, &streaming) }()
	defer watching.Wait() // the stream goroutine does not outlive Run

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
			case <-ticker.C():
				waiting = !relistOnTick(streaming.Load(), g.clk.Since(lastRelist), slowPeriod)
			}
		}
	}
}

// watch keeps the event stream open, re-opening it after failures, and
// gives up for good when the runtime has none.
func (g *Generic) watch(ctx context.Context, w Watcher, kick chan<- struct{}, streaming *atomic.Bool) {
	for ctx.Err() == nil {
		err := w.Watch(ctx, func() {
			streaming.Store(true)
			select {
			case kick <- struct{}{}:
			default:
			}
		})
		streaming.Store(false)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, ErrNoEvents) {
			g.log.Info("runtime has no container event stream; relisting", "period", g.period)
			return
		}
		g.log.Warn("container event stream ended; relisting until it is back", "err", err, "retryIn", watchRetry)
		select {
		case <-ctx.Done():
			return
		case <-g.clk.After(watchRetry):
		}
	}
}

// relistOnTick decides whether a periodic tick relists: always without an
// event stream, and only as a slow safety net with one.
func relistOnTick(streaming bool, sinceLast, slowPeriod time.Duration) bool {
	return !streaming || sinceLast >= slowPeriod
}
