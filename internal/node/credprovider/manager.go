package credprovider

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/singleflight"
	v1 "k8s.io/api/core/v1"
	credentialproviderv1 "k8s.io/kubelet/pkg/apis/credentialprovider/v1"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/base/metrics"
	"github.com/nodelet/nodelet/internal/pure/pullcreds"
)

// ReasonFailed is the reason of the warning event on a pod whose pull went
// on without a plugin's credentials (nodelet's own: the kubelet only logs).
const ReasonFailed = "CredentialProviderFailed"

// tokenLifetime is the lifetime asked for a plugin's service account
// token: the TokenRequest API's default, which the kubelet leaves it at.
const tokenLifetime = 3600

// Recorder records an event on a pod.
type Recorder interface {
	Event(pod *v1.Pod, eventType, reason, message string)
}

// Tokens issues service account tokens bound to a pod (cluster mode's
// token manager).
type Tokens interface {
	Token(ctx context.Context, pod *v1.Pod, audience string, expirationSeconds int64) (string, error)
}

// ServiceAccounts reads a service account from the API.
type ServiceAccounts interface {
	ServiceAccount(ctx context.Context, namespace, name string) (*v1.ServiceAccount, error)
}

// Deps are what a Manager uses.
type Deps struct {
	Clock    clock.PassiveClock
	Log      *slog.Logger
	Recorder Recorder
	// Metrics registers the kubelet's credential provider metrics; nil
	// leaves them unregistered.
	Metrics prometheus.Registerer
	// Tokens and ServiceAccounts serve providers in service account token
	// mode; standalone they are nil and such a provider runs without a
	// token where it may (requireServiceAccount: false), as for a pod
	// without a service account.
	Tokens          Tokens
	ServiceAccounts ServiceAccounts
	// Timeout bounds one run of a plugin (0: DefaultTimeout).
	Timeout time.Duration
}

// Manager asks the configured plugins for image credentials. It is safe
// for concurrent use and starts nothing.
type Manager struct {
	providers []*plugin
	deps      Deps
	metrics   *pluginMetrics
}

// plugin is one provider with its cache.
type plugin struct {
	Provider
	cache *cache
	group singleflight.Group
}

// New returns a Manager over the checked cfg.
func New(cfg *Config, deps Deps) *Manager {
	if deps.Timeout == 0 {
		deps.Timeout = DefaultTimeout
	}
	return newManager(cfg, deps, execRunner{binDir: cfg.BinDir, timeout: deps.Timeout})
}

func newManager(cfg *Config, deps Deps, run runner) *Manager {
	m := &Manager{deps: deps, metrics: newPluginMetrics(deps.Metrics, cfg.Hash, run)}
	for _, p := range cfg.Providers {
		m.providers = append(m.providers, &plugin{Provider: p, cache: newCache(deps.Clock.Now())})
	}
	return m
}

// Credentials gives the node-wide credentials for image: the plugins' for
// a pull that is no pod's. A failing plugin is logged and skipped. A nil
// Manager (no plugins configured) gives none.
func (m *Manager) Credentials(ctx context.Context, image string) ([]pullcreds.Credential, error) {
	if m == nil {
		return nil, nil
	}
	return m.credentials(ctx, image, nil), nil
}

// ForPod returns the lookup for pod's pulls: plugins in service account
// token mode get a token of the pod's service account; a failing plugin
// is also a warning event on the pod. A nil Manager gives a nil Lookup,
// which a pullcreds.Union passes over.
func (m *Manager) ForPod(pod *v1.Pod) pullcreds.Lookup {
	if m == nil {
		return nil
	}
	return podLookup{m: m, pod: pod}
}

type podLookup struct {
	m   *Manager
	pod *v1.Pod
}

func (l podLookup) Credentials(ctx context.Context, image string) ([]pullcreds.Credential, error) {
	return l.m.credentials(ctx, image, l.pod), nil
}

// credentials asks every provider whose matchImages match the image's
// repository, and returns what they gave that applies to it, in the
// kubelet's keyring order (pullcreds.Keyring). A provider that fails
// gives nothing.
func (m *Manager) credentials(ctx context.Context, image string, pod *v1.Pod) []pullcreds.Credential {
	repo, err := pullcreds.Repository(image)
	if err != nil {
		m.deps.Log.Warn("Not asking credential providers about an image that does not parse", "image", image, "err", err)
		return nil
	}
	var keyring pullcreds.Keyring
	for _, p := range m.providers {
		if !slices.ContainsFunc(p.MatchImages, func(glob string) bool { return pullcreds.Matches(glob, repo) }) {
			continue
		}
		auth, source, err := m.provide(ctx, p, repo, pod)
		if err != nil {
			m.failed(p, repo, pod, err)
			continue
		}
		keyring.Add(source, auth)
	}
	return keyring.Lookup(repo)
}

