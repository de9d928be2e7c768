package pleg

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/internal/observed"
)

// Cache holds the newest observed status of every pod, as of the last
// successful relist, and lets readers wait for a relist newer than a given
// time (the kubelet's cache.GetNewerThan, simplified: one timestamp for the
// whole cache). The statuses are shared, not copied: callers must not
// modify them.
type Cache struct {
	mu   sync.Mutex
	pods map[types.UID]*observed.PodStatus
	// at is the start time of the relist that produced pods; zero before
	// the first successful relist.
	at time.Time
	// changed is closed, and replaced, by every set: a broadcast to
	// WaitNewer callers.
	changed chan struct{}
}

func newCache() *Cache {
	return &Cache{pods: map[types.UID]*observed.PodStatus{}, changed: make(chan struct{})}
}

// set replaces the whole content with a relist's snapshot taken at at.
func (c *Cache) set(pods map[types.UID]*observed.PodStatus, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pods = pods
	c.at = at
	close(c.changed)
	c.changed = make(chan struct{})
}

// Get returns the pod's newest status and the time of the relist that
// observed it. ok is false when the last relist did not see the pod (or no
// relist succeeded yet).
func (c *Cache) Get(uid types.UID) (status *observed.PodStatus, at time.Time, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.pods[uid]
	if !ok {
		return nil, time.Time{}, false
	}
	return s, c.at, true
}

// WaitNewer blocks until a relist that started strictly after t has
// succeeded, then returns the pod's status from the newest relist. A pod
// that relist did not see is returned as an empty status carrying only its
// UID (it has no containers or sandboxes), like the kubelet's cache. Pass
// the time your last action on the pod ended to be sure the status reflects
// it. It returns early with an error wrapping ctx.Err() when ctx ends.
func (c *Cache) WaitNewer(ctx context.Context, uid types.UID, t time.Time) (*observed.PodStatus, error) {
	for {
		c.mu.Lock()
		if c.at.After(t) {
			s, ok := c.pods[uid]
			c.mu.Unlock()
			if !ok {
				s = &observed.PodStatus{UID: uid}
			}
			return s, nil
		}
		changed := c.changed
		c.mu.Unlock()

		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for a status of pod %s newer than %s: %w", uid, t.Format(time.RFC3339Nano), ctx.Err())
		case <-changed:
		}
	}
}
