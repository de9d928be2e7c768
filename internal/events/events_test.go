package events

import (
	"bytes"
	"log/slog"
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
