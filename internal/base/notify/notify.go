// Package notify is how the composition root connects two parts that need
// each other, beside the pipeline: it creates a notification before either
// part and gives it to both at construction, one to send on, the other to
// wait on. A Kick wakes its receiver; UIDs also says which pods. Both are
// level-triggered: what is sent before the receiver looks coalesces, and
// sending never blocks.
package notify

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// Kick is a level-triggered wake-up: kicks sent before the receiver looks
// coalesce into one. A nil Kick is never kicked and drops what is sent.
type Kick struct {
	c chan struct{}
}

// NewKick returns a Kick nothing has kicked yet.
func NewKick() *Kick { return &Kick{c: make(chan struct{}, 1)} } // one pending kick is all there is to know

// Kick wakes the receiver, now or when it next waits. It never blocks.
func (k *Kick) Kick() {
	if k == nil {
		return
	}
	select {
	case k.c <- struct{}{}:
	default:
	}
}

// C is what the receiver waits on; nil (never ready) for a nil Kick.
func (k *Kick) C() <-chan struct{} {
	if k == nil {
		return nil
	}
	return k.c
}

// UIDs is a level-triggered set of pod UIDs: Add records one and wakes the
// receiver, which takes every UID recorded since it last looked. A nil UIDs
// drops what is added.
type UIDs struct {
	kick *Kick

	mu   sync.Mutex
	uids map[types.UID]struct{}
}

// NewUIDs returns an empty UIDs.
func NewUIDs() *UIDs { return &UIDs{kick: NewKick(), uids: map[types.UID]struct{}{}} }

// Add records uid and wakes the receiver. It never blocks.
func (u *UIDs) Add(uid types.UID) {
	if u == nil {
		return
	}
	u.mu.Lock()
	u.uids[uid] = struct{}{}
	u.mu.Unlock()
	u.kick.Kick()
}

// C is ready when UIDs were added since the last Take; nil for a nil UIDs.
func (u *UIDs) C() <-chan struct{} {
	if u == nil {
		return nil
	}
	return u.kick.C()
}

// Take returns the UIDs added since the last Take, in no order, and
// forgets them.
func (u *UIDs) Take() []types.UID {
	if u == nil {
		return nil
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	out := make([]types.UID, 0, len(u.uids))
	for uid := range u.uids {
		out = append(out, uid)
	}
	clear(u.uids)
	return out
}