// failed logs a provider's failure (with its stderr, never its output)
// and records it on the pod.
func (m *Manager) failed(p *plugin, image string, pod *v1.Pod, err error) {
	args := []any{"provider", p.Name, "image", image, "err", err}
	if s := stderrOf(err); s != "" {
		args = append(args, "stderr", s)
	}
	if pod == nil {
		m.deps.Log.Warn("Failed to get credentials for image from a credential provider; pulling without them", args...)
		return
	}
	args = append(args, "pod", pod.Namespace+"/"+pod.Name, "podUID", pod.UID)
	m.deps.Log.Warn("Failed to get credentials for image from a credential provider; pulling without them", args...)
	if m.deps.Recorder != nil {
		m.deps.Recorder.Event(pod, v1.EventTypeWarning, ReasonFailed,
			fmt.Sprintf("Credential provider %s failed for image %q, pulling without its credentials: %v", p.Name, image, err))
	}
}

// saRequest is what a provider in service account token mode asks with.
type saRequest struct {
	token       string
	annotations map[string]string
	// key is the service account part of the cache key.
	key    string
	source pullcreds.Source
}

// provide returns what p gives for image (cached, or from one run of the
// plugin per image and token at a time), and where it comes from.
func (m *Manager) provide(ctx context.Context, p *plugin, image string, pod *v1.Pod) (pullcreds.Config, pullcreds.Source, error) {
	source := pullcreds.Source{Kind: pullcreds.FromProvider, Provider: p.Name}
	var sa *saRequest
	if p.Token != nil {
		var skip bool
		var err error
		sa, skip, err = m.serviceAccount(ctx, p, pod)
		if err != nil || skip {
			return nil, source, err
		}
		if sa != nil {
			source = sa.source
		}
	}
	saKey, flightKey := "", image
	if sa != nil {
		saKey = sa.key
		flightKey = string(keyBuilder(nil).add(image).add(hashOf(sa.token)).addMap(sa.annotations))
	}
	if auth, ok := p.cache.get(image, saKey, m.deps.Clock.Now()); ok {
		return auth, source, nil
	}
	res, err, _ := p.group.Do(flightKey, func() (any, error) {
		req := request{Image: image}
		if sa != nil {
			req.Token, req.Annotations = sa.token, sa.annotations
		}
		// Not the caller's cancellation: others may share this run; the
		// timeout bounds it.
		return m.metrics.run(context.WithoutCancel(ctx), &p.Provider, req, m.deps.Clock)
	})
	if err != nil {
		return nil, source, err
	}
	resp := res.(*response)
	if sa != nil && sa.token != "" && p.Token.CacheType != CacheToken {
		for _, a := range resp.auth {
			if a.Password == sa.token {
				return nil, source, errors.New("the plugin returned the service account token as a password, which only cacheType Token allows")
			}
		}
	}
	auth := pullcreds.Config{}
	for reg, a := range resp.auth {
		auth[reg] = pullcreds.Entry{Username: a.Username, Password: a.Password}
	}
	m.store(p, image, saKey, resp, auth)
	return auth, source, nil
}

// store caches a response by its cacheKeyType for its cacheDuration, else
// the provider's default; a duration of 0 is not cached.
func (m *Manager) store(p *plugin, image, saKey string, resp *response, auth pullcreds.Config) {
	d := p.DefaultCacheDuration
	if resp.cacheDuration != nil {
		d = *resp.cacheDuration
	}
	if d == 0 {
		return
	}
	base := image
	switch resp.cacheKeyType {
	case credentialproviderv1.RegistryPluginCacheKeyType:
		base = registryOf(image)
	case credentialproviderv1.GlobalPluginCacheKeyType:
		base = globalKey
	}
	p.cache.put(base, saKey, auth, m.deps.Clock.Now().Add(d))
}

