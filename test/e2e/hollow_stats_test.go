package e2e

// The arithmetic of BenchmarkHollow (hollow_bench_test.go), without the e2e
// build tag so that make unit tests it.

import (
	"bufio"
	"bytes"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"
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
