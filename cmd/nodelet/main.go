// Command nodelet is a node agent that runs Kubernetes pods on one machine
// the way the kubelet does. This is the only place that reads flags and the
// environment, installs signal handling and picks real clocks and loggers;
// everything else is wired in internal/agent.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/nodelet/nodelet/internal/pipeline/cri"
)

// gcPercent is the garbage collector's target unless GOGC is set. An idle
// nodelet's live heap is small (about 9 MiB with 100 pods) and it
// allocates little (10 MiB a minute), so Go's default of 100 % kept as much
// again of garbage resident for one collection a minute. At 50 %, 100 idle
// pods kept 6-7 MiB less anonymous memory for 3-4 collections a minute, at
// 0.22-0.28 % of a core against 0.22 % (BenchmarkDensity, one run each;
// a 10 ms tick a minute is 0.017 %). An earlier build, which allocated
// more when idle, collected 14 times a minute at 50 % against 6 and paid
// 0.1 % of a core for it.
const gcPercent = 50

// gcTarget is the collector's target to set, or false for the user's
// GOGC.
func gcTarget(getenv func(string) string) (int, bool) {
	if getenv("GOGC") != "" {
		return 0, false
	}
	return gcPercent, true
}

func main() {
	if p, ok := gcTarget(os.Getenv); ok {
		debug.SetGCPercent(p)
	}
	// Before anything uses gRPC (gRPC's rule): buffers that fit the
	// runtime's list answers instead of 1 MiB ones (cri.FittedBufferPool).
	cri.SetProcessBufferPool()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := newRootCommand(os.Stdout, os.Stderr).ExecuteContext(ctx)
	stop()
	os.Exit(exitCode(os.Stderr, err))
}

// nodeShutdownSignals is the graceful node shutdown's trigger where
// systemd-logind does not announce shutdowns: SIGPWR (what init sends
// when the machine must go down, on power failure) starts one; the pods
// are stopped as shutdownGracePeriod says and nodelet keeps running.
// SIGTERM keeps its meaning: nodelet exits, pods keep running.
func nodeShutdownSignals(ctx context.Context) <-chan bool {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGPWR)
	out := make(chan bool, 1)
	go func() {
		defer signal.Stop(sig)
		for {
			select {
			case <-ctx.Done():
				return
			case <-sig:
				select {
				case out <- true:
				default: // one is pending already
				}
			}
		}
	}()
	return out
}

// exitCode prints err as one line and maps it to the process exit code; a
// remote command's exit code (nodelet exec) is passed through silently.
func exitCode(stderr io.Writer, err error) int {
	if err == nil {
		return 0
	}
	var remote exitCodeError
	if errors.As(err, &remote) {
		return remote.code
	}
	msg := strings.ReplaceAll(strings.TrimSpace(err.Error()), "\n", "; ")
	fmt.Fprintln(stderr, "nodelet: "+msg)
	return 1
}
