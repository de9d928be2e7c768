package podruntime

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/pipeline/cri"
	"github.com/nodelet/nodelet/internal/pipeline/podworker"
	"github.com/nodelet/nodelet/internal/pipeline/statusmanager"
)

// switchNetwork is a pod network whose readiness the test sets.
type switchNetwork struct {
	mu  sync.Mutex
	err error
}

func (n *switchNetwork) NetworkErr(context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.err
}

func (n *switchNetwork) set(err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.err = err
}

type podEvent struct{ pod, eventType, reason, message string }

type eventList struct {
	mu     sync.Mutex
	events []podEvent
}

func (e *eventList) Event(pod *v1.Pod, eventType, reason, message string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.events = append(e.events, podEvent{pod.Name, eventType, reason, message})
}

// NodeEvent keeps the event with pod "node/NAME".
func (e *eventList) NodeEvent(node, eventType, reason, message string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.events = append(e.events, podEvent{"node/" + node, eventType, reason, message})
}

// take returns the NetworkNotReady events recorded since the last take.
func (e *eventList) take() []podEvent {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []podEvent
	for _, ev := range e.events {
		if ev.reason == ReasonNetworkNotReady {
			out = append(out, ev)
		}
	}
	e.events = nil
	return out
}

// newNetworkFixture is newFixture with a pod network whose readiness the
// test sets (not ready, as the runtime says it before a CNI config) and
// the events recorded.
func newNetworkFixture(t *testing.T) (*fixture, *switchNetwork, *eventList) {
	t.Helper()
	f := newFixture(t)
	netErr := cri.NetworkError(&runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{
		{Type: runtimeapi.RuntimeReady, Status: true},
		{Type: runtimeapi.NetworkReady, Reason: "NetworkPluginNotReady", Message: "Network plugin returns error: cni plugin not initialized"},
	}})
	net, events := &switchNetwork{err: netErr}, &eventList{}
	log := slog.New(slog.DiscardHandler)
	c := cri.New(f.rs, f.is, "fake", cri.DefaultTimeouts(), log)
	f.m = New(c, Options{PodLogsDir: "/var/log/pods"}, Deps{Clock: f.clock, Log: log, Status: statusmanager.New(nil), Recorder: events, Network: net})
	return f, net, events
}

const wantNotReady = "network is not ready: container runtime network not ready: NetworkReady=false " +
	"reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized"

// While the runtime's network is not ready a pod on the pod network gets
// no sandbox: each sync records the kubelet's NetworkNotReady event and
// fails (the pod worker retries after its back-off), and the pod is
// reported pending. Once the network is ready the next sync starts it.
func TestNetworkNotReadyHoldsThePodBack(t *testing.T) {
	f, net, events := newNetworkFixture(t)
	ctx := context.Background()
	pod := testPod()
	for attempt := 1; attempt <= 2; attempt++ {
		res, err := f.m.SyncPod(ctx, podworker.SyncRequest{Pod: pod})
		if err == nil || err.Error() != wantNotReady {
			t.Fatalf("attempt %d: SyncPod = %v, want %q", attempt, err, wantNotReady)
		}
		if res.Terminal {
			t.Errorf("attempt %d: terminal", attempt)
		}
		if got := f.mutations(); got != "" {
			t.Errorf("attempt %d: runtime calls %s, want none", attempt, got)
		}
		if got := f.imageCalls(); got != "" {
			t.Errorf("attempt %d: image calls %s, want none", attempt, got)
		}
		want := []podEvent{{pod.Name, v1.EventTypeWarning, "NetworkNotReady", wantNotReady}}
		if got := events.take(); len(got) != 1 || got[0] != want[0] {
			t.Errorf("attempt %d: events %+v, want %+v", attempt, got, want)
		}
		st, ok := f.m.status.Get(pod.UID)
		if !ok || st.Phase != v1.PodPending || len(st.ContainerStatuses) != 2 ||
			st.ContainerStatuses[0].State.Waiting == nil || st.ContainerStatuses[0].State.Waiting.Reason != "ContainerCreating" {
			t.Errorf("attempt %d: status %+v (known %v), want Pending, ContainerCreating", attempt, st, ok)
		}
	}

	net.set(nil)
	if _, err := f.m.SyncPod(ctx, podworker.SyncRequest{Pod: pod}); err != nil {
		t.Fatal(err)
	}
	if got := f.mutations(); got != "RunPodSandbox,CreateContainer,StartContainer,CreateContainer,StartContainer" {
		t.Errorf("once ready, runtime calls = %s", got)
	}
	if got := events.take(); len(got) != 0 {
		t.Errorf("once ready, events %+v", got)
	}
}

// A pod on the host network does not need the pod network: it starts.
func TestNetworkNotReadyStartsHostNetworkPods(t *testing.T) {
	f, _, events := newNetworkFixture(t)
	pod := testPod()
	pod.Spec.HostNetwork = true
	if _, err := f.m.SyncPod(context.Background(), podworker.SyncRequest{Pod: pod}); err != nil {
		t.Fatal(err)
	}
	if got := f.mutations(); got != "RunPodSandbox,CreateContainer,StartContainer,CreateContainer,StartContainer" {
		t.Errorf("runtime calls = %s", got)
	}
	if got := events.take(); len(got) != 0 {
		t.Errorf("events %+v", got)
	}
}

// A running pod whose network goes away is left as it is: nothing of it
// is stopped, and nothing is started either (a container that exited is
// restarted once the network is back), as the kubelet's SyncPod returns
// before the runtime's.
func TestNetworkNotReadyKillsNothing(t *testing.T) {
	f, net, events := newNetworkFixture(t)
	ctx := context.Background()
	pod := testPod()
	pod.Spec.Containers = pod.Spec.Containers[:1]
	net.set(nil)
	if _, err := f.m.SyncPod(ctx, podworker.SyncRequest{Pod: pod}); err != nil {
		t.Fatal(err)
	}
	f.mutations()
	net.set(errors.New("container runtime network not ready: <nil>"))

	// A changed spec would have the container replaced.
	changed := pod.DeepCopy()
	changed.Spec.Containers[0].Image = "busybox:1.36"
	if _, err := f.m.SyncPod(ctx, podworker.SyncRequest{Pod: changed}); err == nil {
		t.Fatal("SyncPod succeeded while the network is not ready")
	}
	if got := f.mutations(); got != "" {
		t.Errorf("runtime calls = %s, want none", got)
	}
	if st, _ := f.m.status.Get(pod.UID); st.Phase != v1.PodRunning {
		t.Errorf("phase %s, want Running", st.Phase)
	}
	if got := events.take(); len(got) != 1 || got[0].message != "network is not ready: container runtime network not ready: <nil>" {
		t.Errorf("events %+v", got)
	}

	net.set(nil)
	if _, err := f.m.SyncPod(ctx, podworker.SyncRequest{Pod: changed}); err != nil {
		t.Fatal(err)
	}
	if got := f.mutations(); got != "StopContainer,CreateContainer,StartContainer" {
		t.Errorf("once ready, runtime calls = %s", got)
	}
}
