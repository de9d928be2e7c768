package prober

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodelet/nodelet/internal/base/httpget"
	"github.com/nodelet/nodelet/internal/base/testutil"
	"github.com/nodelet/nodelet/internal/pipeline/cri"
)

// seen keeps the last request a test server got.
type seen struct {
	mu  sync.Mutex
	req *http.Request
}

func (s *seen) set(r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.req = r.Clone(context.Background())
}

func (s *seen) get() *http.Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.req
}

func testServer(t *testing.T, tls bool) (srv *httptest.Server, port int, last *seen) {
	t.Helper()
	last = &seen{}
	mux := http.NewServeMux()
	mux.HandleFunc("/ok", func(w http.ResponseWriter, r *http.Request) {
		last.set(r)
		_, _ = w.Write([]byte("fine"))
	})
	mux.HandleFunc("/nocontent", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	mux.HandleFunc("/fail", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "secret details", http.StatusInternalServerError)
	})
	mux.HandleFunc("/redirect", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/ok", http.StatusFound)
	})
	mux.HandleFunc("/loop", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/loop", http.StatusFound)
	})
	mux.HandleFunc("/away", func(w http.ResponseWriter, r *http.Request) {
		// Same server, other host name: not followed.
		w.Header().Set("Location", "http://localhost:"+strconv.Itoa(port)+"/ok")
		w.WriteHeader(http.StatusMovedPermanently)
		_, _ = w.Write([]byte("moved"))
	})
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(strings.Repeat("x", 3*maxOutput)))
	})
	if tls {
		srv = httptest.NewTLSServer(mux)
	} else {
		srv = httptest.NewServer(mux)
	}
	t.Cleanup(srv.Close)
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	port, err = strconv.Atoi(u.Port())
	if err != nil {
		t.Fatal(err)
	}
	return srv, port, last
}

func probeHTTP(t *testing.T, action v1.HTTPGetAction, c *v1.Container, podIP string) (outcome, string, error) {
	t.Helper()
	if c == nil {
		c = &v1.Container{Name: "c"}
	}
	h := newHTTPHandler(action, c, wait)
	defer h.close()
	return h.probe(t.Context(), target{host: podIP}, wait)
}

func TestHTTPProbe(t *testing.T) {
	_, port, _ := testServer(t, false)
	tests := []struct {
		path    string
		want    outcome
		output  string
		wantErr bool
	}{
		{path: "/ok", want: outcomeSuccess, output: "fine"},
		{path: "/nocontent", want: outcomeSuccess},
		{path: "/fail", want: outcomeFailure, output: "HTTP probe failed with statuscode: 500"},
		{path: "/redirect", want: outcomeSuccess, output: "fine"}, // same host: followed
		{path: "/away", want: outcomeWarning, output: "Probe terminated redirects, Response body: moved"},
		{path: "/big", want: outcomeSuccess, output: strings.Repeat("x", maxOutput)},
		{path: "/missing", want: outcomeFailure, output: "HTTP probe failed with statuscode: 404"},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			got, out, err := probeHTTP(t, v1.HTTPGetAction{Path: tt.path, Port: intstr.FromInt(port)}, nil, "127.0.0.1")
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want || out != tt.output {
				t.Fatalf("probe = %v, %q, want %v, %q", got, out, tt.want, tt.output)
			}
		})
	}

	t.Run("redirect loop", func(t *testing.T) {
		got, out, err := probeHTTP(t, v1.HTTPGetAction{Path: "/loop", Port: intstr.FromInt(port)}, nil, "127.0.0.1")
		if err != nil || got != outcomeFailure || !strings.Contains(out, "stopped after 10 redirects") {
			t.Fatalf("probe = %v, %q, %v", got, out, err)
		}
	})
	t.Run("closed port", func(t *testing.T) {
		got, out, err := probeHTTP(t, v1.HTTPGetAction{Path: "/", Port: intstr.FromInt(closedPort(t))}, nil, "127.0.0.1")
		if err != nil || got != outcomeFailure || !strings.Contains(out, "refused") {
			t.Fatalf("probe = %v, %q, %v", got, out, err)
		}
	})
	t.Run("no pod IP", func(t *testing.T) {
		if _, _, err := probeHTTP(t, v1.HTTPGetAction{Port: intstr.FromInt(port)}, nil, ""); !errors.Is(err, errNoPodIP) {
			t.Fatalf("err = %v, want errNoPodIP", err)
		}
	})
}