// serviceAccount prepares a token-mode request for pod: skip is true when
// the plugin is not to run (no service account but one is required, or a
// required annotation is missing); a nil saRequest without skip runs the
// plugin without a token.
func (m *Manager) serviceAccount(ctx context.Context, p *plugin, pod *v1.Pod) (sa *saRequest, skip bool, err error) {
	name := ""
	if pod != nil {
		name = pod.Spec.ServiceAccountName
	}
	if name == "" {
		return nil, p.Token.RequireServiceAccount, nil
	}
	if m.deps.ServiceAccounts == nil || m.deps.Tokens == nil {
		if p.Token.RequireServiceAccount {
			return nil, false, errors.New("service account tokens need cluster mode (--kubeconfig)")
		}
		return nil, false, nil
	}
	acct, err := m.deps.ServiceAccounts.ServiceAccount(ctx, pod.Namespace, name)
	if err != nil {
		return nil, false, fmt.Errorf("getting service account %s/%s: %w", pod.Namespace, name, err)
	}
	annotations := map[string]string{}
	for _, k := range p.Token.RequiredAnnotations {
		v, ok := acct.Annotations[k]
		if !ok {
			m.deps.Log.Debug("Not running a credential provider: the service account lacks a required annotation",
				"provider", p.Name, "pod", pod.Namespace+"/"+pod.Name, "serviceAccount", name, "annotation", k)
			return nil, true, nil
		}
		annotations[k] = v
	}
	for _, k := range p.Token.OptionalAnnotations {
		if v, ok := acct.Annotations[k]; ok {
			annotations[k] = v
		}
	}
	token, err := m.deps.Tokens.Token(ctx, pod, p.Token.Audience, tokenLifetime)
	if err != nil {
		return nil, false, fmt.Errorf("getting a token of service account %s/%s for audience %q: %w", pod.Namespace, name, p.Token.Audience, err)
	}
	kb := keyBuilder(nil).add(pod.Namespace).add(name).add(string(acct.UID)).addMap(annotations)
	if p.Token.CacheType == CacheToken {
		kb = kb.add("token").add(hashOf(token))
	}
	return &saRequest{
		token: token, annotations: annotations, key: string(kb),
		source: pullcreds.Source{Kind: pullcreds.FromProvider, Provider: p.Name, Namespace: pod.Namespace, Name: name, UID: string(acct.UID)},
	}, false, nil
}

// hashOf is a token's sha256, for keys; "" stays "".
func hashOf(s string) string {
	if s == "" {
		return ""
	}
	return fmt.Sprintf("sha256:%x", sha256.Sum256([]byte(s)))
}

// pluginMetrics are the kubelet's credential provider metrics around a
// runner.
type pluginMetrics struct {
	runner   runner
	errors   *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

func newPluginMetrics(reg prometheus.Registerer, hash string, run runner) *pluginMetrics {
	pm := &pluginMetrics{
		runner: run,
		errors: metrics.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kubelet_credential_provider_plugin_errors_total",
			Help: "Number of errors from credential provider plugin",
		}, []string{"plugin_name"})),
		duration: metrics.Register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "kubelet_credential_provider_plugin_duration",
			Help:    "Duration of execution in seconds for credential provider plugin",
			Buckets: prometheus.DefBuckets,
		}, []string{"plugin_name"})),
	}
	info := metrics.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "kubelet_credential_provider_config_info",
		Help: "Information about the last applied credential provider configuration with hash as label",
	}, []string{"hash"}))
	info.WithLabelValues(hash).Set(1)
	return pm
}

// run runs the plugin, timing it and counting its failures (those of the
// run: a process that failed, timed out or answered nonsense).
func (pm *pluginMetrics) run(ctx context.Context, p *Provider, req request, clk clock.PassiveClock) (*response, error) {
	start := clk.Now()
	resp, err := pm.runner.run(ctx, p, req)
	pm.duration.WithLabelValues(p.Name).Observe(clk.Since(start).Seconds())
	if err != nil {
		pm.errors.WithLabelValues(p.Name).Inc()
		return nil, redactToken(err, req.Token)
	}
	return resp, nil
}

// redactToken keeps a token the plugin may have echoed to stderr out of
// the log.
func redactToken(err error, token string) error {
	e, ok := errors.AsType[*errStderr](err)
	if !ok || token == "" || !strings.Contains(e.stderr, token) {
		return err
	}
	return &errStderr{err: e.err, stderr: strings.ReplaceAll(e.stderr, token, "[redacted]")}
}
