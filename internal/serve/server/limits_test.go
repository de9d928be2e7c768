package server

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"
)

// testLimits are DefaultLimits with timeouts short enough for a test.
func testLimits() Limits {
	l := DefaultLimits()
	l.ReadHeaderTimeout = 500 * time.Millisecond
	l.IdleTimeout = time.Second
	return l
}

// startServe serves h on 127.0.0.1 within limits until the test ends.
func startServe(t *testing.T, h http.Handler, tlsCfg *tls.Config, limits Limits) string {
	t.Helper()
	addr, _ := startServeLimited(t, h, tlsCfg, limits)
	return addr
}

// startServeLimited is startServe that also returns the server's
// connLimiter, to watch what the server knows of its connections.
func startServeLimited(t *testing.T, h http.Handler, tlsCfg *tls.Config, limits Limits) (string, *connLimiter) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cl := newConnLimiter(ln, limits.MaxConns)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serveLimited(ctx, cl, h, tlsCfg, limits, slog.New(slog.DiscardHandler)) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return ln.Addr().String(), cl
}

// keepAlive sends one GET /healthz on c, reads the answer and leaves the
// connection open.
func keepAlive(c net.Conn, br *bufio.Reader) error {
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: node\r\n\r\n"); err != nil {
		return err
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

// closedByServer waits up to within for the server to close c: a read
// that ends in EOF or a reset, not in the client's own deadline.
func closedByServer(c net.Conn, within time.Duration) error {
	_ = c.SetReadDeadline(time.Now().Add(within))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("still open after %v", within)
	}
	return nil
}

func TestIdleConnectionClosed(t *testing.T) {
	addr := startServe(t, HealthzHandler(nil), nil, testLimits())
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := keepAlive(c, bufio.NewReader(c)); err != nil {
		t.Fatal(err)
	}
	if err := closedByServer(c, 10*time.Second); err != nil {
		t.Errorf("idle keep-alive connection: %v", err)
	}
}

func TestSlowHeadersClosed(t *testing.T) {
	addr := startServe(t, HealthzHandler(nil), nil, testLimits())
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for _, b := range []byte("GET /healthz HTTP/1.1\r\nHost: node\r\nX-Slow: " + strings.Repeat("a", 1000)) {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			if _, err := c.Write([]byte{b}); err != nil {
				return
			}
		}
	}()
	if err := closedByServer(c, 5*time.Second); err != nil {
		t.Errorf("headers sent a byte at a time: %v", err)
	}
}

// TestMaxConnsDropsIdleFirst fills the server with idle TLS connections
// (whose state the server reports on the *tls.Conn) and checks that the
// next client is served, the oldest idle one dropped.
func TestMaxConnsDropsIdleFirst(t *testing.T) {
	cert, err := LoadOrCreateServingCert(t.TempDir(), "", "", []string{"127.0.0.1"}, testingclock.NewFakePassiveClock(time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	limits := DefaultLimits()
	limits.MaxConns = 2
	addr, cl := startServeLimited(t, HealthzHandler(nil), Config{TLS: cert}.TLSConfig(), limits)
	// waitIdle waits until the server has marked n connections idle: the
	// client can read a response before the server's goroutine records
	// the connection idle, and a third client arriving in that moment
	// rightly drops the other, idle, connection.
	waitIdle := func(n int) {
		for deadline := time.Now().Add(10 * time.Second); cl.idleConns() < n; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("server marked %d of %d connections idle after 10s", cl.idleConns(), n)
			}
		}
	}
	dial := func() (net.Conn, *bufio.Reader) {
		c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		br := bufio.NewReader(c)
		if err := keepAlive(c, br); err != nil {
			t.Fatal(err)
		}
		return c, br
	}
	first, _ := dial()
	waitIdle(1)
	_, br2 := dial()
	waitIdle(2)
	third, br3 := dial() // served: the first made room
	if err := closedByServer(first, 10*time.Second); err != nil {
		t.Errorf("oldest idle connection: %v", err)
	}
	if err := keepAlive(third, br3); err != nil {
		t.Errorf("newest connection: %v", err)
	}
	_ = br2
}

// TestMaxConnsRefusesWhenNoneIdle: with every slot busy, a new connection
// is closed at once rather than queued.
func TestMaxConnsRefusesWhenNoneIdle(t *testing.T) {
	limits := testLimits()
	limits.ReadHeaderTimeout = time.Minute
	limits.MaxConns = 1
	addr, cl := startServeLimited(t, HealthzHandler(nil), nil, limits)
	busy, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	if _, err := io.WriteString(busy, "GET /healthz HTTP/1.1\r\n"); err != nil { // headers never end
		t.Fatal(err)
	}
	// The server must have accepted busy before the next one arrives.
	for deadline := time.Now().Add(10 * time.Second); cl.openConns() < 1; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("server did not accept the first connection in 10s")
		}
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := closedByServer(c, 10*time.Second); err != nil {
		t.Errorf("connection over MaxConns: %v", err)
	}
}

