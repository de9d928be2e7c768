package pleg

import (
	"context"
	"errors"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/observed"
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

// fakeWatcher hands the test the changed callback, or fails.
type fakeWatcher struct {
	err     error
	changed chan func()
}

func (w *fakeWatcher) Watch(ctx context.Context, changed func()) error {
	if w.err != nil {
		return w.err
	}
	w.changed <- changed
	<-ctx.Done()
	return ctx.Err()
}

func startEvented(t *testing.T, w Watcher) (*countingLister, *clocktesting.FakeClock) {
	t.Helper()
	l := &countingLister{relists: make(chan struct{}, 100)}
	clk := clocktesting.NewFakeClock(time.Unix(0, 0))
	g := New(l, time.Second, clk, testLogger(t))
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { g.RunEvented(ctx, w, time.Minute); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	expectRelist(t, l) // the first relist happens at once
	return l, clk
}

func expectRelist(t *testing.T, l *countingLister) {
	t.Helper()
	select {
	case <-l.relists:
	case <-time.After(failsafe):
		t.Fatal("no relist")
	}
}

func TestEventedRelistsOnEvent(t *testing.T) {
	w := &fakeWatcher{changed: make(chan func(), 1)}
	l, _ := startEvented(t, w)
	changed := <-w.changed
	changed()
	expectRelist(t, l) // an event relists at once
	changed()
	expectRelist(t, l)
	// When a tick relists (the slow safety net) is relistOnTick's, tested
	// on its own: here the loop's timing against a fake clock is racy.
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

func TestEventedFallsBackToRelist(t *testing.T) {
	w := &fakeWatcher{err: errors.Join(ErrNoEvents, errors.New("unimplemented"))}
	l, clk := startEvented(t, w)
	for i := 0; i < 3; i++ {
		for !clk.HasWaiters() {
			time.Sleep(time.Millisecond)
		}
		clk.Step(time.Second)
		expectRelist(t, l)
	}
}
