package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"
)

// Limits bound what clients can hold of one of nodelet's HTTP servers
// (secure port, read-only port, healthz): how long a connection may take
// to send its headers, its request, to take its response, how long it may
// sit idle between requests, how large its headers may be, and how many
// connections may be open at once.
type Limits struct {
	// ReadHeaderTimeout bounds the time to read a request's headers: a
	// client sending them a byte at a time (slowloris) is cut off then.
	ReadHeaderTimeout time.Duration
	// ReadTimeout and WriteTimeout bound the whole request and response.
	// Responses that stream for as long as the client wants them lift
	// both (holdOpen); exec, attach and portForward hijack the
	// connection, which lifts them too (net/http clears the deadlines).
	ReadTimeout, WriteTimeout time.Duration
	// IdleTimeout closes a keep-alive connection idle that long.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's headers (net/http adds 4 KiB).
	MaxHeaderBytes int
	// MaxConns bounds the connections open at once, hijacked ones
	// included; 0 is no bound. When a connection arrives with MaxConns
	// open, the one idle the longest is closed to make room; when none is
	// idle, the new connection is closed at once.
	MaxConns int
}

// DefaultLimits are the kubelet's (pkg/kubelet/server/server.go,
// ListenAndServeKubeletServer and ListenAndServeKubeletReadOnlyServer:
// IdleTimeout 90 s "matches http.DefaultTransport keep-alive timeout",
// ReadTimeout and WriteTimeout 4 h, MaxHeaderBytes 1 MiB) and two of
// nodelet's own, which the kubelet does not have: headers within 10 s
// (the kubelet lets a client take its ReadTimeout, 4 h, over them), and at
// most 2048 connections open (the kubelet has no bound; its healthz
// server has no limits at all).
func DefaultLimits() Limits {
	return Limits{
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       4 * time.Hour,
		WriteTimeout:      4 * time.Hour,
		IdleTimeout:       90 * time.Second,
		MaxHeaderBytes:    1 << 20,
		MaxConns:          2048,
	}
}

// serve serves h on ln (over TLS when tlsCfg is set) within limits until
// ctx ends, then shuts down, waiting up to 5 s for requests in flight.
func serve(ctx context.Context, ln net.Listener, h http.Handler, tlsCfg *tls.Config, limits Limits, log *slog.Logger) error {
	return serveLimited(ctx, newConnLimiter(ln, limits.MaxConns), h, tlsCfg, limits, log)
}

// serveLimited is serve on a connLimiter the caller made (a test watches
// its connections' states).
func serveLimited(ctx context.Context, cl *connLimiter, h http.Handler, tlsCfg *tls.Config, limits Limits, log *slog.Logger) error {
	ln := cl.Listener
	srv := &http.Server{
		Handler:           h,
		TLSConfig:         tlsCfg,
		ReadHeaderTimeout: limits.ReadHeaderTimeout,
		ReadTimeout:       limits.ReadTimeout,
		WriteTimeout:      limits.WriteTimeout,
		IdleTimeout:       limits.IdleTimeout,
		MaxHeaderBytes:    limits.MaxHeaderBytes,
		ConnState:         cl.connState,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	stopped := make(chan struct{})
	defer close(stopped)
	go func() {
		select {
		case <-ctx.Done():
		case <-stopped:
			return
		}
		shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx)
	}()
	var err error
	if tlsCfg != nil {
		log.Info("serving TLS", "addr", ln.Addr().String())
		err = srv.ServeTLS(cl, "", "")
	} else {
		log.Info("serving", "addr", ln.Addr().String())
		err = srv.Serve(cl)
	}
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve %s: %w", ln.Addr(), err)
	}
	return nil
}

// holdOpen lifts the server's read and write deadlines off a response that
// streams for as long as the client wants it (containerLogs?follow=true):
// the kubelet's 4-hour ReadTimeout and WriteTimeout cut such a stream, and
// an expired read deadline even cancels the request's context. Hijacked
// connections need nothing: net/http clears their deadlines.
func holdOpen(w http.ResponseWriter) error {
	rc := http.NewResponseController(w)
	return errors.Join(rc.SetReadDeadline(time.Time{}), rc.SetWriteDeadline(time.Time{}))
}

// connLimiter is a listener that keeps at most max connections open (0:
// no bound). It knows each open connection's last state as the
// http.Server reports it (connState), so that a new connection can make
// room by closing the one idle the longest; with none idle, the new one
// is closed at once. Idle connections are the cheap ones to drop: their
// clients open another when they need it.
type connLimiter struct {
	net.Listener
	max int

	mu    sync.Mutex
	conns map[*trackedConn]struct{}
	// seq orders the moments connections went idle.
	seq uint64
}

// trackedConn is an accepted connection; it leaves its limiter when
// closed.
type trackedConn struct {
	net.Conn
	l    *connLimiter
	once sync.Once
	// idle is the limiter's seq when the connection last went idle, 0
	// while it is not idle; guarded by l.mu.
	idle uint64
}

func newConnLimiter(ln net.Listener, max int) *connLimiter {
	return &connLimiter{Listener: ln, max: max, conns: map[*trackedConn]struct{}{}}
}

// Accept returns the next connection there is room for.
func (l *connLimiter) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		tc := &trackedConn{Conn: c, l: l}
		victim, ok := l.admit(tc)
		if victim != nil {
			_ = victim.Close()
		}
		if ok {
			return tc, nil
		}
		_ = c.Close()
	}
}

// admit adds tc if there is room, or room made by dropping the
// connection idle the longest (victim, for the caller to close).
func (l *connLimiter) admit(tc *trackedConn) (victim *trackedConn, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.max > 0 && len(l.conns) >= l.max {
		for c := range l.conns {
			if c.idle != 0 && (victim == nil || c.idle < victim.idle) {
				victim = c
			}
		}
		if victim == nil {
			return nil, false
		}
		delete(l.conns, victim)
	}
	l.conns[tc] = struct{}{}
	return victim, true
}

// openConns counts the connections admitted and not yet closed.
func (l *connLimiter) openConns() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.conns)
}

// idleConns counts the open connections the server last reported idle.
func (l *connLimiter) idleConns() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for c := range l.conns {
		if c.idle != 0 {
			n++
		}
	}
	return n
}

// connState is the http.Server's ConnState hook: it records which
// connections are idle.
func (l *connLimiter) connState(c net.Conn, s http.ConnState) {
	if t, ok := c.(*tls.Conn); ok {
		c = t.NetConn()
	}
	tc, ok := c.(*trackedConn)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if s == http.StateIdle {
		l.seq++
		tc.idle = l.seq
	} else {
		tc.idle = 0
	}
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		delete(c.l.conns, c)
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}
