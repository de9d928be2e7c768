package server

import (
	"bufio"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nodelet/nodelet/internal/base/logs"
)

// FuzzContainerLogsRequest sends any request line to /containerLogs
// through the secure server, as a client would: nothing panics, the log
// streamer only ever sees namespace, pod and container names that are not
// empty and hold no "/", ".." or NUL, and what it saw round-trips: asking
// again for the same names and options, encoded canonically, asks for the
// same thing.
func FuzzContainerLogsRequest(f *testing.F) {
	for _, seed := range []string{
		"/containerLogs/default/web-0/app",
		"/containerLogs/default/web-0/app?follow=true&tailLines=10&timestamps=1&previous=false",
		"/containerLogs/default/web-0/app?tail=all&limitBytes=5&sinceSeconds=3",
		"/containerLogs/default/web-0/app?sinceTime=2026-03-01T12:00:00.5%2B02:00",
		"/containerLogs/default/web-0/app?stream=All&tail=-1",
		"/containerLogs/default/web-0/../../../etc/passwd",
		"/containerLogs/default/web-0%2F..%2F..%2Fetc/app",
		"/containerLogs/default/web-0/app%00",
		"/containerLogs/..%2F..%2Fvar/web-0/app",
		"/containerLogs/default/%2E%2E/app",
		"/containerLogs/default//web-0/app",
		"/containerLogs/default/web-0/",
		"/containerLogs/default/web-0..x/app",
		"/containerLogs/default/web.0/app?sinceTime=x",
		"/containerLogs/d/p/c?limitBytes=9223372036854775807",
	} {
		f.Add(seed)
	}
	deps, logs, _ := testDeps()
	s := open(f, deps)
	f.Fuzz(func(t *testing.T, target string) {
		r, err := http.ReadRequest(bufio.NewReader(strings.NewReader("GET " + target + " HTTP/1.1\r\nHost: node-a\r\n\r\n")))
		if err != nil || r.URL.Path == "" || r.RequestURI != target {
			return // not a request line a server would read as target
		}
		first := serveLogs(t, s, logs, r)
		if first == nil {
			return
		}
		for _, part := range []string{first.namespace, first.pod, first.container} {
			if part == "" || strings.Contains(part, "/") || strings.Contains(part, "..") || strings.ContainsRune(part, 0) {
				t.Fatalf("%q reached the log streamer as %q/%q/%q", target, first.namespace, first.pod, first.container)
			}
		}
		again := canonicalLogsTarget(*first)
		r2 := httptest.NewRequest("GET", again, nil)
		second := serveLogs(t, s, logs, r2)
		if second == nil || second.namespace != first.namespace || second.pod != first.pod || second.container != first.container ||
			!sameLogOptions(first.opts, second.opts) {
			t.Fatalf("%q asked for %+v; %q asked for %+v", target, first, again, second)
		}
	})
}

// serveLogs serves r and returns what the log streamer was asked, or nil
// when the request did not reach it (which must then be a 4xx).
func serveLogs(t *testing.T, s http.Handler, logs *fakeLogs, r *http.Request) *logCall {
	t.Helper()
	logs.mu.Lock()
	logs.calls = nil
	logs.mu.Unlock()
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, r)
	calls := logs.recorded()
	switch {
	case len(calls) > 1:
		t.Fatalf("%s: the log streamer was asked %d times", r.RequestURI, len(calls))
	case len(calls) == 0 && (rec.Code < 400 || rec.Code >= 500):
		t.Fatalf("%s: %d without asking the log streamer", r.RequestURI, rec.Code)
	case len(calls) == 0:
		return nil
	}
	return &calls[0]
}

// canonicalLogsTarget encodes a request for c as a client would.
func canonicalLogsTarget(c logCall) string {
	q := url.Values{}
	o := c.opts
	for name, on := range map[string]bool{"follow": o.Follow, "previous": o.Previous, "timestamps": o.Timestamps} {
		if on {
			q.Set(name, "true")
		}
	}
	for name, v := range map[string]*int64{"tailLines": o.TailLines, "limitBytes": o.LimitBytes, "sinceSeconds": o.SinceSeconds} {
		if v != nil {
			q.Set(name, strconv.FormatInt(*v, 10))
		}
	}
	if o.SinceTime != nil {
		q.Set("sinceTime", o.SinceTime.Format(time.RFC3339Nano))
	}
	return "/containerLogs/" + url.PathEscape(c.namespace) + "/" + url.PathEscape(c.pod) + "/" + url.PathEscape(c.container) + "?" + q.Encode()
}

func sameLogOptions(a, b logs.Options) bool {
	sameInt := func(x, y *int64) bool { return (x == nil) == (y == nil) && (x == nil || *x == *y) }
	return a.Follow == b.Follow && a.Previous == b.Previous && a.Timestamps == b.Timestamps &&
		sameInt(a.TailLines, b.TailLines) && sameInt(a.LimitBytes, b.LimitBytes) && sameInt(a.SinceSeconds, b.SinceSeconds) &&
		(a.SinceTime == nil) == (b.SinceTime == nil) && (a.SinceTime == nil || a.SinceTime.Equal(*b.SinceTime))
}
