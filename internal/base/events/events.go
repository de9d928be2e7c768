// Package events is beside the pipeline: a bounded, in-memory recorder of
// pod events with the kubelet's reasons (Created, Started, Killing,
// BackOff, Unhealthy, FailedPostStartHook, ...), and of events about the
// node itself (FailedToLoadManifest). Repeats of the same event are folded
// into one with a count, as the kubelet's event correlator does. Every
// event is also logged; the HTTP API and the CLI read them from here, and
// a Forwarder may send them on (to the API server, in cluster mode).
package events

import (
	"log/slog"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
)

// Event is one recorded event. Its involved object is either a pod
// (PodUID, Namespace and Pod set) or, for an event about the node itself,
// the node (Node set, the pod fields empty).
type Event struct {
	PodUID    types.UID
	Namespace string
	Pod       string
	// Node is the node's name when the event is about the node (involved
	// object kind Node); empty for pod events.
	Node string
	// Type is v1.EventTypeNormal or v1.EventTypeWarning.
	Type    string
	Reason  string
	Message string
	// Count of occurrences folded into this event.
	Count     int
	FirstTime time.Time
	LastTime  time.Time
}

// Forwarder gets every event as it is recorded, before folding (in
// cluster mode, package apievents sends them to the API server).
type Forwarder interface {
	PodEvent(pod *v1.Pod, eventType, reason, message string)
	NodeEvent(node, eventType, reason, message string)
}

// Recorder keeps the newest events, at most Max of them.
type Recorder struct {
	max   int
	clock clock.PassiveClock
	log   *slog.Logger
	// forward, if set (WithForwarder), gets every event.
	forward Forwarder

	mu     sync.Mutex
	events []Event // oldest first
}

// DefaultMax is how many events are kept when New gets 0.
const DefaultMax = 1000

// Option tunes New.
type Option func(*Recorder)

// WithForwarder makes f get every event.
func WithForwarder(f Forwarder) Option { return func(r *Recorder) { r.forward = f } }

// New returns a recorder keeping at most max events.
func New(max int, clk clock.PassiveClock, log *slog.Logger, opts ...Option) *Recorder {
	if max <= 0 {
		max = DefaultMax
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Recorder{max: max, clock: clk, log: log}
	for _, o := range opts {
		o(r)
	}
	return r
}

// Event records an event about pod. An event equal to one already kept
// (same pod, type, reason and message) updates that one's count and time.
func (r *Recorder) Event(pod *v1.Pod, eventType, reason, message string) {
	r.logf(eventType)("event", "pod", pod.Namespace+"/"+pod.Name, "type", eventType, "reason", reason, "message", message)
	r.record(Event{PodUID: pod.UID, Namespace: pod.Namespace, Pod: pod.Name, Type: eventType, Reason: reason, Message: message})
	if r.forward != nil {
		r.forward.PodEvent(pod, eventType, reason, message)
	}
}

// NodeEvent records an event about the node itself, named node (as the
// kubelet's node events: involved object kind Node, name the node's name).
// An event equal to one already kept (same node, type, reason and message)
// updates that one's count and time.
func (r *Recorder) NodeEvent(node, eventType, reason, message string) {
	r.logf(eventType)("event", "node", node, "type", eventType, "reason", reason, "message", message)
	r.record(Event{Node: node, Type: eventType, Reason: reason, Message: message})
	if r.forward != nil {
		r.forward.NodeEvent(node, eventType, reason, message)
	}
}

// logf is the log function for an event of eventType.
func (r *Recorder) logf(eventType string) func(msg string, args ...any) {
	if eventType == v1.EventTypeWarning {
		return r.log.Warn
	}
	return r.log.Info
}

// record keeps e (its count and times set here), folding it into an equal
// one already kept.
func (r *Recorder) record(e Event) {
	now := r.clock.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.events) - 1; i >= 0; i-- {
		k := &r.events[i]
		if k.PodUID == e.PodUID && k.Node == e.Node && k.Type == e.Type && k.Reason == e.Reason && k.Message == e.Message {
			k.Count++
			k.LastTime = now
			// Move it to the end: it is the newest now.
			moved := *k
			r.events = append(r.events[:i], r.events[i+1:]...)
			r.events = append(r.events, moved)
			return
		}
	}
	e.Count, e.FirstTime, e.LastTime = 1, now, now
	r.events = append(r.events, e)
	if len(r.events) > r.max {
		r.events = append(r.events[:0:0], r.events[len(r.events)-r.max:]...)
	}
}

// ForPod returns the events of one pod, oldest first.
func (r *Recorder) ForPod(uid types.UID) []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Event
	for _, e := range r.events {
		if e.PodUID == uid && e.Node == "" {
			out = append(out, e)
		}
	}
	return out
}

// All returns every kept event, oldest first.
func (r *Recorder) All() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Event(nil), r.events...)
}
