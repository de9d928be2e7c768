package shutdown

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

func TestPeriods(t *testing.T) {
	for _, tc := range []struct {
		total, critical time.Duration
		by              []PriorityPeriod
		want            []PriorityPeriod
	}{
		{0, 0, nil, nil},
		{30 * time.Second, 0, nil, []PriorityPeriod{{0, 30 * time.Second}, {SystemCriticalPriority, 0}}},
		{30 * time.Second, 10 * time.Second, nil, []PriorityPeriod{{0, 20 * time.Second}, {SystemCriticalPriority, 10 * time.Second}}},
		{10 * time.Second, 10 * time.Second, nil, []PriorityPeriod{{0, 0}, {SystemCriticalPriority, 10 * time.Second}}},
		{10 * time.Second, 20 * time.Second, nil, nil}, // refused by validation; off here
		{0, 0, []PriorityPeriod{{100000, 5 * time.Second}, {0, 10 * time.Second}, {SystemCriticalPriority, 2 * time.Second}},
			[]PriorityPeriod{{0, 10 * time.Second}, {100000, 5 * time.Second}, {SystemCriticalPriority, 2 * time.Second}}},
	} {
		got := Periods(tc.total, tc.critical, tc.by)
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Periods(%v, %v, %v) = %v, want %v", tc.total, tc.critical, tc.by, got, tc.want)
		}
	}
	if got := Total(Periods(30*time.Second, 10*time.Second, nil)); got != 30*time.Second {
		t.Errorf("Total = %v, want 30s", got)
	}
}

func testPod(name string, mutate ...func(*v1.Pod)) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name),
		// Every standalone pod is static: that alone makes no pod critical.
		Annotations: map[string]string{"kubernetes.io/config.source": "file"}}}
	for _, f := range mutate {
		f(p)
	}
	return p
}

func priority(v int32) func(*v1.Pod) { return func(p *v1.Pod) { p.Spec.Priority = ptr.To(v) } }
func class(c string) func(*v1.Pod)   { return func(p *v1.Pod) { p.Spec.PriorityClassName = c } }
func grace(s int64) func(*v1.Pod) {
	return func(p *v1.Pod) { p.Spec.TerminationGracePeriodSeconds = ptr.To(s) }
}

// describe is a plan as text: one line per group.
func describe(groups []Group) string {
	var b strings.Builder
	for _, g := range groups {
		fmt.Fprintf(&b, "%d %v:", g.Priority, g.GracePeriod)
		for _, p := range g.Pods {
			fmt.Fprintf(&b, " %s(%ds)", p.Name, GraceSeconds(g, p))
		}
		b.WriteString("\n")
	}
	return b.String()
}

func TestPlan(t *testing.T) {
	pods := []*v1.Pod{
		testPod("plain"),
		testPod("short", grace(3)),
		testPod("long", grace(600)),
		testPod("node-critical", class("system-node-critical")),
		testPod("cluster-critical", class("system-cluster-critical")),
		testPod("high", priority(1000000)),
		testPod("critical-by-priority", priority(SystemCriticalPriority)),
		testPod("class-but-priority", class("system-node-critical"), priority(5)), // the spec's priority wins
		testPod("negative", priority(-10)),
	}
	for _, tc := range []struct {
		name    string
		periods []PriorityPeriod
		want    string
	}{
		{"two groups", Periods(30*time.Second, 10*time.Second, nil), `0 20s: plain(20s) short(3s) long(20s) high(20s) class-but-priority(20s) negative(20s)
2000000000 10s: node-critical(10s) cluster-critical(10s) critical-by-priority(10s)
`},
		{"by priority", Periods(0, 0, []PriorityPeriod{{100, 5 * time.Second}, {1000000, 4 * time.Second}, {SystemCriticalPriority + 1000, 2 * time.Second}}),
			`100 5s: plain(5s) short(3s) long(5s) class-but-priority(5s) negative(5s)
1000000 4s: cluster-critical(4s) high(4s) critical-by-priority(4s)
2000001000 2s: node-critical(2s)
`},
		{"off", nil, ""},
	} {
		if got := describe(Plan(tc.periods, pods)); got != tc.want {
			t.Errorf("%s:\n%s\nwant\n%s", tc.name, got, tc.want)
		}
	}
}

// Each pod is stopped with its group's grace period, or its own
// terminationGracePeriodSeconds when that is not longer (unset: the API's
// default, 30s).
func TestGraceSeconds(t *testing.T) {
	for _, tc := range []struct {
		name  string
		group time.Duration
		pod   *v1.Pod
		want  int64
	}{
		{"unset, group shorter than the default", 20 * time.Second, testPod("p"), 20},
		{"unset, group longer than the default", 60 * time.Second, testPod("p"), 30},
		{"its own shorter", 20 * time.Second, testPod("p", grace(3)), 3},
		{"its own equal", 20 * time.Second, testPod("p", grace(20)), 20},
		{"its own longer", 20 * time.Second, testPod("p", grace(600)), 20},
		{"its own zero", 20 * time.Second, testPod("p", grace(0)), 0},
		{"a group of no time", 0, testPod("p", grace(5)), 0},
		{"a group's fraction of a second is dropped", 2500 * time.Millisecond, testPod("p"), 2},
	} {
		g := Group{PriorityPeriod: PriorityPeriod{GracePeriod: tc.group}}
		if got := GraceSeconds(g, tc.pod); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}

// The groups are stopped lowest priority first, whatever the order the
// periods were given in; a pod goes to the highest group not above its
// priority, the lowest group if it is below all; within a group pods keep
// the sources' order.
func TestPlanOrder(t *testing.T) {
	periods := Periods(0, 0, []PriorityPeriod{
		{SystemCriticalPriority, 3 * time.Second},
		{1000, 2 * time.Second},
		{10, time.Second},
	})
	pods := []*v1.Pod{
		testPod("c-critical", priority(SystemCriticalPriority)),
		testPod("b-at-1000", priority(1000)),
		testPod("a-999", priority(999)),
		testPod("z-below-all", priority(-5)),
		testPod("y-at-10", priority(10)),
		testPod("x-above-critical", priority(SystemCriticalPriority+1)),
	}
	want := `10 1s: a-999(1s) z-below-all(1s) y-at-10(1s)
1000 2s: b-at-1000(2s)
2000000000 3s: c-critical(3s) x-above-critical(3s)
`
	if got := describe(Plan(periods, pods)); got != want {
		t.Errorf("plan:\n%s\nwant\n%s", got, want)
	}
}
