package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	authorizationv1 "k8s.io/api/authorization/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/base/events"
	"github.com/nodelet/nodelet/internal/base/logs"
)

// --- fakes

type fakePods []*v1.Pod

func (f fakePods) Pods() []*v1.Pod                                { return f }
func (f fakePods) RunningPods(context.Context) ([]*v1.Pod, error) { return f, nil }

type fakeStats struct {
	mu   sync.Mutex
	only []bool
}

func (f *fakeStats) SummaryJSON(_ context.Context, only bool) ([]byte, string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.only = append(f.only, only)
	body, err := json.Marshal(&statsv1alpha1.Summary{Node: statsv1alpha1.NodeStats{NodeName: "node-a"}})
	return body, `"v1"`, err
}

type fakeEvents []events.Event

func (f fakeEvents) All() []events.Event { return f }

type logCall struct {
	namespace, pod, container string
	opts                      logs.Options
}

// fakeLogs knows one pod, default/web-0 with container app.
type fakeLogs struct {
	mu    sync.Mutex
	calls []logCall
	// stream, when set, writes the log instead of "hello\n".
	stream func(ctx context.Context, w io.Writer) error
}

func (f *fakeLogs) ContainerLogs(ctx context.Context, namespace, pod, container string, opts logs.Options, w io.Writer) error {
	f.mu.Lock()
	f.calls = append(f.calls, logCall{namespace, pod, container, opts})
	stream := f.stream
	f.mu.Unlock()
	if namespace != "default" || pod != "web-0" {
		return fmt.Errorf("pod %s/%s: %w", namespace, pod, ErrNotFound)
	}
	if container != "app" {
		return fmt.Errorf("container %s: %w", container, ErrNotFound)
	}
	if stream != nil {
		return stream(ctx, w)
	}
	_, err := io.WriteString(w, "hello\n")
	return err
}

func (f *fakeLogs) recorded() []logCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

func testPod() *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-0", Namespace: "default", UID: "0f1e2d3c-aaaa-bbbb-cccc-123456789abc"},
		Spec:       v1.PodSpec{Containers: []v1.Container{{Name: "app", Image: "nginx"}}},
		Status:     v1.PodStatus{Phase: v1.PodRunning, PodIP: "10.1.0.7"},
	}
}

func registry(name string) *prometheus.Registry {
	r := prometheus.NewRegistry()
	r.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: name}))
	return r
}

func testDeps() (Deps, *fakeLogs, *fakeStats) {
	logs, stats := &fakeLogs{}, &fakeStats{}
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	return Deps{
		Pods:        fakePods{testPod()},
		RunningPods: fakePods{testPod()},
		Stats:       stats,
		Logs:        logs,
		Events: fakeEvents{{
			PodUID: "0f1e2d3c-aaaa-bbbb-cccc-123456789abc", Namespace: "default", Pod: "web-0",
			Type: v1.EventTypeNormal, Reason: "Started", Message: "Started container app", Count: 2,
			FirstTime: t0, LastTime: t0.Add(time.Minute),
		}},
		Metrics: Metrics{
			Kubelet:  registry("kubelet_test_total"),
			Probes:   registry("prober_test_total"),
			Resource: registry("resource_test_total"),
			Cadvisor: registry("cadvisor_test_total"),
		},
		Health:  []HealthCheck{{Name: "pleg", Check: func() error { return nil }}},
		Configz: func() *Configz { c := NewConfigz(); c.Port = 10250; return c }(),
	}, logs, stats
}

