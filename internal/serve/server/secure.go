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
	"net"
	"net/http"
	"net/http/pprof"
	"net/url"
	"os"
	"path"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/base/events"
	"github.com/nodelet/nodelet/internal/pure/redact"
)

// PodLister lists the node's pods, each with its status.
type PodLister interface {
	Pods() []*v1.Pod
}

// RunningPodLister lists the pods as the container runtime has them.
type RunningPodLister interface {
	RunningPods(ctx context.Context) ([]*v1.Pod, error)
}

// StatsProvider makes the /stats/summary answer: the summary (stats
// v1alpha1) already encoded as JSON, shared by the callers of a cache
// period, and a strong entity tag of it (quoted).
type StatsProvider interface {
	SummaryJSON(ctx context.Context, onlyCPUAndMemory bool) (body []byte, etag string, err error)
}

// EventLister lists the recorded pod events.
type EventLister interface {
	All() []events.Event
}

// Config is the secure port's configuration.
type Config struct {
	// Addr is where ServeTLS listens (--address, --port).
	Addr string
	// TLS is the serving certificate (LoadOrCreateServingCert), unless
	// GetCertificate is set.
	TLS tls.Certificate
	// GetCertificate, when set, gives the serving certificate of every
	// handshake instead of TLS: one that changes while the port serves
	// (serverTLSBootstrap's, issued and rotated through the API server).
	// An error fails the handshake: the port serves no certificate
	// rather than a wrong one while none is issued.
	GetCertificate func(*tls.ClientHelloInfo) (*tls.Certificate, error)
	// ClientCA verifies client certificates: --client-ca-file plus the
	// local admin CA (LoadCertPool). Nil disables client certificates.
	ClientCA *x509.CertPool
	// AnonymousAuth lets requests without credentials in as
	// system:anonymous (--anonymous-auth).
	AnonymousAuth bool
	// Tokens are the bearer tokens of --token-auth-file (LoadTokenFile).
	Tokens map[string]UserInfo
	// TokenReview, when set, resolves bearer tokens not in Tokens
	// (cluster mode: a TokenReview client).
	TokenReview TokenAuthenticator
	// AuthorizationMode is AuthorizationNodeletGroups,
	// AuthorizationWebhook or AuthorizationAlwaysAllow (which refuses
	// AnonymousAuth; see CheckAuthorization).
	AuthorizationMode string
	// ReadGroup may read in NodeletGroups mode (see groupAuthorizer);
	// empty is system:authenticated. AdminGroup may do anything.
	ReadGroup string
	// SAR sends SubjectAccessReviews in Webhook mode; nil otherwise.
	// Their answers are kept for AuthorizedTTL (allowed) and
	// UnauthorizedTTL (denied); 0 keeps nothing.
	SAR                            kubernetes.Interface
	AuthorizedTTL, UnauthorizedTTL time.Duration
	// NodeName is the name of nodes/<name> that requests are authorized
	// against.
	NodeName string
}

// TLSConfig is the secure port's TLS configuration: the serving
// certificate (GetCertificate's when set, else TLS), and client
// certificates requested but not required (verified against ClientCA
// when given; the authenticator checks them again).
func (c Config) TLSConfig() *tls.Config {
	t := &tls.Config{
		MinVersion: tls.VersionTLS12,
		ClientAuth: tls.RequestClientCert,
	}
	if c.GetCertificate != nil {
		t.GetCertificate = c.GetCertificate
	} else {
		t.Certificates = []tls.Certificate{c.TLS}
	}
	if c.ClientCA != nil {
		t.ClientAuth = tls.VerifyClientCertIfGiven
		t.ClientCAs = c.ClientCA
	}
	return t
}

// Deps are what the secure port serves.
type Deps struct {
	Pods        PodLister
	RunningPods RunningPodLister
	Stats       StatsProvider
	Logs        LogStreamer
	Events      EventLister
	// NodeConditions, when set, are the node's pressure conditions now:
	// /pods carries them as a Warning header (299, as the API server
	// warns), which is how a node without an API server shows them.
	NodeConditions func() []v1.NodeConditionType
	// Metrics are served at /metrics, /metrics/probes, /metrics/resource
	// and /metrics/cadvisor; a nil registry answers 404.
	Metrics Metrics
	// Health are the checks of /healthz.
	Health []HealthCheck
	// Configz is served at /configz as {"kubeletconfig": Configz}, its
	// secrets redacted; nil answers 404.
	Configz *Configz
	// Args is the command line /debug/pprof/cmdline shows, the values of
	// flags that hold secrets redacted (redact.Args); nil is os.Args.
	Args []string
	// Streaming serves /exec, /attach and /portForward; nil answers 501.
	Streaming StreamingRuntime
	// SystemLogs is the directory served at /logs/ (the kubelet's
	// enableSystemLogHandler: /var/log); "" switches /logs/ off (405).
	SystemLogs string
	Log        *slog.Logger
	// Clock verifies client certificates; nil is the real clock.
	Clock clock.PassiveClock
}

