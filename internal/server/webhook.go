package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
)

// Webhook cache lifetimes, the kubelet's defaults: authentication
// .webhook.cacheTTL 2m, authorization.webhook.cacheAuthorizedTTL 5m and
// cacheUnauthorizedTTL 30s.
const (
	DefaultTokenCacheTTL        = 2 * time.Minute
	DefaultAuthorizedCacheTTL   = 5 * time.Minute
	DefaultUnauthorizedCacheTTL = 30 * time.Second
	// webhookCacheSize bounds each cache: a client sending many tokens or
	// paths cannot grow nodelet's memory.
	webhookCacheSize = 4096
)

// TokenReviewer resolves bearer tokens with TokenReviews against the API
// server (authentication.webhook), caching each answer for TTL. Tokens
// are kept only as SHA-256 digests.
type TokenReviewer struct {
	client kubernetes.Interface
	ttl    time.Duration
	cache  *ttlCache[tokenAnswer]
}

type tokenAnswer struct {
	user UserInfo
	ok   bool
}

// NewTokenReviewer returns a TokenReviewer that caches answers for ttl (0:
// DefaultTokenCacheTTL).
func NewTokenReviewer(client kubernetes.Interface, ttl time.Duration, clk clock.PassiveClock) *TokenReviewer {
	if ttl <= 0 {
		ttl = DefaultTokenCacheTTL
	}
	return &TokenReviewer{client: client, ttl: ttl, cache: newTTLCache[tokenAnswer](webhookCacheSize, clk)}
}

// AuthenticateToken implements TokenAuthenticator.
func (t *TokenReviewer) AuthenticateToken(ctx context.Context, token string) (UserInfo, bool, error) {
	sum := sha256.Sum256([]byte(token))
	key := hex.EncodeToString(sum[:])
	if a, ok := t.cache.get(key); ok {
		return a.user, a.ok, nil
	}
	tr := &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}
	resp, err := t.client.AuthenticationV1().TokenReviews().Create(ctx, tr, metav1.CreateOptions{})
	if err != nil {
		return UserInfo{}, false, fmt.Errorf("token review: %w", err)
	}
	st := resp.Status
	a := tokenAnswer{ok: st.Authenticated && st.Error == ""}
	if a.ok {
		a.user = UserInfo{Name: st.User.Username, UID: st.User.UID, Groups: st.User.Groups}
	}
	t.cache.put(key, a, t.ttl)
	return a.user, a.ok, nil
}

// cachedAuthorizer remembers an authorizer's decisions: allowed ones for
// allowedTTL, denied ones for deniedTTL, errors not at all.
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

func (c *cachedAuthorizer) Authorize(ctx context.Context, a Attributes) (bool, string, error) {
	key := strings.Join([]string{a.User.Name, a.User.UID, strings.Join(a.User.Groups, ","),
		a.Verb, a.Resource, a.Subresource, a.Name}, "\x00")
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
