package pleg

import (
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/internal/pure/observed"
)

// ctr and sbx build the parts of a pod status; podOf assembles one.
func ctr(id string, s observed.ContainerState) observed.Container {
	return observed.Container{ID: id, Name: "c-" + id, State: s}
}

func sbx(id string, s observed.SandboxState) observed.Sandbox {
	return observed.Sandbox{ID: id, State: s}
}

func podOf(uid types.UID, parts ...any) *observed.PodStatus {
	p := &observed.PodStatus{UID: uid}
	for _, x := range parts {
		switch v := x.(type) {
		case observed.Container:
			p.Containers = append(p.Containers, v)
		case observed.Sandbox:
			p.Sandboxes = append(p.Sandboxes, v)
		default:
			panic("podOf: unexpected part")
		}
	}
	return p
}

func snapshot(pods ...*observed.PodStatus) map[types.UID]*observed.PodStatus {
	m := map[types.UID]*observed.PodStatus{}
	for _, p := range pods {
		m[p.UID] = p
	}
	return m
}

func ev(uid types.UID, t EventType, id string) Event {
	return Event{PodUID: uid, Type: t, ContainerID: id}
}

const (
	running = observed.ContainerRunning
	exited  = observed.ContainerExited
	created = observed.ContainerCreated
	unknown = observed.ContainerUnknown
	ready   = observed.SandboxReady
	notRdy  = observed.SandboxNotReady
)

// TestDiffContainerTransitions walks generateEvents' table for one
// container: every old state (gone included) against every new state.
func TestDiffContainerTransitions(t *testing.T) {
	const uid = types.UID("u")
	type st struct {
		name  string
		state observed.ContainerState
		gone  bool
	}
	var (
		gone = st{name: "gone", gone: true}
		run  = st{name: "running", state: running}
		exit = st{name: "exited", state: exited}
		crt  = st{name: "created", state: created}
		unk  = st{name: "unknown", state: unknown}
	)
	build := func(s st) map[types.UID]*observed.PodStatus {
		if s.gone {
			return snapshot(podOf(uid))
		}
		return snapshot(podOf(uid, ctr("c", s.state)))
	}
	cases := []struct {
		old, new st
		want     []EventType
	}{
		{gone, run, []EventType{ContainerStarted}},
		{gone, exit, []EventType{ContainerDied}}, // started and died between relists
		{gone, crt, []EventType{ContainerChanged}},
		{gone, unk, []EventType{ContainerChanged}},

		{run, run, nil},
		{run, exit, []EventType{ContainerDied}},
		{run, crt, []EventType{ContainerChanged}},
		{run, unk, []EventType{ContainerChanged}},
		{run, gone, []EventType{ContainerDied, ContainerRemoved}},

		{exit, exit, nil},
		{exit, run, []EventType{ContainerStarted}},
		{exit, crt, []EventType{ContainerChanged}},
		{exit, unk, []EventType{ContainerChanged}},
		{exit, gone, []EventType{ContainerRemoved}},

		{crt, crt, nil},
		{crt, unk, nil}, // both fold onto "unknown"
		{crt, run, []EventType{ContainerStarted}},
		{crt, exit, []EventType{ContainerDied}},
		{crt, gone, []EventType{ContainerDied, ContainerRemoved}},

		{unk, unk, nil},
		{unk, crt, nil},
		{unk, run, []EventType{ContainerStarted}},
		{unk, exit, []EventType{ContainerDied}},
		{unk, gone, []EventType{ContainerDied, ContainerRemoved}},

		{gone, gone, nil},
	}
	for _, tc := range cases {
		t.Run(tc.old.name+"->"+tc.new.name, func(t *testing.T) {
			var want []Event
			for _, typ := range tc.want {
				want = append(want, ev(uid, typ, "c"))
			}
			if got := Diff(build(tc.old), build(tc.new)); !reflect.DeepEqual(got, want) {
				t.Errorf("Diff = %v, want %v", got, want)
			}
		})
	}
}

