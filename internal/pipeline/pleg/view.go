package pleg

import (
	"slices"
	"sort"
	"time"

	"github.com/nodelet/nodelet/internal/pure/observed"
)

// Change is one runtime container event as the PLEG takes it.
type Change struct {
	// Created is when the runtime created the event, zero when it does
	// not say.
	Created time.Time
	// Sandbox is what the event tells of the sandbox it concerns, nil
	// when it tells too little to update the PLEG's view (no sandbox
	// status: a sandbox removed); the PLEG relists then.
	Sandbox *observed.SandboxView
}

// consistent tells whether the event's sandbox v can stand for the sandbox in place of a
// relist, given the pod as the view holds it (old, nil for none). A
// runtime that failed to list the containers of the sandbox still sends
// the event, with none (containerd does); so a container event must list
// its subject unless it was removed, and a sandbox event that lists no
// container while the view holds some of that sandbox is not believed.
// A sandbox's removal is left to a relist too.
func consistent(v observed.SandboxView, old *observed.PodStatus) bool {
	if v.Subject != v.Sandbox.ID {
		listed := slices.ContainsFunc(v.Containers, func(c observed.Container) bool { return c.ID == v.Subject })
		return listed != v.Deleted
	}
	switch {
	case v.Deleted:
		return false
	case len(v.Containers) > 0 || old == nil:
		return true
	}
	return !slices.ContainsFunc(old.Containers, func(c observed.Container) bool { return c.SandboxID == v.Sandbox.ID })
}

// withSandbox is pod old (nil: none listed) with sandbox v as the event
// tells it: v's sandbox and containers replace what the view held of that
// sandbox; the pod's other sandboxes and their containers stay. Nil when
// the pod then has nothing in the runtime (a relist would not list it).
// old is not modified.
func withSandbox(old *observed.PodStatus, v observed.SandboxView) *observed.PodStatus {
	pod := &observed.PodStatus{UID: v.UID, Name: v.Name, Namespace: v.Namespace}
	if old != nil {
		for _, sb := range old.Sandboxes {
			if sb.ID != v.Sandbox.ID {
				pod.Sandboxes = append(pod.Sandboxes, sb)
			}
		}
		for _, c := range old.Containers {
			if c.SandboxID != v.Sandbox.ID {
				pod.Containers = append(pod.Containers, c)
			}
		}
	}
	pod.Sandboxes = append(pod.Sandboxes, v.Sandbox)
	pod.Containers = append(pod.Containers, v.Containers...)
	// Newest first, as the Lister sorts them.
	sort.SliceStable(pod.Sandboxes, func(i, j int) bool { return pod.Sandboxes[i].CreatedAt.After(pod.Sandboxes[j].CreatedAt) })
	sort.SliceStable(pod.Containers, func(i, j int) bool { return pod.Containers[i].CreatedAt.After(pod.Containers[j].CreatedAt) })
	return pod
}
