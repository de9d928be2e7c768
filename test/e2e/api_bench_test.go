//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"
)

// BenchmarkAPI runs 100 pods and measures /pods and /stats/summary under
// 20 concurrent clients for 10 s each: latency p50/p99 and requests per
// second (targets: /stats/summary p99 under 20 ms at 100 pods), over
// kept-alive connections.
func BenchmarkAPI(b *testing.B) {
	const pods, clients = 100, 20
	window := 10 * time.Second
	removeAllPods(shared.rt)
	dir := filepath.Join(shared.work, "api-bench")
	os.MkdirAll(dir, 0o755)
	port := freePort(b)
	root := filepath.Join(shared.work, "api-bench-root")
	startNodelet(b, "--container-runtime-endpoint", shared.endpoint, "--root-dir", root,
		"--pod-manifest-path", dir, "--hostname-override", "e2e", "--pod-logs-dir", filepath.Join(shared.work, "api-bench-logs"),
		"--max-pods", "150", "--healthz-port", "0", "--port", port, "--address", "127.0.0.1")
	for i := 0; i < pods; i++ {
		name := fmt.Sprintf("api%03d", i)
		if err := os.WriteFile(filepath.Join(dir, name+".yaml"), []byte(fmt.Sprintf(sleeperPod, name)), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	ctx := context.Background()
	waitRunning(b, ctx, "api", pods)
	time.Sleep(5 * time.Second)
	admin := adminClientTB(b, root)
	// Each client keeps its connection, as a scraper does; with Go's
	// default of 2 idle connections per host most requests would measure
	// a new TLS handshake instead of the endpoint.
	admin.Transport.(*http.Transport).MaxIdleConnsPerHost = clients
	server := "https://127.0.0.1:" + port
	fmt.Printf("\nAPI with %d pods, %d concurrent clients, %v per endpoint:\n", pods, clients, window)
	for _, path := range []string{"/pods", "/stats/summary"} {
		var mu sync.Mutex
		var lat []time.Duration
		var wg sync.WaitGroup
		deadline := time.Now().Add(window)
		for c := 0; c < clients; c++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var own []time.Duration
				for time.Now().Before(deadline) {
					start := time.Now()
					resp, err := admin.Get(server + path)
					if err != nil {
						b.Error(err)
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					own = append(own, time.Since(start))
				}
				mu.Lock()
				lat = append(lat, own...)
				mu.Unlock()
			}()
		}
		wg.Wait()
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		if len(lat) == 0 {
			b.Fatalf("%s: no requests", path)
		}
		p50, p99 := lat[len(lat)/2], lat[len(lat)*99/100]
		fmt.Printf("  %-15s %6.0f req/s, p50 %v, p99 %v\n", path, float64(len(lat))/window.Seconds(),
			p50.Round(10*time.Microsecond), p99.Round(10*time.Microsecond))
	}
	for i := 0; i < pods; i++ {
		os.Remove(filepath.Join(dir, fmt.Sprintf("api%03d.yaml", i)))
	}
	waitRunning(b, ctx, "api", 0)
	removeAllPods(shared.rt)
}
