package statusmanager

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/internal/base/metrics"
)

type listener struct{ got []string }

func (l *listener) PodStatusChanged(pod *v1.Pod, st v1.PodStatus) {
	l.got = append(l.got, pod.Name+" "+string(st.Phase))
}

func running(ip string) v1.PodStatus {
	return v1.PodStatus{Phase: v1.PodRunning, PodIP: ip,
		Conditions:        []v1.PodCondition{{Type: v1.PodReady, Status: v1.ConditionTrue}},
		ContainerStatuses: []v1.ContainerStatus{{Name: "app", State: v1.ContainerState{Running: &v1.ContainerStateRunning{}}}}}
}

// A pod's status is logged once per change, in one line, and every set
// reaches the listeners.
func TestSetLogsChangesAndTellsListeners(t *testing.T) {
	var buf bytes.Buffer
	l := &listener{}
	m := New(slog.New(slog.NewTextHandler(&buf, nil)), l)
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-n", Namespace: "default", UID: "u1"}}
	m.SetPodStatus(pod, running("10.42.0.3"))
	m.SetPodStatus(pod, running("10.42.0.3"))
	m.Reject(pod, "OutOfcpu", "Node didn't have enough resource: cpu")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines, want 2:\n%s", len(lines), buf.String())
	}
	if !strings.Contains(lines[0], `pod=default/web-n phase=Running reason="" ready=true ip=10.42.0.3 containers="app=running/0"`) {
		t.Errorf("line 1: %s", lines[0])
	}
	if !strings.Contains(lines[1], "phase=Failed reason=OutOfcpu") {
		t.Errorf("line 2: %s", lines[1])
	}
	if st, ok := m.Get("u1"); !ok || st.Phase != v1.PodFailed {
		t.Errorf("Get = %v %v", st.Phase, ok)
	}
	if want := []string{"web-n Running", "web-n Running", "web-n Failed"}; strings.Join(l.got, ",") != strings.Join(want, ",") {
		t.Errorf("listener heard %q, want %q", l.got, want)
	}
}

func TestRemoveOrphansAndRunning(t *testing.T) {
	m := New(nil)
	for _, uid := range []types.UID{"a", "b", "c"} {
		m.SetPodStatus(&v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: string(uid), UID: uid}}, running(""))
	}
	if pods, c := m.Running(); pods != 3 || c[metrics.ContainerStateRunning] != 3 {
		t.Fatalf("Running = %d pods, %v", pods, c)
	}
	m.RemoveOrphans(func(uid types.UID) bool { return uid != "b" })
	if _, ok := m.Get("b"); ok {
		t.Error("b's status kept")
	}
	if _, ok := m.Get("a"); !ok {
		t.Error("a's status dropped")
	}
	if pods, c := m.Running(); pods != 2 || c[metrics.ContainerStateRunning] != 2 {
		t.Errorf("Running = %d pods, %v; want 2 and 2", pods, c)
	}
}

func TestSeenLivesWithTheStatus(t *testing.T) {
	m := New(nil)
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "a", UID: "a"}}
	m.SetSeen("a", map[string]bool{"sb": true, "c1": false})
	m.SetPodStatus(pod, running(""))
	if r, ok := m.Saw("a", "sb"); !ok || !r {
		t.Errorf("Saw(sb) = %v %v", r, ok)
	}
	if r, ok := m.Saw("a", "c1"); !ok || r {
		t.Errorf("Saw(c1) = %v %v", r, ok)
	}
	if _, ok := m.Saw("a", "other"); ok {
		t.Error("saw an object never recorded")
	}
	m.RemoveOrphans(func(types.UID) bool { return false })
	if _, ok := m.Saw("a", "sb"); ok {
		t.Error("seen objects outlived the status")
	}
}

// The consumer of changes (cluster mode's status sender) gets each pod's
// latest status once, including a pod's last status set just before
// housekeeping dropped it; with no consumer nothing piles up.
func TestTakeChanged(t *testing.T) {
	m := New(nil)
	a := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "a", UID: "a"}}
	b := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "b", UID: "b"}}
	m.SetPodStatus(a, running(""))
	m.RemoveOrphans(func(types.UID) bool { return false })
	if len(m.changed) != 0 {
		t.Fatal("with no consumer, changes of dropped pods pile up")
	}
	m.SetPodStatus(a, running(""))
	m.SetPodStatus(b, running(""))
	done := v1.PodStatus{Phase: v1.PodSucceeded}
	m.SetPodStatus(a, done)
	select {
	case <-m.Changed():
	default:
		t.Fatal("no change signalled")
	}
	got := m.TakeChanged()
	if len(got) != 2 || got[0].Pod != a || got[0].Status.Phase != v1.PodSucceeded || got[1].Pod != b {
		t.Fatalf("TakeChanged = %+v", got)
	}
	if got := m.TakeChanged(); len(got) != 0 {
		t.Fatalf("taken twice: %+v", got)
	}
	m.SetPodStatus(a, done)
	m.RemoveOrphans(func(types.UID) bool { return false })
	if got := m.TakeChanged(); len(got) != 1 || got[0].Status.Phase != v1.PodSucceeded {
		t.Fatalf("a dropped pod's last status was lost: %+v", got)
	}
}

// Ephemeral containers count as running containers and show in the
// status line, as the kubelet's running-container metric counts every
// container the runtime runs.
func TestEphemeralContainersCount(t *testing.T) {
	var buf bytes.Buffer
	m := New(slog.New(slog.NewTextHandler(&buf, nil)))
	st := running("")
	st.EphemeralContainerStatuses = []v1.ContainerStatus{{Name: "dbg", State: v1.ContainerState{Running: &v1.ContainerStateRunning{}}}}
	m.SetPodStatus(&v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "a", UID: "a"}}, st)
	if _, c := m.Running(); c[metrics.ContainerStateRunning] != 2 {
		t.Errorf("running containers %v, want 2", c)
	}
	if !strings.Contains(buf.String(), `containers="app=running/0 dbg=running/0"`) {
		t.Errorf("status line: %s", buf.String())
	}
}
