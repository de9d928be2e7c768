package pleg

import (
	"reflect"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/pure/observed"
)

func inSandbox(sandboxID string, c observed.Container) observed.Container {
	c.SandboxID = sandboxID
	return c
}

func at(sec int64, sb observed.Sandbox) observed.Sandbox {
	sb.CreatedAt = time.Unix(sec, 0)
	return sb
}

func ctrAt(sec int64, c observed.Container) observed.Container {
	c.CreatedAt = time.Unix(sec, 0)
	return c
}

func view(uid types.UID, sb observed.Sandbox, subject string, cs ...observed.Container) observed.SandboxView {
	v := observed.SandboxView{UID: uid, Sandbox: sb, Subject: subject}
	for _, c := range cs {
		v.Containers = append(v.Containers, inSandbox(sb.ID, c))
	}
	return v
}

func deleted(v observed.SandboxView) observed.SandboxView {
	v.Deleted = true
	return v
}

// Apply, after a relist of before, with an event created after the relist
// began: what it returns, the view it leaves, the events it sends.
func TestApply(t *testing.T) {
	old := at(1, sbx("s0", notRdy))
	podA := podOf("a", at(2, sbx("s", ready)), inSandbox("s", ctrAt(2, ctr("c", running))), old, inSandbox("s0", ctrAt(1, ctr("c0", exited))))
	for _, tc := range []struct {
		name    string
		before  map[types.UID]*observed.PodStatus
		v       observed.SandboxView
		applied bool
		want    *observed.PodStatus // pod v.UID in the view after; nil: as before
		events  []Event
	}{
		{
			name: "a new pod's sandbox", before: snapshot(),
			v: view("b", sbx("t", ready), "t"), applied: true,
			want: podOf("b", sbx("t", ready)), events: []Event{ev("b", ContainerStarted, "t")},
		},
		{
			name: "a container started in it", before: snapshot(podOf("b", sbx("t", ready))),
			v: view("b", sbx("t", ready), "d", ctr("d", running)), applied: true,
			want: podOf("b", sbx("t", ready), inSandbox("t", ctr("d", running))), events: []Event{ev("b", ContainerStarted, "d")},
		},
		{
			name: "a container created: no event", before: snapshot(podOf("b", sbx("t", ready))),
			v: view("b", sbx("t", ready), "d", ctr("d", created)), applied: true,
			want: podOf("b", sbx("t", ready), inSandbox("t", ctr("d", created))),
		},
		{
			name: "an exit keeps the pod's other sandbox and its containers", before: snapshot(podA),
			v: view("a", at(2, sbx("s", ready)), "c", ctrAt(2, ctr("c", exited))), applied: true,
			want:   podOf("a", at(2, sbx("s", ready)), old, inSandbox("s", ctrAt(2, ctr("c", exited))), inSandbox("s0", ctrAt(1, ctr("c0", exited)))),
			events: []Event{ev("a", ContainerDied, "c")},
		},
		{
			name: "a container removed", before: snapshot(podA),
			v: deleted(view("a", at(2, sbx("s", ready)), "c")), applied: true,
			want:   podOf("a", at(2, sbx("s", ready)), old, inSandbox("s0", ctrAt(1, ctr("c0", exited)))),
			events: []Event{ev("a", ContainerDied, "c"), ev("a", ContainerRemoved, "c")},
		},
		{
			name: "a container event that does not list its container: relist", before: snapshot(podA),
			v: view("a", at(2, sbx("s", ready)), "c"), applied: false,
		},
		{
			name: "a removal that still lists it: relist", before: snapshot(podA),
			v: deleted(view("a", at(2, sbx("s", ready)), "c", ctr("c", exited))), applied: false,
		},
		{
			name: "a sandbox event listing none of the containers the view holds: relist", before: snapshot(podA),
			v: view("a", at(2, sbx("s", notRdy)), "s"), applied: false,
		},
		{
			name: "a sandbox stopped with its containers", before: snapshot(podA),
			v: view("a", at(2, sbx("s", notRdy)), "s", ctrAt(2, ctr("c", exited))), applied: true,
			want:   podOf("a", at(2, sbx("s", notRdy)), old, inSandbox("s", ctrAt(2, ctr("c", exited))), inSandbox("s0", ctrAt(1, ctr("c0", exited)))),
			events: []Event{ev("a", ContainerDied, "c"), ev("a", ContainerDied, "s")},
		},
		{
			name: "a sandbox removed: relist", before: snapshot(podA),
			v: deleted(view("a", at(2, sbx("s", notRdy)), "s")), applied: false,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
			l := &fakeLister{}
			l.set(tc.before, nil)
			g := New(l, time.Second, clk, testLogger(t))
			if err := g.Relist(t.Context()); err != nil {
				t.Fatal(err)
			}
			drain(g)
			if got := g.Apply(tc.v, clk.Now().Add(time.Millisecond)); got != tc.applied {
				t.Fatalf("Apply = %v, want %v", got, tc.applied)
			}
			pods, _ := g.Current()
			want := tc.want
			if want == nil {
				want = tc.before[tc.v.UID]
			}
			if got := pods[tc.v.UID]; !reflect.DeepEqual(got, want) {
				t.Errorf("view of %s:\n got %+v\nwant %+v", tc.v.UID, got, want)
			}
			if got := drain(g); !reflect.DeepEqual(got, tc.events) {
				t.Errorf("events %v, want %v", got, tc.events)
			}
			if tc.before[tc.v.UID] != nil && !reflect.DeepEqual(tc.before[tc.v.UID], l.pods[tc.v.UID]) {
				t.Error("Apply changed the relist's pod in place")
			}
		})
	}
}

// An event created before the last relist began is older than what the
// relist listed: skipped, with no event and no relist asked for; one
// before any relist, or without a time, is left to a relist.
func TestApplyOnlyAfterARelist(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	l := &fakeLister{}
	l.set(snapshot(podOf("a", sbx("s", ready))), nil)
	g := New(l, time.Second, clk, testLogger(t))
	v := view("a", sbx("s", notRdy), "s")
	if g.Apply(v, clk.Now()) {
		t.Error("applied before the first relist")
	}
	if err := g.Relist(t.Context()); err != nil {
		t.Fatal(err)
	}
	drain(g)
	if !g.Apply(v, clk.Now().Add(-time.Millisecond)) {
		t.Error("an event older than the relist is not skipped")
	}
	if g.Apply(v, time.Time{}) {
		t.Error("applied an event without a time")
	}
	pods, _ := g.Current()
	if got := pods["a"].Sandboxes[0].State; got != ready {
		t.Errorf("the skipped event changed the view: sandbox %v", got)
	}
	if got := drain(g); len(got) != 0 {
		t.Errorf("events %v, want none", got)
	}
}
