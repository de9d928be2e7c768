package cri

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	remote "k8s.io/cri-client/pkg"
	"k8s.io/utils/clock"
)

// The back-off between readiness checks: it starts short, because a
// freshly started containerd is usually ready within a second, and is
// bounded, so a runtime that becomes ready is noticed within a few seconds.
const (
	readyInitialDelay = 200 * time.Millisecond
	readyMaxDelay     = 5 * time.Second
)

// errRuntimeNotReady is the class of "the runtime answered, but says it is
// not ready yet".
var errRuntimeNotReady = errors.New("runtime not ready")

// notReadyError is what Dial returns when the runtime answered but did not
// become ready within Timeouts.Ready.
type notReadyError struct {
	endpoint string
	waited   time.Duration
	cause    error
}

func (e *notReadyError) Error() string {
	return fmt.Sprintf("CRI runtime at %s did not become ready within %s: %v", e.endpoint, e.waited.Round(time.Second), e.cause)
}

func (e *notReadyError) Unwrap() []error { return []error{ErrUnavailable, e.cause} }

// waitReady waits until the runtime at ep answers Version and reports the
// RuntimeReady condition, checking on one connection of its own (cri-client
// keeps the connection of a failed Build open, so Build is called once the
// runtime is ready). A runtime that answers "not yet" (containerd's CRI
// plugin says "server is not initialized yet" while it restores its
// sandboxes after a start) is asked again with a bounded back-off, and
// every attempt is logged, for at most t.Ready. Any other failure, and
// silence, are returned at once.
func waitReady(ctx context.Context, ep string, t Timeouts, log *slog.Logger, clk clock.Clock) error {
	conn, err := grpc.NewClient(ep, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return translate(err, "connect to runtime")
	}
	defer conn.Close()
	client := runtimeapi.NewRuntimeServiceClient(conn)
	start := clk.Now()
	delay := readyInitialDelay
	for attempt := 1; ; attempt++ {
		err := checkReady(ctx, client, t.Handshake)
		waited := clk.Since(start)
		if err == nil {
			if attempt > 1 {
				log.Info("CRI runtime is ready", "endpoint", ep, "waited", waited.Round(time.Millisecond), "attempts", attempt)
			}
			return nil
		}
		if ctx.Err() != nil || !notYet(err) {
			return err
		}
		if waited+delay > t.Ready {
			return &notReadyError{endpoint: ep, waited: waited, cause: err}
		}
		log.Info("waiting for the CRI runtime to become ready", "endpoint", ep, "attempt", attempt,
			"waited", waited.Round(time.Millisecond), "retryIn", delay, "reason", err.Error())
		select {
		case <-ctx.Done():
			return translate(ctx.Err(), "wait for runtime")
		case <-clk.After(delay):
		}
		delay = min(2*delay, readyMaxDelay)
	}
}

// checkReady asks for the version and the status once, each bounded by d.
func checkReady(ctx context.Context, client runtimeapi.RuntimeServiceClient, d time.Duration) error {
	vctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	if _, err := client.Version(vctx, &runtimeapi.VersionRequest{Version: string(remote.CRIVersionV1)}); err != nil {
		return translate(err, "get runtime version")
	}
	sctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	st, err := client.Status(sctx, &runtimeapi.StatusRequest{})
	if err != nil {
		return translate(err, "get runtime status")
	}
	for _, c := range st.GetStatus().GetConditions() {
		if c.GetType() == runtimeapi.RuntimeReady && !c.GetStatus() {
			return fmt.Errorf("get runtime status: %w: %s %s", errRuntimeNotReady, c.GetReason(), c.GetMessage())
		}
	}
	return nil
}

// notYet reports whether err is a runtime saying "not yet": an answer that
// may change by itself (containerd's "server is not initialized yet"
// arrives as Unknown), as opposed to silence (DeadlineExceeded), a refusal
// that will not (Unimplemented, InvalidArgument, ...), or a cancellation.
func notYet(err error) bool {
	return errors.Is(err, errRuntimeNotReady) || IsUnknown(err) || IsUnavailable(err) || IsFailedPrecondition(err)
}
