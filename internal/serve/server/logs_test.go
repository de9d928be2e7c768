package server

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/internal/base/logs"
)

func TestContainerLogsOptions(t *testing.T) {
	since := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, c := range []struct {
		query string
		want  logs.Options
	}{
		{"", logs.Options{}},
		{"follow=true", logs.Options{Follow: true}},
		{"follow", logs.Options{Follow: true}},
		{"follow=false", logs.Options{}},
		{"follow=0", logs.Options{}},
		{"previous=true&timestamps=1", logs.Options{Previous: true, Timestamps: true}},
		{"tailLines=10", logs.Options{TailLines: ptr.To[int64](10)}},
		{"tailLines=0", logs.Options{TailLines: ptr.To[int64](0)}},
		{"tail=5", logs.Options{TailLines: ptr.To[int64](5)}},
		{"tail=all&tailLines=3", logs.Options{}},
		{"limitBytes=100", logs.Options{LimitBytes: ptr.To[int64](100)}},
		{"sinceSeconds=30", logs.Options{SinceSeconds: ptr.To[int64](30)}},
		{"sinceTime=2026-01-02T03:04:05Z", logs.Options{SinceTime: &since}},
		{"stream=All&container=ignored&insecureSkipTLSVerifyBackend=true", logs.Options{}},
	} {
		deps, logs, _ := testDeps()
		s := open(t, deps)
		code, body := do(t, s, "GET", "/containerLogs/default/web-0/app?"+c.query, nil)
		if code != 200 || body != "hello\n" {
			t.Errorf("%q: %d %q", c.query, code, body)
			continue
		}
		calls := logs.recorded()
		if len(calls) != 1 {
			t.Fatalf("%q: %d calls", c.query, len(calls))
		}
		got := calls[0]
		if got.namespace != "default" || got.pod != "web-0" || got.container != "app" {
			t.Errorf("%q: path parts %q %q %q", c.query, got.namespace, got.pod, got.container)
		}
		if !equalLogOptions(got.opts, c.want) {
			t.Errorf("%q: options %s, want %s", c.query, fmtOpts(got.opts), fmtOpts(c.want))
		}
	}
}

func equalLogOptions(a, b logs.Options) bool {
	eq := func(x, y *int64) bool { return (x == nil) == (y == nil) && (x == nil || *x == *y) }
	return a.Follow == b.Follow && a.Previous == b.Previous && a.Timestamps == b.Timestamps &&
		eq(a.TailLines, b.TailLines) && eq(a.LimitBytes, b.LimitBytes) && eq(a.SinceSeconds, b.SinceSeconds) &&
		(a.SinceTime == nil) == (b.SinceTime == nil) && (a.SinceTime == nil || a.SinceTime.Equal(*b.SinceTime))
}

func fmtOpts(o logs.Options) string {
	deref := func(v *int64) any {
		if v == nil {
			return nil
		}
		return *v
	}
	var since any
	if o.SinceTime != nil {
		since = o.SinceTime.UTC()
	}
	return fmt.Sprintf("{follow=%v previous=%v timestamps=%v tailLines=%v limitBytes=%v sinceSeconds=%v sinceTime=%v}",
		o.Follow, o.Previous, o.Timestamps, deref(o.TailLines), deref(o.LimitBytes), deref(o.SinceSeconds), since)
}

func TestContainerLogsBadOptions(t *testing.T) {
	deps, logs, _ := testDeps()
	s := open(t, deps)
	for _, q := range []string{
		"sinceSeconds=10&sinceTime=2026-01-02T03:04:05Z",
		"sinceSeconds=0",
		"sinceSeconds=-5",
		"sinceSeconds=soon",
		"sinceTime=yesterday",
		"tailLines=-1",
		"tailLines=ten",
		"tail=ten",
		"limitBytes=0",
		"limitBytes=99999999999999999999",
		"stream=Stderr",
	} {
		if code, body := do(t, s, "GET", "/containerLogs/default/web-0/app?"+q, nil); code != http.StatusBadRequest {
			t.Errorf("%q: %d %q, want 400", q, code, body)
		}
	}
	if n := len(logs.recorded()); n != 0 {
		t.Errorf("streamer called %d times with bad options", n)
	}
}

