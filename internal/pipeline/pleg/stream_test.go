package pleg

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/pipeline/cri"
	"github.com/nodelet/nodelet/internal/pure/observed"
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
				func() { connects++ }, func(c Change) { calls++; created = append(created, c.Created) })
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

// Events about sandboxes nodelet does not manage are not passed on (a
// relist would not list them); the others carry what Sandbox read.
func TestEventWatcherPassesOnlyOurs(t *testing.T) {
	sandbox := func(ev *runtimeapi.ContainerEventResponse) (*observed.SandboxView, bool) {
		if ev.GetCreatedAt()%2 == 0 {
			return nil, false
		}
		return &observed.SandboxView{Subject: fmt.Sprint(ev.GetCreatedAt())}, true
	}
	var subjects []string
	err := EventWatcher{Stream: fakeStream{n: 5, err: errors.New("end")}, Sandbox: sandbox}.Watch(t.Context(),
		func() {}, func(c Change) { subjects = append(subjects, c.Sandbox.Subject) })
	if err == nil {
		t.Fatal("Watch ended without the stream's error")
	}
	// The last event may still sit in the one-slot buffer when the
	// stream ends.
	if got := strings.Join(subjects, ","); got != "1,3,5" && got != "1,3" {
		t.Errorf("passed on %q, want the odd events 1,3,5", got)
	}
}
