package server

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// fakeStreaming knows pod default/web-0 (container app, sandbox sb-1) and
// hands out URLs on base.
type fakeStreaming struct {
	base string
	mu   sync.Mutex
	reqs []any
}

func (f *fakeStreaming) ContainerID(_ context.Context, ns, pod, uid, ctr string) (string, error) {
	if ns != "default" || pod != "web-0" || (uid != "" && uid != "0f1e2d3c") {
		return "", fmt.Errorf("pod %s/%s: %w", ns, pod, ErrNotFound)
	}
	if ctr != "app" {
		return "", fmt.Errorf("container %s: %w", ctr, ErrNotFound)
	}
	return "ctr-1", nil
}

func (f *fakeStreaming) SandboxID(_ context.Context, ns, pod, uid string) (string, error) {
	if ns != "default" || pod != "web-0" {
		return "", fmt.Errorf("pod %s/%s: %w", ns, pod, ErrNotFound)
	}
	return "sb-1", nil
}

func (f *fakeStreaming) record(r any, path string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reqs = append(f.reqs, r)
	return f.base + path, nil
}

func (f *fakeStreaming) Exec(_ context.Context, r *runtimeapi.ExecRequest) (string, error) {
	return f.record(r, "/exec/tok1")
}

func (f *fakeStreaming) Attach(_ context.Context, r *runtimeapi.AttachRequest) (string, error) {
	return f.record(r, "/attach/tok2")
}

func (f *fakeStreaming) PortForward(_ context.Context, r *runtimeapi.PortForwardRequest) (string, error) {
	return f.record(r, "/portforward/tok3")
}

func (f *fakeStreaming) take() []any {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.reqs
	f.reqs = nil
	return r
}

// streamBackend is the runtime's streaming server: it records each
// request and upgrades it, then writes "hello from <path>".
type streamBackend struct {
	srv *httptest.Server
	mu  sync.Mutex
	got []string // "METHOD PATH UPGRADE"
}

func newStreamBackend(t *testing.T) *streamBackend {
	b := &streamBackend{}
	b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.mu.Lock()
		b.got = append(b.got, r.Method+" "+r.URL.Path+" "+r.Header.Get("Upgrade"))
		b.mu.Unlock()
		conn, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		defer conn.Close()
		fmt.Fprintf(rw, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: %s\r\n\r\nhello from %s", r.Header.Get("Upgrade"), r.URL.Path)
		_ = rw.Flush()
	}))
	t.Cleanup(b.srv.Close)
	return b
}

func (b *streamBackend) take() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	g := b.got
	b.got = nil
	return g
}

// upgrade sends an upgrade request over a raw connection and returns the
// status and everything after the response headers.
func upgrade(t *testing.T, srvURL, method, target string) (int, string) {
	t.Helper()
	u, _ := url.Parse(srvURL)
	conn, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\nContent-Length: 0\r\n\r\n", method, target, u.Host)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("%s %s: read response: %v", method, target, err)
	}
	var rest []byte
	if resp.StatusCode == http.StatusSwitchingProtocols {
		rest, _ = io.ReadAll(br)
	} else {
		rest, _ = io.ReadAll(resp.Body)
	}
	return resp.StatusCode, string(rest)
}

func streamingDeps(t *testing.T) (Deps, *fakeStreaming, *streamBackend) {
	b := newStreamBackend(t)
	f := &fakeStreaming{base: b.srv.URL}
	deps, _, _ := testDeps()
	deps.Streaming = f
	return deps, f, b
}

func TestStreamingIsProxiedToTheRuntime(t *testing.T) {
	deps, f, b := streamingDeps(t)
	front := httptest.NewServer(open(t, deps))
	defer front.Close()
	for _, c := range []struct {
		method, target string
		backend        string
		want           any
	}{
		{"POST", "/exec/default/web-0/app?command=ls&command=-l&stdout=1&stderr=true", "/exec/tok1",
			&runtimeapi.ExecRequest{ContainerId: "ctr-1", Cmd: []string{"ls", "-l"}, Stdout: true, Stderr: true}},
		{"GET", "/exec/default/web-0/0f1e2d3c/app?command=sh&input=1&output=1&tty=1", "/exec/tok1",
			&runtimeapi.ExecRequest{ContainerId: "ctr-1", Cmd: []string{"sh"}, Stdin: true, Stdout: true, Tty: true}},
		{"POST", "/attach/default/web-0/app?stdin=1&stdout=1&tty=1", "/attach/tok2",
			&runtimeapi.AttachRequest{ContainerId: "ctr-1", Stdin: true, Stdout: true, Tty: true}},
		{"POST", "/portForward/default/web-0", "/portforward/tok3",
			&runtimeapi.PortForwardRequest{PodSandboxId: "sb-1", Port: []int32{}}},
		{"GET", "/portForward/default/web-0/0f1e2d3c?port=80&port=8080", "/portforward/tok3",
			&runtimeapi.PortForwardRequest{PodSandboxId: "sb-1", Port: []int32{80, 8080}}},
	} {
		code, body := upgrade(t, front.URL, c.method, c.target)
		if code != http.StatusSwitchingProtocols || body != "hello from "+c.backend {
			t.Errorf("%s %s: %d %q, want 101 and the backend's stream", c.method, c.target, code, body)
		}
		if got := b.take(); !slices.Equal(got, []string{c.method + " " + c.backend + " SPDY/3.1"}) {
			t.Errorf("%s %s: backend got %q", c.method, c.target, got)
		}
		reqs := f.take()
		if len(reqs) != 1 || fmt.Sprint(reqs[0]) != fmt.Sprint(c.want) {
			t.Errorf("%s %s: runtime asked %v, want %v", c.method, c.target, reqs, c.want)
		}
	}
}

