package pleg

import (
	"context"
	"fmt"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/cri"
)

// EventStream is the CRI container event stream, where the runtime has it.
type EventStream interface {
	ContainerEvents(ctx context.Context, out chan *runtimeapi.ContainerEventResponse) error
}

// EventWatcher is the Watcher over the CRI container event stream: every
// event means "relist now" (the relist sees only nodelet's objects, and
// runtimes do not all put labels on events, so events are not filtered
// here).
type EventWatcher struct{ Stream EventStream }

// Watch calls changed for each event until ctx ends
// or the stream fails; a runtime without the stream gives ErrNoEvents.
func (w EventWatcher) Watch(ctx context.Context, changed func()) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	events := make(chan *runtimeapi.ContainerEventResponse, 1) // the stream blocks on a full channel
	done := make(chan error, 1)                                // written once
	go func() { done <- w.Stream.ContainerEvents(ctx, events) }()
	for {
		select {
		case err := <-done:
			if cri.IsUnimplemented(err) {
				return fmt.Errorf("%w: %w", ErrNoEvents, err)
			}
			return err
		case <-events:
			changed()
		}
	}
}