func TestHTTPProbeHeaders(t *testing.T) {
	_, port, last := testServer(t, false)
	action := v1.HTTPGetAction{Path: "/ok", Port: intstr.FromInt(port), HTTPHeaders: []v1.HTTPHeader{
		{Name: "Host", Value: "app.example"},
		{Name: "x-custom", Value: "a"},
		{Name: "X-Custom", Value: "b"},
	}}
	if got, _, err := probeHTTP(t, action, nil, "127.0.0.1"); err != nil || got != outcomeSuccess {
		t.Fatalf("probe = %v, %v", got, err)
	}
	r := last.get()
	if r.Host != "app.example" {
		t.Errorf("Host = %q, want app.example", r.Host)
	}
	if got := r.Header.Values("X-Custom"); !reflect.DeepEqual(got, []string{"a", "b"}) {
		t.Errorf("X-Custom = %q", got)
	}
	if got := r.Header.Get("User-Agent"); got != userAgent {
		t.Errorf("User-Agent = %q", got)
	}
	if got := r.Header.Get("Accept"); got != "*/*" {
		t.Errorf("Accept = %q", got)
	}
	if got := r.Header.Get("Connection"); got != "close" {
		t.Errorf("Connection = %q, want close (no keep-alive)", got)
	}

	action.HTTPHeaders = []v1.HTTPHeader{{Name: "User-Agent", Value: "mine"}, {Name: "Accept", Value: ""}}
	if _, _, err := probeHTTP(t, action, nil, "127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	r = last.get()
	if got := r.Header.Get("User-Agent"); got != "mine" {
		t.Errorf("User-Agent = %q, want mine", got)
	}
	if _, ok := r.Header["Accept"]; ok {
		t.Errorf("Accept sent though set empty: %q", r.Header["Accept"])
	}
}

func TestHTTPSProbeSelfSigned(t *testing.T) {
	_, port, _ := testServer(t, true)
	for _, scheme := range []v1.URIScheme{v1.URISchemeHTTPS, "https"} {
		got, out, err := probeHTTP(t, v1.HTTPGetAction{Scheme: scheme, Path: "/ok", Port: intstr.FromInt(port)}, nil, "127.0.0.1")
		if err != nil || got != outcomeSuccess || out != "fine" {
			t.Fatalf("%s probe = %v, %q, %v", scheme, got, out, err)
		}
	}
}

func TestHTTPProbeNamedPortAndHost(t *testing.T) {
	_, port, _ := testServer(t, false)
	c := &v1.Container{Name: "c", Ports: []v1.ContainerPort{{Name: "http", ContainerPort: int32(port)}}}
	got, _, err := probeHTTP(t, v1.HTTPGetAction{Path: "/ok", Port: intstr.FromString("http")}, c, "")
	if !errors.Is(err, errNoPodIP) {
		t.Fatalf("no host and no pod IP: %v, %v", got, err)
	}
	// The action's host wins over the pod IP.
	got, _, err = probeHTTP(t, v1.HTTPGetAction{Host: "127.0.0.1", Path: "/ok", Port: intstr.FromString("http")}, c, "192.0.2.1")
	if err != nil || got != outcomeSuccess {
		t.Fatalf("named port probe = %v, %v", got, err)
	}
	if _, _, err := probeHTTP(t, v1.HTTPGetAction{Path: "/ok", Port: intstr.FromString("grpc")}, c, "127.0.0.1"); err == nil {
		t.Fatal("unknown port name: no error")
	}
}

func TestResolvePort(t *testing.T) {
	c := &v1.Container{Name: "c", Ports: []v1.ContainerPort{{Name: "web", ContainerPort: 8080}}}
	tests := []struct {
		port intstr.IntOrString
		want int
		err  bool
	}{
		{port: intstr.FromInt(80), want: 80},
		{port: intstr.FromString("web"), want: 8080},
		{port: intstr.FromString("9090"), want: 9090}, // a number stored as a string
		{port: intstr.FromString("nope"), err: true},
		{port: intstr.FromInt(0), err: true},
		{port: intstr.FromInt(70000), err: true},
	}
	for _, tt := range tests {
		got, err := httpget.ResolvePort(tt.port, c)
		if (err != nil) != tt.err || got != tt.want {
			t.Errorf("resolvePort(%v) = %d, %v", tt.port.String(), got, err)
		}
	}
}

// closedPort returns a local port nothing listens on.
func closedPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return port
}

