package pleg

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/pure/observed"
)

// countingLister reports every relist on a channel.
type countingLister struct {
	fakeLister
	relists chan struct{}
}

func (l *countingLister) ListPods(ctx context.Context) (map[types.UID]*observed.PodStatus, error) {
	l.relists <- struct{}{}
	return l.fakeLister.ListPods(ctx)
}

// watchCall is one Watch of fakeWatcher: the test calls connected and
// changed as the runtime would, and ends the stream by sending on end.
type watchCall struct {
	connected func()
	changed   func(created time.Time)
	end       chan error
}

// fakeWatcher hands the test each Watch call, or fails every call with
// err.
type fakeWatcher struct {
	err   error
	calls chan *watchCall
}

func (w *fakeWatcher) Watch(ctx context.Context, connected func(), changed func(time.Time)) error {
	if w.err != nil {
		return w.err
	}
	c := &watchCall{connected: connected, changed: changed, end: make(chan error)}
	select {
	case w.calls <- c:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-c.end:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (w *fakeWatcher) next(t *testing.T) *watchCall {
	t.Helper()
	select {
	case c := <-w.calls:
		return c
	case <-time.After(failsafe):
		t.Fatal("the event stream was not opened")
		return nil
	}
}

// fakeStreamMetrics records what it is told.
type fakeStreamMetrics struct {
	mu                    sync.Mutex
	connected, errors     int
	latencies             []time.Duration
	evented               bool
	eventedSet            int
	nodes, types, reasons []string
}

func (m *fakeStreamMetrics) ObserveEventStreamConnected() { m.mu.Lock(); m.connected++; m.mu.Unlock() }
func (m *fakeStreamMetrics) ObserveEventStreamError()     { m.mu.Lock(); m.errors++; m.mu.Unlock() }
func (m *fakeStreamMetrics) ObserveEventLatency(d time.Duration) {
	m.mu.Lock()
	m.latencies = append(m.latencies, d)
	m.mu.Unlock()
}
func (m *fakeStreamMetrics) SetEventedPLEG(on bool) {
	m.mu.Lock()
	m.evented = on
	m.eventedSet++
	m.mu.Unlock()
}
func (m *fakeStreamMetrics) NodeEvent(node, eventType, reason, _ string) {
	m.mu.Lock()
	m.nodes, m.types, m.reasons = append(m.nodes, node), append(m.types, eventType), append(m.reasons, reason)
	m.mu.Unlock()
}

// event returns the node and type of the i-th node event, empty if there
// is none.
func (m *fakeStreamMetrics) event(i int) (node, eventType string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if i >= len(m.nodes) {
		return "", ""
	}
	return m.nodes[i], m.types[i]
}

type streamSnapshot struct {
	connected, errors int
	evented           bool
	reasons           []string
}

func (m *fakeStreamMetrics) snapshot() streamSnapshot {
	m.mu.Lock()
	defer m.mu.Unlock()
	return streamSnapshot{m.connected, m.errors, m.evented, slices.Clone(m.reasons)}
}

func startEvented(t *testing.T, w Watcher) (*countingLister, *clocktesting.FakeClock, *fakeStreamMetrics) {
	t.Helper()
	l := &countingLister{relists: make(chan struct{}, 100)}
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	m := &fakeStreamMetrics{}
	g := New(l, time.Second, clk, testLogger(t), WithStreamMetrics(m), WithNodeEvents("node-a", m))
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { g.RunEvented(ctx, w, time.Minute); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	expectRelist(t, l) // the first relist happens at once
	return l, clk, m
}

func expectRelist(t *testing.T, l *countingLister) {
	t.Helper()
	select {
	case <-l.relists:
	case <-time.After(failsafe):
		t.Fatal("no relist")
	}
}

// stepWhenWaiting advances clk by d once n timers wait on it (the ticker
// always does; the retry timer too after a failure).
func stepWhenWaiting(clk *clocktesting.FakeClock, n int, d time.Duration) {
	for clk.Waiters() < n {
		time.Sleep(time.Millisecond)
	}
	clk.Step(d)
}

func TestEventedFollowsTheStream(t *testing.T) {
	w := &fakeWatcher{calls: make(chan *watchCall)}
	l, clk, m := startEvented(t, w)
	c := w.next(t)
	c.connected()
	expectRelist(t, l) // on connecting: what happened before the stream
	if got := m.snapshot(); got.connected != 1 || got.errors != 0 || !got.evented || len(got.reasons) != 0 {
		t.Errorf("after connecting: %+v; want one connection, evented, no node event", got)
	}
	c.changed(clk.Now().Add(-30 * time.Millisecond))
	expectRelist(t, l) // an event relists at once
	c.changed(time.Time{})
	expectRelist(t, l)
	m.mu.Lock()
	lat := slices.Clone(m.latencies)
	m.mu.Unlock()
	if !slices.Equal(lat, []time.Duration{30 * time.Millisecond}) {
		t.Errorf("latencies %v, want [30ms] (an event without a creation time has none)", lat)
	}
	// When a tick relists (the slow safety net) is relistOnTick's, tested
	// on its own: here the loop's timing against a fake clock is racy.
}

func TestEventedFallsBackAndRecovers(t *testing.T) {
	w := &fakeWatcher{calls: make(chan *watchCall)}
	l, clk, m := startEvented(t, w)
	c := w.next(t)
	c.connected()
	expectRelist(t, l)

	c.end <- errors.New("rpc error: code = Unavailable desc = error reading from server: EOF")
	expectRelist(t, l) // events may have been lost with the stream
	got := m.snapshot()
	if got.errors != 1 || got.evented || !slices.Equal(got.reasons, []string{EventReasonEventedPLEGFailed}) {
		t.Errorf("after the stream broke: %+v; want one error, relisting, a %s event", got, EventReasonEventedPLEGFailed)
	}
	if node, typ := m.event(0); node != "node-a" || typ != v1.EventTypeWarning {
		t.Errorf("node event on %q of type %q, want a Warning on node-a", node, typ)
	}

	// The first retry is a second later; the tick of that second relists,
	// as every tick does while the stream is down.
	stepWhenWaiting(clk, 2, time.Second)
	expectRelist(t, l)
	c = w.next(t)
	c.connected()
	expectRelist(t, l) // catching up on the outage
	got = m.snapshot()
	if got.connected != 2 || !got.evented || !slices.Equal(got.reasons, []string{EventReasonEventedPLEGFailed, EventReasonEventedPLEGRecovered}) {
		t.Errorf("after the stream came back: %+v; want two connections, evented, a %s event", got, EventReasonEventedPLEGRecovered)
	}
	if _, typ := m.event(1); typ != v1.EventTypeNormal {
		t.Errorf("recovery event of type %q, want Normal", typ)
	}
}

func TestEventedRetriesQuietlyUntilFirstConnection(t *testing.T) {
	// A runtime that is not up yet when nodelet starts: retries, errors
	// counted, but nothing fell back, so no node event.
	w := &fakeWatcher{calls: make(chan *watchCall)}
	l, clk, m := startEvented(t, w)
	w.next(t).end <- errors.New("connection refused")
	stepWhenWaiting(clk, 2, time.Second)
	expectRelist(t, l)
	c := w.next(t)
	c.connected()
	expectRelist(t, l)
	if got := m.snapshot(); got.errors != 1 || got.connected != 1 || !got.evented || len(got.reasons) != 0 {
		t.Errorf("got %+v; want one error, one connection, evented, no node event", got)
	}
}

func TestEventedWithoutStreamRelistsEveryPeriod(t *testing.T) {
	w := &fakeWatcher{err: errors.Join(ErrNoEvents, errors.New("unimplemented"))}
	l, clk, m := startEvented(t, w)
	for range 3 {
		stepWhenWaiting(clk, 1, time.Second)
		expectRelist(t, l)
	}
	// A runtime without the stream is relisted, not fallen back from.
	if got := m.snapshot(); got.evented || len(got.reasons) != 0 {
		t.Errorf("got %+v; want relisting and no node event", got)
	}
}

func TestRelistOnTick(t *testing.T) {
	for _, tc := range []struct {
		streaming bool
		since     time.Duration
		want      bool
	}{
		{false, time.Second, true},
		{true, time.Second, false},
		{true, time.Minute, true},
	} {
		if got := relistOnTick(tc.streaming, tc.since, time.Minute); got != tc.want {
			t.Errorf("relistOnTick(%v, %v) = %v", tc.streaming, tc.since, got)
		}
	}
}

func TestEventedPLEGGateOffRelistsEveryPeriod(t *testing.T) {
	w := WatcherFor(fakeStream{}, false)
	if w != nil {
		t.Fatalf("WatcherFor(_, false) = %v, want nil", w)
	}
	l, clk, m := startEvented(t, w)
	for range 3 {
		stepWhenWaiting(clk, 1, time.Second)
		expectRelist(t, l)
	}
	if got := m.snapshot(); got.connected != 0 || got.errors != 0 {
		t.Errorf("got %+v; want no stream opened", got)
	}
}

// TestEventSettle: with WithEventSettle, the relist after an event waits
// until the events have stopped for the settle time, each event putting it
// off again, and at the latest the settle maximum after the first.
func TestEventSettle(t *testing.T) {
	arming := &armingClock{FakeClock: clocktesting.NewFakeClock(time.Unix(1000, 0))}
	clk := arming.FakeClock
	g := New(&countingLister{relists: make(chan struct{}, 100)}, time.Second, arming, testLogger(t),
		WithEventSettle(100*time.Millisecond, time.Second))
	kick := make(chan struct{}) // a send returns once settled has it
	done := make(chan bool, 1)
	go func() { done <- g.settled(t.Context(), kick) }()
	notYet := func(when string) {
		t.Helper()
		select {
		case <-done:
			t.Fatalf("%s: the events counted as settled", when)
		case <-time.After(20 * time.Millisecond):
		}
	}
	settled := func(when string) {
		t.Helper()
		select {
		case ok := <-done:
			if !ok {
				t.Fatalf("%s: settled reported the context done", when)
			}
		case <-time.After(failsafe):
			t.Fatalf("%s: the events never counted as settled", when)
		}
	}

	stepWhenWaiting(clk, 1, 60*time.Millisecond)
	armed := arming.armed.Load()
	kick <- struct{}{} // another event 60 ms after the first
	rearmed(arming, armed, done)
	stepWhenWaiting(clk, 1, 90*time.Millisecond)
	notYet("150 ms after the first event, 90 ms after the last")
	stepWhenWaiting(clk, 1, 100*time.Millisecond)
	settled("100 ms after the last event")

	// Events that never stop: settled at the maximum, not before.
	go func() { done <- g.settled(t.Context(), kick) }()
	for i := 1; i <= 15; i++ {
		stepWhenWaiting(clk, 1, 80*time.Millisecond)
		armed := arming.armed.Load()
		select {
		case kick <- struct{}{}:
			rearmed(arming, armed, done)
		case ok := <-done:
			if !ok {
				t.Fatal("settled reported the context done")
			}
			if elapsed := time.Duration(i) * 80 * time.Millisecond; elapsed < time.Second {
				t.Fatalf("settled after %v of events 80 ms apart, before the 1 s maximum", elapsed)
			}
			return
		}
	}
	t.Fatal("events 80 ms apart for 1.2 s never counted as settled (maximum 1 s)")
}

// armingClock counts the timers made on it. settled receives a kick and
// then stops its timer and makes the next one: a step between the two
// lands on the old timer, which still counts as a waiter.
type armingClock struct {
	*clocktesting.FakeClock
	armed atomic.Int32
}

func (c *armingClock) NewTimer(d time.Duration) clock.Timer {
	t := c.FakeClock.NewTimer(d)
	c.armed.Add(1)
	return t
}

// rearmed waits until settled made its timer after a kick (armed timers
// were made before it), or returned instead (done has its result).
func rearmed(c *armingClock, armed int32, done chan bool) {
	for c.armed.Load() == armed && len(done) == 0 {
		time.Sleep(time.Millisecond)
	}
}
