package podconfig

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/internal/pipeline/podsource"
	"github.com/nodelet/nodelet/internal/pure/podspec"
	"github.com/nodelet/nodelet/internal/pure/podupdate"
)

var (
	t0 = time.Date(2026, 1, 2, 3, 4, 5, 600, time.UTC)
	t1 = t0.Add(time.Hour)
)

// pod is a pod as a source sends it.
func pod(name, uid string, mutate ...func(*v1.Pod)) *v1.Pod {
	p := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: "default", UID: types.UID(uid),
			Annotations: map[string]string{podspec.AnnotationConfigFile: "/m/" + name + ".yaml"},
		},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c", Image: "busybox:1.35"}}},
	}
	for _, m := range mutate {
		m(p)
	}
	return p
}

// stored is a pod as Merge keeps it: with its source and first-seen time.
func stored(source string, seen time.Time, p *v1.Pod) *v1.Pod {
	p = p.DeepCopy()
	p.Annotations[podspec.AnnotationConfigSource] = source
	p.Annotations[podspec.AnnotationConfigSeen] = seen.Format(time.RFC3339Nano)
	return p
}

func state(source string, pods ...*v1.Pod) State {
	m := map[types.UID]*v1.Pod{}
	for _, p := range pods {
		m[p.UID] = p
	}
	return State{source: m}
}

func withLabel(p *v1.Pod)      { p.Labels = map[string]string{"tier": "web"} }
func withAnnotation(p *v1.Pod) { p.Annotations["team"] = "a" }
func withStatus(p *v1.Pod)     { p.Status.Phase = v1.PodRunning }
func withSeen(p *v1.Pod) {
	p.Annotations[podspec.AnnotationConfigSeen] = "1999-01-01T00:00:00Z"
}
func withDeletion(p *v1.Pod) {
	ts := metav1.NewTime(t0)
	p.DeletionTimestamp = &ts
}

// describe renders operations as "OP source: namespace/name(uid) ...".
func describe(ops []PodUpdate) []string {
	var out []string
	for _, op := range ops {
		s := fmt.Sprintf("%s %s:", op.Op, op.Source)
		for _, p := range op.Pods {
			s += fmt.Sprintf(" %s/%s(%s)", p.Namespace, p.Name, p.UID)
		}
		out = append(out, s)
	}
	return out
}

// describeState renders the pods of each source, with their seen time.
func describeState(s State) map[string]string {
	out := map[string]string{}
	for source, pods := range s {
		var names []string
		for _, p := range sorted(pods) {
			seen, _ := time.Parse(time.RFC3339Nano, p.Annotations[podspec.AnnotationConfigSeen])
			at := "t?"
			switch {
			case seen.Equal(t0):
				at = "t0"
			case seen.Equal(t1):
				at = "t1"
			}
			names = append(names, fmt.Sprintf("%s(%s)@%s", p.Name, p.UID, at))
		}
		out[source] = strings.Join(names, " ")
	}
	return out
}

