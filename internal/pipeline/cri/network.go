package cri

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"
)

// networkStateTTL is how long NetworkState trusts the runtime's answer:
// the kubelet asks the runtime for its status every 5 s (updateRuntimeUp).
const networkStateTTL = 5 * time.Second

// ErrNetworkUnknown is the network's state before the runtime first
// answered (the kubelet's ErrNetworkUnknown).
var ErrNetworkUnknown = errors.New("network state unknown")

// NetworkState is whether the runtime's pod network is ready, from the
// NetworkReady condition of RuntimeStatus: the network half of the
// kubelet's runtimeState. It asks the runtime at most every 5 s, when
// asked itself; a runtime that does not answer leaves the last state in
// place, and before the first answer the state is ErrNetworkUnknown.
type NetworkState struct {
	rt    StatusReader
	clock clock.Clock
	log   *slog.Logger

	mu   sync.Mutex
	next time.Time // when to ask again
	err  error
}

// NewNetworkState returns a NetworkState asking rt; clk and log may be nil.
func NewNetworkState(rt StatusReader, clk clock.Clock, log *slog.Logger) *NetworkState {
	if clk == nil {
		clk = clock.RealClock{}
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &NetworkState{rt: rt, clock: clk, log: log, err: ErrNetworkUnknown}
}

// NetworkErr is nil when the runtime's network is ready, else why not
// ("container runtime network not ready: NetworkReady=false reason:...
// message:...").
func (n *NetworkState) NetworkErr(ctx context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	now := n.clock.Now()
	if now.Before(n.next) {
		return n.err
	}
	n.next = now.Add(networkStateTTL)
	resp, err := n.rt.Status(ctx, false)
	if err != nil {
		n.log.Warn("Container runtime status check failed", "err", err)
		return n.err
	}
	if st := resp.GetStatus(); st != nil {
		was := n.err
		n.err = NetworkError(st)
		if n.err != nil && (was == nil || was.Error() != n.err.Error()) {
			n.log.Error("Container runtime network not ready", "err", n.err)
		} else if n.err == nil && was != nil {
			n.log.Info("Container runtime network is ready")
		}
	}
	return n.err
}

// NetworkError is nil when st says the runtime's network is ready, else
// the kubelet's error for it.
func NetworkError(st *runtimeapi.RuntimeStatus) error {
	c := Condition(st, runtimeapi.NetworkReady)
	if c == nil || !c.GetStatus() {
		return fmt.Errorf("container runtime network not ready: %s", ConditionString(c))
	}
	return nil
}

// Condition is st's condition of type t, nil if it has none.
func Condition(st *runtimeapi.RuntimeStatus, t string) *runtimeapi.RuntimeCondition {
	for _, c := range st.GetConditions() {
		if c.GetType() == t {
			return c
		}
	}
	return nil
}

// ConditionString is a runtime condition in the kubelet's words
// (NetworkReady=false reason:... message:...), <nil> for none.
func ConditionString(c *runtimeapi.RuntimeCondition) string {
	if c == nil {
		return "<nil>"
	}
	return fmt.Sprintf("%s=%t reason:%s message:%s", c.GetType(), c.GetStatus(), c.GetReason(), c.GetMessage())
}
