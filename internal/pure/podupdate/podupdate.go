// Package podupdate is the vocabulary every pipeline stage shares for why
// a pod update travels down the pipeline: the merge (podconfig) says what
// changed in the sources, the sync loop adds periodic and event-driven
// syncs, and the pod workers act on it. It is the kubelet's PodOperation
// and SyncPodType as one type, so that no stage translates another's enum.
// Pure: it imports nothing but the standard library.
package podupdate

import "fmt"

// Reason says why a pod update was sent.
type Reason int

const (
	// Add: a pod new to the node (the kubelet's ADD; the pod worker's
	// create).
	Add Reason = iota + 1
	// Update: the pod's spec, labels or annotations changed, its UID did
	// not. (A static pod's UID is a hash of its content, so an edited
	// manifest is a Remove of the old pod and an Add of the new one.)
	Update
	// Remove: no source has the pod any more; stop it.
	Remove
	// Reconcile: only the pod's status changed; nothing to do in the
	// runtime.
	Reconcile
	// Delete: the pod was marked for graceful deletion (a deletion
	// timestamp was set); stop it with its grace period.
	Delete
	// Resync: the periodic sync of an unchanged pod.
	Resync
	// Event: the pod's runtime state or probe results changed.
	Event
	// Kill: the node terminates the pod (eviction, shutdown, an orphan).
	Kill
)

// Terminates reports whether the reason asks for the pod to be stopped.
func (r Reason) Terminates() bool { return r == Remove || r == Delete || r == Kill }

func (r Reason) String() string {
	switch r {
	case Add:
		return "ADD"
	case Update:
		return "UPDATE"
	case Remove:
		return "REMOVE"
	case Reconcile:
		return "RECONCILE"
	case Delete:
		return "DELETE"
	case Resync:
		return "RESYNC"
	case Event:
		return "EVENT"
	case Kill:
		return "KILL"
	}
	return fmt.Sprintf("Reason(%d)", int(r))
}