func TestMerge(t *testing.T) {
	const file, http = podsource.SourceFile, podsource.SourceHTTP
	for _, tc := range []struct {
		name      string
		state     State
		update    podsource.Update
		want      []string
		wantState map[string]string
	}{{
		name:      "first empty snapshot signals the source",
		state:     State{},
		update:    podsource.Update{Source: file},
		want:      []string{"ADD file:"},
		wantState: map[string]string{file: ""},
	}, {
		name:      "first snapshot adds, sorted, seen now",
		state:     State{},
		update:    podsource.Update{Source: file, Pods: []*v1.Pod{pod("b", "2"), pod("a", "1")}},
		want:      []string{"ADD file: default/a(1) default/b(2)"},
		wantState: map[string]string{file: "a(1)@t1 b(2)@t1"},
	}, {
		name:      "same snapshot again: nothing, seen kept",
		state:     state(file, stored(file, t0, pod("a", "1"))),
		update:    podsource.Update{Source: file, Pods: []*v1.Pod{pod("a", "1")}},
		want:      nil,
		wantState: map[string]string{file: "a(1)@t0"},
	}, {
		name:      "empty snapshot after pods: remove, no ready signal",
		state:     state(file, stored(file, t0, pod("a", "1"))),
		update:    podsource.Update{Source: file},
		want:      []string{"REMOVE file: default/a(1)"},
		wantState: map[string]string{file: ""},
	}, {
		name:      "pod gone",
		state:     state(file, stored(file, t0, pod("a", "1")), stored(file, t0, pod("b", "2"))),
		update:    podsource.Update{Source: file, Pods: []*v1.Pod{pod("a", "1")}},
		want:      []string{"REMOVE file: default/b(2)"},
		wantState: map[string]string{file: "a(1)@t0"},
	}, {
		name:      "static pod edited: new UID, remove then add",
		state:     state(file, stored(file, t0, pod("a", "1"))),
		update:    podsource.Update{Source: file, Pods: []*v1.Pod{pod("a", "1b", func(p *v1.Pod) { p.Spec.Containers[0].Image = "x:2" })}},
		want:      []string{"REMOVE file: default/a(1)", "ADD file: default/a(1b)"},
		wantState: map[string]string{file: "a(1b)@t1"},
	}, {
		// The API's ephemeralcontainers subresource changes nothing but
		// spec.ephemeralContainers: an update of the same pod.
		name:  "ephemeral container added, same UID: update",
		state: state(file, stored(file, t0, pod("a", "1"))),
		update: podsource.Update{Source: file, Pods: []*v1.Pod{pod("a", "1", func(p *v1.Pod) {
			p.Spec.EphemeralContainers = []v1.EphemeralContainer{{EphemeralContainerCommon: v1.EphemeralContainerCommon{Name: "debugger", Image: "busybox"}}}
		})}},
		want:      []string{"UPDATE file: default/a(1)"},
		wantState: map[string]string{file: "a(1)@t0"},
	}, {
		name:      "labels changed, same UID: update, seen kept",
		state:     state(file, stored(file, t0, pod("a", "1"))),
		update:    podsource.Update{Source: file, Pods: []*v1.Pod{pod("a", "1", withLabel)}},
		want:      []string{"UPDATE file: default/a(1)"},
		wantState: map[string]string{file: "a(1)@t0"},
	}, {
		name:      "annotation changed: update",
		state:     state(file, stored(file, t0, pod("a", "1"))),
		update:    podsource.Update{Source: file, Pods: []*v1.Pod{pod("a", "1", withAnnotation)}},
		want:      []string{"UPDATE file: default/a(1)"},
		wantState: map[string]string{file: "a(1)@t0"},
	}, {
		name:      "only config.seen differs: nothing",
		state:     state(file, stored(file, t0, pod("a", "1"))),
		update:    podsource.Update{Source: file, Pods: []*v1.Pod{pod("a", "1", withSeen)}},
		want:      nil,
		wantState: map[string]string{file: "a(1)@t0"},
	}, {
		name:      "only status changed: reconcile",
		state:     state(file, stored(file, t0, pod("a", "1"))),
		update:    podsource.Update{Source: file, Pods: []*v1.Pod{pod("a", "1", withStatus)}},
		want:      []string{"RECONCILE file: default/a(1)"},
		wantState: map[string]string{file: "a(1)@t0"},
	}, {
		name:      "deletion timestamp set: delete",
		state:     state(file, stored(file, t0, pod("a", "1"))),
		update:    podsource.Update{Source: file, Pods: []*v1.Pod{pod("a", "1", withDeletion)}},
		want:      []string{"DELETE file: default/a(1)"},
		wantState: map[string]string{file: "a(1)@t0"},
	}, {
		name: "every operation at once, in the kubelet's order",
		state: state(file,
			stored(file, t0, pod("a", "1")), stored(file, t0, pod("b", "2")),
			stored(file, t0, pod("c", "3")), stored(file, t0, pod("d", "4"))),
		update: podsource.Update{Source: file, Pods: []*v1.Pod{
			pod("e", "5"), pod("d", "4", withDeletion), pod("c", "3", withStatus), pod("a", "1", withLabel)}},
		want: []string{
			"REMOVE file: default/b(2)",
			"ADD file: default/e(5)",
			"UPDATE file: default/a(1)",
			"DELETE file: default/d(4)",
			"RECONCILE file: default/c(3)",
		},
		wantState: map[string]string{file: "a(1)@t0 c(3)@t0 d(4)@t0 e(5)@t1"},
	}, {
		name:      "another source: first empty snapshot, the other untouched",
		state:     state(file, stored(file, t0, pod("a", "1"))),
		update:    podsource.Update{Source: http},
		want:      []string{"ADD http:"},
		wantState: map[string]string{file: "a(1)@t0", http: ""},
	}, {
		name:      "first snapshot with only known pods still signals",
		state:     State{},
		update:    podsource.Update{Source: http, Pods: []*v1.Pod{pod("a", "1")}},
		want:      []string{"ADD http: default/a(1)"},
		wantState: map[string]string{http: "a(1)@t1"},
	}, {
		name:      "same name twice in a snapshot: the first is kept",
		state:     State{},
		update:    podsource.Update{Source: file, Pods: []*v1.Pod{pod("a", "1"), pod("a", "2")}},
		want:      []string{"ADD file: default/a(1)"},
		wantState: map[string]string{file: "a(1)@t1"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			stateBefore := deepCopyState(tc.state)
			updateBefore := podsource.Update{Source: tc.update.Source}
			for _, p := range tc.update.Pods {
				updateBefore.Pods = append(updateBefore.Pods, p.DeepCopy())
			}

			got, ops := Merge(tc.state, tc.update, t1)

			if d := describe(ops); !reflect.DeepEqual(d, tc.want) {
				t.Errorf("operations\n got %q\nwant %q", d, tc.want)
			}
			if d := describeState(got); !reflect.DeepEqual(d, tc.wantState) {
				t.Errorf("state\n got %v\nwant %v", d, tc.wantState)
			}
			if !reflect.DeepEqual(tc.state, stateBefore) || !reflect.DeepEqual(tc.update, updateBefore) {
				t.Error("Merge modified its arguments")
			}
			for _, op := range ops {
				for _, p := range op.Pods {
					if p.Annotations[podspec.AnnotationConfigSource] != tc.update.Source {
						t.Errorf("%s: config.source %q", p.Name, p.Annotations[podspec.AnnotationConfigSource])
					}
					if p == got[tc.update.Source][p.UID] {
						t.Errorf("%s: an operation shares its pod with the state", p.Name)
					}
				}
			}
		})
	}
}

