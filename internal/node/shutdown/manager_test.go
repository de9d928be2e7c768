package shutdown

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/base/bounded"
	nodelettest "github.com/nodelet/nodelet/internal/base/testutil"
	"github.com/nodelet/nodelet/internal/pipeline/podworker"
	"github.com/nodelet/nodelet/internal/pure/podupdate"
)

// fakeWorkers records kills; a pod is finished once the test says so.
type fakeWorkers struct {
	mu       sync.Mutex
	killed   []string // name:grace
	finished map[types.UID]bool
	statuses map[types.UID]string
}

func (f *fakeWorkers) UpdatePod(o podworker.UpdatePodOptions) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if o.Reason != podupdate.Kill || o.KillPodOptions == nil || o.KillPodOptions.PodTerminationGracePeriodSecondsOverride == nil {
		panic("not a kill with a grace period")
	}
	if f.statuses[o.Pod.UID] == "" {
		panic("killed before its status reason was set")
	}
	f.killed = append(f.killed, o.Pod.Name+":"+itoa(*o.KillPodOptions.PodTerminationGracePeriodSecondsOverride))
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

// podList is the sources' pods.
type podList []*v1.Pod

func (l podList) Pods() []*v1.Pod { return l }

func (f *fakeWorkers) IsPodActive(uid types.UID) bool { return uid != "uid-gone" }

func (f *fakeWorkers) IsPodFinished(uid types.UID) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.finished[uid]
}

func (f *fakeWorkers) SetStoppedByNode(uid types.UID, reason, message string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.statuses[uid] = reason + ": " + message
}

func (f *fakeWorkers) finish(uids ...types.UID) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, u := range uids {
		f.finished[u] = true
	}
}

func (f *fakeWorkers) kills() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.killed)
}

// fakeLogind is logind: the delay it has, the locks held, the signals.
type fakeLogind struct {
	mu      sync.Mutex
	delay   time.Duration
	raised  []time.Duration
	next    Lock
	held    map[Lock]bool
	signals chan bool
	closed  bool
	// ignoreDropIn: the drop-in does not raise the delay (another
	// drop-in overrides it, say).
	ignoreDropIn bool
}

func (l *fakeLogind) InhibitDelay() (time.Duration, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.delay, nil
}

func (l *fakeLogind) SetInhibitDelay(d time.Duration) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.raised = append(l.raised, d)
	if !l.ignoreDropIn {
		l.delay = d
	}
	return nil
}

func (l *fakeLogind) Inhibit() (Lock, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.next++
	l.held[l.next] = true
	return l.next, nil
}

func (l *fakeLogind) Release(lock Lock) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.held[lock] {
		return errors.New("not held")
	}
	delete(l.held, lock)
	return nil
}

func (l *fakeLogind) PrepareForShutdown(*slog.Logger) (<-chan bool, error) { return l.signals, nil }

func (l *fakeLogind) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	return nil
}

func (l *fakeLogind) locks() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.held)
}