func TestStreamingRequiresUpgrade(t *testing.T) {
	deps, _, b := streamingDeps(t)
	s := open(t, deps)
	if code, body := do(t, s, "POST", "/exec/default/web-0/app?command=ls&stdout=1", nil); code != http.StatusBadRequest || !strings.Contains(body, "Upgrade request required") {
		t.Errorf("plain exec: %d %q, want 400", code, body)
	}
	if got := b.take(); len(got) != 0 {
		t.Errorf("backend got %q", got)
	}
}

func TestStreamingOptionsAndLookupErrors(t *testing.T) {
	deps, f, b := streamingDeps(t)
	s := open(t, deps)
	for target, want := range map[string]int{
		"/exec/default/web-0/app?stdout=1":                           400, // no command
		"/exec/default/web-0/app?command=ls":                         400, // no stream
		"/exec/default/web-0/app?command=ls&stdout=0":                400,
		"/exec/default/web-0/app?command=ls&stdout=yes":              400,
		"/exec/default/web-0/app?command=sh&tty=1&stdout=1&stderr=1": 400,
		"/attach/default/web-0/app?command=ls&stdout=1":              400,
		"/attach/default/web-0/app?tty=true":                         400,
		"/portForward/default/web-0?port=0":                          400,
		"/portForward/default/web-0?port=65536":                      400,
		"/portForward/default/web-0?ports=80,x":                      400,
		"/exec/default/Web_0/app?command=ls&stdout=1":                400,
		"/exec/default/web-1/app?command=ls&stdout=1":                404,
		"/exec/default/web-0/0f1e2d3c-dead/app?command=ls&stdout=1":  404,
		"/exec/default/web-0/db?command=ls&stdout=1":                 404,
		"/attach/other/web-0/app?stdout=1":                           404,
		"/portForward/default/web-1":                                 404,
		"/run/default/web-0/app?cmd=ls":                              501,
	} {
		if code, body := do(t, s, "POST", target, nil); code != want {
			t.Errorf("POST %s: %d %q, want %d", target, code, body, want)
		}
	}
	if reqs := f.take(); len(reqs) != 0 {
		t.Errorf("runtime asked %v", reqs)
	}
	if got := b.take(); len(got) != 0 {
		t.Errorf("backend got %q", got)
	}
}

func TestParsePortsForms(t *testing.T) {
	got, err := parsePorts(url.Values{"port": {"80"}, "ports": {"443, 8080"}})
	if err != nil || !slices.Equal(got, []int32{80, 443, 8080}) {
		t.Errorf("parsePorts: %v, %v", got, err)
	}
}

func TestStreamingStillAuthorized(t *testing.T) {
	rec := &sarRecorder{allow: func(s authorizationv1.SubjectAccessReviewSpec) bool {
		return s.ResourceAttributes.Subresource == "proxy" && s.ResourceAttributes.Verb == "get"
	}}
	deps, f, b := streamingDeps(t)
	s := newTestServer(t, Config{AnonymousAuth: true, AuthorizationMode: AuthorizationWebhook, SAR: rec.clientset(), NodeName: "node-a"}, deps)
	front := httptest.NewServer(s)
	defer front.Close()
	if code, body := upgrade(t, front.URL, "GET", "/exec/default/web-0/app?command=ls&stdout=1"); code != http.StatusForbidden {
		t.Errorf("exec with only proxy get: %d %q, want 403", code, body)
	}
	if specs := rec.take(); len(specs) != 1 || specs[0].ResourceAttributes.Verb != "create" || specs[0].ResourceAttributes.Subresource != "proxy" {
		t.Errorf("SARs: %+v", specs)
	}
	if len(f.take()) != 0 || len(b.take()) != 0 {
		t.Error("a forbidden exec reached the runtime")
	}

	// No credentials at all: 401 before anything else.
	s401 := newTestServer(t, Config{AuthorizationMode: AuthorizationAlwaysAllow, NodeName: "node-a"}, deps)
	if code, _ := do(t, s401, "POST", "/exec/default/web-0/app?command=ls&stdout=1", nil); code != http.StatusUnauthorized {
		t.Errorf("anonymous exec: %d, want 401", code)
	}
}
