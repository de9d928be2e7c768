package e2e

// The arithmetic of BenchmarkHollow (hollow_bench_test.go), without the e2e
// build tag so that make unit tests it.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
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

// hollowResult is what one arm measured at one N. BenchmarkHollow keeps
// it in NODELET_BENCH_HOLLOW_RESULTS (a JSON object a line), so that a
// table split over several runs (by N, or by arm) can be printed as one
// (NODELET_BENCH_HOLLOW_REPORT).
type hollowResult struct {
	Arm   string `json:"arm"`
	Nodes int    `json:"nodes"`
	Pods  int    `json:"pods"`

	PodsPerNode  int           `json:"podsPerNode"`
	ChurnPerNode int           `json:"churnPerNode"`
	Rate         float64       `json:"rate"`
	Settle       time.Duration `json:"settle"`

	Join         time.Duration   `json:"join"`
	Startup      []time.Duration `json:"startup"`     // per pod, sorted
	StartReqs    int             `json:"startReqs"`   // the nodes' requests from the first create to all Running
	IdleReqs     int             `json:"idleReqs"`    // the nodes' requests over idle
	IdleByKind   map[string]int  `json:"idleByKind"`  // ... by kind (auditEvent.kind)
	Watches      float64         `json:"watches"`     // the API server's watches open at the end of idle, less before and less the benchmark's
	OpenWatches  map[string]int  `json:"openWatches"` // the nodes' watches open at the end of idle (audit), by kind
	LeaseP99     time.Duration   `json:"leaseP99"`    // lease updates' latency over idle
	LeaseUpdates int             `json:"leaseUpdates"`
	EtcdWrites   float64         `json:"etcdWrites"`   // over idle
	APIServerCPU float64         `json:"apiserverCPU"` // seconds over idle
	APIServerRSS int64           `json:"apiserverRSS"` // KiB, end of idle
	AgentCPU     float64         `json:"agentCPU"`     // seconds over idle, all agents
	AgentRSS     int64           `json:"agentRSS"`     // KiB, all agents, end of idle
	RuntimeCPU   float64         `json:"runtimeCPU"`   // the fake runtime process (nodelet arm)
	RuntimeRSS   float64         `json:"runtimeRSS"`   // the fake runtime process (nodelet arm)
	Idle         time.Duration   `json:"idle"`
	NotReady     []string        `json:"notReady"`    // nodes seen not Ready during idle
	StartEvents  int             `json:"startEvents"` // the nodes' event writes from the first create to all Running

	Churned      int             `json:"churned"`      // pods deleted and as many created
	ChurnStartup []time.Duration `json:"churnStartup"` // the new pods', sorted
	ChurnReqs    int             `json:"churnReqs"`    // the nodes' requests from the first delete until all done

	Restarted     bool          `json:"restarted"`     // the API server was restarted
	Outage        time.Duration `json:"outage"`        // stop-apiserver issued to /readyz answering again
	StopTook      time.Duration `json:"stopTook"`      // stop-apiserver issued to the process gone
	Recovery      time.Duration `json:"recovery"`      // /readyz answering to every Node Ready with its Lease renewed
	RecoveryReqs  int           `json:"recoveryReqs"`  // the nodes' requests from the stop to a minute after the return
	PodsRestarted []string      `json:"podsRestarted"` // pods gone, replaced, not Running or restarted across it

	Load string    `json:"load"` // the load average when the arm ended
	At   time.Time `json:"at"`   // when the arm ended
}

// appendHollowResult appends r to the results file at path (made 0600 if
// new), one JSON line written at once.
func appendHollowResult(path string, r *hollowResult) error {
	line, err := json.Marshal(r)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(append(line, '\n')); err != nil {
		f.Close()
		return fmt.Errorf("results %s: %w", path, err)
	}
	return f.Close()
}

// readHollowResults reads results files (at most 16 MiB each); of an arm
// and N found more than once, the last one read counts.
func readHollowResults(paths []string) ([]*hollowResult, error) {
	byKey := map[string]int{}
	var out []*hollowResult
	for _, path := range paths {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		limited := &io.LimitedReader{R: f, N: 16<<20 + 1}
		sc := bufio.NewScanner(limited)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for line := 1; sc.Scan(); line++ {
			rec := &hollowResult{}
			if err := json.Unmarshal(sc.Bytes(), rec); err != nil {
				f.Close()
				return nil, fmt.Errorf("%s:%d: %w", path, line, err)
			}
			if rec.Arm != "nodelet" && rec.Arm != "kubelet" || rec.Nodes < 1 {
				f.Close()
				return nil, fmt.Errorf("%s:%d: arm %q, %d nodes: not a result of BenchmarkHollow", path, line, rec.Arm, rec.Nodes)
			}
			key := fmt.Sprintf("%s/%d", rec.Arm, rec.Nodes)
			if i, ok := byKey[key]; ok {
				out[i] = rec
				continue
			}
			byKey[key] = len(out)
			out = append(out, rec)
		}
		err = sc.Err()
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if limited.N <= 0 {
			return nil, fmt.Errorf("%s: larger than 16 MiB", path)
		}
	}
	return out, nil
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

func TestHollowResultsRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "results.jsonl")
	a := &hollowResult{Arm: "nodelet", Nodes: 5, Pods: 150, PodsPerNode: 30, ChurnPerNode: 10, Rate: 5, Settle: time.Minute,
		Join: 3 * time.Second, Startup: []time.Duration{time.Second, 2 * time.Second}, StartReqs: 600, StartEvents: 300,
		IdleReqs: 40, IdleByKind: map[string]int{"update leases.coordination.k8s.io": 40}, Watches: 12, OpenWatches: map[string]int{"watch pods": 5}, LeaseP99: 5 * time.Millisecond,
		LeaseUpdates: 40, EtcdWrites: 99, APIServerCPU: 1.5, APIServerRSS: 300000, AgentCPU: 0.5, AgentRSS: 200000,
		RuntimeCPU: 0.1, RuntimeRSS: 1000, Idle: time.Minute, NotReady: []string{"hollow-nodelet-3"},
		Churned: 50, ChurnStartup: []time.Duration{time.Second}, ChurnReqs: 400, Restarted: true, Outage: 8 * time.Second, StopTook: 5 * time.Second,
		Recovery: 2 * time.Second, RecoveryReqs: 77, PodsRestarted: []string{"pod-1 (gone)"}, Load: "1.00 0.50 0.25", At: time.Unix(1e9, 0).UTC()}
	k1 := &hollowResult{Arm: "kubelet", Nodes: 5, Pods: 150, StartReqs: 1}
	k2 := &hollowResult{Arm: "kubelet", Nodes: 5, Pods: 150, StartReqs: 2}
	for _, r := range []*hollowResult{a, k1, k2} {
		if err := appendHollowResult(path, r); err != nil {
			t.Fatal(err)
		}
	}
	got, err := readHollowResults([]string{path})
	if err != nil {
		t.Fatal(err)
	}
	// The kubelet arm at N=5 twice: the later one counts.
	if len(got) != 2 || !reflect.DeepEqual(got[0], a) || !reflect.DeepEqual(got[1], k2) {
		t.Errorf("read back:\n%+v\n%+v\nwant\n%+v\n%+v", got[0], got[1], a, k2)
	}
	if err := os.WriteFile(path, []byte(`{"arm":"other","nodes":1}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := readHollowResults([]string{path}); err == nil {
		t.Error("a record of neither arm was read")
	}
}
