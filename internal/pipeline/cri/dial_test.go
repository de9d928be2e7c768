package cri

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestDialNonexistentSocket(t *testing.T) {
	tm := DefaultTimeouts()
	tm.Handshake = 30 * time.Second
	for _, ep := range []string{"unix:///nonexistent.sock", "/nonexistent.sock"} {
		t.Run(ep, func(t *testing.T) {
			start := time.Now()
			c, err := Dial(t.Context(), ep, tm, nil)
			elapsed := time.Since(start)
			if err == nil {
				_ = c.Close()
				t.Fatal("Dial succeeded")
			}
			if elapsed > tm.Handshake/10 {
				t.Errorf("Dial took %s, want well under %s", elapsed, tm.Handshake)
			}
			if !errors.Is(err, ErrUnavailable) {
				t.Errorf("errors.Is(%v, ErrUnavailable) = false", err)
			}
			const want = "no CRI runtime at unix:///nonexistent.sock: is containerd running?"
			if err.Error() != want {
				t.Errorf("Error() = %q, want %q", err, want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("Error() has a newline: %q", err)
			}
		})
	}
}

// TestDialSilentSocketIsBounded: something accepts connections but never
// speaks; the handshake must give up after Timeouts.Handshake.
func TestDialSilentSocketIsBounded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "silent.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go acceptAndHold(t, l)

	tm := DefaultTimeouts()
	tm.Handshake = 300 * time.Millisecond
	start := time.Now()
	c, err := Dial(t.Context(), "unix://"+path, tm, nil)
	elapsed := time.Since(start)
	if err == nil {
		_ = c.Close()
		t.Fatal("Dial succeeded")
	}
	if !IsUnavailable(err) {
		t.Errorf("got %v, want class %v", err, ErrUnavailable)
	}
	if elapsed > 10*tm.Handshake {
		t.Errorf("Dial took %s with a %s handshake timeout", elapsed, tm.Handshake)
	}
}

// acceptAndHold accepts connections and never answers until the listener
// is closed.
func acceptAndHold(t *testing.T, l net.Listener) {
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		conns = append(conns, c)
	}
}

func TestDialCanceledContext(t *testing.T) {
	_, ep := startFakeRuntime(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := Dial(ctx, ep, DefaultTimeouts(), nil)
	if !IsCanceled(err) {
		t.Errorf("Dial with canceled ctx: %v, want class %v", err, ErrCanceled)
	}
	if IsUnavailable(err) {
		t.Errorf("Dial with canceled ctx claims no runtime: %v", err)
	}
}

func TestDialInvalidEndpoint(t *testing.T) {
	_, err := Dial(t.Context(), "tcp://localhost:1", DefaultTimeouts(), nil)
	if !IsInvalidArgument(err) {
		t.Errorf("Dial(tcp://): %v, want class %v", err, ErrInvalidArgument)
	}
}

// TestDialFailureLeaksNothing: cri-client does not close the gRPC connection
// of a failed Build, so Dial must fail before building one when the socket
// is missing (it is retried in a loop while containerd starts).
func TestDialFailureLeaksNothing(t *testing.T) {
	const dials = 25
	before := runtime.NumGoroutine()
	for range dials {
		if _, err := Dial(t.Context(), "unix:///nonexistent.sock", DefaultTimeouts(), nil); err == nil {
			t.Fatal("Dial succeeded")
		}
	}
	// A leaked connection keeps several goroutines; allow for unrelated noise.
	if grown := runtime.NumGoroutine() - before; grown >= dials {
		t.Errorf("goroutines grew by %d over %d failed dials", grown, dials)
	}
}
