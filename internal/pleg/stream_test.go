package pleg

import (
	"context"
	"errors"
	"fmt"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/cri"
)

// fakeStream sends n events, then ends with err.
type fakeStream struct {
	n   int
	err error
}

func (s fakeStream) ContainerEvents(ctx context.Context, out chan *runtimeapi.ContainerEventResponse) error {
	for range s.n {
		select {
		case out <- &runtimeapi.ContainerEventResponse{ContainerId: "c"}:
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
			calls := 0
			err := EventWatcher{Stream: fakeStream{n: tc.wantCalls, err: tc.err}}.Watch(t.Context(), func() { calls++ })
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
