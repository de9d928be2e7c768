package resize

import (
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Conditions are a pod's two resize conditions as the kubelet's status
// manager keeps them (nil: absent). Each change returns the new value; the
// receiver is not modified.
//
//	(none) ──resize does not fit──▶ PodResizePending (Deferred|Infeasible)
//	   ▲                                   │ accepted
//	   │ actuated                          ▼
//	   └──────────────────────── PodResizeInProgress ("" or Error: message)
type Conditions struct {
	Pending, InProgress *v1.PodCondition
}

// SetPending records a pending resize: reason Infeasible stays, any other
// becomes Deferred. changed tells whether the reason or the generation
// differ from before (the kubelet then records a ResizeDeferred or
// ResizeInfeasible event).
func (c Conditions) SetPending(reason, message string, generation int64, now metav1.Time) (out Conditions, changed bool) {
	if reason != v1.PodReasonInfeasible {
		reason = v1.PodReasonDeferred
	}
	prev := c.Pending
	c.Pending = condition(v1.PodResizePending, prev, reason, message, generation, now)
	changed = prev == nil || prev.Reason != reason || prev.ObservedGeneration != generation
	return c, changed
}

// ClearPending drops PodResizePending (accepted, or reverted).
func (c Conditions) ClearPending() Conditions {
	c.Pending = nil
	return c
}

// Start records an accepted resize: any earlier error is cleared and
// PodResizeInProgress carries the pod's generation.
func (c Conditions) Start(generation int64, now metav1.Time) Conditions {
	c.Pending = nil
	c.InProgress = condition(v1.PodResizeInProgress, nil, "", "", generation, now)
	return c
}

// Failed records an actuation error on PodResizeInProgress (reason
// Error), keeping its generation; without a resize in progress it starts
// one at generation.
func (c Conditions) Failed(message string, generation int64, now metav1.Time) Conditions {
	if c.InProgress != nil {
		generation = c.InProgress.ObservedGeneration
	}
	c.InProgress = condition(v1.PodResizeInProgress, c.InProgress, v1.PodReasonError, message, generation, now)
	return c
}

// Done drops PodResizeInProgress: everything allocated is actuated.
func (c Conditions) Done() Conditions {
	c.InProgress = nil
	return c
}

// List is the conditions present, Pending first.
func (c Conditions) List() []v1.PodCondition {
	var out []v1.PodCondition
	for _, p := range []*v1.PodCondition{c.Pending, c.InProgress} {
		if p != nil {
			out = append(out, *p)
		}
	}
	return out
}

// condition is the kubelet's updatedPodResizeCondition: the transition
// time moves only when the reason changes.
func condition(t v1.PodConditionType, old *v1.PodCondition, reason, message string, generation int64, now metav1.Time) *v1.PodCondition {
	transition := now
	if old != nil && old.Reason == reason {
		transition = old.LastTransitionTime
	}
	return &v1.PodCondition{
		Type:               t,
		Status:             v1.ConditionTrue,
		LastProbeTime:      now,
		LastTransitionTime: transition,
		ObservedGeneration: generation,
		Reason:             reason,
		Message:            message,
	}
}
