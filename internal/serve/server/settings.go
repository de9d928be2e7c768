package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
)

// PKIDir holds the serving certificate and the local admin credentials
// under nodelet's root dir.
func PKIDir(rootDir string) string { return filepath.Join(rootDir, "pki") }

// Auth are the secure port's certificate and access flags, as the kubelet
// names them.
type Auth struct {
	// TLSCertFile and TLSPrivateKeyFile are the serving certificate; a
	// self-signed one is generated under PKIDir when unset.
	TLSCertFile, TLSPrivateKeyFile string
	// ClientCAFile verifies client certificates; the local admin CA is
	// always trusted too.
	ClientCAFile string
	// TokenAuthFile holds static bearer tokens (token,user,uid,"groups").
	TokenAuthFile string
	// AnonymousAuth lets requests without credentials in as
	// system:anonymous.
	AnonymousAuth bool
	// AuthorizationMode is NodeletGroups (the default), Webhook or
	// AlwaysAllow (refused with AnonymousAuth); AuthorizationReadGroup
	// may use the read-only paths in NodeletGroups mode (empty is
	// system:authenticated). See Config.
	AuthorizationMode      string
	AuthorizationReadGroup string
}

// Settings are what the secure port is set up from.
type Settings struct {
	Auth
	// RootDir holds PKIDir.
	RootDir string
	// Addr is --address:--port.
	Addr string
	// NodeName and NodeIP go into a generated serving certificate.
	NodeName, NodeIP string
	// Client is the API server (cluster mode; nil standalone): with it,
	// bearer tokens are resolved by TokenReview when WebhookAuthn is set
	// (authentication.webhook.enabled, answers cached for TokenCacheTTL),
	// and AuthorizationWebhook asks SubjectAccessReviews.
	Client        kubernetes.Interface
	WebhookAuthn  bool
	TokenCacheTTL time.Duration
	// AuthorizedTTL and UnauthorizedTTL keep SubjectAccessReview answers
	// that allowed and that denied (authorization.webhook
	// cacheAuthorizedTTL, cacheUnauthorizedTTL); 0 keeps none.
	AuthorizedTTL, UnauthorizedTTL time.Duration
	// GetCertificate, when set, serves the certificates it gives
	// (serverTLSBootstrap: certs.Serving.GetCertificate) instead of
	// TLSCertFile or a self-signed one; see Config.GetCertificate.
	GetCertificate func(*tls.ClientHelloInfo) (*tls.Certificate, error)
}

// Load reads or creates what the settings name (the serving certificate,
// the local admin credentials, the client CAs, the token file) into a
// Config.
func (s Settings) Load(clk clock.PassiveClock) (Config, error) {
	if s.AuthorizationMode == AuthorizationWebhook && s.Client == nil {
		return Config{}, errors.New("--authorization-mode=Webhook needs an API server (cluster mode); use NodeletGroups standalone")
	}
	dir := PKIDir(s.RootDir)
	var cert tls.Certificate
	if s.GetCertificate == nil {
		hosts := []string{s.NodeName}
		if s.NodeIP != "" {
			hosts = append(hosts, s.NodeIP)
		}
		var err error
		if cert, err = LoadOrCreateServingCert(dir, s.TLSCertFile, s.TLSPrivateKeyFile, hosts, clk); err != nil {
			return Config{}, fmt.Errorf("serving certificate: %w", err)
		}
	}
	creds, err := EnsureAdminCredentials(dir, clk)
	if err != nil {
		return Config{}, fmt.Errorf("admin credentials: %w", err)
	}
	pool, err := LoadCertPool(s.ClientCAFile, creds.CACert)
	if err != nil {
		return Config{}, fmt.Errorf("client CA: %w", err)
	}
	var tokens map[string]UserInfo
	if s.TokenAuthFile != "" {
		if tokens, err = LoadTokenFile(s.TokenAuthFile); err != nil {
			return Config{}, err
		}
	}
	cfg := Config{
		Addr: s.Addr, TLS: cert, GetCertificate: s.GetCertificate, ClientCA: pool, AnonymousAuth: s.AnonymousAuth, Tokens: tokens,
		AuthorizationMode: s.AuthorizationMode, ReadGroup: s.AuthorizationReadGroup, NodeName: s.NodeName,
	}
	if s.Client != nil {
		cfg.SAR, cfg.AuthorizedTTL, cfg.UnauthorizedTTL = s.Client, s.AuthorizedTTL, s.UnauthorizedTTL
		if s.WebhookAuthn {
			cfg.TokenReview = NewTokenReviewer(s.Client, s.TokenCacheTTL, clk)
		}
	}
	return cfg, nil
}

// ServeForever runs serve until ctx ends; when the port cannot be had it
// logs why and tries again every 5 s, as the kubelet does: a busy port
// must not stop the pods.
func ServeForever(ctx context.Context, addr string, serve func(context.Context) error, clk clock.Clock, log *slog.Logger) {
	for {
		err := serve(ctx)
		if ctx.Err() != nil {
			return
		}
		log.Error("HTTP server failed; retrying in 5s", "addr", addr, "err", err)
		select {
		case <-ctx.Done():
			return
		case <-clk.After(5 * time.Second):
		}
	}
}

// Listeners are where the node agent serves: "" leaves a server off.
type Listeners struct {
	// HealthzAddr serves /healthz over HTTP.
	HealthzAddr string
	// Secure is the kubelet API over HTTPS; Secure.Addr "" is off.
	Secure Settings
	// ReadOnlyAddr is the read-only port over HTTP.
	ReadOnlyAddr string
}

// ServeAll starts, through goRun, the servers l configures, each served
// until ctx ends and retried while its port is busy (ServeForever). A
// secure server whose certificates cannot be had is logged and left off:
// the pods run without it.
func ServeAll(ctx context.Context, l Listeners, deps Deps, clk clock.Clock, log *slog.Logger, goRun func(func())) {
	forever := func(addr string, serve func(context.Context) error) {
		goRun(func() { ServeForever(ctx, addr, serve, clk, log) })
	}
	if l.HealthzAddr != "" {
		h := HealthzHandler(deps.Health)
		forever(l.HealthzAddr, func(ctx context.Context) error { return Serve(ctx, l.HealthzAddr, h, log) })
	}
	if l.Secure.Addr != "" {
		scfg, err := l.Secure.Load(clk)
		var h http.Handler
		if err == nil {
			h, err = NewSecure(scfg, deps)
		}
		if err != nil {
			log.Error("the kubelet API is off", "err", err)
		} else {
			tlsCfg := scfg.TLSConfig()
			forever(scfg.Addr, func(ctx context.Context) error { return ServeTLS(ctx, scfg.Addr, tlsCfg, h, log) })
		}
	}
	if l.ReadOnlyAddr != "" {
		h := ReadOnlyHandler(deps)
		forever(l.ReadOnlyAddr, func(ctx context.Context) error { return Serve(ctx, l.ReadOnlyAddr, h, log) })
	}
}
