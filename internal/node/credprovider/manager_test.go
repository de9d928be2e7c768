package credprovider

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	credentialproviderv1 "k8s.io/kubelet/pkg/apis/credentialprovider/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/pure/pullcreds"
)

// fakeRunner answers every run with resp (or err) and records the requests.
type fakeRunner struct {
	mu   sync.Mutex
	reqs []request
	resp func(req request) (*response, error)
}

func (f *fakeRunner) run(_ context.Context, _ *Provider, req request) (*response, error) {
	f.mu.Lock()
	f.reqs = append(f.reqs, req)
	f.mu.Unlock()
	return f.resp(req)
}

func (f *fakeRunner) runs() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.reqs)
}

type fakeRecorder struct {
	mu     sync.Mutex
	events []string
}

func (r *fakeRecorder) Event(pod *v1.Pod, eventType, reason, message string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, eventType+" "+reason+" "+message)
}

func answer(keyType credentialproviderv1.PluginCacheKeyType, duration *time.Duration, registries ...string) func(request) (*response, error) {
	return func(request) (*response, error) {
		r := &response{cacheKeyType: keyType, cacheDuration: duration, auth: map[string]credentialproviderv1.AuthConfig{}}
		for _, reg := range registries {
			r.auth[reg] = credentialproviderv1.AuthConfig{Username: "user", Password: "pass-" + reg}
		}
		return r, nil
	}
}

func ptrTo[T any](v T) *T { return &v }

type fixture struct {
	m     *Manager
	run   *fakeRunner
	clock *clocktesting.FakeClock
	rec   *fakeRecorder
	reg   *prometheus.Registry
}

func newFixture(t *testing.T, providers []Provider, resp func(request) (*response, error), deps Deps) *fixture {
	t.Helper()
	for i := range providers {
		providers[i].defaultCacheSet = true
	}
	if errs := Validate(providers); len(errs) > 0 {
		t.Fatal(errs)
	}
	f := &fixture{
		run:   &fakeRunner{resp: resp},
		clock: clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)),
		rec:   &fakeRecorder{},
		reg:   prometheus.NewRegistry(),
	}
	deps.Clock, deps.Log, deps.Recorder, deps.Metrics = f.clock, slog.New(slog.DiscardHandler), f.rec, f.reg
	f.m = newManager(&Config{Providers: providers, Hash: "sha256:abc"}, deps, f.run)
	return f
}

func plainProvider(name string, cache time.Duration, match ...string) Provider {
	return Provider{Name: name, MatchImages: match, DefaultCacheDuration: cache, APIVersion: protocolV1}
}

func (f *fixture) creds(t *testing.T, image string) []pullcreds.Credential {
	t.Helper()
	got, err := f.m.Credentials(context.Background(), image)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// Only images matching a provider's matchImages run it; the plugin is
// asked about the repository; what it answers applies by the keyring.
func TestMatchingAndAnswer(t *testing.T) {
	f := newFixture(t, []Provider{plainProvider("p", 0, "127.0.0.1:5000", "*.example")},
		answer(credentialproviderv1.ImagePluginCacheKeyType, nil, "127.0.0.1:5000", "other.example"), Deps{})
	got := f.creds(t, "127.0.0.1:5000/private/app:v1")
	if len(got) != 1 || got[0].Auth.Username != "user" || got[0].Auth.Password != "pass-127.0.0.1:5000" ||
		got[0].Source != (pullcreds.Source{Kind: pullcreds.FromProvider, Provider: "p"}) {
		t.Errorf("credentials = %+v", got)
	}
	if f.run.reqs[0].Image != "127.0.0.1:5000/private/app" || f.run.reqs[0].Token != "" {
		t.Errorf("request = %+v", f.run.reqs[0])
	}
	// Matched, but the answer is for another registry: nothing applies.
	if got := f.creds(t, "a.example/app"); len(got) != 0 {
		t.Errorf("a.example: %+v", got)
	}
	// Not matched: not run.
	for _, image := range []string{"127.0.0.1:5001/app", "a.b.example/app", "busybox"} {
		if got := f.creds(t, image); len(got) != 0 {
			t.Errorf("%s: %+v", image, got)
		}
	}
	if f.run.runs() != 2 {
		t.Errorf("%d runs, want 2 (no cache, 2 matching images)", f.run.runs())
	}
}

// Caching by cacheKeyType and duration, on a fake clock.
func TestCache(t *testing.T) {
	for _, c := range []struct {
		name     string
		keyType  credentialproviderv1.PluginCacheKeyType
		duration *time.Duration
		def      time.Duration
		// runs after each of: app:v1, app:v2 (same repository), other
		// (same registry), elsewhere.example (other registry), and app
		// again once the clock passed the duration.
		want [5]int
	}{
		{"image, default duration", credentialproviderv1.ImagePluginCacheKeyType, nil, time.Minute, [5]int{1, 1, 2, 3, 4}},
		{"registry", credentialproviderv1.RegistryPluginCacheKeyType, ptrTo(time.Minute), 0, [5]int{1, 1, 1, 2, 3}},
		{"global", credentialproviderv1.GlobalPluginCacheKeyType, ptrTo(time.Minute), 0, [5]int{1, 1, 1, 1, 2}},
		{"response duration 0: not cached", credentialproviderv1.GlobalPluginCacheKeyType, ptrTo(time.Duration(0)), time.Hour, [5]int{1, 2, 3, 4, 5}},
		{"no duration, default 0: not cached", credentialproviderv1.GlobalPluginCacheKeyType, nil, 0, [5]int{1, 2, 3, 4, 5}},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t, []Provider{plainProvider("p", c.def, "*.example")},
				answer(c.keyType, c.duration, "*.example"), Deps{})
			for i, image := range []string{"reg.example/app:v1", "reg.example/app:v2", "reg.example/other", "elsewhere.example/app", "reg.example/app"} {
				if i == 4 {
					f.clock.Step(time.Minute + time.Second)
				}
				if got := f.creds(t, image); len(got) != 1 {
					t.Fatalf("%s: %d credentials", image, len(got))
				}
				if f.run.runs() != c.want[i] {
					t.Fatalf("after %s: %d runs, want %d", image, f.run.runs(), c.want[i])
				}
			}
		})
	}
}

