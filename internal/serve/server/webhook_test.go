package server

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"testing/quick"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	testingclock "k8s.io/utils/clock/testing"
)

// Bearer tokens go to the API server as TokenReviews; the answer, yes or
// no, is kept for the TTL, and an error is not kept.
func TestTokenReviewer(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC))
	cs := fake.NewClientset()
	reviews := 0
	var fail error
	cs.PrependReactor("create", "tokenreviews", func(a clienttesting.Action) (bool, runtime.Object, error) {
		reviews++
		if fail != nil {
			return true, nil, fail
		}
		tr := a.(clienttesting.CreateAction).GetObject().(*authenticationv1.TokenReview).DeepCopy()
		if tr.Spec.Token == "good" {
			tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true,
				User: authenticationv1.UserInfo{Username: "system:serviceaccount:default:app", UID: "u1", Groups: []string{"system:serviceaccounts"}}}
		}
		return true, tr, nil
	})
	r := NewTokenReviewer(cs, time.Minute, clk)
	ctx := context.Background()
	for range 3 {
		u, ok, err := r.AuthenticateToken(ctx, "good")
		if err != nil || !ok || u.Name != "system:serviceaccount:default:app" || u.Groups[0] != "system:serviceaccounts" {
			t.Fatalf("good token: %+v %v %v", u, ok, err)
		}
		if _, ok, err := r.AuthenticateToken(ctx, "bad"); err != nil || ok {
			t.Fatalf("bad token: %v %v", ok, err)
		}
	}
	if reviews != 2 {
		t.Errorf("%d TokenReviews for 2 tokens within the TTL, want 2", reviews)
	}
	clk.Step(time.Minute)
	fail = fmt.Errorf("apiserver down")
	if _, ok, err := r.AuthenticateToken(ctx, "good"); err == nil || ok {
		t.Errorf("expired entry with the API down: ok %v err %v, want an error", ok, err)
	}
	fail = nil
	if _, ok, _ := r.AuthenticateToken(ctx, "good"); !ok || reviews != 4 {
		t.Errorf("after an error the token is reviewed again: ok %v, %d reviews", ok, reviews)
	}
}

// SubjectAccessReview answers are kept: allowed ones longer than denied
// ones; the cache holds a bounded number of entries.
func TestAuthorizationCache(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC))
	rec := &sarRecorder{allow: func(s authorizationv1.SubjectAccessReviewSpec) bool { return s.User == "admin" }}
	c := newCachedAuthorizer(newWebhookAuthorizer(rec.clientset()), 5*time.Minute, 30*time.Second, clk)
	ctx := context.Background()
	attrs := func(user string) Attributes {
		return Attributes{User: UserInfo{Name: user}, Verb: "get", Resource: "nodes", Subresource: "proxy", Name: "node-a"}
	}
	check := func(user string, want bool, sars int) {
		t.Helper()
		ok, _, err := c.Authorize(ctx, attrs(user))
		if err != nil || ok != want {
			t.Fatalf("%s: %v %v", user, ok, err)
		}
		if n := len(rec.take()); n != sars {
			t.Fatalf("%s: %d SARs, want %d", user, n, sars)
		}
	}
	check("admin", true, 1)
	check("admin", true, 0)
	check("eve", false, 1)
	check("eve", false, 0)
	clk.Step(31 * time.Second)
	check("eve", false, 1)
	check("admin", true, 0)
	clk.Step(5 * time.Minute)
	check("admin", true, 1)

	for i := range 2 * webhookCacheSize {
		c.cache.put(fmt.Sprint(i), decision{}, time.Hour)
	}
	if n := len(c.cache.entries); n > webhookCacheSize {
		t.Errorf("cache holds %d entries, bound %d", n, webhookCacheSize)
	}
}

// A cache TTL of 0 keeps nothing: every token is reviewed every time.
func TestTokenReviewerTTLZeroCachesNothing(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC))
	cs := fake.NewClientset()
	reviews := 0
	cs.PrependReactor("create", "tokenreviews", func(a clienttesting.Action) (bool, runtime.Object, error) {
		reviews++
		tr := a.(clienttesting.CreateAction).GetObject().(*authenticationv1.TokenReview).DeepCopy()
		tr.Status = authenticationv1.TokenReviewStatus{Authenticated: tr.Spec.Token == "good", User: authenticationv1.UserInfo{Username: "u"}}
		return true, tr, nil
	})
	r := NewTokenReviewer(cs, 0, clk)
	for range 3 {
		if _, ok, err := r.AuthenticateToken(t.Context(), "good"); !ok || err != nil {
			t.Fatalf("good: %v %v", ok, err)
		}
		if _, ok, err := r.AuthenticateToken(t.Context(), "bad"); ok || err != nil {
			t.Fatalf("bad: %v %v", ok, err)
		}
	}
	if reviews != 6 {
		t.Errorf("%d TokenReviews for 6 lookups with TTL 0, want 6", reviews)
	}
}

