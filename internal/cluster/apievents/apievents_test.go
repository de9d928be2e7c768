package apievents

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/base/events"
)

var _ events.Forwarder = (*Sink)(nil)

// runSink runs a Sink of node-a on a fake client until the test ends.
func runSink(t *testing.T) (*fake.Clientset, *Sink) {
	t.Helper()
	client := fake.NewClientset()
	s := New(client, "node-a")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return client, s
}

// The events reach the API as the kubelet's: source kubelet on this host,
// the pod or the Node as involved object, repeats folded into one with a
// count; the kubelet's start-up events (Pulled, Started) go too, nodelet's
// own steps (Admitted) stay on the node.
func TestEventsToTheAPI(t *testing.T) {
	client, s := runSink(t)

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
		list, err := client.CoreV1().Events("").List(context.Background(), metav1.ListOptions{})
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

// Repeated events cost the API server what they cost with the kubelet
// (client-go's correlator, the same broadcaster): a pod's identical
// BackOff sent 100 times is one Event whose count rises to the spam
// filter's burst (25) and no further, in at most 25 requests; 30 similar
// events with distinct messages (Unhealthy, one per probe failure) are
// folded into one "combined from similar events" Event after the
// aggregator's 10.
func TestRepeatedEventsBounded(t *testing.T) {
	client, s := runSink(t)

	pod := func(name string) *v1.Pod {
		return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: name, UID: types.UID("uid-" + name)}}
	}
	looping, flapping := pod("looping"), pod("flapping")
	for range 100 {
		s.PodEvent(looping, v1.EventTypeWarning, "BackOff", "Back-off restarting failed container main in pod looping_web(uid-looping)")
	}
	for i := range 30 {
		s.PodEvent(flapping, v1.EventTypeWarning, "Unhealthy", fmt.Sprintf("Readiness probe failed: attempt %d", i))
	}
	// The sink sends in order: once the last event is in, so is the rest.
	s.PodEvent(pod("last"), v1.EventTypeNormal, "Started", "Started container main")
	var list *v1.EventList
	deadline := time.Now().Add(30 * time.Second)
	for {
		var err error
		if list, err = client.CoreV1().Events("web").List(context.Background(), metav1.ListOptions{}); err != nil {
			t.Fatal(err)
		}
		if slices.ContainsFunc(list.Items, func(e v1.Event) bool { return e.InvolvedObject.Name == "last" }) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the last event never reached the API: %d events", len(list.Items))
		}
		time.Sleep(20 * time.Millisecond)
	}

	byPod := map[string][]v1.Event{}
	for _, e := range list.Items {
		byPod[e.InvolvedObject.Name] = append(byPod[e.InvolvedObject.Name], e)
	}
	if got := byPod["looping"]; len(got) != 1 || got[0].Count < 2 || got[0].Count > 25 {
		t.Errorf("100 identical BackOff events: %d Events in the API (counts %v), want one with a count of 2 to 25", len(got), counts(got))
	}
	got := byPod["flapping"]
	combined := slices.ContainsFunc(got, func(e v1.Event) bool {
		return strings.HasPrefix(e.Message, "(combined from similar events): ")
	})
	if len(got) > 10 || !combined {
		t.Errorf("30 similar Unhealthy events: %d Events in the API (combined %v), want at most 10, one of them combined", len(got), combined)
	}
	requests := map[string]int{}
	for _, a := range client.Actions() {
		if a.GetResource().Resource != "events" || a.GetVerb() == "list" {
			continue
		}
		var name string
		switch a := a.(type) {
		case k8stesting.CreateAction:
			name = a.GetObject().(*v1.Event).InvolvedObject.Name
		case k8stesting.PatchAction:
			name = strings.SplitN(a.GetName(), ".", 2)[0]
		}
		requests[name]++
	}
	if requests["looping"] > 25 || requests["flapping"] > 25 {
		t.Errorf("requests per pod %v: want at most the spam filter's burst of 25 each", requests)
	}
	t.Logf("requests per pod: %v; looping's count %v, flapping's %d Events", requests, counts(byPod["looping"]), len(got))
}

func counts(events []v1.Event) []int32 {
	var out []int32
	for _, e := range events {
		out = append(out, e.Count)
	}
	return out
}