// Expired entries nobody asks for are purged.
func TestCachePurge(t *testing.T) {
	f := newFixture(t, []Provider{plainProvider("p", time.Minute, "*.example")},
		answer(credentialproviderv1.ImagePluginCacheKeyType, nil, "*.example"), Deps{})
	f.creds(t, "a.example/app")
	f.creds(t, "b.example/app")
	if n := f.m.providers[0].cache.len(); n != 2 {
		t.Fatalf("%d cached", n)
	}
	f.clock.Step(purgeInterval + time.Second)
	f.creds(t, "c.example/app")
	if n := f.m.providers[0].cache.len(); n != 1 {
		t.Errorf("%d cached after the purge, want 1", n)
	}
}

// A failing plugin: the pull goes on without it (no error, the other
// providers' credentials), a warning event on the pod, the failure
// counted; never the credential in the event.
func TestFailureIsAnEventNotAnError(t *testing.T) {
	providers := []Provider{plainProvider("broken", 0, "*.example"), plainProvider("good", 0, "*.example")}
	f := newFixture(t, providers, nil, Deps{})
	calls := 0
	f.run.resp = func(request) (*response, error) {
		calls++
		if calls == 1 {
			return nil, &errStderr{err: errors.New("plugin broken: exit status 1"), stderr: "stderr says pass-secret"}
		}
		return answer(credentialproviderv1.ImagePluginCacheKeyType, nil, "reg.example")(request{})
	}
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u"}}
	got, err := f.m.ForPod(pod).Credentials(context.Background(), "reg.example/app")
	if err != nil || len(got) != 1 || got[0].Source.Provider != "good" {
		t.Fatalf("credentials = %+v, %v", got, err)
	}
	if len(f.rec.events) != 1 || !strings.Contains(f.rec.events[0], "Warning CredentialProviderFailed Credential provider broken failed for image \"reg.example/app\"") {
		t.Errorf("events = %q", f.rec.events)
	}
	if strings.Contains(f.rec.events[0], "pass-secret") {
		t.Errorf("the event quotes the plugin's stderr: %q", f.rec.events[0])
	}
	if n := testutil.ToFloat64(f.m.metrics.errors.WithLabelValues("broken")); n != 1 {
		t.Errorf("errors_total{broken} = %v", n)
	}
	if n := testutil.CollectAndCount(f.m.metrics.duration); n != 2 {
		t.Errorf("duration series = %d, want 2", n)
	}
	if err := testutil.CollectAndCompare(f.reg, strings.NewReader(`
# HELP kubelet_credential_provider_config_info Information about the last applied credential provider configuration with hash as label
# TYPE kubelet_credential_provider_config_info gauge
kubelet_credential_provider_config_info{hash="sha256:abc"} 1
`), "kubelet_credential_provider_config_info"); err != nil {
		t.Error(err)
	}
}

type fakeTokens struct {
	mu     sync.Mutex
	token  string
	asked  []string
	failed error
}

func (f *fakeTokens) Token(_ context.Context, pod *v1.Pod, audience string, seconds int64) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = append(f.asked, pod.Namespace+"/"+pod.Spec.ServiceAccountName+" "+audience)
	return f.token, f.failed
}

type fakeAccounts map[string]*v1.ServiceAccount

