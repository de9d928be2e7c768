package apievents

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/base/events"
)

var _ events.Forwarder = (*Sink)(nil)

// The events reach the API as the kubelet's: source kubelet on this host,
// the pod or the Node as involved object, repeats folded into one with a
// count; the kubelet's start-up events (Pulled, Started) go too, nodelet's
// own steps (Admitted) stay on the node.
func TestEventsToTheAPI(t *testing.T) {
	client := fake.NewClientset()
	s := New(client, "node-a")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	rec := events.New(0, clock.RealClock{}, nil, events.WithForwarder(s))
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "web-1", UID: "uid-1"}}
	rec.Event(pod, v1.EventTypeNormal, "Admitted", "Pod admitted")
	rec.Event(pod, v1.EventTypeNormal, "Pulled", `Container image "busybox:1.35" already present on machine`)
	rec.Event(pod, v1.EventTypeNormal, "Started", "Started container main")
	rec.Event(pod, v1.EventTypeNormal, "Killing", "Stopping container main")
	for range 3 {
		rec.Event(pod, v1.EventTypeWarning, "BackOff", "Back-off restarting failed container main")
	}
	rec.NodeEvent("node-a", v1.EventTypeNormal, "NodeReady", "Node node-a status is now: NodeReady")

	var got []v1.Event
	deadline := time.Now().Add(10 * time.Second)
	for {
		list, err := client.CoreV1().Events("").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got = list.Items
		backOff := 0
		for _, e := range got {
			if e.Reason == "BackOff" {
				backOff = int(e.Count)
			}
		}
		if len(got) == 5 && backOff == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("events in the API: %+v; want Pulled, Started, Killing, BackOff (count 3) and NodeReady", got)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, e := range got {
		if e.Source.Component != "kubelet" || e.Source.Host != "node-a" {
			t.Errorf("%s: source %+v", e.Reason, e.Source)
		}
		switch e.Reason {
		case "Pulled", "Started", "Killing", "BackOff":
			if e.Namespace != "web" || e.InvolvedObject.Kind != "Pod" || e.InvolvedObject.Name != "web-1" || e.InvolvedObject.UID != "uid-1" {
				t.Errorf("%s: in %s about %+v", e.Reason, e.Namespace, e.InvolvedObject)
			}
		case "NodeReady":
			if e.Namespace != metav1.NamespaceDefault || e.InvolvedObject.Kind != "Node" || e.InvolvedObject.Name != "node-a" {
				t.Errorf("%s: in %s about %+v", e.Reason, e.Namespace, e.InvolvedObject)
			}
		default:
			t.Errorf("event %s sent to the API", e.Reason)
		}
	}
}
