package pleg

import (
	"context"
	"errors"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/pure/observed"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// failsafe bounds every wait on the code under test so a bug fails the
// test instead of hanging it. It is never used to order events.
const failsafe = 10 * time.Second

// fakeLister returns whatever the test set last.
type fakeLister struct {
	mu     sync.Mutex
	pods   map[types.UID]*observed.PodStatus
	err    error
	during func() // called inside ListPods, e.g. to advance the clock
}

func (l *fakeLister) set(pods map[types.UID]*observed.PodStatus, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pods, l.err = pods, err
}

func (l *fakeLister) ListPods(context.Context) (map[types.UID]*observed.PodStatus, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.during != nil {
		l.during()
	}
	if l.err != nil {
		return nil, l.err
	}
	return l.pods, nil
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// drain returns the events queued now, without waiting.
// drain returns the events waiting, without their ObservedAt (which
// TestEventsCarryTheRelistStart checks).
func drain(g *Generic) []Event {
	var out []Event
	for {
		select {
		case e := <-g.events:
			e.ObservedAt = time.Time{}
			out = append(out, e)
		default:
			return out
		}
	}
}

func mustRelist(t *testing.T, g *Generic) {
	t.Helper()
	if err := g.Relist(t.Context()); err != nil {
		t.Fatalf("Relist: %v", err)
	}
}

func TestRunRelistsOnTicks(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	l := &fakeLister{}
	l.set(snapshot(podOf("a", sbx("s", ready), ctr("c", running))), nil)
	// Unbuffered: each receive marks the end of one relist.
	relisted := make(chan time.Duration)
	g := New(l, 0, clk, testLogger(t), WithRelistObserver(func(d time.Duration) { relisted <- d }))
	if g.period != DefaultRelistPeriod {
		t.Fatalf("period = %v, want the default %v", g.period, DefaultRelistPeriod)
	}

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); g.Run(ctx) }()

	recv(t, relisted) // the immediate first relist
	want := []Event{ev("a", ContainerStarted, "c"), ev("a", ContainerStarted, "s")}
	if got := drain(g); !reflect.DeepEqual(got, want) {
		t.Fatalf("first relist events = %v, want %v", got, want)
	}

	l.set(snapshot(podOf("a", sbx("s", ready), ctr("c", exited))), nil)
	clk.Step(time.Second)
	recv(t, relisted)
	if got, want := drain(g), []Event{ev("a", ContainerDied, "c")}; !reflect.DeepEqual(got, want) {
		t.Fatalf("second relist events = %v, want %v", got, want)
	}
	if !g.LastRelist().Equal(t0.Add(time.Second)) {
		t.Errorf("LastRelist = %v, want %v", g.LastRelist(), t0.Add(time.Second))
	}

	l.set(snapshot(), nil)
	clk.Step(time.Second)
	recv(t, relisted)
	want = []Event{ev("a", ContainerRemoved, "c"), ev("a", ContainerDied, "s"), ev("a", ContainerRemoved, "s")}
	if got := drain(g); !reflect.DeepEqual(got, want) {
		t.Fatalf("third relist events = %v, want %v", got, want)
	}

	cancel()
	recv(t, done)
}

func TestRelistErrorKeepsSnapshot(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	l := &fakeLister{}
	a := podOf("a", ctr("c", running))
	l.set(snapshot(a), nil)
	g := New(l, time.Second, clk, testLogger(t))
	mustRelist(t, g)
	drain(g)

	boom := errors.New("runtime down")
	l.set(nil, boom)
	clk.Step(time.Second)
	err := g.Relist(t.Context())
	if !errors.Is(err, boom) {
		t.Fatalf("Relist error = %v, want it to wrap %v", err, boom)
	}
	if got := drain(g); got != nil {
		t.Errorf("failed relist sent events %v", got)
	}
	if !g.LastRelist().Equal(t0) {
		t.Errorf("LastRelist = %v, want the last success %v", g.LastRelist(), t0)
	}

	// The next success diffs against the snapshot before the failure.
	l.set(snapshot(podOf("a", ctr("c", exited))), nil)
	clk.Step(time.Second)
	mustRelist(t, g)
	if got, want := drain(g), []Event{ev("a", ContainerDied, "c")}; !reflect.DeepEqual(got, want) {
		t.Errorf("events = %v, want %v", got, want)
	}
}

