package cli

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/internal/base/events"
)

func TestPrintEvents(t *testing.T) {
	evs := []events.Event{
		{PodUID: "u1", Namespace: "default", Pod: "web-node1", Type: v1.EventTypeNormal, Reason: "Started", Message: "Started container web"},
		{Node: "node1", Type: v1.EventTypeWarning, Reason: "FailedToLoadManifest", Message: "/etc/nodelet/manifests/bad.yaml: error converting YAML to JSON"},
	}
	var b strings.Builder
	if err := PrintEvents(&b, evs); err != nil {
		t.Fatal(err)
	}
	golden(t, "events-table.golden", b.String())
}