// A shutdown announced by logind stops the regular pods first with
// their share, then the critical ones once the regular ones finished;
// the critical group's time runs out; then the lock is released, the
// state and metrics record start and end. A cancellation takes the lock
// again and admits pods again.
func TestShutdownByLogind(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	w := &fakeWorkers{finished: map[types.UID]bool{}, statuses: map[types.UID]string{}}
	logind := &fakeLogind{delay: 5 * time.Second, held: map[Lock]bool{}, signals: make(chan bool)}
	pods := podList{testPod("web", grace(3)), testPod("gone"), testPod("db"), testPod("dns", class("system-node-critical"))}
	statePath := filepath.Join(t.TempDir(), StateFile)
	reg := prometheus.NewPedanticRegistry()
	var nodeChanged sync.WaitGroup
	nodeChanged.Add(2)
	m := New(Config{Periods: Periods(30*time.Second, 10*time.Second, nil), StatePath: statePath, NodeName: "n"}, Deps{
		Workers: w, Statuses: w, Sources: pods,
		Logind:      func() (Logind, error) { return logind, nil },
		NodeChanged: nodeChanged.Done, Registerer: reg, Clock: clk,
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx, nil) }()

	// The delay is raised to the whole grace period (once logind reloaded).
	nodelettest.Eventually(t, "the delay raised", func() bool {
		clk.Step(100 * time.Millisecond)
		return logind.locks() == 1
	})
	if len(logind.raised) != 1 || logind.raised[0] != 30*time.Second {
		t.Fatalf("delay raised to %v, want 30s", logind.raised)
	}
	if m.ShuttingDown() || m.Status() != nil {
		t.Fatal("shutting down before any signal")
	}

	logind.signals <- true
	nodelettest.Eventually(t, "the regular pods killed", func() bool { return len(w.kills()) == 2 })
	if got := w.kills(); !slices.Equal(got, []string{"web:3", "db:20"}) {
		t.Fatalf("killed %v, want web:3 db:20 (and not yet dns)", got)
	}
	if !m.ShuttingDown() || !errors.Is(m.Status(), ErrShuttingDown) || m.Status().Error() != "node is shutting down" {
		t.Fatalf("status %v while shutting down", m.Status())
	}
	if got := w.statuses["uid-web"]; got != "Terminated: Pod was terminated in response to imminent node shutdown." {
		t.Errorf("status reason %q", got)
	}
	// The critical pod waits for the regular ones.
	clk.Step(time.Second)
	if got := w.kills(); len(got) != 2 {
		t.Fatalf("killed %v before the regular pods finished", got)
	}
	w.finish("uid-web", "uid-db")
	nodelettest.Eventually(t, "the critical pod killed", func() bool {
		clk.Step(pollPeriod)
		return len(w.kills()) == 3
	})
	if got := w.kills()[2]; got != "dns:10" {
		t.Fatalf("critical pod killed as %s, want dns:10", got)
	}
	if logind.locks() != 1 {
		t.Fatal("lock released before the critical group ended")
	}
	// It never finishes: its group's time runs out, then the lock goes.
	nodelettest.Eventually(t, "the lock released", func() bool {
		clk.Step(time.Second)
		return logind.locks() == 0
	})
	s, err := loadState(statePath)
	if err != nil || s.StartTime.IsZero() || !s.EndTime.After(s.StartTime) {
		t.Fatalf("state %+v, %v: want start and a later end", s, err)
	}
	if fi, err := os.Stat(statePath); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("state file %v, %v: want 0600", fi, err)
	}
	got := map[string]float64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		got[mf.GetName()] = mf.GetMetric()[0].GetGauge().GetValue()
	}
	want := map[string]float64{"kubelet_graceful_shutdown_start_time_seconds": float64(s.StartTime.Unix()),
		"kubelet_graceful_shutdown_end_time_seconds": float64(s.EndTime.Unix())}
	if !maps.Equal(got, want) {
		t.Errorf("metrics %v, want %v", got, want)
	}

	// Cancelled: the node is back, with a new lock.
	logind.signals <- false
	nodelettest.Eventually(t, "the shutdown cancelled", func() bool { return !m.ShuttingDown() && logind.locks() == 1 })
	nodeChanged.Wait()
	cancel()
	<-done
	if !logind.closed || logind.locks() != 0 {
		t.Errorf("closed %v, locks %d after the end: want closed, none", logind.closed, logind.locks())
	}
}