func TestNilSnapshotIsEmpty(t *testing.T) {
	l := &fakeLister{}
	l.set(snapshot(podOf("a", ctr("c", exited))), nil)
	g := New(l, time.Second, clocktesting.NewFakeClock(t0), testLogger(t))
	mustRelist(t, g)
	drain(g)
	l.set(nil, nil)
	mustRelist(t, g)
	if got, want := drain(g), []Event{ev("a", ContainerRemoved, "c")}; !reflect.DeepEqual(got, want) {
		t.Errorf("events = %v, want %v", got, want)
	}
}

func TestHealthy(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	l := &fakeLister{}
	g := New(l, time.Second, clk, testLogger(t))

	if ok, err := g.Healthy(); ok || err == nil {
		t.Fatalf("Healthy before any relist = %v, %v; want false with an error", ok, err)
	}
	l.set(snapshot(), nil)
	mustRelist(t, g)
	if ok, err := g.Healthy(); !ok || err != nil {
		t.Fatalf("Healthy after a relist = %v, %v", ok, err)
	}

	l.set(nil, errors.New("runtime down"))
	for elapsed := time.Duration(0); elapsed < RelistThreshold; elapsed += 30 * time.Second {
		clk.Step(30 * time.Second)
		if err := g.Relist(t.Context()); err == nil {
			t.Fatal("Relist succeeded with a failing lister")
		}
	}
	if ok, err := g.Healthy(); !ok || err != nil {
		t.Fatalf("Healthy exactly at the threshold = %v, %v; want true", ok, err)
	}
	clk.Step(time.Second)
	ok, err := g.Healthy()
	if ok || err == nil || !strings.Contains(err.Error(), "threshold is 3m0s") {
		t.Fatalf("Healthy after 3m1s of failures = %v, %v; want false with a threshold error", ok, err)
	}

	l.set(snapshot(), nil)
	mustRelist(t, g)
	if ok, err := g.Healthy(); !ok || err != nil {
		t.Fatalf("Healthy after recovery = %v, %v", ok, err)
	}
}

// While the runtime's event stream is open, relists come with events or
// every slow period (5 minutes) as a safety net: a node where nothing
// happens stays healthy up to the kubelet's evented threshold, 10
// minutes; once the stream is gone, the 3 minutes of relisting apply.
func TestHealthyWhileStreaming(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	l := &fakeLister{}
	l.set(snapshot(), nil)
	g := New(l, time.Second, clk, testLogger(t))
	mustRelist(t, g)
	g.streaming.Store(true)
	clk.Step(5*time.Minute + time.Second)
	if ok, err := g.Healthy(); !ok || err != nil {
		t.Errorf("Healthy 5m1s after the last relist, the stream open = %v, %v; want true", ok, err)
	}
	clk.Step(5 * time.Minute)
	if ok, err := g.Healthy(); ok || err == nil || !strings.Contains(err.Error(), "threshold is 10m0s") {
		t.Errorf("Healthy 10m1s after the last relist, the stream open = %v, %v; want false past 10m0s", ok, err)
	}
	mustRelist(t, g)
	g.streaming.Store(false)
	clk.Step(3*time.Minute + time.Second)
	if ok, err := g.Healthy(); ok || err == nil || !strings.Contains(err.Error(), "threshold is 3m0s") {
		t.Errorf("Healthy 3m1s after the last relist, no stream = %v, %v; want false past 3m0s", ok, err)
	}
}

func TestEventsFullDropsAndCounts(t *testing.T) {
	l := &fakeLister{}
	l.set(snapshot(podOf("a", ctr("c1", running), ctr("c2", running), ctr("c3", running))), nil)
	g := newGeneric(l, time.Second, clocktesting.NewFakeClock(t0), testLogger(t), 1)
	mustRelist(t, g)
	if got, want := drain(g), []Event{ev("a", ContainerStarted, "c1")}; !reflect.DeepEqual(got, want) {
		t.Errorf("delivered = %v, want %v", got, want)
	}
	if g.Dropped() != 2 {
		t.Errorf("Dropped = %d, want 2", g.Dropped())
	}
	if cap(New(l, 0, clocktesting.NewFakeClock(t0), testLogger(t)).events) != 1000 {
		t.Error("New's event capacity is not the kubelet's 1000")
	}
}

