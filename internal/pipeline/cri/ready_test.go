package cri

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/base/testutil"
)

// errNotInitialized is what containerd's CRI plugin answers (as gRPC Unknown)
// until it has restored its sandboxes after a start.
var errNotInitialized = errors.New("server is not initialized yet")

// dialStepping runs dialWith on a fake clock, stepping the clock whenever
// the dial waits on it, and returns its outcome and log.
func dialStepping(t *testing.T, ep string, tm Timeouts) (*Client, string, error) {
	t.Helper()
	var logBuf testutil.SyncBuffer
	log := slog.New(slog.NewTextHandler(&logBuf, nil))
	clk := testingclock.NewFakeClock(time.Now())
	type result struct {
		c   *Client
		err error
	}
	done := make(chan result, 1) // written once by the dial below
	go func() {
		c, err := dialWith(t.Context(), ep, tm, log, clk)
		done <- result{c, err}
	}()
	for {
		select {
		case r := <-done:
			if r.c != nil {
				t.Cleanup(func() { _ = r.c.Close() })
			}
			return r.c, logBuf.String(), r.err
		default:
		}
		if clk.HasWaiters() {
			clk.Step(readyMaxDelay)
		}
		time.Sleep(time.Millisecond) // let the dial run; no result depends on it
	}
}

// A runtime that answers "not initialized" at first (a containerd that was
// just started) is waited for, with progress in the log, and then used.
func TestDialWaitsForRuntimeThatIsStarting(t *testing.T) {
	f, ep := startFakeRuntime(t)
	for range 3 {
		f.RuntimeService.InjectError("Version", errNotInitialized)
	}
	c, log, err := dialStepping(t, ep, DefaultTimeouts())
	if err != nil {
		t.Fatalf("Dial: %v\nlog:\n%s", err, log)
	}
	if _, err := c.Version(t.Context()); err != nil {
		t.Errorf("Version after Dial: %v", err)
	}
	if got := strings.Count(log, "waiting for the CRI runtime to become ready"); got != 3 {
		t.Errorf("logged %d waits, want 3:\n%s", got, log)
	}
	if !strings.Contains(log, "server is not initialized yet") || !strings.Contains(log, "CRI runtime is ready") {
		t.Errorf("log does not say why it waited and when it was over:\n%s", log)
	}
}

// A runtime whose status says RuntimeReady=false is waited for too.
func TestDialWaitsForRuntimeReadyCondition(t *testing.T) {
	f, ep := startFakeRuntime(t)
	f.RuntimeService.Lock()
	f.RuntimeService.FakeStatus = &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{
		{Type: runtimeapi.RuntimeReady, Status: false, Reason: "Restoring", Message: "loading sandboxes"},
	}}
	f.RuntimeService.Unlock()
	var once sync.Once
	go func() {
		// Once the dial has asked at least once, the runtime becomes ready.
		for {
			f.RuntimeService.Lock()
			asked := strings.Count(strings.Join(f.RuntimeService.Called, ","), "Status") >= 1
			if asked {
				once.Do(func() { f.RuntimeService.FakeStatus = nil })
			}
			f.RuntimeService.Unlock()
			if asked {
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	_, log, err := dialStepping(t, ep, DefaultTimeouts())
	if err != nil {
		t.Fatalf("Dial: %v\nlog:\n%s", err, log)
	}
	if !strings.Contains(log, "Restoring loading sandboxes") {
		t.Errorf("log does not give the runtime's reason:\n%s", log)
	}
}

// A runtime that never becomes ready is given up on after Timeouts.Ready,
// with the last reason, and not mistaken for a missing runtime.
func TestDialGivesUpOnRuntimeNeverReady(t *testing.T) {
	f, ep := startFakeRuntime(t)
	for range 1000 {
		f.RuntimeService.InjectError("Version", errNotInitialized)
	}
	tm := DefaultTimeouts()
	tm.Ready = 10 * time.Second
	_, log, err := dialStepping(t, ep, tm)
	if err == nil {
		t.Fatal("Dial succeeded")
	}
	const want = "did not become ready within"
	if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "server is not initialized yet") {
		t.Errorf("error %q: want %q and the runtime's reason", err, want)
	}
	if strings.Contains(err.Error(), "is containerd running?") {
		t.Errorf("a runtime that answers is reported as missing: %q", err)
	}
	if !IsUnavailable(err) {
		t.Errorf("error class: %v, want %v", err, ErrUnavailable)
	}
	if !strings.Contains(log, "waiting for the CRI runtime to become ready") {
		t.Errorf("no progress logged:\n%s", log)
	}
}

// Answers that will not change by themselves end the dial at once.
func TestDialDoesNotWaitOnPermanentErrors(t *testing.T) {
	f, ep := startFakeRuntime(t)
	f.RuntimeService.InjectError("Version", status.Error(codes.Unimplemented, "unknown service runtime.v1.RuntimeService"))
	_, log, err := dialStepping(t, ep, DefaultTimeouts())
	if !IsUnimplemented(err) {
		t.Errorf("Dial: %v, want class %v", err, ErrUnimplemented)
	}
	if strings.Contains(log, "waiting for") {
		t.Errorf("waited on a permanent error:\n%s", log)
	}
}

func TestDialCanceledWhileWaiting(t *testing.T) {
	f, ep := startFakeRuntime(t)
	for range 1000 {
		f.RuntimeService.InjectError("Version", errNotInitialized)
	}
	ctx, cancel := context.WithCancel(t.Context())
	clk := testingclock.NewFakeClock(time.Now())
	done := make(chan error, 1) // written once
	go func() {
		_, err := dialWith(ctx, ep, DefaultTimeouts(), nil, clk)
		done <- err
	}()
	for !clk.HasWaiters() {
		select {
		case err := <-done:
			t.Fatalf("Dial returned without waiting: %v", err)
		default:
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; !IsCanceled(err) {
		t.Errorf("Dial canceled while waiting: %v, want class %v", err, ErrCanceled)
	}
}