func newTestServer(t testing.TB, cfg Config, deps Deps) *secureServer {
	t.Helper()
	s, err := newSecureServer(cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// open is an anonymous, always-allowed server for handler tests.
func open(t testing.TB, deps Deps) *secureServer {
	return anonymousAlwaysAllowed(newTestServer(t, Config{AuthorizationMode: AuthorizationAlwaysAllow, NodeName: "node-a"}, deps))
}

// anonymousAlwaysAllowed lets anonymous requests into s, which NewSecure
// refuses with AlwaysAllow: for tests of what is behind authorization.
func anonymousAlwaysAllowed(s *secureServer) *secureServer {
	s.authn.(*requestAuthenticator).anonymous = true
	return s
}

func do(t *testing.T, h http.Handler, method, target string, header http.Header) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(method, target, nil)
	maps.Copy(req.Header, header)
	h.ServeHTTP(rec, req)
	body, _ := io.ReadAll(rec.Result().Body)
	return rec.Code, string(body)
}

// --- the route table

type authzCase struct {
	verb         string
	subresources []string
	// access is who may use the route in NodeletGroups mode: readers
	// (the read group) or admins only.
	access access
}

type access int

const (
	readers access = iota
	admins
)

// routeAuthz is how every registered route must be authorized. A route
// registered without a case here fails TestEveryRouteHasAnAuthorizationCase.
var routeAuthz = map[string]authzCase{
	"GET /healthz":                                     {"get", []string{"healthz", "proxy"}, readers},
	"GET /pods":                                        {"get", []string{"pods", "proxy"}, readers},
	"GET /runningpods/{$}":                             {"get", []string{"pods", "proxy"}, readers},
	"GET /stats/summary":                               {"get", []string{"stats"}, readers},
	"POST /stats/summary":                              {"create", []string{"stats"}, admins},
	"GET /metrics":                                     {"get", []string{"metrics"}, readers},
	"GET /metrics/probes":                              {"get", []string{"metrics"}, readers},
	"GET /metrics/resource":                            {"get", []string{"metrics"}, readers},
	"GET /metrics/cadvisor":                            {"get", []string{"metrics"}, readers},
	containerLogsPattern:                               {"get", []string{"proxy"}, readers},
	"GET /events":                                      {"get", []string{"proxy"}, readers},
	"GET /configz":                                     {"get", []string{"configz", "proxy"}, readers},
	pprofPattern:                                       {"get", []string{"proxy"}, admins},
	"GET " + logsPath:                                  {"get", []string{"log"}, admins},
	"GET /exec/{namespace}/{pod}/{container}":          {"create", []string{"proxy"}, admins},
	"POST /exec/{namespace}/{pod}/{container}":         {"create", []string{"proxy"}, admins},
	"GET /exec/{namespace}/{pod}/{uid}/{container}":    {"create", []string{"proxy"}, admins},
	"POST /exec/{namespace}/{pod}/{uid}/{container}":   {"create", []string{"proxy"}, admins},
	"GET /attach/{namespace}/{pod}/{container}":        {"create", []string{"proxy"}, admins},
	"POST /attach/{namespace}/{pod}/{container}":       {"create", []string{"proxy"}, admins},
	"GET /attach/{namespace}/{pod}/{uid}/{container}":  {"create", []string{"proxy"}, admins},
	"POST /attach/{namespace}/{pod}/{uid}/{container}": {"create", []string{"proxy"}, admins},
	"GET /portForward/{namespace}/{pod}":               {"create", []string{"proxy"}, admins},
	"POST /portForward/{namespace}/{pod}":              {"create", []string{"proxy"}, admins},
	"GET /portForward/{namespace}/{pod}/{uid}":         {"create", []string{"proxy"}, admins},
	"POST /portForward/{namespace}/{pod}/{uid}":        {"create", []string{"proxy"}, admins},
	"POST /run/{namespace}/{pod}/{container}":          {"create", []string{"proxy"}, admins},
	"POST /run/{namespace}/{pod}/{uid}/{container}":    {"create", []string{"proxy"}, admins},
}

var wildcardRE = regexp.MustCompile(`\{[a-z]+\}`)

// sample turns a route pattern into a request that matches it.
func sample(pattern string) (method, target string) {
	method, p, _ := strings.Cut(pattern, " ")
	p = strings.ReplaceAll(p, "{$}", "")
	p = wildcardRE.ReplaceAllStringFunc(p, func(w string) string {
		switch w {
		case "{namespace}":
			return "default"
		case "{pod}":
			return "web-0"
		case "{container}":
			return "app"
		case "{uid}":
			return "0f1e2d3c-aaaa-bbbb-cccc-123456789abc"
		}
		panic("no sample for " + w)
	})
	return method, p
}

func isStreaming(pattern string) bool {
	_, p, _ := strings.Cut(pattern, " ")
	for _, s := range streamingPaths {
		if isSubpath(p, s) {
			return true
		}
	}
	return false
}

func TestEveryRouteHasAnAuthorizationCase(t *testing.T) {
	deps, _, _ := testDeps()
	s := open(t, deps)
	for _, p := range s.patterns {
		want, ok := routeAuthz[p]
		if !ok {
			t.Errorf("route %q has no authorization case in routeAuthz", p)
			continue
		}
		method, target := sample(p)
		verb, subs, ok := requestAuthorization(method, target)
		if !ok || verb != want.verb || !slices.Equal(subs, want.subresources) {
			t.Errorf("%s %s: authorized as %s on %v, want %s on %v", method, target, verb, subs, want.verb, want.subresources)
		}
	}
	for p := range routeAuthz {
		if !slices.Contains(s.patterns, p) {
			t.Errorf("routeAuthz has %q, which is not registered", p)
		}
	}
}

func TestRequestAuthorizationPaths(t *testing.T) {
	for _, c := range []struct {
		method, path string
		verb         string
		subs         []string
	}{
		{"GET", "/stats", "get", []string{"stats"}},
		{"GET", "/stats/", "get", []string{"stats"}},
		{"GET", "/statsfoo", "get", []string{"proxy"}},
		{"GET", "/metrics/anything", "get", []string{"metrics"}},
		{"GET", "/logs/syslog", "get", []string{"log"}},
		{"GET", "/runningpods", "get", []string{"pods", "proxy"}},
		{"HEAD", "/pods", "get", []string{"pods", "proxy"}},
		{"PUT", "/debug/flags/v", "update", []string{"proxy"}},
		{"PATCH", "/x", "patch", []string{"proxy"}},
		{"DELETE", "/x", "delete", []string{"proxy"}},
		{"POST", "/exec/a/b/c", "create", []string{"proxy"}},
		{"GET", "/portForward/a/b", "create", []string{"proxy"}},
		{"GET", "/execfoo", "get", []string{"proxy"}},
		{"POST", "/checkpoint/a/b/c", "create", []string{"checkpoint"}},
	} {
		verb, subs, ok := requestAuthorization(c.method, c.path)
		if !ok || verb != c.verb || !slices.Equal(subs, c.subs) {
			t.Errorf("%s %s: %s %v, want %s %v", c.method, c.path, verb, subs, c.verb, c.subs)
		}
	}
	if _, _, ok := requestAuthorization("OPTIONS", "/pods"); ok {
		t.Error("OPTIONS has a verb")
	}
}

func TestEveryRouteNeedsCredentials(t *testing.T) {
	deps, logs, _ := testDeps()
	s := newTestServer(t, Config{AuthorizationMode: AuthorizationAlwaysAllow, NodeName: "node-a"}, deps)
	for _, p := range s.patterns {
		method, target := sample(p)
		if code, _ := do(t, s, method, target, nil); code != http.StatusUnauthorized {
			t.Errorf("%s %s without credentials: %d, want 401", method, target, code)
		}
	}
	for _, target := range []string{"/", "/nothing", "/stats/"} {
		if code, _ := do(t, s, "GET", target, nil); code != http.StatusUnauthorized {
			t.Errorf("unrouted %s without credentials: %d, want 401", target, code)
		}
	}
	if n := len(logs.recorded()); n != 0 {
		t.Errorf("log streamer called %d times without credentials", n)
	}
}

// tlsFixture is a real TLS server with a generated serving certificate,
// trusting the local admin CA.
type tlsFixture struct {
	srv   *httptest.Server
	roots *x509.CertPool
	admin tls.Certificate
	creds Credentials
}

func startTLS(t *testing.T, cfg Config, deps Deps) *tlsFixture {
	t.Helper()
	dir := t.TempDir()
	clk := testingclock.NewFakePassiveClock(time.Now())
	serving, err := LoadOrCreateServingCert(dir, "", "", []string{"node-a"}, clk)
	if err != nil {
		t.Fatal(err)
	}
	creds, err := EnsureAdminCredentials(dir, clk)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := LoadCertPool("", creds.CACert)
	if err != nil {
		t.Fatal(err)
	}
	cfg.TLS, cfg.ClientCA = serving, pool
	deps.Clock = clk
	h, err := NewSecure(cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.TLS = cfg.TLSConfig()
	srv.StartTLS()
	t.Cleanup(srv.Close)
	admin, err := tls.LoadX509KeyPair(creds.ClientCert, creds.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(serving.Leaf)
	return &tlsFixture{srv: srv, roots: roots, admin: admin, creds: creds}
}

func (f *tlsFixture) client(certs ...tls.Certificate) *http.Client {
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs:      f.roots,
		Certificates: certs,
		MinVersion:   tls.VersionTLS12,
	}}}
}