// Route patterns of the secure port (http.ServeMux syntax).
const (
	containerLogsPattern = "GET /containerLogs/{namespace}/{pod}/{container}"
	pprofPattern         = "GET /debug/pprof/"
)

// streamingPatterns are exec, attach, portForward and run, as the kubelet
// routes them (with and without the pod UID).
var streamingPatterns = []string{
	"GET /exec/{namespace}/{pod}/{container}",
	"POST /exec/{namespace}/{pod}/{container}",
	"GET /exec/{namespace}/{pod}/{uid}/{container}",
	"POST /exec/{namespace}/{pod}/{uid}/{container}",
	"GET /attach/{namespace}/{pod}/{container}",
	"POST /attach/{namespace}/{pod}/{container}",
	"GET /attach/{namespace}/{pod}/{uid}/{container}",
	"POST /attach/{namespace}/{pod}/{uid}/{container}",
	"GET /portForward/{namespace}/{pod}",
	"POST /portForward/{namespace}/{pod}",
	"GET /portForward/{namespace}/{pod}/{uid}",
	"POST /portForward/{namespace}/{pod}/{uid}",
	"POST /run/{namespace}/{pod}/{container}",
	"POST /run/{namespace}/{pod}/{uid}/{container}",
}

type secureServer struct {
	authn    Authenticator
	authz    Authorizer
	nodeName string
	deps     Deps
	log      *slog.Logger
	mux      *http.ServeMux
	patterns []string
}

// NewSecure returns the handler of the secure port: every request,
// /healthz included, is authenticated (client certificate, bearer token,
// else anonymous when allowed; 401 otherwise) and authorized as a verb on
// a subresource of nodes/<NodeName> (403 when denied) before it reaches
// /pods, /runningpods/, /stats/summary, /metrics*, /containerLogs,
// /events, /configz, /debug/pprof/, /logs/ or the streaming endpoints.
func NewSecure(cfg Config, deps Deps) (http.Handler, error) {
	return newSecureServer(cfg, deps)
}

func newSecureServer(cfg Config, deps Deps) (*secureServer, error) {
	if deps.Log == nil {
		deps.Log = slog.New(slog.DiscardHandler)
	}
	if deps.Clock == nil {
		deps.Clock = clock.RealClock{}
	}
	if err := CheckAuthorization(cfg.AuthorizationMode, cfg.AnonymousAuth); err != nil {
		return nil, err
	}
	var authz Authorizer
	switch cfg.AuthorizationMode {
	case AuthorizationAlwaysAllow:
		authz = alwaysAllow{}
	case AuthorizationNodeletGroups:
		g := groupAuthorizer{adminGroup: AdminGroup, readGroup: cfg.ReadGroup}
		if g.readGroup == "" {
			g.readGroup = AuthenticatedGroup
		}
		authz = g
	case AuthorizationWebhook:
		if cfg.SAR == nil {
			return nil, errors.New("authorization mode Webhook needs an API server client")
		}
		if cfg.NodeName == "" {
			return nil, errors.New("authorization mode Webhook needs the node name")
		}
		authz = newWebhookAuthorizer(cfg.SAR)
		if cfg.AuthorizedTTL > 0 || cfg.UnauthorizedTTL > 0 {
			authz = newCachedAuthorizer(authz, cfg.AuthorizedTTL, cfg.UnauthorizedTTL, deps.Clock)
		}
	}
	authn := &requestAuthenticator{clientCA: cfg.ClientCA, anonymous: cfg.AnonymousAuth, clock: deps.Clock}
	if len(cfg.Tokens) > 0 {
		authn.tokens = append(authn.tokens, NewStaticTokens(cfg.Tokens))
	}
	if cfg.TokenReview != nil {
		authn.tokens = append(authn.tokens, cfg.TokenReview)
	}
	s := &secureServer{
		authn:    authn,
		authz:    authz,
		nodeName: cfg.NodeName,
		deps:     deps,
		log:      deps.Log,
		mux:      http.NewServeMux(),
	}
	s.handle("GET /healthz", HealthzHandler(deps.Health))
	s.handle("GET /pods", http.HandlerFunc(s.getPods))
	s.handle("GET /runningpods/{$}", http.HandlerFunc(s.getRunningPods))
	s.handle("GET /stats/summary", http.HandlerFunc(s.getSummary))
	s.handle("POST /stats/summary", http.HandlerFunc(s.getSummary))
	s.handle("GET /metrics", gathererHandler(deps.Metrics.Kubelet))
	s.handle("GET /metrics/probes", gathererHandler(deps.Metrics.Probes))
	s.handle("GET /metrics/resource", gathererHandler(deps.Metrics.Resource))
	s.handle("GET /metrics/cadvisor", gathererHandler(deps.Metrics.Cadvisor))
	s.handle(containerLogsPattern, http.HandlerFunc(s.getContainerLogs))
	s.handle("GET /events", http.HandlerFunc(s.getEvents))
	s.handle("GET /configz", http.HandlerFunc(s.getConfigz))
	s.handle(pprofPattern, http.HandlerFunc(s.servePprof))
	s.handle("GET "+logsPath, systemLogsHandler(deps.SystemLogs, s.log))
	for _, p := range streamingPatterns {
		s.handle(p, http.HandlerFunc(s.serveStreaming))
	}
	return s, nil
}

