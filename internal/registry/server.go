package registry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// Server is the loopback registry containerd uses as its mirror. Blobs are
// served straight from the store's blobs directory; manifests live in
// memory, so Start publishes every stored image into it.
//
// Each image is served twice: under its mirror path ("library/busybox", as
// containerd asks a mirror) and under its registry-qualified path
// ("docker.io/library/busybox"). A request carrying containerd's ?ns=
// parameter is routed to the qualified path, so images of different
// registries with the same repository path do not shadow each other.
type Server struct {
	store     *Store
	addr      string
	log       *slog.Logger
	transport *http.Transport

	mu       sync.Mutex
	srv      *http.Server
	listener net.Listener
	done     chan struct{}
	unwatch  func() bool
}

// NewServer returns a server for store that will listen on addr (a
// loopback IP and port, e.g. "127.0.0.1:5050" or "127.0.0.1:0").
func NewServer(store *Store, addr string, log *slog.Logger) *Server {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = nil
	return &Server{store: store, addr: addr, log: log, transport: t}
}

// Start listens, serves in the background until ctx is done or Close is
// called, and publishes every stored image. It returns once publishing is
// over; if that fails the server is closed again.
func (s *Server) Start(ctx context.Context) error {
	if err := checkLoopback(s.addr); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("listening for the image registry: %w", err)
	}
	if err := s.serve(ctx, ln); err != nil {
		return err
	}
	s.log.Info("image registry listening", "addr", ln.Addr().String())
	if err := s.publishAll(ctx); err != nil {
		return errors.Join(err, s.Close())
	}
	return nil
}

// serve starts serving on ln in a goroutine.
func (s *Server) serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           withNamespace(s.handler()),
		ReadHeaderTimeout: 30 * time.Second,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	done := make(chan struct{})
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil {
		ln.Close()
		return errors.New("starting the image registry: already started")
	}
	s.srv, s.listener, s.done = srv, ln, done
	s.unwatch = context.AfterFunc(ctx, func() { srv.Close() })
	go func() {
		defer close(done)
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("image registry stopped serving", "err", err)
		}
	}()
	return nil
}

func (s *Server) handler() http.Handler {
	return ggcrregistry.New(
		ggcrregistry.WithBlobHandler(ggcrregistry.NewDiskBlobHandler(s.store.BlobsDir())),
		ggcrregistry.Logger(slog.NewLogLogger(s.log.Handler(), slog.LevelDebug)),
	)
}

// Addr is the address the server listens on ("127.0.0.1:PORT") once
// started, and the configured address before.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.listener == nil {
		return s.addr
	}
	return s.listener.Addr().String()
}

// Close stops listening, closes open connections and waits for the serving
// goroutine to end. It is safe to call more than once.
func (s *Server) Close() error {
	s.mu.Lock()
	srv, done, unwatch := s.srv, s.done, s.unwatch
	s.mu.Unlock()
	if srv == nil {
		return nil
	}
	unwatch()
	err := srv.Close()
	<-done
	s.transport.CloseIdleConnections()
	if err != nil {
		return fmt.Errorf("closing the image registry: %w", err)
	}
	return nil
}

// Publish pushes the stored image ref into the running server over the
// registry protocol. Its blobs are already on disk, so only the manifest
// travels.
func (s *Server) Publish(ctx context.Context, ref string) error {
	if !s.started() {
		return fmt.Errorf("publishing %s: the image registry is not started", ref)
	}
	return publish(ctx, s.store, s.Addr(), ref, s.transport)
}

// PublishTo pushes the stored image ref into a registry Server that another
// process (a running nodelet sharing the store) serves at addr, so that it
// serves an image imported while it runs. addr must be a loopback address.
func PublishTo(ctx context.Context, store *Store, addr, ref string) error {
	if err := checkLoopback(addr); err != nil {
		return err
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = nil
	defer t.CloseIdleConnections()
	return publish(ctx, store, addr, ref, t)
}

func publish(ctx context.Context, store *Store, addr, ref string, t http.RoundTripper) error {
	img, err := store.Image(ref)
	if err != nil {
		return fmt.Errorf("publishing %s: %w", ref, err)
	}
	targets, err := mirrorTargets(addr, ref)
	if err != nil {
		return fmt.Errorf("publishing %s: %w", ref, err)
	}
	for _, target := range targets {
		if err := remote.Write(target, img, remote.WithContext(ctx), remote.WithTransport(t)); err != nil {
			return fmt.Errorf("publishing %s as %s: %w", ref, target, err)
		}
	}
	return nil
}

func (s *Server) started() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.srv != nil
}