func TestDiffSandboxes(t *testing.T) {
	const uid = types.UID("u")
	cases := []struct {
		name     string
		old, new *observed.PodStatus
		want     []Event
	}{
		{"created ready", podOf(uid), podOf(uid, sbx("s", ready)), []Event{ev(uid, ContainerStarted, "s")}},
		{"created not ready", podOf(uid), podOf(uid, sbx("s", notRdy)), []Event{ev(uid, ContainerDied, "s")}},
		{"went not ready", podOf(uid, sbx("s", ready)), podOf(uid, sbx("s", notRdy)), []Event{ev(uid, ContainerDied, "s")}},
		{"stays ready", podOf(uid, sbx("s", ready)), podOf(uid, sbx("s", ready)), nil},
		{"removed after not ready", podOf(uid, sbx("s", notRdy)), podOf(uid), []Event{ev(uid, ContainerRemoved, "s")}},
		{"removed while ready", podOf(uid, sbx("s", ready)), podOf(uid),
			[]Event{ev(uid, ContainerDied, "s"), ev(uid, ContainerRemoved, "s")}},
		{"new sandbox replaces old", podOf(uid, sbx("s1", notRdy)), podOf(uid, sbx("s2", ready)),
			[]Event{ev(uid, ContainerRemoved, "s1"), ev(uid, ContainerStarted, "s2")}},
		{"container wins a shared ID", podOf(uid), podOf(uid, ctr("x", exited), sbx("x", ready)),
			[]Event{ev(uid, ContainerDied, "x")}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := Diff(snapshot(tc.old), snapshot(tc.new)); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Diff = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestDiffPods(t *testing.T) {
	t.Run("pod appears", func(t *testing.T) {
		got := Diff(nil, snapshot(podOf("a", sbx("s", ready), ctr("c", running))))
		want := []Event{ev("a", ContainerStarted, "c"), ev("a", ContainerStarted, "s")}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("Diff = %v, want %v", got, want)
		}
	})
	t.Run("pod disappears", func(t *testing.T) {
		got := Diff(snapshot(podOf("a", sbx("s", notRdy), ctr("c", exited), ctr("d", running))), nil)
		want := []Event{
			ev("a", ContainerRemoved, "c"),
			ev("a", ContainerDied, "d"), ev("a", ContainerRemoved, "d"),
			ev("a", ContainerRemoved, "s"),
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("Diff = %v, want %v", got, want)
		}
	})
	t.Run("nil statuses are empty pods", func(t *testing.T) {
		old := map[types.UID]*observed.PodStatus{"a": nil}
		if got := Diff(old, map[types.UID]*observed.PodStatus{"a": nil, "b": nil}); got != nil {
			t.Errorf("Diff = %v, want none", got)
		}
		got := Diff(old, snapshot(podOf("a", ctr("c", running))))
		if want := []Event{ev("a", ContainerStarted, "c")}; !reflect.DeepEqual(got, want) {
			t.Errorf("Diff = %v, want %v", got, want)
		}
	})
	t.Run("arguments untouched", func(t *testing.T) {
		old := snapshot(podOf("a", ctr("c", running)))
		new := snapshot(podOf("b", ctr("d", running)))
		Diff(old, new)
		if len(old) != 1 || len(new) != 1 || old["a"].Containers[0].State != running {
			t.Errorf("Diff modified its arguments: %v %v", old, new)
		}
	})
}

// The order is by pod UID, then container ID, whatever the map and slice
// orders; repeated runs (map iteration is randomised) agree.
func TestDiffDeterministicOrder(t *testing.T) {
	old := snapshot(
		podOf("pod-b", ctr("z", running), ctr("a", running)),
		podOf("pod-a", ctr("m", running)),
	)
	new := snapshot(
		podOf("pod-c", ctr("y", running), ctr("b", exited), sbx("k", ready)),
		podOf("pod-b", ctr("a", exited)),
		podOf("pod-a", ctr("m", exited), ctr("l", running)),
	)
	want := []Event{
		ev("pod-a", ContainerStarted, "l"),
		ev("pod-a", ContainerDied, "m"),
		ev("pod-b", ContainerDied, "a"),
		ev("pod-b", ContainerDied, "z"), ev("pod-b", ContainerRemoved, "z"),
		ev("pod-c", ContainerDied, "b"),
		ev("pod-c", ContainerStarted, "k"),
		ev("pod-c", ContainerStarted, "y"),
	}
	for i := 0; i < 20; i++ {
		if got := Diff(old, new); !reflect.DeepEqual(got, want) {
			t.Fatalf("run %d: Diff =\n%v\nwant\n%v", i, got, want)
		}
	}
}

func TestEventTypeString(t *testing.T) {
	for typ, want := range map[EventType]string{
		ContainerStarted: "ContainerStarted", ContainerDied: "ContainerDied",
		ContainerRemoved: "ContainerRemoved", ContainerChanged: "ContainerChanged",
	} {
		if typ.String() != want {
			t.Errorf("%d.String() = %q, want %q", int(typ), typ.String(), want)
		}
	}
}
