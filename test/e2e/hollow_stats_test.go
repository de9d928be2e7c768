package e2e

// The arithmetic of BenchmarkHollow (hollow_bench_test.go), without the e2e
// build tag so that make unit tests it.

import (
	"bufio"
	"bytes"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// percentile is the nearest-rank q-quantile of sorted d (0 when empty).
func percentile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(d)))) - 1
	return d[max(0, min(i, len(d)-1))]
}

// sumMetric sums the samples of a metric family in Prometheus text whose
// labels contain label (any when empty).
func sumMetric(data []byte, name, label string) float64 {
	var sum float64
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) {
			continue
		}
		rest := line[len(name):]
		if rest == "" || (rest[0] != '{' && rest[0] != ' ') || !strings.Contains(rest, label) {
			continue
		}
		f := strings.Fields(rest[strings.LastIndexByte(rest, '}')+1:])
		if len(f) == 0 {
			continue
		}
		if v, err := strconv.ParseFloat(f[0], 64); err == nil {
			sum += v
		}
	}
	return sum
}

// slope is the least-squares slope of ys over xs.
func slope(xs, ys []float64) float64 {
	var mx, my float64
	for i := range xs {
		mx += xs[i]
		my += ys[i]
	}
	mx /= float64(len(xs))
	my /= float64(len(xs))
	var num, den float64
	for i := range xs {
		num += (xs[i] - mx) * (ys[i] - my)
		den += (xs[i] - mx) * (xs[i] - mx)
	}
	if den == 0 {
		return math.NaN()
	}
	return num / den
}

// podsRestarted are the pods of before that are gone from after, have a
// new UID, are no longer Running or whose containers restarted more often.
func podsRestarted(before, after []v1.Pod) []string {
	now := map[string]*v1.Pod{}
	for i := range after {
		now[after[i].Name] = &after[i]
	}
	restarts := func(p *v1.Pod) int32 {
		var n int32
		for _, s := range p.Status.ContainerStatuses {
			n += s.RestartCount
		}
		return n
	}
	var out []string
	for i := range before {
		b := &before[i]
		a := now[b.Name]
		switch {
		case a == nil:
			out = append(out, b.Name+" (gone)")
		case a.UID != b.UID:
			out = append(out, b.Name+" (new UID)")
		case a.Status.Phase != v1.PodRunning:
			out = append(out, fmt.Sprintf("%s (%s)", b.Name, a.Status.Phase))
		case restarts(a) > restarts(b):
			out = append(out, fmt.Sprintf("%s (%d restarts)", b.Name, restarts(a)-restarts(b)))
		}
	}
	return out
}

// eventWrites is the writes of Events (core/v1 or events.k8s.io: create,
// patch, update) among requests counted by kind (auditEvent.kind).
func eventWrites(byKind map[string]int) int {
	n := 0
	for kind, k := range byKind {
		// "VERB RESOURCE[.GROUP][/SUB][ (CODE)]": a refused write counts too,
		// the agent made it.
		f := strings.Fields(kind)
		if len(f) >= 2 && (f[0] == "create" || f[0] == "patch" || f[0] == "update") &&
			(f[1] == "events" || f[1] == "events.events.k8s.io") {
			n += k
		}
	}
	return n
}

// hollowLargestN is the largest of nodes (in any order) at which an arm
// held (notHeld(n) is "") and held at every smaller N, and why the next
// larger did not (empty when it is the largest run).
func hollowLargestN(nodes []int, notHeld func(int) string) (int, string) {
	ns := slices.Sorted(slices.Values(nodes))
	held := 0
	for _, n := range ns {
		if why := notHeld(n); why != "" {
			return held, fmt.Sprintf("N=%d: %s", n, why)
		}
		held = n
	}
	return held, ""
}

func heldString(n int, why string) string {
	s := "none"
	if n > 0 {
		s = "N=" + strconv.Itoa(n)
	}
	if why != "" {
		s += " (not at " + why + ")"
	} else if n > 0 {
		s += " (the largest N run)"
	}
	return s
}

func TestHollowPercentile(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		var d []time.Duration
		for _, x := range v {
			d = append(d, time.Duration(x)*time.Millisecond)
		}
		return d
	}
	hundred := make([]int, 100)
	for i := range hundred {
		hundred[i] = i + 1
	}
	for _, tc := range []struct {
		d    []time.Duration
		q    float64
		want time.Duration
	}{
		{nil, 0.99, 0},
		{ms(7), 0.5, 7 * time.Millisecond},
		{ms(1, 2, 3, 4), 0.5, 2 * time.Millisecond},
		{ms(1, 2, 3, 4), 0.99, 4 * time.Millisecond},
		{ms(hundred...), 0.99, 99 * time.Millisecond},
		{ms(hundred...), 0.9, 90 * time.Millisecond},
		{ms(hundred...), 0, time.Millisecond},
	} {
		if got := percentile(tc.d, tc.q); got != tc.want {
			t.Errorf("percentile(%v, %v) = %v, want %v", tc.d, tc.q, got, tc.want)
		}
	}
}

