package localnet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	clocktesting "k8s.io/utils/clock/testing"

	nltestutil "github.com/nodelet/nodelet/internal/base/testutil"
)

// exitStatus is the error of an iptables command that ran and failed.
type exitStatus int

func (e exitStatus) Error() string { return fmt.Sprintf("exit status %d", int(e)) }
func (e exitStatus) ExitCode() int { return int(e) }

// fakeIptables is the filter table in memory, answering the commands the
// keeper may run as iptables does (exit status 1: no such chain or rule).
// Any command that would remove or change a rule fails the test.
type fakeIptables struct {
	t      *testing.T
	mu     sync.Mutex
	chains map[string][]string // chain → its rules, each spec joined by spaces
	calls  []string
	err    error // when set, every command fails with it (no iptables, no permission)
}

func newFake(t *testing.T) *fakeIptables {
	return &fakeIptables{t: t, chains: map[string][]string{"INPUT": nil, "OUTPUT": nil, "FORWARD": nil}}
}

// withKubelets returns f with the rules a kubelet installs, and a rule of
// someone else's first in INPUT.
func (f *fakeIptables) withKubelets() *fakeIptables {
	f.chains["INPUT"] = []string{"-j KUBE-FIREWALL", "-s 10.0.0.1 -j ACCEPT"}
	f.chains["OUTPUT"] = []string{"-j KUBE-FIREWALL"}
	f.chains["KUBE-FIREWALL"] = []string{kubeletRule}
	return f
}

func (f *fakeIptables) Run(_ context.Context, args ...string) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, strings.Join(args, " "))
	if f.err != nil {
		return nil, f.err
	}
	if len(args) < 6 || !slices.Equal(args[:4], []string{"-w", "5", "-t", "filter"}) {
		f.t.Errorf("iptables %q: want -w 5 -t filter first", args)
		return nil, exitStatus(2)
	}
	op, chain, spec := args[4], args[5], strings.Join(args[6:], " ")
	rules, exists := f.chains[chain]
	switch op {
	case "-S":
		if !exists {
			return nil, exitStatus(1)
		}
	case "-N":
		if exists {
			return nil, exitStatus(1)
		}
		f.chains[chain] = []string{}
	case "-C":
		if !exists || !slices.Contains(rules, spec) {
			return nil, exitStatus(1)
		}
	case "-I", "-A":
		if !exists {
			return nil, exitStatus(1)
		}
		if op == "-I" {
			f.chains[chain] = append([]string{spec}, rules...)
		} else {
			f.chains[chain] = append(rules, spec)
		}
	default:
		f.t.Errorf("iptables %s: the keeper only adds, it never removes or changes a rule", strings.Join(args, " "))
		return nil, exitStatus(2)
	}
	return nil, nil
}

// remove takes a rule away behind the keeper's back (a firewall reload).
func (f *fakeIptables) remove(chain, spec string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.chains[chain] = slices.DeleteFunc(f.chains[chain], func(s string) bool { return s == spec })
}

func (f *fakeIptables) snapshot() map[string][]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string][]string{}
	for c, rs := range f.chains {
		out[c] = slices.Clone(rs)
	}
	return out
}

func (f *fakeIptables) adds() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, c := range f.calls {
		if strings.Contains(c, " -N ") || strings.Contains(c, " -I ") || strings.Contains(c, " -A ") {
			out = append(out, c)
		}
	}
	return out
}

type fakeEvents struct {
	mu      sync.Mutex
	reasons []string
}

func (e *fakeEvents) NodeEvent(node, eventType, reason, message string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.reasons = append(e.reasons, node+" "+eventType+" "+reason+": "+message)
}

type harness struct {
	ipt    *fakeIptables
	keeper *Keeper
	clock  *clocktesting.FakeClock
	log    *nltestutil.SyncBuffer
	events *fakeEvents
	reg    *prometheus.Registry
}

func newHarness(t *testing.T, ipt *fakeIptables) *harness {
	h := &harness{ipt: ipt, clock: clocktesting.NewFakeClock(timeZero()),
		log: &nltestutil.SyncBuffer{}, events: &fakeEvents{}, reg: prometheus.NewRegistry()}
	h.keeper = New(Deps{Iptables: ipt, Events: h.events, NodeName: "n1", Registerer: h.reg, Clock: h.clock,
		Log: slog.New(slog.NewTextHandler(h.log, nil))})
	return h
}