func TestMergeUpdateCarriesNewContent(t *testing.T) {
	s := state(podsource.SourceFile, stored(podsource.SourceFile, t0, pod("a", "1", withStatus)))
	_, ops := Merge(s, podsource.Update{Source: podsource.SourceFile, Pods: []*v1.Pod{pod("a", "1", withLabel)}}, t1)
	if len(ops) != 1 || ops[0].Op != podupdate.Update {
		t.Fatalf("ops %q", describe(ops))
	}
	p := ops[0].Pods[0]
	if p.Labels["tier"] != "web" || p.Status.Phase != "" {
		t.Errorf("updated pod: labels %v status %v; want the new labels and status", p.Labels, p.Status.Phase)
	}
	if p.Annotations[podspec.AnnotationConfigSeen] != t0.Format(time.RFC3339Nano) {
		t.Errorf("seen %q, want the first one", p.Annotations[podspec.AnnotationConfigSeen])
	}
}

func deepCopyState(s State) State {
	out := State{}
	for source, pods := range s {
		m := map[types.UID]*v1.Pod{}
		for uid, p := range pods {
			m[uid] = p.DeepCopy()
		}
		out[source] = m
	}
	return out
}

// A static pod is created (CreationTimestamp) when first seen, and keeps
// that time through updates.
func TestMergeSetsCreationTimestampOnce(t *testing.T) {
	first := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default", UID: "u1"}}
	state, ops := Merge(nil, podsource.Update{Source: "file", Pods: []*v1.Pod{pod}}, first)
	if len(ops) != 1 || !ops[0].Pods[0].CreationTimestamp.Time.Equal(first) {
		t.Fatalf("ops %+v", ops)
	}
	changed := pod.DeepCopy()
	changed.Labels = map[string]string{"a": "b"}
	_, ops = Merge(state, podsource.Update{Source: "file", Pods: []*v1.Pod{changed}}, first.Add(time.Hour))
	if len(ops) != 1 || ops[0].Op != podupdate.Update || !ops[0].Pods[0].CreationTimestamp.Time.Equal(first) {
		t.Fatalf("update ops %+v", ops)
	}
}
