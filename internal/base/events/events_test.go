package events

import (
	"bytes"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
)

func pod(name string) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name)}}
}

func TestRecorderFoldsRepeatsAndIsBounded(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(100, 0))
	var logs bytes.Buffer
	r := New(3, clk, slog.New(slog.NewTextHandler(&logs, nil)))
	a, b := pod("a"), pod("b")
	r.Event(a, v1.EventTypeNormal, "Started", "Started container app")
	r.Event(a, v1.EventTypeWarning, "BackOff", "Back-off restarting failed container app")
	clk.Step(time.Second)
	r.Event(a, v1.EventTypeWarning, "BackOff", "Back-off restarting failed container app")
	got := r.ForPod(a.UID)
	if len(got) != 2 || got[1].Count != 2 || !got[1].LastTime.Equal(time.Unix(101, 0)) || !got[1].FirstTime.Equal(time.Unix(100, 0)) {
		t.Fatalf("events %+v", got)
	}
	r.Event(b, v1.EventTypeNormal, "Created", "Created container x")
	r.Event(b, v1.EventTypeNormal, "Started", "Started container x")
	all := r.All()
	if len(all) != 3 || all[0].Reason != "BackOff" || all[2].Reason != "Started" {
		t.Fatalf("bounded list %+v", all)
	}
	if !strings.Contains(logs.String(), `level=WARN msg=event pod=default/a type=Warning reason=BackOff`) {
		t.Errorf("logs:\n%s", logs.String())
	}
}

func TestNodeEventsFoldAndStayApartFromPods(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(100, 0))
	var logs bytes.Buffer
	r := New(10, clk, slog.New(slog.NewTextHandler(&logs, nil)))
	r.NodeEvent("node1", v1.EventTypeWarning, "FailedToLoadManifest", "/etc/m/a.yaml: bad")
	clk.Step(time.Second)
	r.NodeEvent("node1", v1.EventTypeWarning, "FailedToLoadManifest", "/etc/m/a.yaml: bad")
	r.NodeEvent("node1", v1.EventTypeWarning, "FailedToLoadManifest", "/etc/m/b.yaml: bad")
	// A pod without a UID does not fold into a node event, nor the other way.
	r.Event(&v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default"}}, v1.EventTypeWarning, "FailedToLoadManifest", "/etc/m/b.yaml: bad")

	want := []Event{
		{Node: "node1", Type: v1.EventTypeWarning, Reason: "FailedToLoadManifest", Message: "/etc/m/a.yaml: bad", Count: 2,
			FirstTime: time.Unix(100, 0), LastTime: time.Unix(101, 0)},
		{Node: "node1", Type: v1.EventTypeWarning, Reason: "FailedToLoadManifest", Message: "/etc/m/b.yaml: bad", Count: 1,
			FirstTime: time.Unix(101, 0), LastTime: time.Unix(101, 0)},
		{Namespace: "default", Pod: "p", Type: v1.EventTypeWarning, Reason: "FailedToLoadManifest", Message: "/etc/m/b.yaml: bad", Count: 1,
			FirstTime: time.Unix(101, 0), LastTime: time.Unix(101, 0)},
	}
	if got := r.All(); !reflect.DeepEqual(got, want) {
		t.Errorf("All() =\n%+v\nwant\n%+v", got, want)
	}
	if got := r.ForPod(""); len(got) != 1 || got[0].Pod != "p" {
		t.Errorf("ForPod(\"\") = %+v, want only the pod's event", got)
	}
	if !strings.Contains(logs.String(), `level=WARN msg=event node=node1 type=Warning reason=FailedToLoadManifest message="/etc/m/a.yaml: bad"`) {
		t.Errorf("logs:\n%s", logs.String())
	}
}