func TestContainerLogsTraversal(t *testing.T) {
	deps, logs, _ := testDeps()
	s := open(t, deps)
	for _, target := range []string{
		"/containerLogs/default/web-0/../../../etc/passwd",
		"/containerLogs/default/web-0/..",
		"/containerLogs/default/../web-0/app",
		"/containerLogs/default/web-0/./app",
		"/containerLogs/default//web-0/app",
		"/containerLogs/default/web-0%2F..%2F..%2Fetc/app",
		"/containerLogs/default/web-0/app%2f..%2f..",
		"/containerLogs/..%2F..%2Fvar/web-0/app",
		"/containerLogs/default/%2E%2E/app",
		"/containerLogs/default/web-0/app/extra",
		"/containerLogs/default/Web_0/app",
		"/containerLogs/default/web-0/APP",
		"/containerLogs/default/web-0..x/app",
		"/containerLogs/-bad-/web-0/app",
		"/containerLogs/default/" + strings.Repeat("a", 254) + "/app",
		"/containerLogs/default/web-0",
		"/containerLogs/default/nosuchpod/app",
		"/containerLogs/default/web-0/nosuchcontainer",
	} {
		code, body := do(t, s, "GET", target, nil)
		if code < 400 || code >= 500 {
			t.Errorf("%s: %d %q, want 4xx", target, code, body)
		}
	}
	for _, c := range logs.recorded() {
		for _, part := range []string{c.namespace, c.pod, c.container} {
			if strings.Contains(part, "/") || strings.Contains(part, "..") || part == "" {
				t.Errorf("streamer called with %q/%q/%q", c.namespace, c.pod, c.container)
			}
		}
	}
	// Only the unknown pod and container reached the streamer, as 404.
	if n := len(logs.recorded()); n != 2 {
		t.Errorf("streamer called %d times, want 2 (unknown pod, unknown container)", n)
	}
	if code, _ := do(t, s, "GET", "/containerLogs/default/nosuchpod/app", nil); code != http.StatusNotFound {
		t.Errorf("unknown pod: %d, want 404", code)
	}
}

func TestContainerLogsErrors(t *testing.T) {
	deps, logs, _ := testDeps()
	s := open(t, deps)
	logs.stream = func(context.Context, io.Writer) error { return errors.New("runtime exploded") }
	if code, body := do(t, s, "GET", "/containerLogs/default/web-0/app", nil); code != 500 || !strings.Contains(body, "runtime exploded") {
		t.Errorf("error before data: %d %q", code, body)
	}
	logs.stream = func(context.Context, io.Writer) error {
		return fmt.Errorf("follow: %w: 64 logs are followed already", ErrTooManyRequests)
	}
	if code, body := do(t, s, "GET", "/containerLogs/default/web-0/app?follow=true", nil); code != http.StatusTooManyRequests || !strings.Contains(body, "64 logs are followed already") {
		t.Errorf("too many follows: %d %q, want 429", code, body)
	}
	logs.stream = func(_ context.Context, w io.Writer) error {
		io.WriteString(w, "partial\n")
		return errors.New("cut")
	}
	if code, body := do(t, s, "GET", "/containerLogs/default/web-0/app", nil); code != 200 || body != "partial\n" {
		t.Errorf("error after data: %d %q", code, body)
	}
	logs.stream = func(context.Context, io.Writer) error { return nil }
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest("GET", "/containerLogs/default/web-0/app", nil))
	if rec.Code != 200 || rec.Body.Len() != 0 || !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/plain") {
		t.Errorf("empty log: %d %q %v", rec.Code, rec.Body, rec.Header())
	}
	if code, _ := do(t, open(t, Deps{}), "GET", "/containerLogs/default/web-0/app", nil); code != 404 {
		t.Errorf("no streamer: %d, want 404", code)
	}
}

func TestContainerLogsFollowFlushes(t *testing.T) {
	deps, logs, _ := testDeps()
	readFirst := make(chan struct{})
	logs.stream = func(ctx context.Context, w io.Writer) error {
		io.WriteString(w, "line 1\n")
		// The client must see line 1 before line 2 is written.
		select {
		case <-readFirst:
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Second):
			return errors.New("line 1 never reached the client")
		}
		io.WriteString(w, "line 2\n")
		return nil
	}
	srv := httptest.NewServer(open(t, deps))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/containerLogs/default/web-0/app?follow=true")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	line, err := br.ReadString('\n')
	if err != nil || line != "line 1\n" {
		t.Fatalf("first line: %q %v", line, err)
	}
	close(readFirst)
	rest, _ := io.ReadAll(br)
	if string(rest) != "line 2\n" {
		t.Errorf("rest: %q", rest)
	}
}