// A TTL of 0 for one kind of answer keeps none of that kind.
func TestAuthorizationCacheTTLZero(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC))
	for _, tc := range []struct {
		allowed, denied time.Duration
		wantAdmin       int // SARs for three asks each
		wantEve         int
	}{
		{0, 30 * time.Second, 3, 1},
		{5 * time.Minute, 0, 1, 3},
		{0, 0, 3, 3},
	} {
		rec := &sarRecorder{allow: func(s authorizationv1.SubjectAccessReviewSpec) bool { return s.User == "admin" }}
		c := newCachedAuthorizer(newWebhookAuthorizer(rec.clientset()), tc.allowed, tc.denied, clk)
		for _, u := range []struct {
			name string
			want int
		}{{"admin", tc.wantAdmin}, {"eve", tc.wantEve}} {
			for range 3 {
				if _, _, err := c.Authorize(t.Context(), Attributes{User: UserInfo{Name: u.name}, Verb: "get", Resource: "nodes", Name: "n"}); err != nil {
					t.Fatal(err)
				}
			}
			if n := len(rec.take()); n != u.want {
				t.Errorf("TTLs %v/%v, %s: %d SARs, want %d", tc.allowed, tc.denied, u.name, n, u.want)
			}
		}
	}
}

// The user's extra fields from the TokenReview go into the
// SubjectAccessReview, and the review names no audiences (as the
// kubelet's); two tokens of users differing only in extra are asked
// about apart.
func TestTokenExtraReachesTheSAR(t *testing.T) {
	cs := fake.NewClientset()
	extra := map[string]map[string]authenticationv1.ExtraValue{
		"tok-a": {"authentication.kubernetes.io/pod-name": {"web-0"}, "scopes": {"read", "logs"}},
		"tok-b": {"authentication.kubernetes.io/pod-name": {"web-1"}, "scopes": {"read", "logs"}},
	}
	cs.PrependReactor("create", "tokenreviews", func(a clienttesting.Action) (bool, runtime.Object, error) {
		tr := a.(clienttesting.CreateAction).GetObject().(*authenticationv1.TokenReview).DeepCopy()
		if len(tr.Spec.Audiences) != 0 {
			t.Errorf("TokenReview audiences %q, want none", tr.Spec.Audiences)
		}
		tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true,
			User: authenticationv1.UserInfo{Username: "system:serviceaccount:default:app", UID: "u1", Extra: extra[tr.Spec.Token]}}
		return true, tr, nil
	})
	rec := &sarRecorder{allow: func(s authorizationv1.SubjectAccessReviewSpec) bool {
		return slices.Equal(s.Extra["authentication.kubernetes.io/pod-name"], []string{"web-0"})
	}}
	clk := testingclock.NewFakeClock(time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC))
	deps, _, _ := testDeps()
	s := newTestServer(t, Config{AuthorizationMode: AuthorizationWebhook, SAR: rec.clientset(), AuthorizedTTL: time.Minute, UnauthorizedTTL: time.Minute,
		TokenReview: NewTokenReviewer(cs, time.Minute, clk), NodeName: "node-a"}, deps)
	if code, body := do(t, s, "GET", "/pods", bearer("tok-a")); code != http.StatusOK {
		t.Errorf("tok-a: %d %q", code, body)
	}
	specs := rec.take()
	if len(specs) == 0 || !slices.Equal(specs[0].Extra["scopes"], []string{"read", "logs"}) || specs[0].UID != "u1" {
		t.Fatalf("SAR specs %+v: want the token's extra and UID", specs)
	}
	if code, body := do(t, s, "GET", "/pods", bearer("tok-b")); code != http.StatusForbidden {
		t.Errorf("tok-b (other extra, cached answer of tok-a must not apply): %d %q", code, body)
	}
}

// blockingReviews never answer: they wait for the call's context.
type blockingReviews struct{ deadlines chan time.Duration }

func (b blockingReviews) wait(ctx context.Context) error {
	dl, ok := ctx.Deadline()
	if !ok {
		dl = time.Time{}
	}
	b.deadlines <- time.Until(dl)
	<-ctx.Done()
	return ctx.Err()
}

func (b blockingReviews) Create(ctx context.Context, _ *authenticationv1.TokenReview, _ metav1.CreateOptions) (*authenticationv1.TokenReview, error) {
	return nil, b.wait(ctx)
}

type blockingSARs struct{ blockingReviews }

func (b blockingSARs) Create(ctx context.Context, _ *authorizationv1.SubjectAccessReview, _ metav1.CreateOptions) (*authorizationv1.SubjectAccessReview, error) {
	return nil, b.wait(ctx)
}

