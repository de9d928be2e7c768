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
	"strings"
	"syscall"

	"github.com/nodelet/nodelet/internal/pipeline/cri"
)

// The garbage collector keeps Go's default target (GOGC=100). At 100 idle
// pods, 50 % kept 2 MiB less anonymous memory but collected 14 times a
// minute instead of 6, for 0.57 % of a core against 0.47 % (BenchmarkDensity,
// the same hour): idle CPU is the scarcer of the two on a small node.

func main() {
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