func (s *secureServer) handle(pattern string, h http.Handler) {
	s.mux.Handle(pattern, h)
	s.patterns = append(s.patterns, pattern)
}

// ServeHTTP authenticates, then authorizes, then routes.
func (s *secureServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u, ok, err := s.authn.Authenticate(r)
	if err != nil {
		s.log.Debug("authentication failed", "path", r.URL.Path, "remote", r.RemoteAddr, "err", err)
	}
	if err != nil || !ok {
		http.Error(w, "Unauthorized", http.StatusUnauthorized)
		return
	}
	if !cleanPath(r.URL) {
		http.Error(w, "invalid request path", http.StatusBadRequest)
		return
	}
	verb, subresources, ok := requestAuthorization(r.Method, r.URL.Path)
	if !ok {
		http.Error(w, fmt.Sprintf("method %s is not allowed", r.Method), http.StatusMethodNotAllowed)
		return
	}
	var authzErr error
	var reason string
	for _, sub := range subresources {
		a := Attributes{User: u, Verb: verb, Resource: "nodes", Name: s.nodeName, Subresource: sub, Path: r.URL.Path}
		allowed, why, err := s.authz.Authorize(r.Context(), a)
		if err != nil {
			authzErr = errors.Join(authzErr, err)
			continue
		}
		if allowed {
			s.mux.ServeHTTP(w, r)
			return
		}
		if why != "" {
			reason = why
		}
	}
	attrs := fmt.Sprintf("user=%s, verb=%s, resource=nodes, subresource=%s", u.Name, verb, strings.Join(subresources, "|"))
	if authzErr != nil {
		s.log.Error("authorization failed", "user", u.Name, "verb", verb, "subresources", subresources, "err", authzErr)
		http.Error(w, "Authorization error ("+attrs+")", http.StatusInternalServerError)
		return
	}
	s.log.Debug("forbidden", "user", u.Name, "verb", verb, "subresources", subresources, "path", r.URL.Path, "reason", reason)
	http.Error(w, "Forbidden ("+attrs+")", http.StatusForbidden)
}

// cleanPath reports whether the path is canonical: absolute, with no ".",
// ".." or empty segments and no encoded slash. Only then does authorizing
// the decoded path agree with how the mux routes the escaped one.
func cleanPath(u *url.URL) bool {
	p := u.Path
	if !strings.HasPrefix(p, "/") || strings.Contains(strings.ToLower(u.EscapedPath()), "%2f") {
		return false
	}
	c := path.Clean(p)
	if strings.HasSuffix(p, "/") && c != "/" {
		c += "/"
	}
	return c == p
}

func (s *secureServer) getPods(w http.ResponseWriter, _ *http.Request) {
	var pods []*v1.Pod
	if s.deps.Pods != nil {
		pods = s.deps.Pods.Pods()
	}
	if s.deps.NodeConditions != nil {
		for _, c := range s.deps.NodeConditions() {
			w.Header().Add("Warning", fmt.Sprintf("299 - %q", "node has condition "+string(c)))
		}
	}
	writeJSON(w, podList(pods), s.log)
}

func (s *secureServer) getRunningPods(w http.ResponseWriter, r *http.Request) {
	if s.deps.RunningPods == nil {
		http.Error(w, "running pods are not available", http.StatusNotFound)
		return
	}
	pods, err := s.deps.RunningPods.RunningPods(r.Context())
	if err != nil {
		s.log.Error("list running pods", "err", err)
		http.Error(w, fmt.Sprintf("list running pods: %v", err), http.StatusInternalServerError)
		return
	}
	writeJSON(w, podList(pods), s.log)
}

