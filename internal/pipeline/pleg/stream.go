package pleg

import (
	"context"
	"fmt"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/pipeline/cri"
	"github.com/nodelet/nodelet/internal/pure/observed"
)

// EventStream is the CRI container event stream, where the runtime has it:
// ContainerEvents calls connected once the stream is open, then sends its
// events on out.
type EventStream interface {
	ContainerEvents(ctx context.Context, out chan *runtimeapi.ContainerEventResponse, connected func()) error
}

// EventWatcher is the Watcher over the CRI container event stream.
// Sandbox reads an event: the sandbox it tells of nodelet's pods (nil when
// it tells too little: the PLEG relists), and ours, false for an event
// about someone else's sandbox, which the relist does not list and which
// is not passed on. A nil Sandbox passes every event on with no sandbox
// (each one relists).
type EventWatcher struct {
	Stream  EventStream
	Sandbox func(*runtimeapi.ContainerEventResponse) (view *observed.SandboxView, ours bool)
}

// WatcherFor returns the EventWatcher over s reading events with sandbox,
// or nil (RunEvented then relists every period) when evented is false: the
// kubelet's EventedPLEG feature gate.
func WatcherFor(s EventStream, evented bool, sandbox func(*runtimeapi.ContainerEventResponse) (*observed.SandboxView, bool)) Watcher {
	if !evented {
		return nil
	}
	return EventWatcher{Stream: s, Sandbox: sandbox}
}

// Watch calls connected once the stream is open and changed for each event
// that may be about nodelet's pods until ctx ends or the stream fails; a
// runtime without the stream gives ErrNoEvents.
func (w EventWatcher) Watch(ctx context.Context, connected func(), changed func(Change)) error {
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
			c := Change{}
			if ev.GetCreatedAt() > 0 {
				c.Created = time.Unix(0, ev.GetCreatedAt())
			}
			if w.Sandbox != nil {
				var ours bool
				if c.Sandbox, ours = w.Sandbox(ev); !ours {
					continue
				}
			}
			changed(c)
		}
	}
}
