package pleg

import (
	"context"
	"fmt"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/pipeline/cri"
)

// EventStream is the CRI container event stream, where the runtime has it:
// ContainerEvents calls connected once the stream is open, then sends its
// events on out.
type EventStream interface {
	ContainerEvents(ctx context.Context, out chan *runtimeapi.ContainerEventResponse, connected func()) error
}

// EventWatcher is the Watcher over the CRI container event stream: every
// event means "relist now" (the relist sees only nodelet's objects, and
// runtimes do not all put labels on events, so events are not filtered
// here).
type EventWatcher struct{ Stream EventStream }

// WatcherFor returns the EventWatcher over s, or nil (RunEvented then
// relists every period) when evented is false: the kubelet's EventedPLEG
// feature gate.
func WatcherFor(s EventStream, evented bool) Watcher {
	if !evented {
		return nil
	}
	return EventWatcher{Stream: s}
}

// Watch calls connected once the stream is open and changed for each event
// until ctx ends or the stream fails; a runtime without the stream gives
// ErrNoEvents.
func (w EventWatcher) Watch(ctx context.Context, connected func(), changed func(created time.Time)) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	events := make(chan *runtimeapi.ContainerEventResponse, 1) // the stream blocks on a full channel
	done := make(chan error, 1)                                // written once
	// connected runs on the stream's goroutine before it receives
	// anything, so before any changed.
	go func() { done <- w.Stream.ContainerEvents(ctx, events, connected) }()
	for {
		select {
		case err := <-done:
			if cri.IsUnimplemented(err) {
				return fmt.Errorf("%w: %w", ErrNoEvents, err)
			}
			return err
		case ev := <-events:
			var created time.Time
			if ev.GetCreatedAt() > 0 {
				created = time.Unix(0, ev.GetCreatedAt())
			}
			changed(created)
		}
	}
}