func call(t *testing.T, c *http.Client, method, url string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func TestEveryRouteServesTheAdminOverTLS(t *testing.T) {
	deps, _, _ := testDeps()
	deps.SystemLogs = t.TempDir()
	f := startTLS(t, Config{AuthorizationMode: AuthorizationAlwaysAllow, NodeName: "node-a"}, deps)
	admin := f.client(f.admin)
	anon := f.client()
	s := open(t, deps)
	for _, p := range s.patterns {
		method, target := sample(p)
		want := http.StatusOK
		if isStreaming(p) {
			want = http.StatusNotImplemented
		}
		if code, body := call(t, admin, method, f.srv.URL+target); code != want {
			t.Errorf("admin %s %s: %d %q, want %d", method, target, code, body, want)
		}
		if code, _ := call(t, anon, method, f.srv.URL+target); code != http.StatusUnauthorized {
			t.Errorf("no certificate %s %s: %d, want 401", method, target, code)
		}
	}
	if code, body := call(t, admin, "POST", f.srv.URL+"/exec/default/web-0/app"); !strings.Contains(body, "streaming is not implemented yet") {
		t.Errorf("exec: %d %q", code, body)
	}
}

func TestForeignClientCertificateRejected(t *testing.T) {
	deps, _, _ := testDeps()
	f := startTLS(t, Config{AnonymousAuth: true, AuthorizationMode: AuthorizationNodeletGroups, ReadGroup: UnauthenticatedGroup, NodeName: "node-a"}, deps)
	// Another admin CA, not trusted by the server.
	otherCreds, err := EnsureAdminCredentials(t.TempDir(), testingclock.NewFakePassiveClock(time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	other, err := tls.LoadX509KeyPair(otherCreds.ClientCert, otherCreds.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("GET", f.srv.URL+"/pods", nil)
	if resp, err := f.client(other).Do(req); err == nil {
		resp.Body.Close()
		t.Errorf("handshake with an untrusted client certificate succeeded: %d", resp.StatusCode)
	}

	// The authenticator checks again, whatever the TLS layer let through,
	// and an invalid certificate is never anonymous.
	s := newTestServer(t, Config{ClientCA: f.srv.TLS.ClientCAs, AnonymousAuth: true, AuthorizationMode: AuthorizationNodeletGroups, ReadGroup: UnauthenticatedGroup}, deps)
	r := httptest.NewRequest("GET", "/pods", nil)
	r.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{other.Leaf}}
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, r)
	if rec.Code != http.StatusUnauthorized {
		t.Errorf("untrusted certificate: %d, want 401", rec.Code)
	}
	r.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{f.admin.Leaf}}
	rec = httptest.NewRecorder()
	s.ServeHTTP(rec, r)
	if rec.Code != http.StatusOK {
		t.Errorf("admin certificate: %d, want 200", rec.Code)
	}
}

// sarRecorder answers SubjectAccessReviews with allow and records them.
type sarRecorder struct {
	mu    sync.Mutex
	specs []authorizationv1.SubjectAccessReviewSpec
	allow func(authorizationv1.SubjectAccessReviewSpec) bool
	err   error
}

func (r *sarRecorder) clientset() *fake.Clientset {
	cs := fake.NewClientset()
	cs.PrependReactor("create", "subjectaccessreviews", func(a clienttesting.Action) (bool, runtime.Object, error) {
		sar := a.(clienttesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview)
		r.mu.Lock()
		defer r.mu.Unlock()
		r.specs = append(r.specs, sar.Spec)
		if r.err != nil {
			return true, nil, r.err
		}
		out := sar.DeepCopy()
		out.Status.Allowed = r.allow(sar.Spec)
		if !out.Status.Allowed {
			out.Status.Reason = "no RBAC rule"
		}
		return true, out, nil
	})
	return cs
}

func (r *sarRecorder) take() []authorizationv1.SubjectAccessReviewSpec {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.specs
	r.specs = nil
	return s
}

func TestWebhookDeniesWithTheKubeletAttributes(t *testing.T) {
	rec := &sarRecorder{allow: func(authorizationv1.SubjectAccessReviewSpec) bool { return false }}
	deps, logs, _ := testDeps()
	f := startTLS(t, Config{AuthorizationMode: AuthorizationWebhook, SAR: rec.clientset(), NodeName: "node-a"}, deps)
	admin := f.client(f.admin)
	s := open(t, deps)
	for _, p := range s.patterns {
		method, target := sample(p)
		code, body := call(t, admin, method, f.srv.URL+target)
		if code != http.StatusForbidden || !strings.Contains(body, "Forbidden (user=nodelet-admin") {
			t.Errorf("%s %s: %d %q, want 403", method, target, code, body)
		}
		want := routeAuthz[p]
		specs := rec.take()
		var subs []string
		for _, sp := range specs {
			ra := sp.ResourceAttributes
			subs = append(subs, ra.Subresource)
			if ra.Verb != want.verb || ra.Resource != "nodes" || ra.Name != "node-a" || ra.Group != "" || ra.Version != "v1" {
				t.Errorf("%s %s: SAR attributes %+v", method, target, ra)
			}
			if sp.User != AdminUser || !slices.Equal(sp.Groups, []string{AdminGroup, AuthenticatedGroup}) {
				t.Errorf("%s %s: SAR user %q groups %v", method, target, sp.User, sp.Groups)
			}
		}
		if !slices.Equal(subs, want.subresources) {
			t.Errorf("%s %s: SARs for %v, want %v", method, target, subs, want.subresources)
		}
	}
	if n := len(logs.recorded()); n != 0 {
		t.Errorf("log streamer called %d times although denied", n)
	}
}

func TestWebhookAllowsAndFallsBackToProxy(t *testing.T) {
	// Allowed only nodes/proxy get: /pods passes on its fallback, /stats
	// (no fallback) is forbidden, exec (create) is forbidden.
	rec := &sarRecorder{allow: func(s authorizationv1.SubjectAccessReviewSpec) bool {
		return s.ResourceAttributes.Subresource == "proxy" && s.ResourceAttributes.Verb == "get"
	}}
	deps, _, _ := testDeps()
	s := newTestServer(t, Config{AnonymousAuth: true, AuthorizationMode: AuthorizationWebhook, SAR: rec.clientset(), NodeName: "node-a"}, deps)
	for _, c := range []struct {
		method, target string
		want           int
	}{
		{"GET", "/pods", 200},
		{"GET", "/stats/summary", 403},
		{"GET", "/exec/default/web-0/app", 403},
		{"GET", "/containerLogs/default/web-0/app", 200},
	} {
		if code, body := do(t, s, c.method, c.target, nil); code != c.want {
			t.Errorf("%s %s: %d %q, want %d", c.method, c.target, code, body, c.want)
		}
	}
	specs := rec.take()
	if len(specs) == 0 || specs[0].User != AnonymousUser || !slices.Equal(specs[0].Groups, []string{UnauthenticatedGroup}) {
		t.Errorf("anonymous SAR: %+v", specs)
	}

	rec.err = fmt.Errorf("apiserver down")
	if code, body := do(t, s, "GET", "/pods", nil); code != http.StatusInternalServerError || !strings.Contains(body, "Authorization error") {
		t.Errorf("SAR failure: %d %q, want 500", code, body)
	}
}

// groupTokens are a user of each kind, by bearer token.
var groupTokens = map[string]UserInfo{
	"admin-token":  {Name: "root", Groups: []string{AdminGroup}},
	"reader-token": {Name: "alice"},
	"viewer-token": {Name: "vic", Groups: []string{"nodelet:viewers"}},
}

func bearer(token string) http.Header {
	if token == "" {
		return nil
	}
	return http.Header{"Authorization": {"Bearer " + token}}
}

func TestNodeletGroupsAuthorizesEveryRoute(t *testing.T) {
	deps, _, _ := testDeps()
	for _, readGroup := range []string{"", "nodelet:viewers"} {
		s := newTestServer(t, Config{Tokens: groupTokens, AnonymousAuth: true, AuthorizationMode: AuthorizationNodeletGroups,
			ReadGroup: readGroup, NodeName: "node-a"}, deps)
		reader := "reader-token" // in system:authenticated
		if readGroup != "" {
			reader = "viewer-token"
		}
		for _, p := range s.patterns {
			method, target := sample(p)
			c := routeAuthz[p]
			for _, u := range []struct {
				token   string
				allowed bool
			}{
				{"admin-token", true},
				{reader, c.access == readers},
				{"", false}, // anonymous: in system:unauthenticated only
			} {
				code, body := do(t, s, method, target, bearer(u.token))
				if denied := code == http.StatusForbidden; denied == u.allowed || code == http.StatusUnauthorized {
					t.Errorf("read group %q, token %q: %s %s: %d %q, allowed %v", readGroup, u.token, method, target, code, body, u.allowed)
				}
			}
		}
		if readGroup != "" {
			// Authenticated but not in the read group: nothing.
			if code, _ := do(t, s, "GET", "/pods", bearer("reader-token")); code != http.StatusForbidden {
				t.Errorf("authenticated user outside %s: GET /pods %d, want 403", readGroup, code)
			}
		}
		// Readers never write, and unrouted paths are not theirs.
		for _, c := range []struct{ method, target string }{
			{"POST", "/pods"}, {"DELETE", "/pods"}, {"PUT", "/configz"},
			{"GET", "/debug/flags/v"}, {"GET", "/logs/syslog"}, {"GET", "/podsx"},
		} {
			if code, body := do(t, s, c.method, c.target, bearer(reader)); code != http.StatusForbidden {
				t.Errorf("reader %s %s: %d %q, want 403", c.method, c.target, code, body)
			}
		}
		if code, _ := do(t, s, "HEAD", "/pods", bearer(reader)); code != http.StatusOK {
			t.Errorf("reader HEAD /pods: %d, want 200", code)
		}
	}
}

// Readers may be anonymous only when the read group says so.
func TestNodeletGroupsAnonymousReaders(t *testing.T) {
	deps, _, _ := testDeps()
	s := newTestServer(t, Config{AnonymousAuth: true, AuthorizationMode: AuthorizationNodeletGroups, ReadGroup: UnauthenticatedGroup, NodeName: "node-a"}, deps)
	for target, want := range map[string]int{"/pods": 200, "/healthz": 200, "/debug/pprof/cmdline": 403} {
		if code, _ := do(t, s, "GET", target, nil); code != want {
			t.Errorf("anonymous GET %s: %d, want %d", target, code, want)
		}
	}
	if code, _ := do(t, s, "POST", "/exec/default/web-0/app", nil); code != http.StatusForbidden {
		t.Errorf("anonymous exec: %d, want 403", code)
	}
}

func TestAnonymousWithAlwaysAllowRefused(t *testing.T) {
	deps, _, _ := testDeps()
	_, err := NewSecure(Config{AnonymousAuth: true, AuthorizationMode: AuthorizationAlwaysAllow, NodeName: "node-a"}, deps)
	if err == nil {
		t.Fatal("anonymous requests with AlwaysAllow accepted")
	}
	if msg := err.Error(); strings.Contains(msg, "\n") || !strings.Contains(msg, "--anonymous-auth") || !strings.Contains(msg, "--authorization-mode="+AuthorizationNodeletGroups) {
		t.Errorf("error %q: want one line naming --anonymous-auth and the mode to use", msg)
	}
	for _, c := range []struct {
		mode      string
		anonymous bool
		ok        bool
	}{
		{AuthorizationAlwaysAllow, false, true},
		{AuthorizationAlwaysAllow, true, false},
		{AuthorizationNodeletGroups, true, true},
		{AuthorizationNodeletGroups, false, true},
		{AuthorizationWebhook, true, true},
		{"RBAC", false, false},
		{"", false, false},
	} {
		if err := CheckAuthorization(c.mode, c.anonymous); (err == nil) != c.ok {
			t.Errorf("mode %q anonymous %v: %v, want ok %v", c.mode, c.anonymous, err, c.ok)
		}
	}
}

func TestNewSecureRejectsBadConfig(t *testing.T) {
	deps, _, _ := testDeps()
	for _, cfg := range []Config{
		{AuthorizationMode: ""},
		{AuthorizationMode: "RBAC"},
		{AuthorizationMode: AuthorizationAlwaysAllow, AnonymousAuth: true},
		{AuthorizationMode: AuthorizationWebhook, NodeName: "node-a"},
		{AuthorizationMode: AuthorizationWebhook, SAR: fake.NewClientset()},
	} {
		if _, err := NewSecure(cfg, deps); err == nil {
			t.Errorf("%+v accepted", cfg)
		}
	}
}

// --- the handlers

func TestPodsAndRunningPods(t *testing.T) {
	deps, _, _ := testDeps()
	s := open(t, deps)
	for _, target := range []string{"/pods", "/runningpods/"} {
		code, body := do(t, s, "GET", target, nil)
		if code != 200 {
			t.Fatalf("%s: %d %q", target, code, body)
		}
		var list v1.PodList
		if err := json.Unmarshal([]byte(body), &list); err != nil {
			t.Fatalf("%s: %v", target, err)
		}
		if list.APIVersion != "v1" || list.Kind != "PodList" || len(list.Items) != 1 {
			t.Fatalf("%s: %+v", target, list)
		}
		if p := list.Items[0]; p.Name != "web-0" || p.Status.Phase != v1.PodRunning || p.Status.PodIP != "10.1.0.7" {
			t.Errorf("%s: pod %+v", target, p)
		}
	}
	empty := open(t, Deps{})
	if code, body := do(t, empty, "GET", "/pods", nil); code != 200 || !strings.Contains(body, `"items":[]`) {
		t.Errorf("no pods: %d %q", code, body)
	}
}

func TestStatsSummary(t *testing.T) {
	deps, _, stats := testDeps()
	s := open(t, deps)
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest("GET", "/stats/summary?only_cpu_and_memory=true", nil))
	var sum statsv1alpha1.Summary
	if rec.Code != 200 || json.Unmarshal(rec.Body.Bytes(), &sum) != nil || sum.Node.NodeName != "node-a" {
		t.Errorf("summary: %d %q", rec.Code, rec.Body)
	}
	h := rec.Result().Header
	if h.Get("Content-Type") != "application/json" || h.Get("ETag") != `"v1"` || h.Get("Content-Length") != strconv.Itoa(rec.Body.Len()) {
		t.Errorf("headers: %v", h)
	}
	do(t, s, "GET", "/stats/summary", nil)
	// The kubelet's POST variant, the parameter in the form.
	req := httptest.NewRequest("POST", "/stats/summary", strings.NewReader("only_cpu_and_memory=true"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	rec = httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), `"nodeName":"node-a"`) {
		t.Errorf("POST: %d %q", rec.Code, rec.Body)
	}
	if !slices.Equal(stats.only, []bool{true, false, true}) {
		t.Errorf("only_cpu_and_memory passed as %v", stats.only)
	}
	if code, _ := do(t, s, "GET", "/stats/summary?only_cpu_and_memory=maybe", nil); code != 400 {
		t.Errorf("bad only_cpu_and_memory: %d", code)
	}
	for _, target := range []string{"/stats/", "/stats", "/stats/container"} {
		if code, _ := do(t, s, "GET", target, nil); code != 404 {
			t.Errorf("%s: %d, want 404", target, code)
		}
	}
	// Conditional requests: the same tag is 304 without a body, another
	// one the full answer.
	for _, c := range []struct {
		inm  string
		want int
	}{{`"v1"`, 304}, {`W/"v1"`, 304}, {`"v0", "v1"`, 304}, {"*", 304}, {`"v0"`, 200}} {
		code, body := do(t, s, "GET", "/stats/summary", http.Header{"If-None-Match": {c.inm}})
		if code != c.want || (code == 304 && body != "") {
			t.Errorf("If-None-Match %s: %d %q, want %d", c.inm, code, body, c.want)
		}
	}
}