func TestChangedIsNotSent(t *testing.T) {
	l := &fakeLister{}
	l.set(snapshot(podOf("a", ctr("c", created))), nil)
	g := New(l, time.Second, clocktesting.NewFakeClock(t0), testLogger(t))
	mustRelist(t, g)
	if got := drain(g); got != nil {
		t.Errorf("events = %v, want none (ContainerChanged is filtered)", got)
	}
}

func TestRelistObserverSeesDuration(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	l := &fakeLister{during: func() { clk.Step(250 * time.Millisecond) }}
	l.set(snapshot(), nil)
	var got []time.Duration
	g := New(l, time.Second, clk, testLogger(t), WithRelistObserver(func(d time.Duration) { got = append(got, d) }))
	mustRelist(t, g)
	l.set(nil, errors.New("boom"))
	if err := g.Relist(t.Context()); err == nil {
		t.Fatal("Relist succeeded with a failing lister")
	}
	if want := []time.Duration{250 * time.Millisecond, 250 * time.Millisecond}; !reflect.DeepEqual(got, want) {
		t.Errorf("observed %v, want %v (failures are observed too)", got, want)
	}
}

func recv[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(failsafe):
		t.Fatal("timed out waiting on a channel")
		panic("unreachable")
	}
}

// Every event carries when the relist that found it began.
func TestEventsCarryTheRelistStart(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	l := &fakeLister{during: func() { clk.Step(250 * time.Millisecond) }}
	l.set(snapshot(podOf("a", ctr("c", running))), nil)
	g := New(l, time.Second, clk, testLogger(t))
	mustRelist(t, g)
	select {
	case e := <-g.Events():
		if !e.ObservedAt.Equal(t0) {
			t.Errorf("ObservedAt = %v, want the relist's start %v", e.ObservedAt, t0)
		}
	default:
		t.Fatal("no event")
	}
}

// Current gives the last relist's pods while they are what the runtime
// holds: none before the first relist; with the event stream open however
// old; without it for two relist periods; none while the latest relist
// failed.
func TestCurrent(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	l := &fakeLister{}
	g := New(l, time.Second, clk, testLogger(t))
	if _, ok := g.Current(); ok {
		t.Fatal("Current before any relist is current")
	}
	l.set(snapshot(podOf("a", ctr("c", observed.ContainerRunning))), nil)
	mustRelist(t, g)
	pods, ok := g.Current()
	if !ok || len(pods) != 1 || pods["a"] == nil {
		t.Fatalf("Current after a relist = %v, %v; want pod a", pods, ok)
	}
	clk.Step(2 * time.Second)
	if _, ok := g.Current(); !ok {
		t.Error("Current two periods after the relist is not current")
	}
	clk.Step(time.Millisecond)
	if _, ok := g.Current(); ok {
		t.Error("Current just past two periods without a stream is current")
	}
	g.streaming.Store(true)
	clk.Step(5 * time.Minute)
	if pods, ok := g.Current(); !ok || pods["a"] == nil {
		t.Errorf("Current with the stream open = %v, %v; want pod a", pods, ok)
	}
	l.set(nil, errors.New("runtime down"))
	if err := g.Relist(t.Context()); err == nil {
		t.Fatal("Relist succeeded with a failing lister")
	}
	if _, ok := g.Current(); ok {
		t.Error("Current after a failed relist is current, the stream open")
	}
	l.set(snapshot(podOf("b", ctr("c", observed.ContainerRunning))), nil)
	mustRelist(t, g)
	if pods, ok := g.Current(); !ok || pods["b"] == nil || pods["a"] != nil {
		t.Errorf("Current after a relist succeeded again = %v, %v; want pod b only", pods, ok)
	}
}