// TestFollowOutlivesTimeouts: a log follow streams past the server's read
// and write timeouts, which cut any other response.
func TestFollowOutlivesTimeouts(t *testing.T) {
	deps, logs, _ := testDeps()
	const lines = 8
	logs.stream = func(ctx context.Context, w io.Writer) error {
		for i := range lines {
			if _, err := fmt.Fprintf(w, "line %d\n", i); err != nil {
				return err
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
		return nil
	}
	limits := testLimits()
	limits.ReadTimeout, limits.WriteTimeout = 300*time.Millisecond, 300*time.Millisecond
	addr := startServe(t, open(t, deps), nil, limits)
	resp, err := http.Get("http://" + addr + "/containerLogs/default/web-0/app?follow=true")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if got := strings.Count(string(body), "\n"); err != nil || got != lines {
		t.Errorf("follow got %d of %d lines (%v): %q", got, lines, err, body)
	}
}

// TestExecOutlivesTimeouts: an exec stream (a hijacked, proxied
// connection) runs past the server's read and write timeouts.
func TestExecOutlivesTimeouts(t *testing.T) {
	const ticks = 8
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		defer conn.Close()
		fmt.Fprintf(rw, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\r\n")
		for i := range ticks {
			fmt.Fprintf(rw, "tick %d\n", i)
			if rw.Flush() != nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}))
	defer backend.Close()
	deps, _, _ := testDeps()
	deps.Streaming = &fakeStreaming{base: backend.URL}
	limits := testLimits()
	limits.ReadTimeout, limits.WriteTimeout = 300*time.Millisecond, 300*time.Millisecond
	addr := startServe(t, open(t, deps), nil, limits)
	code, body := upgrade(t, "http://"+addr, "POST", "/exec/default/web-0/app?command=sh&stdout=1")
	if got := strings.Count(body, "tick"); code != http.StatusSwitchingProtocols || got != ticks {
		t.Errorf("exec: %d, got %d of %d ticks: %q", code, got, ticks, body)
	}
}

// floodEnv tells the test binary, run again as a child, to be the flood
// client of TestFloodBounded against the address it holds.
const floodEnv = "NODELET_TEST_FLOOD_ADDR"

// Flood sizes: idle keep-alive connections, and slowloris connections
// kept going (each reopened when the server closes it).
const (
	floodIdle      = 1000
	floodSlowloris = 50
)

// TestFloodBounded runs a client in another process (so that
// /proc/self/fd counts the server's descriptors only) that holds 1,000
// idle keep-alive connections and keeps 50 slowloris connections going,
// and checks that the server's descriptors and memory stay bounded, that
// another client is answered meanwhile, and that the idle connections are
// closed once idle longer than IdleTimeout.
func TestFloodBounded(t *testing.T) {
	if addr := os.Getenv(floodEnv); addr != "" {
		floodClient(t, addr)
		return
	}
	if testing.Short() {
		t.Skip("starts a second process holding 1,000 connections")
	}
	limits := testLimits()
	limits.IdleTimeout = 3 * time.Second
	limits.MaxConns = 200
	addr := startServe(t, HealthzHandler(nil), nil, limits)

	baseFDs, baseHeap, baseRSS := measure(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestFloodBounded$", "-test.v")
	cmd.Env = append(os.Environ(), floodEnv+"="+addr)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stdin.Close() // the child stops when its stdin closes
		if err := cmd.Wait(); err != nil {
			t.Errorf("flood client: %v", err)
		}
	}()
	out := bufio.NewScanner(stdout)
	ready := false
	for out.Scan() {
		line := out.Text()
		t.Log("client:", line)
		if line == "ready" {
			ready = true
			break
		}
	}
	if !ready {
		t.Fatal("the flood client stopped before it was ready")
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()

	fds, heap, rss := measure(t)
	t.Logf("flooded: fds %d -> %d, heap %d KiB -> %d KiB, RSS %d KiB -> %d KiB", baseFDs, fds, baseHeap>>10, heap>>10, baseRSS>>10, rss>>10)
	if fds > baseFDs+limits.MaxConns+20 {
		t.Errorf("server holds %d descriptors with the flood, %d before: want at most MaxConns (%d) more", fds, baseFDs, limits.MaxConns)
	}
	if grown := int64(heap) - int64(baseHeap); grown > 32<<20 {
		t.Errorf("heap grew by %d MiB under the flood", grown>>20)
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatalf("a normal client during the flood: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("a normal client during the flood: %d", resp.StatusCode)
	}

	// The slowloris connections go on; the idle ones must go after
	// IdleTimeout, leaving at most the slowloris ones open.
	deadline := time.Now().Add(limits.IdleTimeout + 10*time.Second)
	for {
		fds, _, _ = measure(t)
		if fds <= baseFDs+floodSlowloris+30 {
			t.Logf("after the idle timeout: fds %d", fds)
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("server still holds %d descriptors (%d before the flood) long after the idle timeout", fds, baseFDs)
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// measure returns the process's open descriptors, live heap after a
// collection, and resident set size.
func measure(t *testing.T) (fds int, heap uint64, rss uint64) {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			rss = kb << 10
		}
	}
	return len(ents), ms.HeapAlloc, rss
}

// floodClient is the child side of TestFloodBounded: it opens floodIdle
// keep-alive connections (one request each, then idle), keeps
// floodSlowloris connections sending headers a byte at a time, says
// "ready", and holds everything until its stdin closes.
func floodClient(t *testing.T, addr string) {
	stop := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(stop)
	}()
	for range floodSlowloris {
		go slowloris(addr, stop)
	}
	var conns []net.Conn
	failed := 0
	for range floodIdle {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			failed++
			continue
		}
		conns = append(conns, c)
		if err := keepAlive(c, bufio.NewReader(c)); err != nil {
			failed++
		}
	}
	fmt.Printf("opened %d connections, %d refused or dropped\n", len(conns), failed)
	fmt.Println("ready")
	<-stop
	for _, c := range conns {
		c.Close()
	}
}

// slowloris sends a request's headers a byte every 10 ms, never ending
// them, and starts again whenever the server closes the connection.
func slowloris(addr string, stop <-chan struct{}) {
	for {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			for i := 0; ; i++ {
				b := byte('a')
				if i < 4 {
					b = "GET "[i]
				}
				if _, err := c.Write([]byte{b}); err != nil {
					break
				}
				select {
				case <-stop:
					c.Close()
					return
				case <-time.After(10 * time.Millisecond):
				}
			}
			c.Close()
		}
		select {
		case <-stop:
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
}
