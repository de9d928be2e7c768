// Package token is beside the pipeline (volumes, cluster mode): the
// service account tokens of serviceAccountToken projections, issued by the
// API server's TokenRequest API (serviceaccounts/<name>/token) and bound to
// the pod, cached and refreshed by the kubelet's token manager rules
// (pkg/kubelet/token):
//
//   - a token is cached per service account, audience, lifetime and bound
//     pod (name and UID);
//   - it is refreshed once 80% of its lifetime has passed, or once it is
//     older than 24 hours, whichever comes first;
//   - a refresh that fails keeps the cached token while it is still valid
//     (logged), and is an error once it has expired;
//   - Forget drops a pod's tokens (its volumes were torn down), and expired
//     tokens are dropped on the way.
//
// The refresh happens when a token is asked for: volume.Manager asks on
// every SetUp, which the pod workers run on every sync (each resync
// period at least), and writes the new token atomically.
package token

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/utils/clock"
)

// maxAge is the age past which a token is refreshed whatever its lifetime
// (the kubelet's maxTTL).
const maxAge = 24 * time.Hour

// refreshPercent is how much of its lifetime a token may use up before it
// is refreshed.
const refreshPercent = 80

// Manager issues and caches service account tokens. It is safe for
// concurrent use; it starts nothing.
type Manager struct {
	client corev1client.ServiceAccountsGetter
	clock  clock.Clock
	log    *slog.Logger

	mu    sync.Mutex
	cache map[key]entry
}

// key is what a token is cached by. It holds nothing secret.
type key struct {
	namespace, serviceAccount, audience string
	expirationSeconds                   int64
	podName                             string
	podUID                              types.UID
}

// entry is a cached token.
type entry struct {
	token string
	// issued and expires bound its lifetime.
	issued, expires time.Time
}

// New returns a Manager asking client (a clientset's CoreV1()) for tokens.
func New(client corev1client.ServiceAccountsGetter, clk clock.Clock, log *slog.Logger) *Manager {
	return &Manager{client: client, clock: clk, log: log, cache: map[key]entry{}}
}

// Token returns a token of the pod's service account ("default" when the
// spec names none) for audience ("" for the API server's own), bound to
// the pod, valid for expirationSeconds (the API server may shorten it).
// It is the cached token unless that needs a refresh (see the package
// doc).
func (m *Manager) Token(ctx context.Context, pod *v1.Pod, audience string, expirationSeconds int64) (string, error) {
	k := key{
		namespace: pod.Namespace, serviceAccount: serviceAccount(pod), audience: audience,
		expirationSeconds: expirationSeconds, podName: pod.Name, podUID: pod.UID,
	}
	now := m.clock.Now()
	m.mu.Lock()
	cached, ok := m.cache[k]
	m.mu.Unlock()
	if ok && !needsRefresh(cached, now) {
		return cached.token, nil
	}

	fresh, err := m.request(ctx, k)
	// The Node authorizer learns that a pod is bound to this node a
	// moment after the node does: a first token for a pod just bound can
	// be refused ("pod scheduled on a different node") for that moment.
	// The NodeRestriction admission plugin reads the pod from an informer
	// of its own, which can lag the watch nodelet learnt of the pod from:
	// the request then fails with the pod not found. Asked again shortly,
	// as the kubelet's volume manager retries within the same sync, rather
	// than failing the pod's sync for a back-off.
	delay := lagRetryDelay
	for attempt := 0; err != nil && !ok && notYetKnown(err) && attempt < lagRetries; attempt++ {
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-m.clock.After(delay):
		}
		delay *= 2
		fresh, err = m.request(ctx, k)
	}
	if err != nil {
		switch {
		case !ok:
			return "", fmt.Errorf("requesting a token of service account %s/%s: %w", k.namespace, k.serviceAccount, err)
		case !now.Before(cached.expires):
			return "", fmt.Errorf("the token of service account %s/%s expired and its refresh failed: %w", k.namespace, k.serviceAccount, err)
		default:
			m.log.Warn("Could not refresh a service account token; the cached one is still valid",
				"pod", pod.Namespace+"/"+pod.Name, "podUID", pod.UID, "serviceAccount", k.serviceAccount,
				"expires", cached.expires, "err", err)
			return cached.token, nil
		}
	}
	m.mu.Lock()
	m.dropExpiredLocked(now)
	m.cache[k] = fresh
	m.mu.Unlock()
	return fresh.token, nil
}

// notYetKnown: the API server refused a first token in a way that can
// mean its view of the pod lags nodelet's: Forbidden (the Node
// authorizer's graph), or the bound pod not found (NodeRestriction's pod
// informer; the service account missing is not retried).
func notYetKnown(err error) bool {
	if apierrors.IsForbidden(err) {
		return true
	}
	var status apierrors.APIStatus
	if !apierrors.IsNotFound(err) || !errors.As(err, &status) {
		return false
	}
	d := status.Status().Details
	return d != nil && (d.Kind == "pod" || d.Kind == "pods")
}

// A first token refused as notYetKnown is asked again lagRetries
// times, lagRetryDelay apart at first, doubling (3.1 s in all).
const (
	lagRetries    = 5
	lagRetryDelay = 100 * time.Millisecond
)

// Forget drops every token bound to the pod.
func (m *Manager) Forget(podUID types.UID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k := range m.cache {
		if k.podUID == podUID {
			delete(m.cache, k)
		}
	}
}

// Cached is how many tokens are cached (for tests and metrics).
func (m *Manager) Cached() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.cache)
}

// request asks the TokenRequest API for a token bound to the pod.
func (m *Manager) request(ctx context.Context, k key) (entry, error) {
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: &k.expirationSeconds,
		BoundObjectRef:    &authenticationv1.BoundObjectReference{APIVersion: "v1", Kind: "Pod", Name: k.podName, UID: k.podUID},
	}}
	if k.audience != "" {
		tr.Spec.Audiences = []string{k.audience}
	}
	got, err := m.client.ServiceAccounts(k.namespace).CreateToken(ctx, k.serviceAccount, tr, metav1.CreateOptions{})
	if err != nil {
		return entry{}, err
	}
	if got.Status.Token == "" || got.Status.ExpirationTimestamp.IsZero() {
		return entry{}, fmt.Errorf("the API server returned no token or no expiration")
	}
	lifetime := k.expirationSeconds
	if got.Spec.ExpirationSeconds != nil {
		lifetime = *got.Spec.ExpirationSeconds // what the server granted
	}
	expires := got.Status.ExpirationTimestamp.Time
	return entry{token: got.Status.Token, expires: expires, issued: expires.Add(-time.Duration(lifetime) * time.Second)}, nil
}

// needsRefresh reports whether a token is older than 80% of its lifetime
// or than 24 hours at now.
func needsRefresh(e entry, now time.Time) bool {
	if !now.Before(e.issued.Add(maxAge)) {
		return true
	}
	lifetime := e.expires.Sub(e.issued)
	return !now.Before(e.issued.Add(lifetime * refreshPercent / 100))
}

func (m *Manager) dropExpiredLocked(now time.Time) {
	for k, e := range m.cache {
		if !now.Before(e.expires) {
			delete(m.cache, k)
		}
	}
}

func serviceAccount(pod *v1.Pod) string {
	if pod.Spec.ServiceAccountName != "" {
		return pod.Spec.ServiceAccountName
	}
	return "default"
}