func (f fakeAccounts) ServiceAccount(_ context.Context, namespace, name string) (*v1.ServiceAccount, error) {
	if sa, ok := f[namespace+"/"+name]; ok {
		return sa, nil
	}
	return nil, errors.New("not found")
}

func tokenProvider(cacheType string, require bool, required, optional []string) Provider {
	p := plainProvider("sa", time.Hour, "*.example")
	p.Token = &TokenAttributes{Audience: "registry-aud", CacheType: cacheType, RequireServiceAccount: require,
		RequiredAnnotations: required, OptionalAnnotations: optional, requireSet: true}
	return p
}

func saPod(name, sa string) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name)},
		Spec: v1.PodSpec{ServiceAccountName: sa}}
}

// Service account token mode: the token and annotations in the request,
// the service account as the source, caching per service account or per
// token, required annotations and service accounts.
func TestServiceAccountTokenMode(t *testing.T) {
	accounts := fakeAccounts{
		"ns/builder": {ObjectMeta: metav1.ObjectMeta{Name: "builder", Namespace: "ns", UID: "sa-uid",
			Annotations: map[string]string{"registry.io/role": "pull", "registry.io/extra": "x", "other.io/no": "n"}}},
		"ns/plain": {ObjectMeta: metav1.ObjectMeta{Name: "plain", Namespace: "ns", UID: "sa2"}},
	}
	t.Run("request and source", func(t *testing.T) {
		tokens := &fakeTokens{token: "tok-1"}
		f := newFixture(t, []Provider{tokenProvider(CacheServiceAccount, true, []string{"registry.io/role"}, []string{"registry.io/extra", "registry.io/absent"})},
			answer(credentialproviderv1.ImagePluginCacheKeyType, nil, "reg.example"), Deps{Tokens: tokens, ServiceAccounts: accounts})
		got, _ := f.m.ForPod(saPod("a", "builder")).Credentials(context.Background(), "reg.example/app")
		if len(got) != 1 || got[0].Source != (pullcreds.Source{Kind: pullcreds.FromProvider, Provider: "sa", Namespace: "ns", Name: "builder", UID: "sa-uid"}) {
			t.Fatalf("credentials = %+v", got)
		}
		req := f.run.reqs[0]
		if req.Token != "tok-1" || len(req.Annotations) != 2 || req.Annotations["registry.io/role"] != "pull" || req.Annotations["registry.io/extra"] != "x" {
			t.Errorf("request = %+v", req)
		}
		if tokens.asked[0] != "ns/builder registry-aud" {
			t.Errorf("token asked: %v", tokens.asked)
		}
		// A second pod of the same service account, with another token:
		// cached per service account.
		tokens.token = "tok-2"
		f.m.ForPod(saPod("b", "builder")).Credentials(context.Background(), "reg.example/app")
		if f.run.runs() != 1 {
			t.Errorf("%d runs, want 1 (cached per service account)", f.run.runs())
		}
		// Node-wide (no pod): no service account, one is required: not run.
		if got := f.creds(t, "reg.example/app"); len(got) != 0 || f.run.runs() != 1 {
			t.Errorf("node-wide: %+v, %d runs", got, f.run.runs())
		}
	})
	t.Run("token cache type", func(t *testing.T) {
		tokens := &fakeTokens{token: "tok-1"}
		f := newFixture(t, []Provider{tokenProvider(CacheToken, true, nil, nil)},
			func(req request) (*response, error) {
				return &response{cacheKeyType: credentialproviderv1.GlobalPluginCacheKeyType,
					auth: map[string]credentialproviderv1.AuthConfig{"reg.example": {Username: "t", Password: req.Token}}}, nil
			}, Deps{Tokens: tokens, ServiceAccounts: accounts})
		pod := saPod("a", "plain")
		for i, tok := range []string{"tok-1", "tok-1", "tok-2"} {
			tokens.token = tok
			got, _ := f.m.ForPod(pod).Credentials(context.Background(), "reg.example/app")
			if len(got) != 1 || got[0].Auth.Password != tok {
				t.Fatalf("credentials = %+v", got)
			}
			if want := []int{1, 1, 2}[i]; f.run.runs() != want {
				t.Errorf("after token %d: %d runs, want %d", i, f.run.runs(), want)
			}
		}
	})
	t.Run("the token as password needs cacheType Token", func(t *testing.T) {
		f := newFixture(t, []Provider{tokenProvider(CacheServiceAccount, true, nil, nil)},
			func(req request) (*response, error) {
				return &response{cacheKeyType: credentialproviderv1.GlobalPluginCacheKeyType,
					auth: map[string]credentialproviderv1.AuthConfig{"reg.example": {Username: "t", Password: req.Token}}}, nil
			}, Deps{Tokens: &fakeTokens{token: "tok-1"}, ServiceAccounts: accounts})
		got, _ := f.m.ForPod(saPod("a", "plain")).Credentials(context.Background(), "reg.example/app")
		if len(got) != 0 || len(f.rec.events) != 1 || !strings.Contains(f.rec.events[0], "only cacheType Token allows") {
			t.Errorf("credentials = %+v, events %q", got, f.rec.events)
		}
		if strings.Contains(f.rec.events[0], "tok-1") {
			t.Errorf("event quotes the token: %q", f.rec.events[0])
		}
	})
	t.Run("not run", func(t *testing.T) {
		tokens := &fakeTokens{token: "tok"}
		f := newFixture(t, []Provider{tokenProvider(CacheServiceAccount, true, []string{"registry.io/role"}, nil)},
			answer(credentialproviderv1.ImagePluginCacheKeyType, nil, "reg.example"), Deps{Tokens: tokens, ServiceAccounts: accounts})
		for _, pod := range []*v1.Pod{saPod("a", "plain") /* lacks the annotation */, saPod("b", "") /* static pod */} {
			if got, _ := f.m.ForPod(pod).Credentials(context.Background(), "reg.example/app"); len(got) != 0 {
				t.Errorf("%s: %+v", pod.Name, got)
			}
		}
		if f.run.runs() != 0 || len(tokens.asked) != 0 || len(f.rec.events) != 0 {
			t.Errorf("%d runs, tokens %v, events %q", f.run.runs(), tokens.asked, f.rec.events)
		}
	})
	t.Run("optional service account", func(t *testing.T) {
		f := newFixture(t, []Provider{tokenProvider(CacheServiceAccount, false, nil, nil)},
			answer(credentialproviderv1.ImagePluginCacheKeyType, nil, "reg.example"), Deps{}) // standalone
		for _, pod := range []*v1.Pod{saPod("a", ""), saPod("b", "plain")} {
			got, _ := f.m.ForPod(pod).Credentials(context.Background(), "reg.example/app")
			if len(got) != 1 || got[0].Source != (pullcreds.Source{Kind: pullcreds.FromProvider, Provider: "sa"}) {
				t.Errorf("%s: %+v", pod.Name, got)
			}
		}
		if f.run.reqs[0].Token != "" {
			t.Errorf("request = %+v", f.run.reqs[0])
		}
	})
	t.Run("token refused", func(t *testing.T) {
		f := newFixture(t, []Provider{tokenProvider(CacheServiceAccount, true, nil, nil)},
			answer(credentialproviderv1.ImagePluginCacheKeyType, nil, "reg.example"),
			Deps{Tokens: &fakeTokens{failed: errors.New("forbidden: audience")}, ServiceAccounts: accounts})
		got, err := f.m.ForPod(saPod("a", "plain")).Credentials(context.Background(), "reg.example/app")
		if err != nil || len(got) != 0 || f.run.runs() != 0 || len(f.rec.events) != 1 || !strings.Contains(f.rec.events[0], `for audience "registry-aud": forbidden`) {
			t.Errorf("credentials %+v, %v; %d runs; events %q", got, err, f.run.runs(), f.rec.events)
		}
	})
}