func TestTCPProbe(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	port := ln.Addr().(*net.TCPAddr).Port
	c := &v1.Container{Name: "c", Ports: []v1.ContainerPort{{Name: "db", ContainerPort: int32(port)}}}

	probe := func(action v1.TCPSocketAction, podIP string) (outcome, string, error) {
		return tcpHandler{action: action, container: c}.probe(t.Context(), target{host: podIP}, wait)
	}
	if got, out, err := probe(v1.TCPSocketAction{Port: intstr.FromInt(port)}, "127.0.0.1"); err != nil || got != outcomeSuccess {
		t.Fatalf("open port: %v, %q, %v", got, out, err)
	}
	if got, out, err := probe(v1.TCPSocketAction{Port: intstr.FromString("db"), Host: "127.0.0.1"}, ""); err != nil || got != outcomeSuccess {
		t.Fatalf("named port, explicit host: %v, %q, %v", got, out, err)
	}
	if got, out, err := probe(v1.TCPSocketAction{Port: intstr.FromInt(closedPort(t))}, "127.0.0.1"); err != nil || got != outcomeFailure || !strings.Contains(out, "refused") {
		t.Fatalf("closed port: %v, %q, %v", got, out, err)
	}
	if _, _, err := probe(v1.TCPSocketAction{Port: intstr.FromString("nope")}, "127.0.0.1"); err == nil {
		t.Fatal("unknown port name: no error")
	}
	if _, _, err := probe(v1.TCPSocketAction{Port: intstr.FromInt(port)}, ""); !errors.Is(err, errNoPodIP) {
		t.Fatalf("no pod IP: %v", err)
	}
}

// execFunc is an ExecRunner answering at once.
type execFunc func(id string, cmd []string, timeout time.Duration) ([]byte, []byte, int32, error)

func (f execFunc) ExecSync(_ context.Context, id string, cmd []string, timeout time.Duration) ([]byte, []byte, int32, error) {
	return f(id, cmd, timeout)
}

func TestExecProbe(t *testing.T) {
	tests := []struct {
		name    string
		stdout  string
		stderr  string
		code    int32
		err     error
		want    outcome
		output  string
		wantErr bool
	}{
		{name: "exit 0", stdout: "ok\n", stderr: "warn\n", want: outcomeSuccess, output: "ok\nwarn\n"},
		{name: "exit 1", stdout: "bad", code: 1, want: outcomeFailure, output: "bad"},
		{name: "cri timeout", err: fmt.Errorf("exec in container x: %w: took too long", cri.ErrDeadlineExceeded),
			want: outcomeFailure, output: `command "cat /tmp/healthy" timed out`},
		{name: "ctx timeout", err: context.DeadlineExceeded, want: outcomeFailure, output: `command "cat /tmp/healthy" timed out`},
		{name: "other error", err: cri.ErrNotFound, wantErr: true},
		{name: "long output", stdout: strings.Repeat("y", 2*maxOutput), want: outcomeSuccess, output: strings.Repeat("y", maxOutput)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var gotID string
			var gotTimeout time.Duration
			h := execHandler{cmd: []string{"cat", "/tmp/healthy"}, exec: execFunc(func(id string, _ []string, timeout time.Duration) ([]byte, []byte, int32, error) {
				gotID, gotTimeout = id, timeout
				return []byte(tt.stdout), []byte(tt.stderr), tt.code, tt.err
			})}
			got, out, err := h.probe(t.Context(), target{containerID: "cid"}, 3*time.Second)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v", err)
			}
			if !tt.wantErr && (got != tt.want || out != tt.output) {
				t.Fatalf("probe = %v, %q, want %v, %q", got, out, tt.want, tt.output)
			}
			if gotID != "cid" || gotTimeout != 3*time.Second {
				t.Fatalf("ExecSync(%q, timeout %v)", gotID, gotTimeout)
			}
		})
	}
	if _, _, err := (execHandler{cmd: []string{"true"}}).probe(t.Context(), target{}, time.Second); err == nil {
		t.Fatal("no exec runner: no error")
	}
}

