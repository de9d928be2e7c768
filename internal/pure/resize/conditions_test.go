package resize_test

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/internal/pure/resize"
)

func TestConditions(t *testing.T) {
	t0 := metav1.NewTime(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	t1 := metav1.NewTime(t0.Add(time.Minute))
	t2 := metav1.NewTime(t0.Add(2 * time.Minute))

	var c resize.Conditions
	c, changed := c.SetPending("OutOfcpu", "Node didn't have enough resource: cpu", 2, t0)
	if !changed || c.Pending.Reason != v1.PodReasonDeferred || c.Pending.ObservedGeneration != 2 || c.Pending.Status != v1.ConditionTrue {
		t.Fatalf("first SetPending = %+v, changed=%t; want Deferred at generation 2, changed", c.Pending, changed)
	}
	c, changed = c.SetPending("OutOfcpu", "Node didn't have enough resource: cpu", 2, t1)
	if changed || !c.Pending.LastTransitionTime.Equal(&t0) || !c.Pending.LastProbeTime.Equal(&t1) {
		t.Errorf("same SetPending again: changed=%t transition=%v probe=%v; want unchanged, transition kept, probe moved", changed, c.Pending.LastTransitionTime, c.Pending.LastProbeTime)
	}
	c, changed = c.SetPending(v1.PodReasonInfeasible, "swap", 3, t1)
	if !changed || c.Pending.Reason != v1.PodReasonInfeasible || !c.Pending.LastTransitionTime.Equal(&t1) {
		t.Errorf("Infeasible: %+v changed=%t; want Infeasible with a new transition time", c.Pending, changed)
	}

	c = c.Start(4, t1)
	if c.Pending != nil || c.InProgress == nil || c.InProgress.Reason != "" || c.InProgress.ObservedGeneration != 4 {
		t.Fatalf("Start: %+v; want Pending gone and InProgress at generation 4 without a reason", c)
	}
	c = c.Failed("cannot decrease memory limits: ...", 5, t2)
	if c.InProgress.Reason != v1.PodReasonError || c.InProgress.ObservedGeneration != 4 || !c.InProgress.LastTransitionTime.Equal(&t2) {
		t.Errorf("Failed: %+v; want reason Error, generation kept at 4, new transition", c.InProgress)
	}
	if got := c.List(); len(got) != 1 || got[0].Type != v1.PodResizeInProgress {
		t.Errorf("List = %+v, want only PodResizeInProgress", got)
	}
	c = c.Start(5, t2)
	if c.InProgress.Reason != "" || c.InProgress.Message != "" || c.InProgress.ObservedGeneration != 5 {
		t.Errorf("Start after an error: %+v; want the error cleared and generation 5", c.InProgress)
	}
	if c = c.Done(); len(c.List()) != 0 {
		t.Errorf("Done: %+v; want no conditions", c.List())
	}
	var none resize.Conditions
	if f := none.Failed("boom", 7, t0); f.InProgress.ObservedGeneration != 7 {
		t.Errorf("Failed without a resize in progress: generation %d, want 7", f.InProgress.ObservedGeneration)
	}
}

func TestEventMessages(t *testing.T) {
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Generation: 3}, Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c1"}}}}
	for got, want := range map[string]string{
		resize.StartedMessage(pod):                                  `Pod resize started: {"containers":[{"name":"c1","resources":{}}],"generation":3}`,
		resize.PendingMessage(pod, v1.PodReasonDeferred, "no room"): `Pod resize Deferred: {"containers":[{"name":"c1","resources":{}}],"generation":3,"error":"no room"}`,
		resize.ErrorMessage(pod, "boom"):                            `Pod resize error: {"containers":[{"name":"c1","resources":{}}],"generation":3,"error":"boom"}`,
		resize.CompletedMessage(pod):                                `Pod resize completed: {"containers":[{"name":"c1","resources":{}}],"generation":3}`,
	} {
		if got != want {
			t.Errorf("got  %s\nwant %s", got, want)
		}
	}
}
