package token

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"context"
	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
)

// issuer answers TokenRequests on a fake clientset: token "tok-N", valid
// from the fake clock's now for what was asked (or grant seconds, when
// set), and records each request.
type issuer struct {
	clock *clocktesting.FakeClock
	grant int64
	fail  error

	mu       sync.Mutex
	attempts int // every request, refused or not
	requests []*authenticationv1.TokenRequest
	names    []string
}

func (is *issuer) react(action k8stesting.Action) (bool, runtime.Object, error) {
	create := action.(k8stesting.CreateAction)
	if create.GetSubresource() != "token" {
		return false, nil, nil
	}
	is.mu.Lock()
	defer is.mu.Unlock()
	is.attempts++
	if is.fail != nil {
		return true, nil, is.fail
	}
	tr := create.GetObject().(*authenticationv1.TokenRequest).DeepCopy()
	is.requests = append(is.requests, tr)
	is.names = append(is.names, action.GetNamespace()+"/"+create.(k8stesting.CreateActionImpl).Name)
	lifetime := *tr.Spec.ExpirationSeconds
	if is.grant != 0 {
		lifetime = is.grant
		tr.Spec.ExpirationSeconds = &lifetime
	}
	tr.Status.Token = fmt.Sprintf("tok-%d", len(is.requests))
	tr.Status.ExpirationTimestamp = metav1.NewTime(is.clock.Now().Add(time.Duration(lifetime) * time.Second))
	return true, tr, nil
}

func (is *issuer) count() int {
	is.mu.Lock()
	defer is.mu.Unlock()
	return len(is.requests)
}

func newManager(t *testing.T) (*Manager, *issuer) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	is := &issuer{clock: clk}
	client := fake.NewClientset()
	client.PrependReactor("create", "serviceaccounts", is.react)
	return New(client.CoreV1(), clk, slog.New(slog.DiscardHandler)), is
}

func pod(uid string) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "web-" + uid, UID: types.UID(uid)},
		Spec: v1.PodSpec{ServiceAccountName: "builder"}}
}