func TestExpandCommand(t *testing.T) {
	env := []v1.EnvVar{
		{Name: "PORT", Value: "8080"},
		{Name: "SECRET", ValueFrom: &v1.EnvVarSource{}},
	}
	got := expandCommand([]string{"check", "$(PORT)", "x$(PORT)y", "$$(PORT)", "$(UNKNOWN)", "$(SECRET)", "$", "a$b", "$(PORT"}, env)
	want := []string{"check", "8080", "x8080y", "$(PORT)", "$(UNKNOWN)", "", "$", "a$b", "$(PORT"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("expandCommand = %q\nwant            %q", got, want)
	}
}

type fakeChecker struct {
	serving bool
	err     error

	addr, service string
	timeout       time.Duration
}

func (f *fakeChecker) Check(_ context.Context, addr, service string, timeout time.Duration) (bool, error) {
	f.addr, f.service, f.timeout = addr, service, timeout
	return f.serving, f.err
}

func TestGRPCProbe(t *testing.T) {
	f := &fakeChecker{serving: true}
	h := grpcHandler{check: f, port: 9000, service: "health"}
	got, _, err := h.probe(t.Context(), target{host: "10.0.0.7"}, 2*time.Second)
	if err != nil || got != outcomeSuccess {
		t.Fatalf("serving: %v, %v", got, err)
	}
	if f.addr != "10.0.0.7:9000" || f.service != "health" || f.timeout != 2*time.Second {
		t.Fatalf("Check(%q, %q, %v)", f.addr, f.service, f.timeout)
	}
	f.serving = false
	if got, out, err := h.probe(t.Context(), target{host: "10.0.0.7"}, time.Second); err != nil || got != outcomeFailure || out == "" {
		t.Fatalf("not serving: %v, %q, %v", got, out, err)
	}
	f.err = errors.New(`timeout: failed to connect service "10.0.0.7:9000" within 1s`)
	if got, out, err := h.probe(t.Context(), target{host: "10.0.0.7"}, time.Second); err != nil || got != outcomeFailure || out != f.err.Error() {
		t.Fatalf("check error: %v, %q, %v", got, out, err)
	}
	if _, _, err := (grpcHandler{port: 1}).probe(t.Context(), target{host: "10.0.0.7"}, time.Second); err == nil {
		t.Fatal("no checker: no error")
	}
	if _, _, err := h.probe(t.Context(), target{}, time.Second); !errors.Is(err, errNoPodIP) {
		t.Fatalf("no pod IP: %v", err)
	}
}

// A probe through the manager against a real server: the pod IP given to
// SetContainers is the default host.
func TestManagerHTTPProbe(t *testing.T) {
	_, port, last := testServer(t, false)
	h := newHarness(t)
	pod := newPod("a", v1.Container{Name: "c",
		Ports: []v1.ContainerPort{{Name: "web", ContainerPort: int32(port)}},
		ReadinessProbe: &v1.Probe{ProbeHandler: v1.ProbeHandler{
			HTTPGet: &v1.HTTPGetAction{Path: "/ok", Port: intstr.FromString("web")},
		}},
	})
	h.m.AddPod(pod)
	h.run(pod, map[string]string{"c": "id1"})
	if h.update() != "a" {
		t.Fatal("want an update for pod a")
	}
	// The new instance and its first success may be announced as one.
	testutil.Eventually(t, "readiness", func() bool { ready, _ := h.m.Ready("id1"); return ready })
	if r := last.get(); r == nil || r.URL.Path != "/ok" {
		t.Fatalf("server saw %v", r)
	}
}