func TestMetricsEndpoints(t *testing.T) {
	deps, _, _ := testDeps()
	s := open(t, deps)
	for target, metric := range map[string]string{
		"/metrics": "kubelet_test_total", "/metrics/probes": "prober_test_total",
		"/metrics/resource": "resource_test_total", "/metrics/cadvisor": "cadvisor_test_total",
	} {
		if code, body := do(t, s, "GET", target, nil); code != 200 || !strings.Contains(body, metric+" 0") {
			t.Errorf("%s: %d\n%s", target, code, body)
		}
	}
	deps.Metrics.Cadvisor = nil
	if code, _ := do(t, open(t, deps), "GET", "/metrics/cadvisor", nil); code != 404 {
		t.Errorf("no cadvisor registry: %d, want 404", code)
	}
	// An optional gatherer answers 404 with its reason while it has
	// nothing to serve, its metrics once it has.
	opt := &optionalGatherer{Gatherer: registry("cri_test_total"), unavailable: errors.New("runtime has no CRI metrics")}
	deps.Metrics.Cadvisor = opt
	s = open(t, deps)
	if code, body := do(t, s, "GET", "/metrics/cadvisor", nil); code != 404 || !strings.Contains(body, "runtime has no CRI metrics") {
		t.Errorf("unavailable: %d %q, want 404 with the reason", code, body)
	}
	opt.unavailable = nil
	if code, body := do(t, s, "GET", "/metrics/cadvisor", nil); code != 200 || !strings.Contains(body, "cri_test_total 0") {
		t.Errorf("available: %d %q", code, body)
	}
}