func TestHollowSlope(t *testing.T) {
	if got := slope([]float64{1, 5, 10}, []float64{102, 110, 120}); math.Abs(got-2) > 1e-9 {
		t.Errorf("slope of y = 2x + 100: %v", got)
	}
	if got := slope([]float64{5, 5}, []float64{1, 2}); !math.IsNaN(got) {
		t.Errorf("slope over one x: %v, want NaN", got)
	}
}

func TestHollowSumMetric(t *testing.T) {
	text := `# HELP apiserver_longrunning_requests [STABLE] Gauge of all active long-running apiserver requests
# TYPE apiserver_longrunning_requests gauge
apiserver_longrunning_requests{component="apiserver",group="",resource="pods",scope="cluster",subresource="",verb="WATCH",version="v1"} 3
apiserver_longrunning_requests{component="apiserver",group="",resource="nodes",scope="cluster",subresource="",verb="WATCH",version="v1"} 4
apiserver_longrunning_requests{component="apiserver",group="",resource="pods",scope="namespace",subresource="exec",verb="CONNECT",version="v1"} 9
apiserver_longrunning_requests_other{verb="WATCH"} 100
etcd_mvcc_put_total 1234
etcd_mvcc_put_total_x 5
`
	if got := sumMetric([]byte(text), "apiserver_longrunning_requests", `verb="WATCH"`); got != 7 {
		t.Errorf("watches: %v, want 7", got)
	}
	if got := sumMetric([]byte(text), "etcd_mvcc_put_total", ""); got != 1234 {
		t.Errorf("puts: %v, want 1234", got)
	}
	if got := sumMetric([]byte(text), "nothing", ""); got != 0 {
		t.Errorf("a metric not there: %v", got)
	}
}

func TestHollowPodsRestarted(t *testing.T) {
	pod := func(name, uid string, phase v1.PodPhase, restarts ...int32) v1.Pod {
		p := v1.Pod{Status: v1.PodStatus{Phase: phase}}
		p.Name, p.UID = name, types.UID(uid)
		for _, r := range restarts {
			p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, v1.ContainerStatus{RestartCount: r})
		}
		return p
	}
	before := []v1.Pod{
		pod("same", "1", v1.PodRunning, 0, 2),
		pod("gone", "2", v1.PodRunning, 0),
		pod("replaced", "3", v1.PodRunning, 0),
		pod("failed", "4", v1.PodRunning, 0),
		pod("restarted", "5", v1.PodRunning, 1, 0),
	}
	after := []v1.Pod{
		pod("same", "1", v1.PodRunning, 0, 2),
		pod("replaced", "33", v1.PodRunning, 0),
		pod("failed", "4", v1.PodFailed, 0),
		pod("restarted", "5", v1.PodRunning, 1, 1),
		pod("new", "6", v1.PodPending),
	}
	got := podsRestarted(before, after)
	want := []string{"gone (gone)", "replaced (new UID)", "failed (Failed)", "restarted (1 restarts)"}
	if !slices.Equal(got, want) {
		t.Errorf("podsRestarted: %q, want %q", got, want)
	}
	if got := podsRestarted(before, before); len(got) != 0 {
		t.Errorf("nothing changed, yet restarted: %q", got)
	}
}

func TestHollowEventWrites(t *testing.T) {
	byKind := map[string]int{
		"create events":                     3,
		"patch events":                      2,
		"create events.events.k8s.io":       4,
		"update events.events.k8s.io":       1,
		"create events (403)":               7,
		"get events":                        5,
		"list events":                       6,
		"create pods/binding":               8,
		"patch pods/status":                 9,
		"update leases.coordination.k8s.io": 10,
	}
	// Writes whether or not they were refused: the agent made them.
	if got := eventWrites(byKind); got != 17 {
		t.Errorf("eventWrites: %d, want 17", got)
	}
}

func TestHollowLargestN(t *testing.T) {
	for _, tc := range []struct {
		nodes   []int
		notHeld map[int]string
		want    int
		wantWhy string
	}{
		{[]int{1, 5, 10}, nil, 10, ""},
		{[]int{10, 1, 5}, map[int]string{10: "start-up p99 6s"}, 5, "N=10: start-up p99 6s"},
		// A smaller N that failed caps it even when a larger one held.
		{[]int{1, 5, 10}, map[int]string{5: "not run or failed"}, 1, "N=5: not run or failed"},
		{[]int{1}, map[int]string{1: "2 Nodes not Ready"}, 0, "N=1: 2 Nodes not Ready"},
	} {
		got, why := hollowLargestN(tc.nodes, func(n int) string { return tc.notHeld[n] })
		if got != tc.want || why != tc.wantWhy {
			t.Errorf("%v %v: %d %q, want %d %q", tc.nodes, tc.notHeld, got, why, tc.want, tc.wantWhy)
		}
	}
	if s := heldString(5, "N=10: x"); s != "N=5 (not at N=10: x)" {
		t.Errorf("heldString: %q", s)
	}
	if s := heldString(0, "N=1: x"); s != "none (not at N=1: x)" {
		t.Errorf("heldString: %q", s)
	}
}
