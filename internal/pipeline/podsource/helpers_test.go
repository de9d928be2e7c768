package podsource

import (
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/base/testutil"
)

// waitLimit bounds every wait on a real event (fsnotify, HTTP); reaching it
// fails the test.
const waitLimit = 10 * time.Second

// notifyClock is a fake clock that tells the test each time the code under
// test arms a timer (the debounce timer), so that the test steps the clock
// only once the timer exists.
type notifyClock struct {
	*testingclock.FakeClock
	armed chan struct{}
}

func newNotifyClock() *notifyClock {
	return &notifyClock{
		FakeClock: testingclock.NewFakeClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)),
		// Buffered so that the source never blocks on a test that is not
		// listening; a dropped notification is harmless, since the test
		// steps the clock for each one it receives while others are queued.
		armed: make(chan struct{}, 64),
	}
}

func (c *notifyClock) NewTimer(d time.Duration) clock.Timer {
	t := c.FakeClock.NewTimer(d)
	select {
	case c.armed <- struct{}{}:
	default:
	}
	return t
}

// counter is an ErrorCounter for tests.
type counter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *counter) Inc(reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[reason]++
}

func (c *counter) get(reason string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[reason]
}

// nodeEvent is one event an eventSink got.
type nodeEvent struct{ node, eventType, reason, message string }

// eventSink is an EventSink for tests; safe for concurrent use.
type eventSink struct {
	mu     sync.Mutex
	events []nodeEvent
}

func (s *eventSink) NodeEvent(node, eventType, reason, message string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, nodeEvent{node, eventType, reason, message})
}

// all returns the events recorded so far, oldest first.
func (s *eventSink) all() []nodeEvent {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]nodeEvent(nil), s.events...)
}

// logBuffer collects log lines; safe for concurrent use.
type logBuffer struct{ testutil.SyncBuffer }

// lines returns the logged lines containing all of the given strings.
func (b *logBuffer) lines(all ...string) []string {
	var out []string
	for line := range strings.SplitSeq(b.String(), "\n") {
		ok := line != ""
		for _, s := range all {
			ok = ok && strings.Contains(line, s)
		}
		if ok {
			out = append(out, line)
		}
	}
	return out
}

func newTestLog() (*slog.Logger, *logBuffer) {
	b := &logBuffer{}
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug})), b
}

func podNames(u Update) string {
	var names []string
	for _, p := range u.Pods {
		names = append(names, p.Name)
	}
	return strings.Join(names, ",")
}

func errorClasses(u Update) string {
	var classes []string
	for _, e := range u.Errors {
		classes = append(classes, e.Class)
	}
	return strings.Join(classes, ",")
}

// podYAML is goodPod with another name and image.
func podYAML(name, image string) string {
	return strings.NewReplacer("name: web", "name: "+name, "busybox:1.35", image).Replace(goodPod)
}

func runDone(t *testing.T, run func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		run()
	}()
	t.Cleanup(func() {
		select {
		case <-done:
		case <-time.After(waitLimit):
			t.Error("Run did not return after its context ended")
		}
	})
}