func podList(pods []*v1.Pod) *v1.PodList {
	list := &v1.PodList{TypeMeta: metaList("PodList"), Items: make([]v1.Pod, 0, len(pods))}
	for _, p := range pods {
		if p != nil {
			list.Items = append(list.Items, *p)
		}
	}
	return list
}

// maxFormBytes bounds the form of a POST /stats/summary.
const maxFormBytes = 64 << 10

// getSummary serves /stats/summary as the kubelet does, by GET or POST,
// only_cpu_and_memory in the query or the POST form. The body is the
// provider's encoding, written as is with its length and entity tag; a
// request whose If-None-Match names the tag gets 304.
func (s *secureServer) getSummary(w http.ResponseWriter, r *http.Request) {
	if s.deps.Stats == nil {
		http.Error(w, "stats are not available", http.StatusNotFound)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		http.Error(w, fmt.Sprintf("parse form: %v", err), http.StatusBadRequest)
		return
	}
	only := false
	if v := r.Form.Get("only_cpu_and_memory"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			http.Error(w, fmt.Sprintf("only_cpu_and_memory: %v", err), http.StatusBadRequest)
			return
		}
		only = b
	}
	body, etag, err := s.deps.Stats.SummaryJSON(r.Context(), only)
	if err != nil {
		s.log.Error("stats summary", "err", err)
		http.Error(w, fmt.Sprintf("stats summary: %v", err), http.StatusInternalServerError)
		return
	}
	h := w.Header()
	if etag != "" {
		h.Set("ETag", etag)
		if r.Method != http.MethodPost && etagMatch(r.Header.Values("If-None-Match"), etag) {
			w.WriteHeader(http.StatusNotModified)
			return
		}
	}
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	_, _ = w.Write(body)
}

// etagMatch reports whether an If-None-Match header lists etag (weak
// comparison, as RFC 9110 asks for If-None-Match) or is "*".
func etagMatch(headers []string, etag string) bool {
	etag = strings.TrimPrefix(etag, "W/")
	for _, h := range headers {
		for t := range strings.SplitSeq(h, ",") {
			t = strings.TrimSpace(t)
			if t == "*" || strings.TrimPrefix(t, "W/") == etag {
				return true
			}
		}
	}
	return false
}

// OptionalGatherer is a gatherer that may have nothing to serve (the CRI
// metrics of a runtime without ListPodSandboxMetrics): while Unavailable
// returns an error, its endpoint answers 404 with it.
type OptionalGatherer interface {
	prometheus.Gatherer
	Unavailable(ctx context.Context) error
}

func gathererHandler(g prometheus.Gatherer) http.Handler {
	if g == nil {
		return http.NotFoundHandler()
	}
	h := promhttp.HandlerFor(g, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
	og, ok := g.(OptionalGatherer)
	if !ok {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := og.Unavailable(r.Context()); err != nil {
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		}
		h.ServeHTTP(w, r)
	})
}

func (s *secureServer) getContainerLogs(w http.ResponseWriter, r *http.Request) {
	req, err := parseContainerLogsRequest(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	ns, pod, ctr, opts := req.namespace, req.pod, req.container, req.options
	if s.deps.Logs == nil {
		http.Error(w, "container logs are not available", http.StatusNotFound)
		return
	}
	if opts.Follow {
		// A follow lasts as long as the client wants it: the server's
		// read and write timeouts must not cut it.
		if err := holdOpen(w); err != nil {
			s.log.Debug("cannot lift the deadlines of a log stream", "err", err)
		}
	}
	lw := newLogWriter(w, opts.Follow, s.log)
	err = s.deps.Logs.ContainerLogs(r.Context(), ns, pod, ctr, opts, lw)
	if lw.started() {
		if err != nil && r.Context().Err() == nil {
			s.log.Warn("container log stream ended with an error", "namespace", ns, "pod", pod, "container", ctr, "err", err)
		}
		return
	}
	switch {
	case err == nil:
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusOK)
	case isNotFound(err):
		http.Error(w, err.Error(), http.StatusNotFound)
	case errors.Is(err, ErrTooManyRequests):
		w.Header().Set("Retry-After", "10")
		http.Error(w, err.Error(), http.StatusTooManyRequests)
	case r.Context().Err() != nil:
		// The client went away.
	default:
		s.log.Error("container logs", "namespace", ns, "pod", pod, "container", ctr, "err", err)
		http.Error(w, fmt.Sprintf("container logs: %v", err), http.StatusInternalServerError)
	}
}