type optionalGatherer struct {
	prometheus.Gatherer
	unavailable error
}

func (g *optionalGatherer) Unavailable(context.Context) error { return g.unavailable }

func TestEventsConfigzHealthz(t *testing.T) {
	deps, _, _ := testDeps()
	s := open(t, deps)
	code, body := do(t, s, "GET", "/events", nil)
	var evs []EventItem
	if code != 200 || json.Unmarshal([]byte(body), &evs) != nil || len(evs) != 1 || evs[0].Reason != "Started" || evs[0].Count != 2 || evs[0].Pod != "web-0" {
		t.Errorf("/events: %d %q", code, body)
	}
	if code, body := do(t, open(t, Deps{}), "GET", "/events", nil); code != 200 || strings.TrimSpace(body) != "[]" {
		t.Errorf("/events with none: %d %q", code, body)
	}
	// A node event names the node and its kind; a pod event has neither.
	withNode := deps
	t1 := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	withNode.Events = fakeEvents{
		{PodUID: "u1", Namespace: "default", Pod: "web-0", Type: v1.EventTypeNormal, Reason: "Started", Message: "m", Count: 1, FirstTime: t1, LastTime: t1},
		{Node: "node1", Type: v1.EventTypeWarning, Reason: "FailedToLoadManifest", Message: "/m/a.yaml: bad", Count: 1, FirstTime: t1, LastTime: t1},
	}
	want := `[{"podUID":"u1","namespace":"default","pod":"web-0","type":"Normal","reason":"Started","message":"m","count":1,` +
		`"firstTimestamp":"2024-05-01T12:00:00Z","lastTimestamp":"2024-05-01T12:00:00Z"},` +
		`{"podUID":"","namespace":"","pod":"","kind":"Node","node":"node1","type":"Warning","reason":"FailedToLoadManifest","message":"/m/a.yaml: bad","count":1,` +
		`"firstTimestamp":"2024-05-01T12:00:00Z","lastTimestamp":"2024-05-01T12:00:00Z"}]`
	if code, body := do(t, open(t, withNode), "GET", "/events", nil); code != 200 || strings.TrimSpace(body) != want {
		t.Errorf("/events with a node event: %d\n%s\nwant\n%s", code, body, want)
	}
	code, body = do(t, s, "GET", "/configz", nil)
	var cz map[string]map[string]any
	if code != 200 || json.Unmarshal([]byte(body), &cz) != nil || cz["kubeletconfig"]["kind"] != "KubeletConfiguration" {
		t.Errorf("/configz: %d %q", code, body)
	}
	if code, body := do(t, s, "GET", "/healthz", nil); code != 200 || body != "ok" {
		t.Errorf("/healthz: %d %q", code, body)
	}
	if code, body := do(t, s, "GET", "/debug/pprof/cmdline", nil); code != 200 || body == "" {
		t.Errorf("/debug/pprof/cmdline: %d %q", code, body)
	}
}

