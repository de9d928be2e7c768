//go:build e2e

package e2e

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/serve/stats"
)

// /metrics/cadvisor on the read-only port has the container metrics the
// upstream ContainerMetrics conformance test asks of the kubelet's
// cAdvisor, with values in its bounds, for a pod like the test's (busybox,
// 80M memory limit, some direct I/O) and its sandbox's network counters;
// then the cost of a scrape with 30 containers and sandboxes.
func TestCadvisorMetrics(t *testing.T) {
	ro := freePort(t)
	_, dir, _ := lifecycleNodelet(t, "cadvisor", "--read-only-port", ro)
	writeManifest(t, dir, "cadv.yaml", `apiVersion: v1
kind: Pod
metadata: {name: cadv}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: busy
    image: busybox:1.35
    resources: {limits: {memory: 80M}}
    command: ["sh", "-c", "dd if=/dev/zero of=/f oflag=direct bs=4096 count=2 2>/dev/null; dd if=/f of=/dev/null iflag=direct bs=4096 count=2 2>/dev/null; while true; do sleep 1; done"]
`)
	const fillers = 14
	for i := range fillers {
		writeManifest(t, dir, fmt.Sprintf("filler%d.yaml", i), fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: filler%d}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: busybox:1.35
    command: ["sh", "-c", "while true; do sleep 1; done"]
`, i))
	}

	scrape := func() (string, error) {
		resp, err := http.Get("http://127.0.0.1:" + ro + "/metrics/cadvisor")
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return "", fmt.Errorf("status %d: %.300s", resp.StatusCode, body)
		}
		return string(body), err
	}
	busy := map[string]string{"namespace": "default", "pod": "cadv-e2e", "container": "busy"}
	pod := map[string]string{"namespace": "default", "pod": "cadv-e2e", "container": "POD"}
	const mb = 1 << 20
	now := float64(time.Now().Unix())
	// The upstream test's bounds (container_metrics_test.go).
	bounds := map[string][2]float64{
		"container_blkio_device_usage_total":            {0, 10000000},
		"container_cpu_system_seconds_total":            {0, 100},
		"container_cpu_usage_seconds_total":             {0, 100},
		"container_cpu_user_seconds_total":              {0, 100},
		"container_file_descriptors":                    {0, 100},
		"container_fs_reads_bytes_total":                {0, 10000000},
		"container_fs_reads_total":                      {0, 100},
		"container_fs_usage_bytes":                      {0, 1000000},
		"container_fs_writes_bytes_total":               {0, 1000000},
		"container_fs_writes_total":                     {0, 200},
		"container_last_seen":                           {now - 60, now + 600},
		"container_memory_cache":                        {0, 10 * mb},
		"container_memory_events_high_total":            {0, 100},
		"container_memory_events_max_total":             {0, 100},
		"container_memory_failcnt":                      {0, 0},
		"container_memory_failures_total":               {0, 1000000},
		"container_memory_mapped_file":                  {0, 10000000},
		"container_memory_max_usage_bytes":              {0, 80 * mb},
		"container_memory_rss":                          {10 << 10, 80 * mb},
		"container_memory_swap":                         {0, 0},
		"container_memory_usage_bytes":                  {10 << 10, 80 * mb},
		"container_memory_working_set_bytes":            {10 << 10, 80 * mb},
		"container_oom_events_total":                    {0, 0},
		"container_processes":                           {1, 10},
		"container_sockets":                             {0, 10},
		"container_spec_cpu_period":                     {100000, 100000},
		"container_spec_cpu_shares":                     {2, 2},
		"container_spec_memory_limit_bytes":             {79953920, 79998976},
		"container_spec_memory_reservation_limit_bytes": {0, 0},
		"container_spec_memory_swap_limit_bytes":        {0, 80 * mb},
		"container_start_time_seconds":                  {now - 600, now + 600},
		"container_threads":                             {1, 10},
		"container_threads_max":                         {0, 100000},
		"container_ulimits_soft":                        {1, 1073741816},
	}
	var text string
	eventually(t, 120*time.Second, "/metrics/cadvisor has cadv-e2e's container and the 14 fillers", func() (err error) {
		if text, err = scrape(); err != nil {
			return err
		}
		if _, err := sumSeries(text, "container_memory_rss", busy); err != nil {
			return err
		}
		if n := strings.Count(text, "\ncontainer_threads{"); n < 2*(fillers+1) {
			return fmt.Errorf("%d series of container_threads, want %d (containers and sandboxes)", n, 2*(fillers+1))
		}
		// The direct I/O has been done and the usage measured.
		if v, err := sumSeries(text, "container_fs_usage_bytes", busy); err != nil || v == 0 {
			return fmt.Errorf("writable layer usage %v: %v", v, err)
		}
		return nil
	})
	// Each series of the metric is checked, as upstream does.
	for name, b := range bounds {
		found := 0
		for _, line := range strings.Split(text, "\n") {
			if !strings.HasPrefix(line, name+"{") || !hasLabels(line, busy) {
				continue
			}
			found++
			v, err := sumSeries(line, name, nil)
			if err != nil || v < b[0] || v > b[1] {
				t.Errorf("%s = %v (%v), want within %v", line, v, err, b)
			}
		}
		if found == 0 {
			t.Errorf("no series %s for the busybox container", name)
		}
	}
	for _, name := range []string{"container_network_receive_bytes_total", "container_network_transmit_bytes_total",
		"container_network_receive_packets_total", "container_network_transmit_packets_total",
		"container_network_receive_errors_total", "container_network_receive_packets_dropped_total",
		"container_network_transmit_errors_total", "container_network_transmit_packets_dropped_total"} {
		if _, err := sumSeries(text, name, map[string]string{"namespace": "default", "pod": "cadv-e2e", "container": "POD", "interface": "eth0"}); err != nil {
			t.Errorf("sandbox network: %v", err)
		}
	}
	if _, err := sumSeries(text, "container_cpu_usage_seconds_total", pod); err != nil {
		t.Errorf("sandbox CPU: %v", err)
	}
	if t.Failed() {
		t.Logf("/metrics/cadvisor:\n%s", text)
	}

	// The cost of a scrape: the collector run in this process against the
	// same runtime and host, CPU time (user+sys) over many scrapes.
	m := stats.NewContainerMetrics(shared.rt, stats.NewHostMachine(), clock.RealClock{}, slog.New(slog.DiscardHandler))
	if _, err := m.Gather(); err != nil {
		t.Fatal(err)
	}
	const scrapes = 50
	cpu := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			t.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	fams, _ := m.Gather()
	samples := 0
	for _, f := range fams {
		samples += len(f.GetMetric())
	}
	before, start := cpu(), time.Now()
	for range scrapes {
		if _, err := m.Gather(); err != nil {
			t.Fatal(err)
		}
	}
	used, wall := cpu()-before, time.Since(start)
	t.Logf("scrape of %d containers and sandboxes (%d samples): %v CPU, %v wall per scrape (in-process collector, %d scrapes)",
		2*(fillers+1), samples, used/scrapes, wall/scrapes, scrapes)
}

// hasLabels reports whether a series line carries all of labels.
func hasLabels(line string, labels map[string]string) bool {
	for k, v := range labels {
		if !strings.Contains(line, k+`="`+v+`"`) {
			return false
		}
	}
	return true
}
