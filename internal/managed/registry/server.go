package registry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"
)

// Server is the loopback registry containerd uses as its mirror. It serves
// the pull side of the registry protocol (GET and HEAD of manifests and
// blobs) straight from the store, so an image written to the store, by
// this process or by `nodelet images import`, is served at once. It has no
// write path at all: every other method is refused, so no local user or
// hostNetwork pod can replace or delete an image that containerd runs.
//
// Each image is served twice: under its mirror path ("library/busybox", as
// containerd asks a mirror) and under its registry-qualified path
// ("docker.io/library/busybox"). A request carrying containerd's ?ns=
// parameter is answered only from images of that registry, so images of
// different registries with the same repository path do not shadow each
// other.
type Server struct {
	store *Store
	addr  string
	log   *slog.Logger

	mu       sync.Mutex
	srv      *http.Server
	listener net.Listener
	done     chan struct{}
	unwatch  func() bool
}

// NewServer returns a server for store that will listen on addr (a
// loopback IP and port, e.g. "127.0.0.1:5050" or "127.0.0.1:0").
func NewServer(store *Store, addr string, log *slog.Logger) *Server {
	return &Server{store: store, addr: addr, log: log}
}

// Limits of the server's connections. Requests are small (no bodies); a
// response may be a large layer, so the write timeout is generous.
const (
	readHeaderTimeout = 10 * time.Second
	readTimeout       = 30 * time.Second
	writeTimeout      = 15 * time.Minute
	idleTimeout       = 2 * time.Minute
	maxHeaderBytes    = 64 << 10
)

// Start listens and serves in the background until ctx is done or Close
// is called.
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
	s.warnShadowed()
	return nil
}

// serve starts serving on ln in a goroutine.
func (s *Server) serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           &handler{store: s.store, log: s.log},
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
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
	if err != nil {
		return fmt.Errorf("closing the image registry: %w", err)
	}
	return nil
}

// warnShadowed warns when two stored images share a mirror path: requests
// without ?ns= get the later one.
func (s *Server) warnShadowed() {
	entries, err := s.store.List()
	if err != nil {
		s.log.Warn("listing stored images", "err", err)
		return
	}
	byPath := map[string]string{}
	for _, e := range entries {
		repo, tag, err := MirrorRepository(e.Ref)
		if err != nil {
			continue
		}
		if other, ok := byPath[repo+":"+tag]; ok {
			s.log.Warn("images share a mirror path; requests without ?ns= get the later one", "path", repo+":"+tag, "ref", e.Ref, "shadowed", other)
		}
		byPath[repo+":"+tag] = e.Ref
	}
}

// checkLoopback refuses addresses whose host is not a loopback IP: the
// registry serves every stored image without authentication and must not
// be reachable from the network.
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