func (h *harness) blocked(t *testing.T) float64 {
	t.Helper()
	return testutil.ToFloat64(h.keeper.blocked)
}

// wantInstalled checks the filter table holds every rule exactly once.
func wantInstalled(t *testing.T, chains map[string][]string) {
	t.Helper()
	for _, want := range []struct{ chain, spec string }{
		{"INPUT", "-j KUBE-FIREWALL"}, {"OUTPUT", "-j KUBE-FIREWALL"}, {"KUBE-FIREWALL", kubeletRule},
	} {
		n := 0
		for _, s := range chains[want.chain] {
			if s == want.spec {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%s holds %q %d times, want once; table: %v", want.chain, want.spec, n, chains)
		}
	}
	if chains["INPUT"][0] != "-j KUBE-FIREWALL" || chains["OUTPUT"][0] != "-j KUBE-FIREWALL" {
		t.Errorf("the jumps are not first: %v", chains)
	}
}

func TestSyncInstallsOnAnEmptyTable(t *testing.T) {
	h := newHarness(t, newFake(t))
	h.ipt.chains["INPUT"] = []string{"-s 10.0.0.1 -j ACCEPT"}
	h.keeper.Sync(context.Background())
	wantInstalled(t, h.ipt.snapshot())
	if got := h.ipt.snapshot()["INPUT"]; got[1] != "-s 10.0.0.1 -j ACCEPT" || len(got) != 2 {
		t.Errorf("INPUT = %v: another's rule changed", got)
	}
	if got := h.blocked(t); got != 1 {
		t.Errorf("nodelet_localnet_blocked = %v, want 1", got)
	}
	if log := h.log.String(); !strings.Contains(log, "connections to 127.0.0.0/8 from elsewhere are blocked") || !strings.Contains(log, "-A KUBE-FIREWALL") {
		t.Errorf("install not logged with what was added:\n%s", log)
	}
}

// Beside a kubelet (or a nodelet) that installed the rules, the keeper
// adds nothing, now or at later syncs, and says once that all is in place.
func TestSyncBesideAKubeletAddsNothing(t *testing.T) {
	h := newHarness(t, newFake(t).withKubelets())
	before := h.ipt.snapshot()
	for range 3 {
		h.keeper.Sync(context.Background())
	}
	if adds := h.ipt.adds(); len(adds) != 0 {
		t.Errorf("added beside the kubelet's rules: %q", adds)
	}
	if after := h.ipt.snapshot(); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("table changed:\n%v\nwas:\n%v", after, before)
	}
	if n := strings.Count(h.log.String(), "are blocked"); n != 1 {
		t.Errorf("logged %d times that the rules are in place, want once:\n%s", n, h.log.String())
	}
	if got := h.blocked(t); got != 1 {
		t.Errorf("nodelet_localnet_blocked = %v, want 1", got)
	}
}

// Two nodelets on one machine: the second finds the first's rules; neither
// removes anything (the fake fails the test on any removal).
func TestTwoKeepersDoNotFight(t *testing.T) {
	ipt := newFake(t)
	a, b := newHarness(t, ipt), newHarness(t, ipt)
	for range 2 {
		a.keeper.Sync(context.Background())
		b.keeper.Sync(context.Background())
	}
	wantInstalled(t, ipt.snapshot())
	if adds := ipt.adds(); len(adds) != 4 {
		t.Errorf("adds = %q, want the first keeper's 4 only", adds)
	}
}

// A chain created by another between the keeper's look and its -N is no
// failure.
func TestSyncChainCreatedMeanwhile(t *testing.T) {
	ipt := &racingChain{fakeIptables: newFake(t)}
	h := newHarness(t, ipt.fakeIptables)
	h.keeper.deps.Iptables = ipt
	h.keeper.Sync(context.Background())
	wantInstalled(t, ipt.snapshot())
	if got := h.blocked(t); got != 1 {
		t.Errorf("nodelet_localnet_blocked = %v, want 1; log:\n%s", got, h.log.String())
	}
}

// racingChain creates the chain itself just before the keeper's -N.
type racingChain struct{ *fakeIptables }

