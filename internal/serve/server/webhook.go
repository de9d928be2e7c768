package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
)

// Webhook settings. The cache lifetimes are the kubelet's defaults
// (authentication.webhook.cacheTTL 2m; authorization.webhook
// cacheAuthorizedTTL 5m and cacheUnauthorizedTTL 30s, which nodeconfig
// sets).
const (
	DefaultTokenCacheTTL = 2 * time.Minute
	// webhookTimeout bounds each TokenReview and SubjectAccessReview
	// call: the delegated authentication and authorization defaults of
	// k8s.io/apiserver (pkg/server/options: TokenRequestTimeout and
	// ClientTimeout, 10s), which a component that asks the API server
	// about its own clients uses.
	webhookTimeout = 10 * time.Second
	// webhookCacheSize bounds each cache: a client sending many tokens or
	// paths cannot grow nodelet's memory.
	webhookCacheSize = 4096
)

// tokenReviewCreator is the one call of the TokenReview API the
// TokenReviewer makes.
type tokenReviewCreator interface {
	Create(ctx context.Context, tr *authenticationv1.TokenReview, opts metav1.CreateOptions) (*authenticationv1.TokenReview, error)
}

// TokenReviewer resolves bearer tokens with TokenReviews against the API
// server (authentication.webhook), caching each answer, yes or no, for
// ttl (0: none); errors are not cached. Tokens are kept only as SHA-256
// digests. As the kubelet's, the reviews name no audiences: the API
// server checks the token against its own (the kubelet's
// DelegatingAuthenticatorConfig sets no APIAudiences).
type TokenReviewer struct {
	reviews tokenReviewCreator
	ttl     time.Duration
	timeout time.Duration
	cache   *ttlCache[tokenAnswer]
}

type tokenAnswer struct {
	user UserInfo
	ok   bool
}

// NewTokenReviewer returns a TokenReviewer that caches answers for ttl;
// 0 caches nothing (the kubelet's authentication.webhook.cacheTTL: a
// file's 0s is its default, 2m, which nodeconfig applies).
func NewTokenReviewer(client kubernetes.Interface, ttl time.Duration, clk clock.PassiveClock) *TokenReviewer {
	return &TokenReviewer{reviews: client.AuthenticationV1().TokenReviews(), ttl: ttl, timeout: webhookTimeout,
		cache: newTTLCache[tokenAnswer](webhookCacheSize, clk)}
}

// AuthenticateToken implements TokenAuthenticator.
func (t *TokenReviewer) AuthenticateToken(ctx context.Context, token string) (UserInfo, bool, error) {
	sum := sha256.Sum256([]byte(token))
	key := hex.EncodeToString(sum[:])
	if a, ok := t.cache.get(key); ok {
		return a.user.clone(), a.ok, nil
	}
	ctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	tr := &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}
	resp, err := t.reviews.Create(ctx, tr, metav1.CreateOptions{})
	if err != nil {
		return UserInfo{}, false, fmt.Errorf("token review: %w", err)
	}
	st := resp.Status
	a := tokenAnswer{ok: st.Authenticated && st.Error == ""}
	if a.ok {
		// The response is this call's own: the cache keeps it as it is,
		// and every caller gets its own copy (clone).
		a.user = UserInfo{Name: st.User.Username, UID: st.User.UID, Groups: st.User.Groups}
		if len(st.User.Extra) > 0 {
			a.user.Extra = make(map[string][]string, len(st.User.Extra))
			for k, v := range st.User.Extra {
				a.user.Extra[k] = v
			}
		}
	}
	if t.ttl > 0 {
		t.cache.put(key, a, t.ttl)
	}
	return a.user.clone(), a.ok, nil
}

// cachedAuthorizer remembers an authorizer's decisions: allowed ones for
// allowedTTL, denied ones for deniedTTL (0: not at all), errors not at
// all. A decision is known by the whole SubjectAccessReview spec the
// attributes make (as the API server's webhook authorizer keys its cache
// on the spec's JSON): two requests share an entry only when the API
// server would be asked exactly the same question.
type cachedAuthorizer struct {
	next                  Authorizer
	allowedTTL, deniedTTL time.Duration
	cache                 *ttlCache[decision]
}

type decision struct {
	allowed bool
	why     string
}

func newCachedAuthorizer(next Authorizer, allowedTTL, deniedTTL time.Duration, clk clock.PassiveClock) *cachedAuthorizer {
	return &cachedAuthorizer{next: next, allowedTTL: allowedTTL, deniedTTL: deniedTTL,
		cache: newTTLCache[decision](webhookCacheSize, clk)}
}

// decisionKey is the JSON of the SubjectAccessReview spec a makes: JSON
// quotes every string and sorts the Extra map's keys, so no two specs
// share a key.
func decisionKey(a Attributes) (string, error) {
	b, err := json.Marshal(sarSpec(a))
	if err != nil {
		return "", fmt.Errorf("cache key: %w", err)
	}
	return string(b), nil
}

func (c *cachedAuthorizer) Authorize(ctx context.Context, a Attributes) (bool, string, error) {
	key, err := decisionKey(a)
	if err != nil {
		return false, "", err
	}
	if d, ok := c.cache.get(key); ok {
		return d.allowed, d.why, nil
	}
	allowed, why, err := c.next.Authorize(ctx, a)
	if err != nil {
		return allowed, why, err
	}
	ttl := c.deniedTTL
	if allowed {
		ttl = c.allowedTTL
	}
	if ttl > 0 {
		c.cache.put(key, decision{allowed: allowed, why: why}, ttl)
	}
	return allowed, why, nil
}

// ttlCache is a map of at most size entries that expire.
type ttlCache[V any] struct {
	size int
	clk  clock.PassiveClock

	mu      sync.Mutex
	entries map[string]ttlEntry[V]
}

type ttlEntry[V any] struct {
	v       V
	expires time.Time
}

func newTTLCache[V any](size int, clk clock.PassiveClock) *ttlCache[V] {
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &ttlCache[V]{size: size, clk: clk, entries: map[string]ttlEntry[V]{}}
}

func (c *ttlCache[V]) get(key string) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[key]
	if !ok || !c.clk.Now().Before(e.expires) {
		var zero V
		return zero, false
	}
	return e.v, true
}

func (c *ttlCache[V]) put(key string, v V, ttl time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clk.Now()
	if len(c.entries) >= c.size {
		for k, e := range c.entries {
			if !now.Before(e.expires) {
				delete(c.entries, k)
			}
		}
	}
	for k := range c.entries { // still full: drop any one
		if len(c.entries) < c.size {
			break
		}
		delete(c.entries, k)
	}
	c.entries[key] = ttlEntry[V]{v: v, expires: now.Add(ttl)}
}