// Each review call has its own timeout, whatever the request's context.
func TestReviewsTimeOut(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Now())
	if got := NewTokenReviewer(fake.NewClientset(), time.Minute, clk).timeout; got != 10*time.Second {
		t.Errorf("TokenReview timeout %v, want 10s", got)
	}
	if got := newWebhookAuthorizer(fake.NewClientset()).timeout; got != 10*time.Second {
		t.Errorf("SAR timeout %v, want 10s", got)
	}
	b := blockingReviews{deadlines: make(chan time.Duration, 2)}
	tr := NewTokenReviewer(fake.NewClientset(), time.Minute, clk)
	tr.reviews, tr.timeout = b, 50*time.Millisecond
	if _, ok, err := tr.AuthenticateToken(context.Background(), "tok"); ok || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("TokenReview: %v %v, want a deadline error", ok, err)
	}
	w := webhookAuthorizer{reviews: blockingSARs{b}, timeout: 50 * time.Millisecond}
	if ok, _, err := w.Authorize(context.Background(), Attributes{User: UserInfo{Name: "u"}, Verb: "get"}); ok || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("SAR: %v %v, want a deadline error", ok, err)
	}
	for range 2 {
		if d := <-b.deadlines; d <= 0 || d > 50*time.Millisecond {
			t.Errorf("review called with %v left, want at most 50ms", d)
		}
	}
}

// Identities and questions that differ only where a joined key would
// blur them are cached apart.
func TestDecisionKeysDiffer(t *testing.T) {
	base := Attributes{User: UserInfo{Name: "alice", UID: "1", Groups: []string{"a", "b"}}, Verb: "get", Resource: "nodes", Subresource: "proxy", Name: "n"}
	for name, mutate := range map[string]func(*Attributes){
		"groups joined":     func(a *Attributes) { a.User.Groups = []string{"a,b"} },
		"groups split":      func(a *Attributes) { a.User.Groups = []string{"a", "", "b"} },
		"group order":       func(a *Attributes) { a.User.Groups = []string{"b", "a"} },
		"uid":               func(a *Attributes) { a.User.UID = "2" },
		"uid into name":     func(a *Attributes) { a.User.Name, a.User.UID = "alice\x001", "" },
		"extra":             func(a *Attributes) { a.User.Extra = map[string][]string{"scopes": {"x"}} },
		"extra value split": func(a *Attributes) { a.User.Extra = map[string][]string{"scopes": {"x", "y"}} },
		"subresource":       func(a *Attributes) { a.Subresource = "log" },
		"name":              func(a *Attributes) { a.Name = "m" },
		"verb":              func(a *Attributes) { a.Verb = "create" },
	} {
		b := base
		b.User = base.User.clone()
		mutate(&b)
		ka, _ := decisionKey(base)
		kb, _ := decisionKey(b)
		if ka == kb {
			t.Errorf("%s: same key %q", name, ka)
		}
	}
	x := base
	x.User = base.User.clone()
	x.User.Extra = map[string][]string{"scopes": {"x,y"}}
	y := base
	y.User = base.User.clone()
	y.User.Extra = map[string][]string{"scopes": {"x", "y"}}
	if kx, _ := decisionKey(x); kx == func() string { k, _ := decisionKey(y); return k }() {
		t.Errorf("extra [\"x,y\"] and [\"x\",\"y\"] share a key")
	}
}

// quickAttrs are attributes built from few, separator-laden strings, so
// that random pairs often differ in one place only.
type quickAttrs Attributes

func (quickAttrs) Generate(r *rand.Rand, _ int) reflect.Value {
	atoms := []string{"", "a", "b", ",", "\x00", "\"", ":", "a,b", "=", "system:authenticated"}
	str := func() string {
		var sb strings.Builder
		for range r.Intn(3) {
			sb.WriteString(atoms[r.Intn(len(atoms))])
		}
		return sb.String()
	}
	list := func() []string {
		var l []string
		for range r.Intn(3) {
			l = append(l, str())
		}
		return l
	}
	a := Attributes{User: UserInfo{Name: str(), UID: str(), Groups: list()}, Verb: []string{"get", "create"}[r.Intn(2)],
		Resource: "nodes", Subresource: []string{"proxy", "log", "pods"}[r.Intn(3)], Name: str()}
	if r.Intn(2) == 0 {
		a.User.Extra = map[string][]string{}
		for range 1 + r.Intn(2) {
			a.User.Extra[str()] = list()
		}
	}
	return reflect.ValueOf(quickAttrs(a))
}

// specAuthorizer decides by the whole SAR spec (a digest's parity), and
// counts its calls.
type specAuthorizer struct{ calls int }

func (s *specAuthorizer) Authorize(_ context.Context, a Attributes) (bool, string, error) {
	s.calls++
	b, _ := json.Marshal(sarSpec(a))
	sum := sha256.Sum256(b)
	return sum[0]&1 == 1, "", nil
}

// Property: whatever identities and questions come, in whatever order,
// the cache answers each as the API server would have: two different
// review specs never share an entry.
func TestCacheNeverConfusesSpecs(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Now())
	prop := func(as []quickAttrs) bool {
		next := &specAuthorizer{}
		c := newCachedAuthorizer(next, time.Hour, time.Hour, clk)
		for _, qa := range as {
			a := Attributes(qa)
			want, _, _ := (&specAuthorizer{}).Authorize(t.Context(), a)
			got, _, err := c.Authorize(t.Context(), a)
			if err != nil || got != want {
				t.Logf("spec %+v: cached %v, want %v (%v)", sarSpec(a), got, want, err)
				return false
			}
		}
		return true
	}
	if err := quick.Check(prop, &quick.Config{MaxCount: 500}); err != nil {
		t.Error(err)
	}
}