// Without plugins the agent holds a nil Manager: it gives nothing, and no
// Lookup a union would call.
func TestNilManager(t *testing.T) {
	var m *Manager
	if got, err := m.Credentials(context.Background(), "reg.example/app"); got != nil || err != nil {
		t.Errorf("Credentials = %v, %v", got, err)
	}
	if l := m.ForPod(saPod("a", "")); l != nil {
		t.Errorf("ForPod = %#v, want nil", l)
	}
}

// What several providers answer is one keyring: the most specific
// registry first, then each registry's credentials in provider order.
func TestKeyringAcrossProviders(t *testing.T) {
	f := newFixture(t, []Provider{plainProvider("first", 0, "*.example"), plainProvider("second", 0, "reg.example")}, nil, Deps{})
	f.run.resp = func(request) (*response, error) {
		n := f.run.runs()
		r := &response{cacheKeyType: credentialproviderv1.ImagePluginCacheKeyType, auth: map[string]credentialproviderv1.AuthConfig{
			"reg.example": {Username: fmt.Sprintf("host-%d", n)}}}
		if n == 2 {
			r.auth["https://reg.example/v2/team"] = credentialproviderv1.AuthConfig{Username: "team-2"}
		}
		return r, nil
	}
	var users []string
	for _, c := range f.creds(t, "reg.example/team/app") {
		users = append(users, c.Source.Provider+":"+c.Auth.Username)
	}
	if want := []string{"second:team-2", "first:host-1", "second:host-2"}; !slices.Equal(users, want) {
		t.Errorf("credentials %v, want %v", users, want)
	}
}