// Without logind, a trigger (SIGPWR) does the same; a group whose pods
// all finish does not wait for its time.
func TestShutdownByTrigger(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	w := &fakeWorkers{finished: map[types.UID]bool{}, statuses: map[types.UID]string{}}
	pods := podList{testPod("web"), testPod("dns", priority(SystemCriticalPriority))}
	m := New(Config{Periods: Periods(20*time.Second, 10*time.Second, nil)}, Deps{
		Workers: w, Statuses: w, Sources: pods,
		Logind: func() (Logind, error) { return nil, errors.New("no system bus") }, Clock: clk,
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	triggers := make(chan bool)
	go m.Run(ctx, triggers)
	triggers <- true
	w.finish("uid-web", "uid-dns")
	nodelettest.Eventually(t, "both groups stopped", func() bool {
		clk.Step(pollPeriod) // less than either group's time
		return len(w.kills()) == 2
	})
	if got := w.kills(); !slices.Equal(got, []string{"web:10", "dns:10"}) {
		t.Errorf("killed %v", got)
	}
}

// Off (no shutdownGracePeriod): Run returns at once.
func TestOff(t *testing.T) {
	m := New(Config{Periods: Periods(0, 0, nil)}, Deps{})
	m.Run(context.Background(), make(chan bool))
	if m.Enabled() {
		t.Error("enabled without a grace period")
	}
}

func TestWriteDropIn(t *testing.T) {
	path := filepath.Join(t.TempDir(), "logind.conf.d", "99-nodelet.conf")
	if err := WriteDropIn(path, 30500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), "[Login]\nInhibitDelayMaxSec=31\n") {
		t.Errorf("drop-in %q", data)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, want 0644 (logind reads it)", fi.Mode())
	}
}

// A logind whose delay stays below the grace period after the drop-in is
// not used: no lock is kept, the connection is closed.
func TestLogindDelayNotRaised(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	logind := &fakeLogind{delay: 5 * time.Second, held: map[Lock]bool{}, signals: make(chan bool), ignoreDropIn: true}
	m := New(Config{Periods: Periods(30*time.Second, 10*time.Second, nil)}, Deps{Logind: func() (Logind, error) { return logind, nil }, Clock: clk})
	done := make(chan struct{})
	go func() { defer close(done); m.watchLogind(context.Background(), make(chan bool)) }()
	nodelettest.Eventually(t, "the watch given up", func() bool {
		clk.Step(time.Second)
		select {
		case <-done:
			return true
		default:
			return false
		}
	})
	if !logind.closed || logind.locks() != 0 {
		t.Errorf("closed %v, locks %d: want closed, none", logind.closed, logind.locks())
	}
}

// logind's signal, read from its D-Bus message.
func TestPrepareForShutdownSignal(t *testing.T) {
	name := "org.freedesktop.login1.Manager.PrepareForShutdown"
	for _, tc := range []struct {
		s    *dbus.Signal
		want bool
		ok   bool
	}{
		{&dbus.Signal{Name: name, Body: []any{true}}, true, true},
		{&dbus.Signal{Name: name, Body: []any{false}}, false, true},
		{&dbus.Signal{Name: name, Body: []any{"yes"}}, false, false},
		{&dbus.Signal{Name: name}, false, false},
		{&dbus.Signal{Name: "org.freedesktop.login1.Manager.SessionNew", Body: []any{true}}, false, false},
		{nil, false, false},
	} {
		got, err := prepareForShutdown(tc.s)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("%+v: %v, %v; want %v, ok %v", tc.s, got, err, tc.want, tc.ok)
		}
	}
}

// A state file larger than nodelet writes is refused with its name and
// size, not cut at the limit and then reported as broken JSON.
func TestLoadStateTooLarge(t *testing.T) {
	path := filepath.Join(t.TempDir(), StateFile)
	body := `{"startTime":"2026-01-01T00:00:00Z","pad":"` + strings.Repeat("x", maxStateFile) + `"}`
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := loadState(path)
	if !errors.Is(err, bounded.ErrTooLarge) || !strings.Contains(err.Error(), path) {
		t.Errorf("loadState of %d bytes: %v; want ErrTooLarge naming %s", len(body), err, path)
	}
}

// A group whose pods do not finish holds the next one back for its grace
// period, then the next starts anyway; the empty group between them (at
// priority 100) is skipped.
func TestShutdownGroupTimesOut(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	w := &fakeWorkers{finished: map[types.UID]bool{}, statuses: map[types.UID]string{}}
	pods := podList{testPod("high", priority(1000)), testPod("low")}
	m := New(Config{Periods: Periods(0, 0, []PriorityPeriod{{0, 10 * time.Second}, {100, 5 * time.Second}, {1000, 4 * time.Second}})},
		Deps{Workers: w, Statuses: w, Sources: pods,
			Logind: func() (Logind, error) { return nil, errors.New("no system bus") }, Clock: clk})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	triggers := make(chan bool)
	go m.Run(ctx, triggers)
	triggers <- true
	nodelettest.Eventually(t, "the low group stopped and waiting", func() bool {
		return len(w.kills()) == 1 && clk.HasWaiters()
	})
	for range 49 { // 9.8s: the low group's time is not over
		clk.Step(pollPeriod)
	}
	if got := w.kills(); !slices.Equal(got, []string{"low:10"}) {
		t.Fatalf("killed %v before the low group's 10s ran out", got)
	}
	nodelettest.Eventually(t, "the high group stopped", func() bool {
		clk.Step(pollPeriod)
		return len(w.kills()) == 2
	})
	if got := w.kills(); !slices.Equal(got, []string{"low:10", "high:4"}) {
		t.Errorf("killed %v, want low:10 then high:4", got)
	}
}
