//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/pipeline/cri"
	"github.com/nodelet/nodelet/internal/pipeline/pleg"
	"github.com/nodelet/nodelet/internal/serve/server"
)

const (
	streamUpMetric     = "kubelet_evented_pleg_active"
	streamOpenedMetric = "kubelet_evented_pleg_connection_success_count"
	streamErrorMetric  = "kubelet_evented_pleg_connection_error_count"
)

// requireEventStream skips the test when the shared runtime has no CRI
// container event stream (containerd before 1.7).
func requireEventStream(t testing.TB) {
	t.Helper()
	err := probeEventStream()
	if cri.IsUnimplemented(err) {
		t.Skipf("the runtime has no container event stream: %v", err)
	}
	if err != nil {
		t.Fatalf("container event stream: %v", err)
	}
}

// probeEventStream opens the shared runtime's container event stream for
// 2 s: nil when it stayed open, else why not.
func probeEventStream() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	// Drained: cri-client sends each event without watching ctx, so a
	// full channel would block it for good once other pods make events.
	events := make(chan *runtimeapi.ContainerEventResponse, 16)
	go func() {
		for range events {
		}
	}()
	defer close(events) // ContainerEvents has returned: nothing sends any more
	err := shared.rt.ContainerEvents(ctx, events, nil)
	deadline, _ := ctx.Deadline()
	switch {
	// The stream stayed open until our deadline. containerd may end it
	// (RST_STREAM) a moment before ctx's own timer fires, so the clock
	// decides, not ctx.Err(); both readings are monotonic.
	case ctx.Err() != nil || !time.Now().Before(deadline):
		return nil
	case err == nil:
		return errors.New("the stream ended at once")
	}
	return err
}

const exitLaterPod = `apiVersion: v1
kind: Pod
metadata: {name: %s}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: busybox:1.35
    command: ["sh", "-c", "sleep %d; exit 3"]
`

// The evented PLEG falls back to relisting when containerd dies and
// follows the stream again once it is back: the metrics and the node's
// events say so, an exit during the outage is seen, and an exit after it
// is seen within seconds although the periodic relist is then 5 minutes
// away.
func TestEventedPLEGFallsBackWhenContainerdDies(t *testing.T) {
	requireEventStream(t)
	n, dir, _ := lifecycleNodelet(t, "evented")
	api := n.api(t)
	metric := func(name string) float64 {
		v, err := api.metric("/metrics", name, nil)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return v
	}
	eventually(t, 30*time.Second, "the PLEG follows the event stream", func() error {
		if v, err := api.metric("/metrics", streamUpMetric, nil); err != nil || v != 1 {
			return fmt.Errorf("%s = %v (%v)", streamUpMetric, v, err)
		}
		return nil
	})
	opened, failed := metric(streamOpenedMetric), metric(streamErrorMetric)

	// A container that exits while containerd is down.
	writeManifest(t, dir, "outage.yaml", fmt.Sprintf(exitLaterPod, "outage", 4))
	waitPod(t, api, "outage-e2e", 60*time.Second, "running", func(p *v1.Pod) error {
		if c := containerStatus(p, "main"); c.State.Running == nil {
			return fmt.Errorf("main: %+v", c.State)
		}
		return nil
	})
	pid := shared.containerd.PID()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, api, 30*time.Second, "the stream's failure on the node", nodeEvent(v1.EventTypeWarning, pleg.EventReasonEventedPLEGFailed))
	if got := metric(streamErrorMetric); got <= failed {
		t.Errorf("%s = %v after containerd died, want more than %v", streamErrorMetric, got, failed)
	}
	eventually(t, 60*time.Second, "containerd back", func() error {
		if p := shared.containerd.PID(); p == 0 || p == pid {
			return fmt.Errorf("containerd pid %d", p)
		}
		_, err := shared.rt.Version(context.Background())
		return err
	})
	waitEvent(t, api, 60*time.Second, "the stream back on the node", nodeEvent(v1.EventTypeNormal, pleg.EventReasonEventedPLEGRecovered))
	if got := metric(streamOpenedMetric); got <= opened {
		t.Errorf("%s = %v after containerd came back, want more than %v", streamOpenedMetric, got, opened)
	}
	if got := metric(streamUpMetric); got != 1 {
		t.Errorf("%s = %v after the stream came back, want 1", streamUpMetric, got)
	}
	waitPod(t, api, "outage-e2e", 30*time.Second, "the exit during the outage seen", exitedWith(3))

	// After the outage the stream alone brings an exit in: the safety-net
	// relist is minutes away.
	writeManifest(t, dir, "after.yaml", fmt.Sprintf(exitLaterPod, "after", 2))
	waitPod(t, api, "after-e2e", 60*time.Second, "the exit after the outage seen", exitedWith(3))
}

func nodeEvent(eventType, reason string) func(server.EventItem) bool {
	return func(e server.EventItem) bool { return e.Node != "" && e.Type == eventType && e.Reason == reason }
}

func exitedWith(code int32) func(*v1.Pod) error {
	return func(p *v1.Pod) error {
		c := containerStatus(p, "main")
		if c.State.Terminated == nil || c.State.Terminated.ExitCode != code {
			return fmt.Errorf("main: %+v, want terminated with %d", c.State, code)
		}
		return nil
	}
}