func token(t *testing.T, m *Manager, p *v1.Pod, audience string, seconds int64) string {
	t.Helper()
	tok, err := m.Token(t.Context(), p, audience, seconds)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// The request names the service account and binds the token to the pod.
func TestTokenRequest(t *testing.T) {
	m, is := newManager(t)
	if got := token(t, m, pod("a"), "vault", 3600); got != "tok-1" {
		t.Fatalf("token %q", got)
	}
	tr := is.requests[0]
	ref := tr.Spec.BoundObjectRef
	if is.names[0] != "app/builder" || ref == nil || ref.Kind != "Pod" || ref.APIVersion != "v1" || ref.Name != "web-a" || ref.UID != "a" {
		t.Errorf("request for %s bound to %+v", is.names[0], ref)
	}
	if len(tr.Spec.Audiences) != 1 || tr.Spec.Audiences[0] != "vault" || *tr.Spec.ExpirationSeconds != 3600 {
		t.Errorf("audiences %v, expirationSeconds %d", tr.Spec.Audiences, *tr.Spec.ExpirationSeconds)
	}

	// No audience asks for the API server's (none in the request); no
	// service account is "default". Each is a token of its own.
	p := pod("a")
	p.Spec.ServiceAccountName = ""
	if got := token(t, m, p, "", 3600); got != "tok-2" {
		t.Errorf("token %q, want a new one", got)
	}
	if is.names[1] != "app/default" || len(is.requests[1].Spec.Audiences) != 0 {
		t.Errorf("request for %s with audiences %v", is.names[1], is.requests[1].Spec.Audiences)
	}
}

// A token is refreshed once 80% of its lifetime has passed, not before.
func TestRefreshAtEightyPercent(t *testing.T) {
	m, is := newManager(t)
	clk := is.clock
	p := pod("a")
	token(t, m, p, "", 3600)
	clk.Step(2880*time.Second - time.Nanosecond)
	if got := token(t, m, p, "", 3600); got != "tok-1" || is.count() != 1 {
		t.Errorf("just before 80%%: token %q after %d requests, want the cached tok-1", got, is.count())
	}
	clk.Step(time.Nanosecond)
	if got := token(t, m, p, "", 3600); got != "tok-2" {
		t.Errorf("at 80%% of the lifetime: token %q, want a refreshed tok-2", got)
	}
	// The new token's lifetime counts from its own issue.
	clk.Step(2000 * time.Second)
	if got := token(t, m, p, "", 3600); got != "tok-2" {
		t.Errorf("token %q, want tok-2 until 80%% of its own lifetime", got)
	}
}

// The lifetime the server grants counts, not the one asked for.
func TestRefreshByGrantedLifetime(t *testing.T) {
	m, is := newManager(t)
	is.grant = 600
	p := pod("a")
	token(t, m, p, "", 3600)
	is.clock.Step(480 * time.Second)
	if got := token(t, m, p, "", 3600); got != "tok-2" {
		t.Errorf("at 80%% of the granted 600s: token %q, want tok-2", got)
	}
}

// A token valid for longer than a day is refreshed after 24 hours.
func TestRefreshAfterADay(t *testing.T) {
	m, is := newManager(t)
	week := int64(7 * 24 * 3600)
	p := pod("a")
	token(t, m, p, "", week)
	is.clock.Step(24*time.Hour - time.Second)
	if got := token(t, m, p, "", week); got != "tok-1" {
		t.Errorf("before a day: token %q", got)
	}
	is.clock.Step(time.Second)
	if got := token(t, m, p, "", week); got != "tok-2" {
		t.Errorf("after a day: token %q, want tok-2", got)
	}
}

// A failed refresh keeps the cached token while it is valid, and is an
// error once it has expired; a first request that fails is an error.
func TestRefreshFailure(t *testing.T) {
	m, is := newManager(t)
	p := pod("a")
	token(t, m, p, "", 3600)
	is.fail = errors.New("apiserver down")
	is.clock.Step(3000 * time.Second)
	if got, err := m.Token(t.Context(), p, "", 3600); err != nil || got != "tok-1" {
		t.Errorf("refresh failing while valid: %q, %v; want the cached tok-1", got, err)
	}
	is.clock.Step(600 * time.Second)
	if _, err := m.Token(t.Context(), p, "", 3600); err == nil {
		t.Error("refresh failing after expiry: no error")
	}
	if _, err := m.Token(t.Context(), pod("b"), "", 3600); err == nil {
		t.Error("first request failing: no error")
	}
	is.fail = nil
	if got := token(t, m, p, "", 3600); got != "tok-2" {
		t.Errorf("after the API server came back: %q", got)
	}
}

// Forget drops a pod's tokens; expired tokens go on the next issue.
func TestForgetAndExpiry(t *testing.T) {
	m, is := newManager(t)
	token(t, m, pod("a"), "", 3600)
	token(t, m, pod("a"), "vault", 3600)
	token(t, m, pod("b"), "", 600)
	if m.Cached() != 3 {
		t.Fatalf("cached %d", m.Cached())
	}
	m.Forget("a")
	if m.Cached() != 1 {
		t.Errorf("after Forget(a): cached %d, want 1", m.Cached())
	}
	if got := token(t, m, pod("a"), "", 3600); got != "tok-4" {
		t.Errorf("after Forget: %q, want a new token", got)
	}
	is.clock.Step(601 * time.Second)
	token(t, m, pod("c"), "", 3600)
	if m.Cached() != 2 {
		t.Errorf("cached %d, want 2 (b's expired token dropped)", m.Cached())
	}
}

// A first token refused because the API server's view of the pod lags
// nodelet's (Forbidden: the Node authorizer has not seen the pod's
// binding yet; the pod not found: NodeRestriction's informer has not seen
// the pod) is asked again shortly within the same call; a refusal that
// lasts is an error after a bounded wait.
func TestNotYetKnownRetriedShortly(t *testing.T) {
	for name, refusal := range map[string]error{
		"forbidden": apierrors.NewForbidden(schema.GroupResource{Resource: "serviceaccounts"}, "builder",
			errors.New("node requested token bound to a pod scheduled on a different node")),
		"pod not found": apierrors.NewNotFound(schema.GroupResource{Resource: "pod"}, "web-a"),
	} {
		t.Run(name, func(t *testing.T) {
			m, is := newManager(t)
			clk := is.clock
			is.mu.Lock()
			is.fail = refusal
			is.mu.Unlock()
			done := callToken(m, "a")
			for !clk.HasWaiters() {
				time.Sleep(time.Millisecond)
			}
			clk.Step(100 * time.Millisecond) // first retry: still refused
			for !clk.HasWaiters() {
				time.Sleep(time.Millisecond)
			}
			is.mu.Lock()
			is.fail = nil
			is.mu.Unlock()
			clk.Step(200 * time.Millisecond)
			if r := <-done; r.err != nil || r.tok == "" {
				t.Fatalf("Token once the API server knew the pod: %q %v", r.tok, r.err)
			}

			is.mu.Lock()
			is.fail = refusal
			is.mu.Unlock()
			done = callToken(m, "b")
			for i := 0; i < lagRetries; i++ {
				for !clk.HasWaiters() {
					time.Sleep(time.Millisecond)
				}
				clk.Step(2 * time.Second)
			}
			if r := <-done; r.err == nil || !errors.Is(r.err, refusal) {
				t.Fatalf("a lasting refusal: %q %v, want %v", r.tok, r.err, refusal)
			}
		})
	}
}

// A missing service account is not a lag: the error comes at once, after
// one request.
func TestMissingServiceAccountNotRetried(t *testing.T) {
	m, is := newManager(t)
	missing := apierrors.NewNotFound(schema.GroupResource{Resource: "serviceaccounts"}, "builder")
	is.fail = missing
	if _, err := m.Token(t.Context(), pod("a"), "", 3600); !errors.Is(err, missing) {
		t.Fatalf("Token: %v, want %v", err, missing)
	}
	if is.attempts != 1 {
		t.Errorf("%d requests, want 1", is.attempts)
	}
}

type tokenResult struct {
	tok string
	err error
}

// callToken asks m for a token of pod(uid) in a goroutine of its own.
func callToken(m *Manager, uid string) chan tokenResult {
	done := make(chan tokenResult, 1)
	go func() {
		tok, err := m.Token(context.Background(), pod(uid), "", 3600)
		done <- tokenResult{tok, err}
	}()
	return done
}

func TestServiceAccounts(t *testing.T) {
	client := fake.NewClientset(&v1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "builder", Namespace: "ns", UID: "sa-uid",
		Annotations: map[string]string{"registry.io/role": "pull"}}})
	s := NewServiceAccounts(client.CoreV1())
	sa, err := s.ServiceAccount(context.Background(), "ns", "builder")
	if err != nil || sa.UID != "sa-uid" || sa.Annotations["registry.io/role"] != "pull" {
		t.Errorf("ServiceAccount = %+v, %v", sa, err)
	}
	if _, err := s.ServiceAccount(context.Background(), "other", "builder"); !apierrors.IsNotFound(err) {
		t.Errorf("another namespace's: %v", err)
	}
}
