package pleg

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/pipeline/cri"
)

// fakeStream sends n events, then ends with err.
type fakeStream struct {
	n   int
	err error
}

func (s fakeStream) ContainerEvents(ctx context.Context, out chan *runtimeapi.ContainerEventResponse, connected func()) error {
	connected()
	for i := range s.n {
		select {
		case out <- &runtimeapi.ContainerEventResponse{ContainerId: "c", CreatedAt: int64(i + 1)}:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return s.err
}

func TestEventWatcher(t *testing.T) {
	broken := errors.New("stream broke")
	for _, tc := range []struct {
		name      string
		err       error
		noEvents  bool
		wantCalls int
	}{
		{"runtime without the stream", fmt.Errorf("stream container events: %w", cri.ErrUnimplemented), true, 0},
		{"stream that breaks", broken, false, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls, connects := 0, 0
			var created []time.Time
			err := EventWatcher{Stream: fakeStream{n: tc.wantCalls, err: tc.err}}.Watch(t.Context(),
				func() { connects++ }, func(c time.Time) { calls++; created = append(created, c) })
			if connects != 1 {
				t.Errorf("connected called %d times, want once", connects)
			}
			for i, c := range created {
				if c != time.Unix(0, int64(i+1)) {
					t.Errorf("event %d created %v, want the event's CreatedAt", i, c)
				}
			}
			if errors.Is(err, ErrNoEvents) != tc.noEvents || !errors.Is(err, tc.err) {
				t.Errorf("Watch = %v; want it to wrap %v, and ErrNoEvents: %v", err, tc.err, tc.noEvents)
			}
			// Every event but the last was handed over before the stream
			// ended; the last may still sit in the one-slot buffer.
			if calls < tc.wantCalls-1 || calls > tc.wantCalls {
				t.Errorf("changed called %d times, want %d", calls, tc.wantCalls)
			}
		})
	}
}
