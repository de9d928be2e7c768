package prober

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/base/testutil"
)

// wait bounds how long a test waits for something that should happen at
// once; it only turns a hang into a failure.
const wait = 10 * time.Second

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// fakeExec answers ExecSync calls under the test's control: each call is
// handed to the test on calls and waits for its reply.
type fakeExec struct {
	calls chan *execCall
}

type execCall struct {
	id      string
	cmd     []string
	timeout time.Duration
	reply   chan execReply
}

type execReply struct {
	out  string
	code int32
	err  error
}

func (f *fakeExec) ExecSync(ctx context.Context, id string, cmd []string, timeout time.Duration) ([]byte, []byte, int32, error) {
	c := &execCall{id: id, cmd: cmd, timeout: timeout, reply: make(chan execReply, 1)}
	select {
	case f.calls <- c:
	case <-ctx.Done():
		return nil, nil, 0, ctx.Err()
	}
	select {
	case r := <-c.reply:
		return []byte(r.out), nil, r.code, r.err
	case <-ctx.Done():
		return nil, nil, 0, ctx.Err()
	}
}

type event struct {
	pod                    string
	eventType, reason, msg string
}

type fakeRecorder struct {
	mu     sync.Mutex
	events []event
}

func (r *fakeRecorder) Event(pod *v1.Pod, eventType, reason, message string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, event{pod.Name, eventType, reason, message})
}

func (r *fakeRecorder) list() []event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// harness runs a Manager on a fake clock with a fake exec runner.
type harness struct {
	t     *testing.T
	m     *Manager
	clock *testingclock.FakeClock
	exec  *fakeExec
	rec   *fakeRecorder
	reg   *prometheus.Registry
	stop  func()
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	h := &harness{
		t:     t,
		clock: testingclock.NewFakeClock(epoch),
		exec:  &fakeExec{calls: make(chan *execCall)},
		rec:   &fakeRecorder{},
		reg:   prometheus.NewRegistry(),
	}
	h.m = New(Deps{Exec: h.exec, Clock: h.clock, Metrics: h.reg, Recorder: h.rec})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); h.m.Run(ctx) }()
	h.stop = func() { cancel(); <-done }
	t.Cleanup(h.stop)
	testutil.Eventually(t, "Run to start", func() bool {
		h.m.mu.Lock()
		defer h.m.mu.Unlock()
		return h.m.ctx != nil
	})
	return h
}

// settle waits until every started worker has decided and waits on its
// timer or for a wake: no probe runs, the next one needs the clock.
func (h *harness) settle() {
	h.t.Helper()
	testutil.Eventually(h.t, "workers to settle", func() bool {
		h.m.mu.Lock()
		defer h.m.mu.Unlock()
		for _, p := range h.m.pods {
			for _, c := range p.containers {
				for _, w := range c.workers {
					if w != nil && w.cancel != nil && (!w.parked || w.dirty) {
						return false
					}
				}
			}
		}
		return true
	})
}

// step settles the workers, then moves the clock.
func (h *harness) step(d time.Duration) {
	h.t.Helper()
	h.settle()
	h.clock.Step(d)
}

// call waits for the next exec call.
func (h *harness) call() *execCall {
	h.t.Helper()
	select {
	case c := <-h.exec.calls:
		return c
	case <-time.After(wait):
		h.t.Fatal("timed out waiting for an exec call")
		return nil
	}
}

// answer waits for the next exec call, checks its command and replies.
func (h *harness) answer(cmd string, code int32, out string) {
	h.t.Helper()
	c := h.call()
	if got := fmt.Sprint(c.cmd); got != "["+cmd+"]" {
		h.t.Fatalf("exec %v, want [%s]", c.cmd, cmd)
	}
	c.reply <- execReply{out: out, code: code}
}

// noCall checks that no probe runs now.
func (h *harness) noCall() {
	h.t.Helper()
	h.settle()
	select {
	case c := <-h.exec.calls:
		h.t.Fatalf("unexpected exec %v", c.cmd)
	default:
	}
}

// update waits for the next pod UID on Updates.
func (h *harness) update() types.UID {
	h.t.Helper()
	select {
	case uid := <-h.m.Updates():
		return uid
	case <-time.After(wait):
		h.t.Fatal("timed out waiting for an update")
		return ""
	}
}

// noUpdate checks that no update is pending once the workers settled.
func (h *harness) noUpdate() {
	h.t.Helper()
	h.settle()
	testutil.Eventually(h.t, "no pending update", func() bool {
		select {
		case uid := <-h.m.Updates():
			h.t.Fatalf("unexpected update for %s", uid)
		default:
		}
		h.m.mu.Lock()
		defer h.m.mu.Unlock()
		return len(h.m.pending) == 0 && h.m.handing == ""
	})
}

// workers counts the started workers.
func (h *harness) workers() int {
	h.m.mu.Lock()
	defer h.m.mu.Unlock()
	n := 0
	for _, p := range h.m.pods {
		for _, c := range p.containers {
			for _, w := range c.workers {
				if w != nil && w.cancel != nil {
					n++
				}
			}
		}
	}
	return n
}

func execProbe(cmd string, mod func(*v1.Probe)) *v1.Probe {
	p := &v1.Probe{
		ProbeHandler:     v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{cmd}}},
		TimeoutSeconds:   1,
		PeriodSeconds:    10,
		SuccessThreshold: 1,
		FailureThreshold: 3,
	}
	if mod != nil {
		mod(p)
	}
	return p
}

func newPod(uid string, containers ...v1.Container) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "pod-" + uid, Namespace: "ns", UID: types.UID(uid)},
		Spec:       v1.PodSpec{Containers: containers},
	}
}

// run tells the manager that the named containers run as given IDs,
// started now.
func (h *harness) run(pod *v1.Pod, ids map[string]string) {
	running := map[string]RunningContainer{}
	for name, id := range ids {
		running[name] = RunningContainer{ID: id, StartedAt: h.clock.Now()}
	}
	h.m.SetContainers(pod, "127.0.0.1", running)
}
