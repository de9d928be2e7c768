package stats

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/serve/server"
)

// BenchmarkServeSummary100Pods measures /stats/summary as BenchmarkAPI
// (test/e2e) does, without the runtime: the provider over the fake
// runtime (100 pods, 300 containers), wired as the agent wires it (real
// clock, one-second cache, stale answers while refreshing), behind the
// real secure handler on an httptest TLS server, and 20 concurrent
// clients presenting the admin client certificate in this process. It
// reports the latency percentiles (not asserted) and the body size.
func BenchmarkServeSummary100Pods(b *testing.B) {
	for _, target := range []string{"/stats/summary", "/stats/summary?only_cpu_and_memory=true", "/metrics/resource"} {
		for _, keepAlive := range []bool{true, false} {
			name := target + "/keep-alive"
			if !keepAlive {
				// BenchmarkAPI's client: http.Transport's default of two
				// idle connections per host, so most requests of 20
				// clients make a new TLS connection.
				name = target + "/default-transport"
			}
			b.Run(name, func(b *testing.B) { benchServe(b, target, keepAlive) })
		}
	}
}

func benchServe(b *testing.B, target string, keepAlive bool) {
	const clients = 20
	e := newEnv(b)
	hundredPods(b, e)
	p := New(e.rt, e.machine, "node-1", e.rootDir, clock.RealClock{}, discardLogger(), WithServeStale(10*time.Second))
	srvURL, client := serveTLS(b, p, keepAlive)

	get := func() (int, error) {
		resp, err := client.Get(srvURL + target)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		n, err := io.Copy(io.Discard, resp.Body)
		if err == nil && resp.StatusCode != http.StatusOK {
			b.Fatalf("GET %s: %s", target, resp.Status)
		}
		return int(n), err
	}
	// Warm up: the first refresh, the connections.
	size, err := get()
	if err != nil {
		b.Fatal(err)
	}

	var (
		mu    sync.Mutex
		lat   []time.Duration
		next  atomic.Int64
		wg    sync.WaitGroup
		total = int64(b.N)
	)
	b.ResetTimer()
	for range clients {
		wg.Go(func() {
			var own []time.Duration
			for next.Add(1) <= total {
				start := time.Now()
				if _, err := get(); err != nil {
					b.Error(err)
					return
				}
				own = append(own, time.Since(start))
			}
			mu.Lock()
			lat = append(lat, own...)
			mu.Unlock()
		})
	}
	wg.Wait()
	b.StopTimer()
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2])/1e6, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100])/1e6, "p99-ms")
	b.ReportMetric(float64(size), "body-bytes")
}

// serveTLS serves p behind the secure handler over TLS, authorizing the
// local admin by client certificate, and returns its URL and an admin
// client.
func serveTLS(tb testing.TB, p *Provider, keepAlive bool) (string, *http.Client) {
	tb.Helper()
	dir := tb.TempDir()
	clk := clock.RealClock{}
	serving, err := server.LoadOrCreateServingCert(dir, "", "", []string{"127.0.0.1"}, clk)
	if err != nil {
		tb.Fatal(err)
	}
	creds, err := server.EnsureAdminCredentials(dir, clk)
	if err != nil {
		tb.Fatal(err)
	}
	pool, err := server.LoadCertPool(creds.CACert)
	if err != nil {
		tb.Fatal(err)
	}
	resourceReg := p.ResourceGatherer()
	cfg := server.Config{TLS: serving, ClientCA: pool, AuthorizationMode: server.AuthorizationNodeletGroups, NodeName: "node-1"}
	h, err := server.NewSecure(cfg, server.Deps{Stats: p, Metrics: server.Metrics{Resource: resourceReg}, Log: discardLogger()})
	if err != nil {
		tb.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.TLS = cfg.TLSConfig()
	srv.StartTLS()
	tb.Cleanup(srv.Close)
	admin, err := tls.LoadX509KeyPair(creds.ClientCert, creds.ClientKey)
	if err != nil {
		tb.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(serving.Leaf)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{admin}, MinVersion: tls.VersionTLS12}}
	if keepAlive {
		tr.MaxIdleConnsPerHost = 64
	}
	client := &http.Client{Transport: tr}
	tb.Cleanup(client.CloseIdleConnections)
	return srv.URL, client
}