func (r *racingChain) Run(ctx context.Context, args ...string) ([]byte, error) {
	if slices.Contains(args, "-N") {
		r.mu.Lock()
		r.chains[Chain] = []string{}
		r.mu.Unlock()
	}
	return r.fakeIptables.Run(ctx, args...)
}

// Removed rules are added again at the next check, a Period later, and the
// re-creation is logged; nothing is added before the period has passed.
func TestRunRecreatesRemovedRules(t *testing.T) {
	h := newHarness(t, newFake(t))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { h.keeper.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	nltestutil.Eventually(t, "first sync", h.clock.HasWaiters)
	wantInstalled(t, h.ipt.snapshot())

	h.ipt.remove(Chain, kubeletRule)
	h.ipt.remove("INPUT", "-j KUBE-FIREWALL")
	h.clock.Step(Period - 1)
	if got := h.ipt.snapshot(); slices.Contains(got[Chain], kubeletRule) {
		t.Fatalf("re-created before Period: %v", got)
	}
	h.clock.Step(1)
	nltestutil.Eventually(t, "the rules re-created", func() bool {
		got := h.ipt.snapshot()
		return slices.Contains(got[Chain], kubeletRule) && slices.Contains(got["INPUT"], "-j KUBE-FIREWALL")
	})
	nltestutil.Eventually(t, "next wait", h.clock.HasWaiters)
	wantInstalled(t, h.ipt.snapshot())
	log := h.log.String()
	if !strings.Contains(log, "re-created the rules") || !strings.Contains(log, "-A KUBE-FIREWALL") || !strings.Contains(log, "-I INPUT") {
		t.Errorf("re-creation not logged with what was added:\n%s", log)
	}
}

// Without iptables (or without permission) the keeper reports once, as an
// error log, a node event and the metric, keeps checking, and reports
// when the rules are in place again.
func TestSyncFailureIsReportedAndRecovered(t *testing.T) {
	ipt := newFake(t)
	ipt.err = errors.New(`find iptables: exec: "iptables": executable file not found in $PATH`)
	h := newHarness(t, ipt)
	for range 2 {
		h.keeper.Sync(context.Background())
	}
	if got := h.blocked(t); got != 0 {
		t.Errorf("nodelet_localnet_blocked = %v, want 0", got)
	}
	if n := strings.Count(h.log.String(), "level=ERROR"); n != 1 || !strings.Contains(h.log.String(), "executable file not found") {
		t.Errorf("want one error log with the reason, got %d:\n%s", n, h.log.String())
	}
	if len(h.events.reasons) != 1 || !strings.Contains(h.events.reasons[0], "n1 Warning "+EventFailed+": ") ||
		!strings.Contains(h.events.reasons[0], "executable file not found") {
		t.Errorf("node events = %q, want one Warning %s with the reason", h.events.reasons, EventFailed)
	}

	ipt.mu.Lock()
	ipt.err = nil
	ipt.mu.Unlock()
	h.keeper.Sync(context.Background())
	wantInstalled(t, ipt.snapshot())
	if got := h.blocked(t); got != 1 {
		t.Errorf("nodelet_localnet_blocked = %v after recovery, want 1", got)
	}
}

// A check that fails otherwise than "absent" (exit status 2 or more:
// a missing conntrack match, a permission error) is an error, not a reason
// to add a rule again and again.
func TestSyncCheckErrorAddsNothing(t *testing.T) {
	ipt := &failingCheck{fakeIptables: newFake(t).withKubelets()}
	h := newHarness(t, ipt.fakeIptables)
	h.keeper.deps.Iptables = ipt
	h.keeper.Sync(context.Background())
	if adds := ipt.adds(); len(adds) != 0 {
		t.Errorf("added after a failed check: %q", adds)
	}
	if got := h.blocked(t); got != 0 {
		t.Errorf("nodelet_localnet_blocked = %v, want 0", got)
	}
}

type failingCheck struct{ *fakeIptables }

func (f *failingCheck) Run(ctx context.Context, args ...string) ([]byte, error) {
	if slices.Contains(args, "conntrack") && slices.Contains(args, "-C") {
		return nil, fmt.Errorf("iptables: Couldn't load match `conntrack': %w", exitStatus(2))
	}
	return f.fakeIptables.Run(ctx, args...)
}

func timeZero() time.Time { return time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC) }