func TestStreamingEndpointsValidateNames(t *testing.T) {
	deps, _, _ := testDeps()
	s := open(t, deps)
	for target, want := range map[string]int{
		"/exec/default/web-0/app":                   501,
		"/exec/default/web-0/0f1e2d3c-aaaa/app":     501,
		"/exec/default/Web_0/app":                   400,
		"/exec/default/web-0/bad.uid/app":           400,
		"/portForward/default/web-0":                501,
		"/attach/default/web-0/..":                  400,
		"/run/default/web-0%2F..%2Fx/app":           400,
		"/portForward/default/web-0/0f1e2d3c/extra": 404,
	} {
		if code, body := do(t, s, "POST", target, nil); code != want {
			t.Errorf("POST %s: %d %q, want %d", target, code, body, want)
		}
	}
	if code, _ := do(t, s, "GET", "/run/default/web-0/app", nil); code != 405 {
		t.Errorf("GET /run: %d, want 405", code)
	}
}

func TestServeTLSStopsWithContext(t *testing.T) {
	deps, _, _ := testDeps()
	cert, err := LoadOrCreateServingCert(t.TempDir(), "", "", nil, testingclock.NewFakePassiveClock(time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{TLS: cert, AuthorizationMode: AuthorizationAlwaysAllow}
	h, err := NewSecure(cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- ServeTLS(ctx, "127.0.0.1:0", cfg.TLSConfig(), h, slog.New(slog.DiscardHandler)) }()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("ServeTLS: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("ServeTLS did not stop")
	}
	if err := ServeTLS(t.Context(), "256.0.0.1:0", cfg.TLSConfig(), h, slog.New(slog.DiscardHandler)); err == nil {
		t.Error("bad address accepted")
	}
}
