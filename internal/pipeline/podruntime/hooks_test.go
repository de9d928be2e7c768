package podruntime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	critest "k8s.io/cri-api/pkg/apis/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/base/httpget"
	"github.com/nodelet/nodelet/internal/base/testutil"
	"github.com/nodelet/nodelet/internal/pipeline/cri"
	"github.com/nodelet/nodelet/internal/pipeline/podworker"
	"github.com/nodelet/nodelet/internal/pipeline/statusmanager"
)

// stopRecorder records the order in which containers are stopped.
type stopRecorder struct {
	*cri.Client
	mu      sync.Mutex
	stopped []string
	names   map[string]string // container ID -> name
}

func (s *stopRecorder) ExecSync(ctx context.Context, id string, cmd []string, timeout time.Duration) ([]byte, []byte, int32, error) {
	s.mu.Lock()
	s.stopped = append(s.stopped, "exec:"+s.names[id])
	s.mu.Unlock()
	return s.Client.ExecSync(ctx, id, cmd, timeout)
}

func (s *stopRecorder) StopContainer(ctx context.Context, id string, grace time.Duration) error {
	s.mu.Lock()
	s.stopped = append(s.stopped, s.names[id])
	s.mu.Unlock()
	return s.Client.StopContainer(ctx, id, grace)
}

// eventLog is a Recorder that keeps "Type Reason: message" lines.
type eventLog struct {
	mu     sync.Mutex
	events []string
}

func (e *eventLog) Event(_ *v1.Pod, eventType, reason, message string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.events = append(e.events, fmt.Sprintf("%s %s: %s", eventType, reason, message))
}

// NodeEvent keeps "node NAME: Type Reason: message".
func (e *eventLog) NodeEvent(node, eventType, reason, message string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.events = append(e.events, fmt.Sprintf("node %s: %s %s: %s", node, eventType, reason, message))
}

func (e *eventLog) has(prefix string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, ev := range e.events {
		if strings.HasPrefix(ev, prefix) {
			return true
		}
	}
	return false
}

func newHookFixture(t *testing.T) (*Manager, *critest.FakeRuntimeService, *stopRecorder, *eventLog, *clocktesting.FakeClock) {
	rs, is := critest.NewFakeRuntimeService(), critest.NewFakeImageService()
	is.SetFakeImageSize(1)
	log := slog.New(slog.DiscardHandler)
	rec := &stopRecorder{Client: cri.New(rs, is, "fake", cri.DefaultTimeouts(), log), names: map[string]string{}}
	events := &eventLog{}
	clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	return New(rec, Options{}, Deps{Clock: clk, Log: log, Recorder: events, Status: statusmanager.New(nil)}), rs, rec, events, clk
}

func hookPod() *v1.Pod {
	always := v1.ContainerRestartPolicyAlways
	grace := int64(10)
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default", UID: "uid-p"},
		Spec: v1.PodSpec{
			RestartPolicy:                 v1.RestartPolicyAlways,
			TerminationGracePeriodSeconds: &grace,
			InitContainers: []v1.Container{
				{Name: "side1", Image: "i:1", RestartPolicy: &always},
				{Name: "side2", Image: "i:1", RestartPolicy: &always},
			},
			Containers: []v1.Container{
				{Name: "app", Image: "i:1", Lifecycle: &v1.Lifecycle{PreStop: &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"drain"}}}}},
				{Name: "app2", Image: "i:1"},
			},
		},
	}
}

// runUntilAllStarted syncs until every container of the pod runs (sidecars
// start one per sync).
func runUntilAllStarted(t *testing.T, m *Manager, rs *critest.FakeRuntimeService, rec *stopRecorder, pod *v1.Pod) {
	t.Helper()
	for i := 0; i < 5; i++ {
		if _, err := m.syncPod(context.Background(), podworker.SyncRequest{Pod: pod}); err != nil {
			t.Fatal(err)
		}
	}
	rs.Lock()
	defer rs.Unlock()
	for id, c := range rs.Containers {
		rec.names[id] = c.Metadata.Name
	}
	if len(rs.Containers) != 4 {
		t.Fatalf("%d containers after syncing, want 4", len(rs.Containers))
	}
}

