// Package pleg is beside the pipeline: the pod lifecycle event generator.
// It relists the runtime's pods periodically (through a Lister implemented
// over CRI elsewhere), diffs each snapshot against the previous one into
// container events for the sync loop, and reports its own health the way
// the kubelet's GenericPLEG does. Where the runtime streams container
// events (EventWatcher), a relist follows each event at once.
package pleg

import (
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/internal/pure/observed"
)

// EventType is the kind of a pod lifecycle event. The names are the
// kubelet's.
type EventType int

const (
	// ContainerStarted: a container (or sandbox) is now running.
	ContainerStarted EventType = iota + 1
	// ContainerDied: a container exited (or a sandbox went not-ready).
	ContainerDied
	// ContainerRemoved: a container (or sandbox) no longer exists.
	ContainerRemoved
	// ContainerChanged: a container moved to a state that is neither
	// running nor exited (created, unknown). Generic does not deliver
	// these on Events (neither does the kubelet); Diff reports them.
	ContainerChanged
)

func (t EventType) String() string {
	switch t {
	case ContainerStarted:
		return "ContainerStarted"
	case ContainerDied:
		return "ContainerDied"
	case ContainerRemoved:
		return "ContainerRemoved"
	case ContainerChanged:
		return "ContainerChanged"
	}
	return "EventType(?)"
}

// Event is one change of one container (or sandbox) of one pod.
type Event struct {
	PodUID types.UID
	Type   EventType
	// ContainerID is the runtime ID of the container or of the sandbox.
	ContainerID string
	// ObservedAt is when the relist that found the change began: a look
	// at the runtime that began later has seen it too.
	ObservedAt time.Time
}

// state is a container's state as the event generator sees it: the
// runtime's states folded onto four, "gone" included.
type state int

const (
	stateNonExistent state = iota
	stateRunning
	stateExited
	stateUnknown
)

func containerState(s observed.ContainerState) state {
	switch s {
	case observed.ContainerRunning:
		return stateRunning
	case observed.ContainerExited:
		return stateExited
	default:
		// Created is reported as unknown, as the kubelet does: nothing
		// acts on a container that exists but never ran.
		return stateUnknown
	}
}

func sandboxState(s observed.SandboxState) state {
	if s == observed.SandboxReady {
		return stateRunning
	}
	return stateExited
}

// states maps every container and sandbox ID of a pod to its state.
// Containers come first: should a sandbox share an ID with a container, the
// container wins (the kubelet dedups the same way).
func states(s *observed.PodStatus) map[string]state {
	out := map[string]state{}
	if s == nil {
		return out
	}
	for _, c := range s.Containers {
		if _, dup := out[c.ID]; !dup {
			out[c.ID] = containerState(c.State)
		}
	}
	for _, sb := range s.Sandboxes {
		if _, dup := out[sb.ID]; !dup {
			out[sb.ID] = sandboxState(sb.State)
		}
	}
	return out
}

// transition returns the event types for one container going from old to
// new, following the kubelet's generateEvents table:
//
//	new state    old state        events
//	same         same             none
//	running      any              Started
//	exited       any              Died (also when never seen running)
//	unknown      any              Changed
//	gone         exited           Removed
//	gone         running/unknown  Died, Removed
func transition(old, new state) []EventType {
	if old == new {
		return nil
	}
	switch new {
	case stateRunning:
		return []EventType{ContainerStarted}
	case stateExited:
		return []EventType{ContainerDied}
	case stateUnknown:
		return []EventType{ContainerChanged}
	default: // gone
		if old == stateExited {
			return []EventType{ContainerRemoved}
		}
		return []EventType{ContainerDied, ContainerRemoved}
	}
}

// Diff returns the events that turn the old snapshot into the new one.
// Sandboxes count as containers: a ready sandbox is running, a not-ready one
// exited. The order is deterministic: by pod UID, then container ID, then
// the transition's own order (Died before Removed). A nil status is an empty
// pod. Diff does not modify its arguments.
func Diff(old, new map[types.UID]*observed.PodStatus) []Event {
	uids := make([]types.UID, 0, len(old)+len(new))
	for uid := range old {
		uids = append(uids, uid)
	}
	for uid := range new {
		if _, seen := old[uid]; !seen {
			uids = append(uids, uid)
		}
	}
	sort.Slice(uids, func(i, j int) bool { return uids[i] < uids[j] })

	var events []Event
	for _, uid := range uids {
		before, after := states(old[uid]), states(new[uid])
		ids := make([]string, 0, len(before)+len(after))
		for id := range before {
			ids = append(ids, id)
		}
		for id := range after {
			if _, seen := before[id]; !seen {
				ids = append(ids, id)
			}
		}
		sort.Strings(ids)
		for _, id := range ids {
			// A missing key reads as stateNonExistent, the zero value.
			for _, t := range transition(before[id], after[id]) {
				events = append(events, Event{PodUID: uid, Type: t, ContainerID: id})
			}
		}
	}
	return events
}