// publishAll publishes every stored image, warning when two of them share
// a mirror path (the later one wins for requests without ?ns=).
func (s *Server) publishAll(ctx context.Context) error {
	entries, err := s.store.List()
	if err != nil {
		return fmt.Errorf("publishing stored images: %w", err)
	}
	byPath := map[string]string{}
	for _, e := range entries {
		if repo, tag, err := MirrorRepository(e.Ref); err == nil {
			if other, ok := byPath[repo+":"+tag]; ok {
				s.log.Warn("images share a mirror path; requests without ?ns= get the later one", "path", repo+":"+tag, "ref", e.Ref, "shadowed", other)
			}
			byPath[repo+":"+tag] = e.Ref
		}
		if err := s.Publish(ctx, e.Ref); err != nil {
			return err
		}
		s.log.Debug("published image", "ref", e.Ref, "digest", e.Digest.String())
	}
	return nil
}

// mirrorTargets are the references on the server at addr that the stored
// image ref is published under: its mirror path and, when the registry host
// can be a path component (no port), its registry-qualified path.
func mirrorTargets(addr, ref string) ([]name.Reference, error) {
	full, err := NormalizeRef(ref)
	if err != nil {
		return nil, err
	}
	r, err := name.ParseReference(full)
	if err != nil {
		return nil, fmt.Errorf("parsing image reference %q: %w", full, err)
	}
	sep := ":"
	if _, ok := r.(name.Digest); ok {
		sep = "@"
	}
	repo := r.Context().RepositoryStr()
	paths := []string{repo}
	if reg := registryOf(r); pathSafeHost(reg) {
		paths = append(paths, reg+"/"+repo)
	}
	var targets []name.Reference
	for _, path := range paths {
		t, err := name.ParseReference(addr+"/"+path+sep+r.Identifier(), name.Insecure)
		if err != nil {
			return nil, fmt.Errorf("naming %s on the mirror: %w", full, err)
		}
		targets = append(targets, t)
	}
	return targets, nil
}

// checkLoopback refuses addresses whose host is not a loopback IP: the
// registry accepts pushes and must not be reachable from the network.
func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("parsing image registry address %q: %w", addr, err)
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || !ip.IsLoopback() {
		return fmt.Errorf("refusing image registry address %q: the host must be a loopback IP such as 127.0.0.1", addr)
	}
	return nil
}

// withNamespace routes requests that carry containerd's ?ns=<registry>
// parameter to the registry-qualified repository path.
func withNamespace(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rest, ok := strings.CutPrefix(r.URL.Path, "/v2/")
		ns := namespace(r.URL.Query().Get("ns"))
		if ok && rest != "" && ns != "" {
			r = r.Clone(r.Context())
			r.URL.Path = "/v2/" + ns + "/" + rest
			r.URL.RawPath = ""
		}
		next.ServeHTTP(w, r)
	})
}

// namespace normalizes a ?ns= value to the registry host the qualified
// paths use, or returns "" for a value that is not a registry host.
func namespace(ns string) string {
	if ns == "" || strings.Contains(ns, "/") {
		return ""
	}
	reg, err := name.NewRegistry(ns)
	if err != nil {
		return ""
	}
	host := reg.RegistryStr()
	switch host {
	case name.DefaultRegistry, "registry-1.docker.io":
		return dockerHub
	}
	if !pathSafeHost(host) {
		return ""
	}
	return host
}

// pathSafeHost reports whether a registry host can serve as the first
// component of a repository path: lower-case letters, digits, dots and
// dashes, so no port.
func pathSafeHost(host string) bool {
	if host == "" {
		return false
	}
	for _, c := range host {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '.' && c != '-' {
			return false
		}
	}
	return true
}
