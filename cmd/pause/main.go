// Command pause is beside the pipeline: the PID 1 of every pod sandbox
// nodelet's pause image runs. It holds the pod's namespaces open by
// sleeping, reaps the zombies of processes orphaned into the sandbox, and
// exits 0 on SIGTERM or SIGINT. It uses only the standard library so that
// it builds as a tiny static binary:
//
//	CGO_ENABLED=0 go build -ldflags='-s -w' -o bin/pause ./cmd/pause
package main

import (
	"os"
	"os/signal"
	"syscall"
)

// version is printed by -v.
const version = "nodelet-pause 1.0"

func main() {
	if len(os.Args) > 1 && (os.Args[1] == "-v" || os.Args[1] == "--version") {
		os.Stdout.WriteString(version + "\n")
		return
	}
	signals := make(chan os.Signal, 16)
	signal.Notify(signals, syscall.SIGCHLD, syscall.SIGTERM, syscall.SIGINT)
	// Children that exited before the handler was installed sent their
	// SIGCHLD to nobody; collect them now.
	reap()
	waitForStop(signals)
}

// waitForStop reaps children on every SIGCHLD and returns on SIGTERM or
// SIGINT.
func waitForStop(signals <-chan os.Signal) {
	for sig := range signals {
		if sig != syscall.SIGCHLD {
			return
		}
		reap()
	}
}

// reap collects every exited child without blocking. Several exits can
// share one SIGCHLD, so it loops until none is left.
func reap() {
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if pid <= 0 || err != nil {
			return
		}
	}
}
