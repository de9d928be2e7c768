package localnet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/base/metrics"
)

// Period is how often the rules are checked and what is missing added
// again: the kubelet's iptables monitor looks every minute too, and has no
// setting for it.
const Period = time.Minute

// EventFailed is the reason of the node event when the rules cannot be
// installed.
const EventFailed = "FailedToBlockLocalnet"

// Iptables runs the iptables command with args and returns its combined
// output. An error of a command that ran and failed has an ExitCode() int
// method, as *exec.ExitError has: exit status 1 means "no such chain or
// rule" to a check.
type Iptables interface {
	Run(ctx context.Context, args ...string) ([]byte, error)
}

// NodeEvents records events about the node (events.Recorder).
type NodeEvents interface {
	NodeEvent(node, eventType, reason, message string)
}

// Deps are the keeper's collaborators.
type Deps struct {
	Iptables Iptables
	// Events and NodeName: a Warning node event when the rules cannot be
	// installed (nil Events: none).
	Events   NodeEvents
	NodeName string
	// Registerer gets nodelet_localnet_blocked (nil: none).
	Registerer prometheus.Registerer
	Clock      clock.Clock
	Log        *slog.Logger
}

// Keeper keeps the rules of Rules in place. Its methods are called from
// one goroutine (Run's).
type Keeper struct {
	deps    Deps
	blocked prometheus.Gauge
	// synced is set after the first successful Sync; failing while the
	// last Sync failed.
	synced, failing bool
}

// New returns a keeper. It runs nothing.
func New(deps Deps) *Keeper {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "nodelet_localnet_blocked",
		Help: "1 when the last check found the kubelet's rule that blocks connections to 127.0.0.0/8 from elsewhere in place (or added it), 0 when it could not be installed.",
	})
	return &Keeper{deps: deps, blocked: metrics.Register(deps.Registerer, g)}
}

// Run syncs at once and then every Period until ctx ends.
func (k *Keeper) Run(ctx context.Context) {
	for {
		k.Sync(ctx)
		select {
		case <-ctx.Done():
			return
		case <-k.deps.Clock.After(Period):
		}
	}
}

// Sync adds what is missing of the rules and reports it: what it installed
// the first time, what it re-created later, the reason when it cannot. A
// failure never stops anything else: pods keep running.
func (k *Keeper) Sync(ctx context.Context) {
	added, err := k.ensure(ctx)
	switch {
	case ctx.Err() != nil:
		return
	case err != nil:
		k.blocked.Set(0)
		if !k.failing {
			k.deps.Log.Error("cannot block connections to 127.0.0.0/8 from pods: node-local services are reachable from pods that route 127.0.0.1 through their gateway",
				"err", err)
			if k.deps.Events != nil {
				k.deps.Events.NodeEvent(k.deps.NodeName, v1.EventTypeWarning, EventFailed, err.Error())
			}
		}
		k.failing = true
		return
	case !k.synced:
		k.deps.Log.Info("connections to 127.0.0.0/8 from elsewhere are blocked", "chain", Chain, "added", added)
	case len(added) > 0:
		k.deps.Log.Warn("re-created the rules that block connections to 127.0.0.0/8 from elsewhere: someone removed them", "chain", Chain, "added", added)
	case k.failing:
		k.deps.Log.Info("connections to 127.0.0.0/8 from elsewhere are blocked again", "chain", Chain)
	}
	k.synced, k.failing = true, false
	k.blocked.Set(1)
}

// ensure observes, plans and runs the plan; it returns the commands it ran.
func (k *Keeper) ensure(ctx context.Context) ([]string, error) {
	o, err := k.observe(ctx)
	if err != nil {
		return nil, err
	}
	var added []string
	for _, cmd := range Plan(o) {
		_, err := k.deps.Iptables.Run(ctx, cmd...)
		if err != nil && !(isChainCreate(cmd) && exitCode(err) == 1) { // created meanwhile by another
			return added, fmt.Errorf("iptables %s: %w", strings.Join(cmd, " "), err)
		}
		added = append(added, strings.Join(cmd, " "))
	}
	return added, nil
}

// observe asks iptables which of Rules are present.
func (k *Keeper) observe(ctx context.Context) (Observed, error) {
	var o Observed
	var err error
	if o.ChainExists, err = k.check(ctx, CheckChain()); err != nil || !o.ChainExists {
		return o, err
	}
	for _, r := range Rules() {
		present, err := k.check(ctx, r.Check())
		if err != nil {
			return o, err
		}
		o.Present = append(o.Present, present)
	}
	return o, nil
}

// check runs a check command: exit status 0 is present, 1 absent, anything
// else (no iptables, no permission, no conntrack match) an error.
func (k *Keeper) check(ctx context.Context, args []string) (bool, error) {
	_, err := k.deps.Iptables.Run(ctx, args...)
	switch {
	case err == nil:
		return true, nil
	case exitCode(err) == 1:
		return false, nil
	default:
		return false, fmt.Errorf("iptables %s: %w", strings.Join(args, " "), err)
	}
}

func isChainCreate(cmd []string) bool { return len(cmd) > 1 && cmd[len(cmd)-2] == "-N" }

// exitCode is err's exit status, or -1 when the command did not run.
func exitCode(err error) int {
	var ec interface{ ExitCode() int }
	if errors.As(err, &ec) {
		return ec.ExitCode()
	}
	return -1
}