// Termination stops regular containers first (running their preStop hooks
// before the stop), then sidecars in reverse order.
func TestTerminationOrderAndPreStop(t *testing.T) {
	m, rs, rec, events, _ := newHookFixture(t)
	pod := hookPod()
	runUntilAllStarted(t, m, rs, rec, pod)
	rs.Lock()
	rs.Called = nil
	rs.Unlock()
	if err := m.SyncTerminatingPod(context.Background(), podworker.TerminatingRequest{Pod: pod, GracePeriod: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(rec.stopped, ",")
	// app's preStop runs before app stops; app2 stops in parallel.
	if got != "exec:app,app,app2,side2,side1" && got != "exec:app,app2,app,side2,side1" && got != "app2,exec:app,app,side2,side1" {
		t.Errorf("order %s, want app's preStop before app, the app containers, then side2, then side1", got)
	}
	if !events.has("Normal Killing: Stopping container app") {
		t.Errorf("events %v", events.events)
	}
}

// A failing preStop hook is reported and the container is stopped anyway.
func TestFailedPreStopStillStops(t *testing.T) {
	m, rs, rec, events, _ := newHookFixture(t)
	pod := hookPod()
	runUntilAllStarted(t, m, rs, rec, pod)
	rs.InjectError("ExecSync", errors.New("no such command"))
	if err := m.SyncTerminatingPod(context.Background(), podworker.TerminatingRequest{Pod: pod, GracePeriod: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if !events.has("Warning FailedPreStopHook") || len(rec.stopped) != 5 {
		t.Errorf("events %v, stopped %v", events.events, rec.stopped)
	}
}

// A failing postStart hook kills the container with FailedPostStartHook.
func TestFailedPostStartKillsContainer(t *testing.T) {
	m, rs, rec, events, _ := newHookFixture(t)
	pod := hookPod()
	pod.Spec.InitContainers = nil
	pod.Spec.Containers = []v1.Container{{Name: "app", Image: "i:1",
		Lifecycle: &v1.Lifecycle{PostStart: &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"false"}}}}}}
	rs.InjectError("ExecSync", errors.New("exit 1"))
	_, err := m.syncPod(context.Background(), podworker.SyncRequest{Pod: pod})
	if err == nil || !strings.Contains(err.Error(), "postStart") {
		t.Fatalf("err = %v", err)
	}
	// The container IDs are not named in this test: "exec:" is the hook,
	// "" the stop that follows it.
	if !events.has("Warning FailedPostStartHook") || strings.Join(rec.stopped, "|") != "exec:|" {
		t.Errorf("events %v, stopped %v", events.events, rec.stopped)
	}
}

// activeDeadlineSeconds fails the pod with DeadlineExceeded and stops it.
func TestActiveDeadline(t *testing.T) {
	m, rs, rec, events, clk := newHookFixture(t)
	pod := hookPod()
	pod.Spec.InitContainers = nil
	pod.Spec.Containers = pod.Spec.Containers[1:]
	deadline := int64(30)
	pod.Spec.ActiveDeadlineSeconds = &deadline
	st, err := m.syncPod(context.Background(), podworker.SyncRequest{Pod: pod})
	if err != nil || st.Phase != v1.PodRunning {
		t.Fatalf("phase %s err %v", st.Phase, err)
	}
	if st.StartTime == nil || !st.StartTime.Time.Equal(clk.Now().Truncate(time.Second)) {
		t.Errorf("startTime %v, want now", st.StartTime)
	}
	rs.Lock()
	for id, c := range rs.Containers {
		rec.names[id] = c.Metadata.Name
	}
	rs.Unlock()
	clk.Step(31 * time.Second)
	st, err = m.syncPod(context.Background(), podworker.SyncRequest{Pod: pod})
	if err != nil || st.Phase != v1.PodFailed || st.Reason != "DeadlineExceeded" {
		t.Fatalf("phase %s reason %s err %v", st.Phase, st.Reason, err)
	}
	if len(rec.stopped) != 1 || !events.has("Warning DeadlineExceeded") {
		t.Errorf("stopped %v events %v", rec.stopped, events.events)
	}
}

func TestHTTPHook(t *testing.T) {
	var gotPath, gotAgent string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotPath, gotAgent = r.URL.Path, r.Header.Get("User-Agent")
		if r.URL.Path == "/fail" {
			http.Error(w, "no", http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	port, _ := strconv.Atoi(u.Port())
	c := &v1.Container{Name: "c", Ports: []v1.ContainerPort{{Name: "web", ContainerPort: int32(port)}}}
	hook := &v1.HTTPGetAction{Path: "/started", Port: intstr.FromString("web")}
	if err := httpHook(context.Background(), hook, c, u.Hostname(), (&net.Dialer{}).DialContext); err != nil || gotPath != "/started" || gotAgent != hookUserAgent {
		t.Fatalf("hook: %v path %q agent %q", err, gotPath, gotAgent)
	}
	hook.Path = "/fail"
	if err := httpHook(context.Background(), hook, c, u.Hostname(), (&net.Dialer{}).DialContext); err == nil || !strings.Contains(err.Error(), "503") {
		t.Fatalf("failing hook: %v", err)
	}
}

// An httpGet hook reads at most a bounded response: a server sending
// endless headers fails the hook with a message naming the bound, after
// at most the budget and a buffer were read.
func TestHTTPHookBoundsResponseHeaders(t *testing.T) {
	const readSlack = 64 << 10 // one read buffer; for TLS a record and the handshake
	for _, tls := range []bool{false, true} {
		t.Run("tls="+strconv.FormatBool(tls), func(t *testing.T) {
			srv := httptest.NewUnstartedServer(testutil.HeaderBomb{Total: 32 << 20})
			if tls {
				srv.StartTLS()
			} else {
				srv.Start()
			}
			defer srv.Close()
			u, _ := url.Parse(srv.URL)
			port, _ := strconv.Atoi(u.Port())
			hook := &v1.HTTPGetAction{Path: "/", Port: intstr.FromInt(port)}
			if tls {
				hook.Scheme = v1.URISchemeHTTPS
			}
			var read atomic.Int64
			dial := testutil.CountingDial(&read, (&net.Dialer{}).DialContext)
			err := httpHook(t.Context(), hook, &v1.Container{Name: "c"}, u.Hostname(), dial)
			want := "response headers exceeded " + strconv.Itoa(httpget.MaxResponseHeaderBytes) + " bytes"
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("hook error %v, want one saying %q", err, want)
			}
			if n := read.Load(); n > httpget.MaxResponseHeaderBytes+readSlack {
				t.Errorf("read %d bytes, want at most %d", n, httpget.MaxResponseHeaderBytes+readSlack)
			}
		})
	}
}

// barrierRuntime's ExecSync (a preStop hook) returns only once n hooks
// have started, or fails after a while: hooks run one after the other
// would never all start.
type barrierRuntime struct {
	*stopRecorder
	n       int
	mu      sync.Mutex
	started int
	all     chan struct{}
}

func (b *barrierRuntime) ExecSync(ctx context.Context, id string, cmd []string, timeout time.Duration) ([]byte, []byte, int32, error) {
	b.mu.Lock()
	b.started++
	if b.started == b.n {
		close(b.all)
	}
	b.mu.Unlock()
	select {
	case <-b.all:
	case <-time.After(5 * time.Second):
		return nil, nil, 0, fmt.Errorf("hook of %s: the other hooks did not start", id)
	}
	return b.stopRecorder.ExecSync(ctx, id, cmd, timeout)
}

// The preStop hooks of every container, sidecars included, run at once;
// the sidecars are stopped only after the regular containers, the later
// sidecar first.
func TestSidecarPreStopHooksRunTogether(t *testing.T) {
	m, rs, rec, events, _ := newHookFixture(t)
	b := &barrierRuntime{stopRecorder: rec, n: 3, all: make(chan struct{})}
	m.rt = b
	pod := hookPod()
	for i := range pod.Spec.InitContainers {
		pod.Spec.InitContainers[i].Lifecycle = &v1.Lifecycle{PreStop: &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"drain"}}}}
	}
	runUntilAllStarted(t, m, rs, rec, pod)
	if err := m.SyncTerminatingPod(context.Background(), podworker.TerminatingRequest{Pod: pod, GracePeriod: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if events.has("Warning FailedPreStopHook") {
		t.Errorf("a hook waited for another: %v", events.events)
	}
	pos := map[string]int{}
	for i, s := range rec.stopped {
		pos[s] = i
	}
	if !(pos["app"] < pos["side2"] && pos["app2"] < pos["side2"] && pos["side2"] < pos["side1"]) {
		t.Errorf("order %v: want app and app2, then side2, then side1 stopped", rec.stopped)
	}
}
