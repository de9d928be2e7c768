package podsource

import (
	"errors"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
)

func TestManifestErrorsCounter(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := NewManifestErrorsCounter(reg)
	c.Inc(ReasonDecode)
	// A second source built on the same registry shares the counter.
	NewManifestErrorsCounter(reg).Inc(ReasonDecode)

	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		if f.GetName() != "nodelet_manifest_errors_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			got[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
		}
	}
	if got[ReasonDecode] != 2 {
		t.Errorf("decode = %v, want 2", got[ReasonDecode])
	}
	for _, r := range reasons() {
		if _, ok := got[r]; !ok {
			t.Errorf("reason %q not exported before its first error", r)
		}
	}
}

// Each problem becomes one Warning event about the node, naming the file
// and the reason, when it is first seen; the same problem in the next
// reports (rescans) adds none; one that went away and came back, or whose
// reason changed, is recorded again.
func TestReporterRecordsEachProblemOnceAsNodeEvent(t *testing.T) {
	bad := FileError{Path: "/m/bad.yaml", Class: ReasonDecode, Err: errors.New("error converting YAML to JSON:\n  line 3")}
	badOther := FileError{Path: "/m/bad.yaml", Class: ReasonDecode, Err: errors.New("no pod in the file")}
	kept := FileError{Path: "/m/web.yaml", Class: ReasonValidate, Err: errors.New("spec.containers: Required value"), Kept: true}
	dup := FileError{Path: "/m/b.yaml", Class: ReasonDuplicate, Err: errors.New("pod default/web is also defined in /m/a.yaml, which is used")}
	const (
		badMsg      = "/m/bad.yaml: error converting YAML to JSON: line 3"
		badOtherMsg = "/m/bad.yaml: no pod in the file"
		keptMsg     = "/m/web.yaml: spec.containers: Required value; its last good version is kept"
		dupMsg      = "/m/b.yaml: pod default/web is also defined in /m/a.yaml, which is used"
	)
	steps := []struct {
		report []FileError
		want   []string // messages of the events this report adds
	}{
		{[]FileError{bad}, []string{badMsg}},
		{[]FileError{bad}, nil}, // a rescan sees it again
		{[]FileError{bad, kept, dup}, []string{keptMsg, dupMsg}},
		{[]FileError{bad, kept, dup}, nil},
		{[]FileError{badOther, kept}, []string{badOtherMsg}}, // the reason changed; dup went away
		{[]FileError{badOther, kept, dup}, []string{dupMsg}}, // dup came back
		{nil, nil},
		{[]FileError{bad}, []string{badMsg}},
	}
	sink := &eventSink{}
	r := newReporter(nil, nil, sink, "node1")
	seen := 0
	for i, step := range steps {
		r.report(step.report)
		all := sink.all()
		var got []string
		for _, e := range all[seen:] {
			if e.node != "node1" || e.eventType != v1.EventTypeWarning || e.reason != EventReasonFailedToLoadManifest {
				t.Errorf("step %d: event %+v, want a Warning %s about node1", i, e, EventReasonFailedToLoadManifest)
			}
			got = append(got, e.message)
		}
		seen = len(all)
		if !slices.Equal(got, step.want) {
			t.Errorf("step %d: new events %q, want %q", i, got, step.want)
		}
	}
}

// Without a sink the reporter still logs and counts.
func TestReporterWithoutSink(t *testing.T) {
	c := &counter{}
	r := newReporter(nil, c, nil, "node1")
	r.report([]FileError{{Path: "/m/x.yaml", Class: ReasonDecode, Err: errors.New("x")}})
	if c.get(ReasonDecode) != 1 {
		t.Errorf("counted %d", c.get(ReasonDecode))
	}
}
