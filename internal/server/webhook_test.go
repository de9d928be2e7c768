package server

import (
	"context"
	"fmt"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
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
	c := newCachedAuthorizer(webhookAuthorizer{client: rec.clientset()}, 5*time.Minute, 30*time.Second, clk)
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
