//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/pipeline/cri"
	"github.com/nodelet/nodelet/internal/pure/podspec"
)

// startWatch sees containers start through the runtime's own event stream
// (CRI GetContainerEvents): containerd sends CONTAINER_STARTED_EVENT as it
// records the container RUNNING, the moment ListContainers would first show
// it so. Polling ListContainers every 2 ms instead cost the runtime and the
// benchmark about 70 ms of CPU per start on this 2-core machine, for as long
// as an agent took, and almost none for the raw CRI floor, whose wait began
// after its calls had returned: the agents' starts were slowed by the
// measurement itself.
type startWatch struct {
	mu      sync.Mutex
	changed chan struct{}                   // closed and replaced at each start seen, and when the stream ends
	started map[string]map[string]time.Time // pod name → container ID → when its event arrived
	ended   error                           // why the stream ended, nil while it is open
}

// podStarts, while a benchmark that called followStarts runs on a runtime
// with the event stream, is what waitStarted uses; nil otherwise (it
// polls).
var podStarts *startWatch

// followStarts sets podStarts for the rest of the benchmark (watchStarts)
// and returns why it is nil when it is, for describeStartWatch.
func followStarts(b *testing.B) (noWatch string) {
	w, noWatch := watchStarts(b)
	podStarts = w
	b.Cleanup(func() { podStarts = nil })
	return noWatch
}

// watchStarts opens one event stream on the shared runtime for the rest of
// the benchmark. It returns nil, and why, for a runtime without the stream
// (containerd 1.6).
func watchStarts(b *testing.B) (*startWatch, string) {
	ctx, cancel := context.WithCancel(context.Background())
	events := make(chan *runtimeapi.ContainerEventResponse, 256)
	open, done := make(chan struct{}), make(chan error, 1)
	go func() { done <- shared.rt.ContainerEvents(ctx, events, func() { close(open) }) }()
	select {
	case <-open:
	case err := <-done:
		cancel()
		return nil, err.Error()
	}
	// A runtime without the call fails it after the stream opened.
	select {
	case err := <-done:
		cancel()
		if cri.IsUnimplemented(err) {
			return nil, "the runtime has no GetContainerEvents"
		}
		return nil, err.Error()
	case <-time.After(200 * time.Millisecond):
	}
	w := &startWatch{changed: make(chan struct{}), started: map[string]map[string]time.Time{}}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-ctx.Done():
				return
			case e := <-events:
				w.record(e, time.Now())
			case err := <-done:
				for len(events) > 0 { // what came before the end
					w.record(<-events, time.Now())
				}
				w.end(err)
				return
			}
		}
	}()
	b.Cleanup(func() { cancel(); wg.Wait() })
	return w, ""
}

// record keeps a container's start; the sandbox's own event (its pause
// container) is not one.
func (w *startWatch) record(e *runtimeapi.ContainerEventResponse, at time.Time) {
	if e.GetContainerEventType() != runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT ||
		e.GetContainerId() == e.GetPodSandboxStatus().GetId() {
		return
	}
	pod := e.GetPodSandboxStatus().GetMetadata().GetName()
	for _, c := range e.GetContainersStatuses() {
		if c.GetId() == e.GetContainerId() && c.GetLabels()[podspec.LabelPodName] != "" {
			pod = c.GetLabels()[podspec.LabelPodName]
		}
	}
	if pod == "" {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started[pod] == nil {
		w.started[pod] = map[string]time.Time{}
	}
	if _, ok := w.started[pod][e.GetContainerId()]; !ok {
		w.started[pod][e.GetContainerId()] = at
	}
	close(w.changed)
	w.changed = make(chan struct{})
}

// end records that the stream ended: a wait on it then fails at once
// rather than at its deadline.
func (w *startWatch) end(err error) {
	if err == nil {
		err = fmt.Errorf("closed by the runtime")
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.ended = err
	close(w.changed)
	w.changed = make(chan struct{})
}

// seen is the containers started of pods named prefix*, and when the last
// of them was seen.
func (w *startWatch) seen(prefix string) (ids map[string]bool, last time.Time, changed <-chan struct{}, ended error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	ended = w.ended
	ids = map[string]bool{}
	for pod, ctrs := range w.started {
		if !strings.HasPrefix(pod, prefix) {
			continue
		}
		for id, at := range ctrs {
			ids[id] = true
			if at.After(last) {
				last = at
			}
		}
	}
	return ids, last, w.changed, ended
}

// waitStarted waits until want containers of pods named prefix* have
// started, and returns when the last was seen: by the event stream when
// podStarts is set, confirmed by one ListContainers that shows them all
// running; else by polling.
func waitStarted(b *testing.B, ctx context.Context, prefix string, want int) time.Time {
	w := podStarts
	if w == nil {
		waitRunning(b, ctx, prefix, want)
		return time.Now()
	}
	deadline := time.After(3 * time.Minute)
	for {
		ids, last, changed, ended := w.seen(prefix)
		if len(ids) >= want {
			if len(ids) > want {
				b.Fatalf("%s: %d containers started, want %d", prefix, len(ids), want)
			}
			running := 0
			for _, c := range runningContainers(b, ctx) {
				if ids[c.GetId()] {
					running++
				}
			}
			if running != want {
				b.Fatalf("%s: %d containers started by the runtime's events, %d of them running in ListContainers", prefix, want, running)
			}
			return last
		}
		if ended != nil {
			b.Fatalf("%s: %d of %d containers started when the runtime's event stream ended: %v", prefix, len(ids), want, ended)
		}
		select {
		case <-changed:
		case <-deadline:
			b.Fatalf("%s: %d of %d containers started within 3 minutes", prefix, len(ids), want)
		}
	}
}

// describeStartWatch says how the benchmark judged a pod running.
func describeStartWatch(why string) string {
	if podStarts != nil {
		return "the arrival of the runtime's CONTAINER_STARTED_EVENT for each container (one GetContainerEvents stream of the benchmark's, open before any agent starts), then one ListContainers that shows them RUNNING"
	}
	return fmt.Sprintf("every container of the pods RUNNING in CRI ListContainers, polled every 2 ms (no event stream: %s)", why)
}
