package containerd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/base/testutil"
)

// fakeProc is a containerd that exits when told to.
type fakeProc struct {
	pid        int
	ignoreTerm bool
	exit       chan error // closed or written to end the process
	mu         sync.Mutex
	signals    []os.Signal
}

func (p *fakeProc) Pid() int    { return p.pid }
func (p *fakeProc) Wait() error { return <-p.exit }
func (p *fakeProc) Signal(sig os.Signal) error {
	p.mu.Lock()
	p.signals = append(p.signals, sig)
	p.mu.Unlock()
	if sig == sigKill || (sig == sigTerm && !p.ignoreTerm) {
		select {
		case p.exit <- errors.New("signalled"):
		default:
		}
	}
	return nil
}

type harness struct {
	clk     *clocktesting.FakeClock
	mgr     *Manager
	started chan *fakeProc // every start, in order
}

func newHarness(t *testing.T) *harness {
	h := &harness{clk: clocktesting.NewFakeClock(time.Unix(1000, 0)), started: make(chan *fakeProc, 10)}
	pid := 100
	cfg := DefaultConfig(t.TempDir())
	h.mgr = New(cfg, Deps{
		Log:   slog.New(slog.NewTextHandler(testWriter{t}, nil)),
		Clock: h.clk,
		start: func(Config) (process, error) {
			pid++
			p := &fakeProc{pid: pid, exit: make(chan error, 1)}
			h.started <- p
			return p, nil
		},
		ready: func(context.Context, Config) error { return nil },
		major: func(string) (int, error) { return 2, nil },
	})
	return h
}

// nextStart returns the next started process once the manager has adopted it.
func (h *harness) nextStart(t *testing.T) *fakeProc {
	t.Helper()
	select {
	case p := <-h.started:
		testutil.Eventually(t, fmt.Sprintf("the manager to adopt pid %d", p.pid), func() bool { return h.mgr.PID() == p.pid })
		return p
	case <-time.After(10 * time.Second):
		t.Fatal("containerd was not started")
		return nil
	}
}

// waitTimer steps the fake clock forward by d once the supervisor waits on it.
func (h *harness) fire(t *testing.T, d time.Duration) {
	t.Helper()
	testutil.Eventually(t, "the supervisor to wait on the clock", h.clk.HasWaiters)
	h.clk.Step(d)
}

func TestManagerRestartsWithBackoff(t *testing.T) {
	h := newHarness(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := h.mgr.Start(ctx); err != nil {
		t.Fatal(err)
	}
	p := h.nextStart(t)
	// Each quick death doubles the delay: 1s, 2s, 4s.
	for _, delay := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second} {
		p.exit <- errors.New("killed")
		h.fire(t, delay-time.Millisecond)
		select {
		case <-h.started:
			t.Fatalf("restarted before %v", delay)
		default:
		}
		h.fire(t, time.Millisecond)
		p = h.nextStart(t)
	}
	if got := h.mgr.Restarts(); got != 3 {
		t.Errorf("Restarts() = %d, want 3", got)
	}
	// After a minute of running the back-off starts over at 1s.
	h.clk.Step(2 * time.Minute)
	p.exit <- errors.New("killed")
	h.fire(t, time.Second)
	p = h.nextStart(t)

	cancel()
	select {
	case <-h.mgr.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("manager did not stop")
	}
	if len(p.signals) != 1 || p.signals[0] != sigTerm {
		t.Errorf("stop sent %v, want one SIGTERM", p.signals)
	}
}

func TestManagerKillsWhenTermIsIgnored(t *testing.T) {
	h := newHarness(t)
	ctx, cancel := context.WithCancel(context.Background())
	h.mgr.deps.start = func(Config) (process, error) {
		p := &fakeProc{pid: 7, exit: make(chan error, 1), ignoreTerm: true}
		h.started <- p
		return p, nil
	}
	if err := h.mgr.Start(ctx); err != nil {
		t.Fatal(err)
	}
	p := h.nextStart(t)
	cancel()
	h.fire(t, StopTimeout)
	select {
	case <-h.mgr.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("manager did not stop")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.signals) != 2 || p.signals[0] != sigTerm || p.signals[1] != sigKill {
		t.Errorf("signals = %v, want SIGTERM then SIGKILL", p.signals)
	}
}

func TestStartFailsWhenContainerdExitsEarly(t *testing.T) {
	h := newHarness(t)
	h.mgr.deps.start = func(Config) (process, error) {
		p := &fakeProc{pid: 9, exit: make(chan error, 1)}
		p.exit <- errors.New("exit status 1")
		return p, nil
	}
	h.mgr.deps.ready = func(ctx context.Context, _ Config) error { <-ctx.Done(); return ctx.Err() }
	err := h.mgr.Start(context.Background())
	if err == nil {
		t.Fatal("Start succeeded although containerd exited")
	}
}

func TestBackoff(t *testing.T) {
	var b backoff
	want := []time.Duration{1, 2, 4, 8, 16, 30, 30}
	for i, w := range want {
		if got := b.next(time.Second); got != w*time.Second {
			t.Errorf("step %d: %v, want %v", i, got, w*time.Second)
		}
	}
	if got := b.next(time.Hour); got != time.Second {
		t.Errorf("after a long run: %v, want 1s", got)
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) { w.t.Log(string(b)); return len(b), nil }

func TestStartAsksTheBinaryForItsVersion(t *testing.T) {
	h := newHarness(t)
	h.mgr.deps.major = func(string) (int, error) { return 1, nil }
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); <-h.mgr.Done() }()
	if err := h.mgr.Start(ctx); err != nil {
		t.Fatal(err)
	}
	h.nextStart(t)
	toml, err := os.ReadFile(h.mgr.Config().ConfigPath())
	if err != nil {
		t.Fatal(err)
	}
	if h.mgr.Config().Major != 1 || !strings.Contains(string(toml), "version = 2\n") {
		t.Errorf("containerd 1.x got major %d and config:\n%s", h.mgr.Config().Major, toml)
	}
}

// A state directory a containerd 2 ran on is not handed to a containerd 1.
func TestStartRefusesAnOlderContainerdOnNewerState(t *testing.T) {
	h := newHarness(t)
	cfg := h.mgr.Config()
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg.majorFile(), []byte("2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	h.mgr.deps.major = func(string) (int, error) { return 1, nil }
	err := h.mgr.Start(context.Background())
	if err == nil || !strings.Contains(err.Error(), "last used by containerd 2.x") {
		t.Fatalf("Start = %v, want a refusal naming containerd 2.x", err)
	}
	select {
	case <-h.started:
		t.Fatal("containerd was started")
	default:
	}
}

func TestStartRecordsTheMajorVersion(t *testing.T) {
	h := newHarness(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); <-h.mgr.Done() }()
	if err := h.mgr.Start(ctx); err != nil {
		t.Fatal(err)
	}
	h.nextStart(t)
	data, err := os.ReadFile(h.mgr.Config().majorFile())
	if err != nil || string(data) != "2\n" {
		t.Errorf("major file = %q, %v", data, err)
	}
}
