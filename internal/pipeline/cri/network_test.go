package cri

import (
	"context"
	"errors"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critest "k8s.io/cri-api/pkg/apis/testing"
	clocktesting "k8s.io/utils/clock/testing"
)

func networkStatus(ready bool) *runtimeapi.RuntimeStatus {
	c := &runtimeapi.RuntimeCondition{Type: runtimeapi.NetworkReady, Status: ready}
	if !ready {
		c.Reason, c.Message = "NetworkPluginNotReady", "Network plugin returns error: cni plugin not initialized"
	}
	return &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{{Type: runtimeapi.RuntimeReady, Status: true}, c}}
}

// NetworkState follows the runtime's NetworkReady condition, asking at
// most every 5 s; before the first answer, and while the runtime does not
// answer, it keeps what it knew.
func TestNetworkState(t *testing.T) {
	ctx := context.Background()
	rs := critest.NewFakeRuntimeService()
	clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	n := NewNetworkState(rs, clk, nil)
	const notReady = "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady " +
		"message:Network plugin returns error: cni plugin not initialized"

	rs.InjectError("Status", errors.New("unavailable"))
	if err := n.NetworkErr(ctx); !errors.Is(err, ErrNetworkUnknown) {
		t.Fatalf("before an answer: %v, want %v", err, ErrNetworkUnknown)
	}
	clk.Step(networkStateTTL)
	rs.FakeStatus = networkStatus(false)
	if err := n.NetworkErr(ctx); err == nil || err.Error() != notReady {
		t.Fatalf("not ready: %v, want %q", err, notReady)
	}
	rs.FakeStatus = networkStatus(true)
	if err := n.NetworkErr(ctx); err == nil {
		t.Fatal("asked again within 5 s")
	}
	clk.Step(networkStateTTL)
	if err := n.NetworkErr(ctx); err != nil {
		t.Fatalf("ready: %v", err)
	}
	clk.Step(networkStateTTL)
	rs.InjectError("Status", errors.New("unavailable"))
	if err := n.NetworkErr(ctx); err != nil {
		t.Fatalf("a runtime that did not answer: %v, want the last state (ready)", err)
	}
	clk.Step(networkStateTTL)
	rs.FakeStatus = &runtimeapi.RuntimeStatus{}
	if err := n.NetworkErr(ctx); err == nil || err.Error() != "container runtime network not ready: <nil>" {
		t.Fatalf("no NetworkReady condition: %v", err)
	}
}