// uidRE matches pod UIDs (UUIDs, or hex hashes for static pods).
var uidRE = regexp.MustCompile(`^[0-9A-Za-z-]{1,128}$`)

// validateNames checks the object names taken from the path: a namespace
// and container are DNS labels, a pod a DNS subdomain, a UID alphanumeric
// with dashes. Empty container and uid are not checked.
func validateNames(namespace, pod, container, uid string) error {
	if errs := validation.IsDNS1123Label(namespace); len(errs) > 0 {
		return fmt.Errorf("invalid namespace %q: %s", namespace, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Subdomain(pod); len(errs) > 0 {
		return fmt.Errorf("invalid pod name %q: %s", pod, strings.Join(errs, "; "))
	}
	if container != "" {
		if errs := validation.IsDNS1123Label(container); len(errs) > 0 {
			return fmt.Errorf("invalid container name %q: %s", container, strings.Join(errs, "; "))
		}
	}
	if uid != "" && !uidRE.MatchString(uid) {
		return fmt.Errorf("invalid pod UID %q", uid)
	}
	return nil
}

func (s *secureServer) streamingNotImplemented(w http.ResponseWriter, r *http.Request) {
	if err := validateNames(r.PathValue("namespace"), r.PathValue("pod"), r.PathValue("container"), r.PathValue("uid")); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	http.Error(w, "streaming is not implemented yet", http.StatusNotImplemented)
}

// EventItem is one event as /events serves it. A pod event names the pod
// (podUID, namespace, pod); an event about the node itself has kind "Node"
// and the node's name in node, and empty pod fields.
type EventItem struct {
	PodUID         types.UID `json:"podUID"`
	Namespace      string    `json:"namespace"`
	Pod            string    `json:"pod"`
	Kind           string    `json:"kind,omitempty"`
	Node           string    `json:"node,omitempty"`
	Type           string    `json:"type"`
	Reason         string    `json:"reason"`
	Message        string    `json:"message"`
	Count          int       `json:"count"`
	FirstTimestamp time.Time `json:"firstTimestamp"`
	LastTimestamp  time.Time `json:"lastTimestamp"`
}

func (s *secureServer) getEvents(w http.ResponseWriter, _ *http.Request) {
	items := []EventItem{}
	if s.deps.Events != nil {
		for _, e := range s.deps.Events.All() {
			item := EventItem{
				PodUID: e.PodUID, Namespace: e.Namespace, Pod: e.Pod,
				Type: e.Type, Reason: e.Reason, Message: e.Message, Count: e.Count,
				FirstTimestamp: e.FirstTime, LastTimestamp: e.LastTime,
			}
			if e.Node != "" {
				item.Kind, item.Node = "Node", e.Node
			}
			items = append(items, item)
		}
	}
	writeJSON(w, items, s.log)
}

func (s *secureServer) getConfigz(w http.ResponseWriter, _ *http.Request) {
	if s.deps.Configz == nil {
		http.Error(w, "configz is not available", http.StatusNotFound)
		return
	}
	writeJSON(w, map[string]any{"kubeletconfig": redactedConfigz(s.deps.Configz)}, s.log)
}

// servePprof serves /debug/pprof/: the index, and the named profiles.
func (s *secureServer) servePprof(w http.ResponseWriter, r *http.Request) {
	switch strings.TrimPrefix(r.URL.Path, "/debug/pprof/") {
	case "cmdline":
		// As pprof.Cmdline, with the secrets redacted.
		args := s.deps.Args
		if args == nil {
			args = os.Args
		}
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, strings.Join(redact.Args(args), "\x00"))
	case "profile":
		pprof.Profile(w, r)
	case "symbol":
		pprof.Symbol(w, r)
	case "trace":
		pprof.Trace(w, r)
	default:
		pprof.Index(w, r)
	}
}

func metaList(kind string) metav1.TypeMeta {
	return metav1.TypeMeta{Kind: kind, APIVersion: "v1"}
}

func writeJSON(w http.ResponseWriter, v any, log *slog.Logger) {
	data, err := json.Marshal(v)
	if err != nil {
		log.Error("encode response", "err", err)
		http.Error(w, fmt.Sprintf("encode response: %v", err), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(data)
}

// ServeTLS listens on addr and serves h over TLS with tlsCfg until ctx
// ends, within DefaultLimits.
func ServeTLS(ctx context.Context, addr string, tlsCfg *tls.Config, h http.Handler, log *slog.Logger) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	return serve(ctx, ln, h, tlsCfg, DefaultLimits(), log)
}
