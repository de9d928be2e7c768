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

// The lifetimes of what the manager holds per pod, as its contract says:
//
//   - a status is replaced by every set, whatever either phase (terminal
//     phases are final in status.Generate, not here), and kept, terminal or
//     not, for as long as housekeeping keeps the pod;
//   - RemoveOrphans forgets the status, what it was computed from, and why
//     the node stops the pod: a pod that comes back under the same UID
//     starts afresh; keep is asked without the lock held;
//   - the node's first reason to stop a pod stays;
//   - listeners hear every set, in order, identical ones and rejections
//     too, each listener in turn;
//   - Changed coalesces: one signal however many sets; TakeChanged gives
//     copies.

func testPod(uid string) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: uid, Namespace: "default", UID: types.UID(uid)}}
}

func TestStatusReplacedAndKept(t *testing.T) {
	m := New(nil)
	a := testPod("a")
	for _, phase := range []v1.PodPhase{v1.PodPending, v1.PodRunning, v1.PodFailed, v1.PodRunning} {
		m.SetPodStatus(a, v1.PodStatus{Phase: phase})
		if st, ok := m.Get("a"); !ok || st.Phase != phase {
			t.Fatalf("after setting %s: Get = %s %v", phase, st.Phase, ok)
		}
	}
	m.SetPodStatus(a, v1.PodStatus{Phase: v1.PodSucceeded})
	for range 3 {
		m.RemoveOrphans(func(types.UID) bool { return true })
	}
	if st, ok := m.Get("a"); !ok || st.Phase != v1.PodSucceeded {
		t.Errorf("a terminal status of a pod kept: Get = %s %v, want Succeeded", st.Phase, ok)
	}
	if _, ok := m.Get("never"); ok {
		t.Error("a status for a pod never set")
	}
}

func TestRemoveOrphansForgetsEverything(t *testing.T) {
	m := New(nil)
	a, b := testPod("a"), testPod("b")
	for _, p := range []*v1.Pod{a, b} {
		m.SetSeen(p.UID, map[string]bool{"c1": true})
		m.SetStoppedByNode(p.UID, "Evicted", "low on memory")
		m.SetPodStatus(p, v1.PodStatus{Phase: v1.PodFailed})
	}
	// keep is asked without the lock: it may read the manager.
	m.RemoveOrphans(func(uid types.UID) bool {
		_, ok := m.Get(uid)
		return ok && uid == "b"
	})
	if _, ok := m.Get("a"); ok {
		t.Error("a's status kept")
	}
	if _, ok := m.Saw("a", "c1"); ok {
		t.Error("a's seen objects kept")
	}
	if r := m.StoppedByNode("a"); r != nil {
		t.Errorf("a is still stopped by the node: %+v", r)
	}
	if _, ok := m.Get("b"); !ok || m.StoppedByNode("b") == nil {
		t.Error("b, kept, lost its status or its stop reason")
	}
	if _, ok := m.Saw("b", "c1"); !ok {
		t.Error("b, kept, lost its seen objects")
	}
	// The same UID again starts afresh.
	m.SetStoppedByNode("a", "Terminated", "node shutdown")
	if r := m.StoppedByNode("a"); r == nil || r.Reason != "Terminated" {
		t.Errorf("a back: stopped by node %+v, want the new reason", r)
	}
}

func TestStoppedByNodeFirstReasonStays(t *testing.T) {
	m := New(nil)
	if r := m.StoppedByNode("a"); r != nil {
		t.Fatalf("stopped before any reason: %+v", r)
	}
	m.SetStoppedByNode("a", "Evicted", "The node was low on resource: memory. ")
	m.SetStoppedByNode("a", "Terminated", "Pod was terminated in response to imminent node shutdown.")
	r := m.StoppedByNode("a")
	if r == nil || r.Reason != "Evicted" || r.Message != "The node was low on resource: memory. " {
		t.Errorf("StoppedByNode = %+v, want the first (Evicted)", r)
	}
	// A copy: the caller cannot change it.
	r.Reason = "x"
	if m.StoppedByNode("a").Reason != "Evicted" {
		t.Error("StoppedByNode's result aliases the manager's")
	}
	// Setting a status does not change it.
	m.SetPodStatus(testPod("a"), v1.PodStatus{Phase: v1.PodRunning})
	if m.StoppedByNode("a").Reason != "Evicted" {
		t.Error("a status set cleared the node's reason")
	}
}

func TestSeenReplacedNotMerged(t *testing.T) {
	m := New(nil)
	m.SetSeen("a", map[string]bool{"c1": true, "sb": true})
	m.SetSeen("a", map[string]bool{"c2": false})
	if _, ok := m.Saw("a", "c1"); ok {
		t.Error("c1 from the previous SetSeen still seen")
	}
	if r, ok := m.Saw("a", "c2"); !ok || r {
		t.Errorf("Saw(c2) = %v %v, want not running, seen", r, ok)
	}
}

type recorder struct {
	name string
	log  *[]string
}

func (r recorder) PodStatusChanged(pod *v1.Pod, st v1.PodStatus) {
	*r.log = append(*r.log, r.name+":"+pod.Name+"="+string(st.Phase)+"/"+st.Reason)
}

func TestListenersHearEverySetInOrder(t *testing.T) {
	var heard []string
	m := New(nil, recorder{"first", &heard}, recorder{"second", &heard})
	a, b := testPod("a"), testPod("b")
	m.SetPodStatus(a, v1.PodStatus{Phase: v1.PodPending})
	m.SetPodStatus(b, v1.PodStatus{Phase: v1.PodRunning})
	m.SetPodStatus(a, v1.PodStatus{Phase: v1.PodPending}) // the same again
	m.Reject(a, "OutOfcpu", "no cpu")
	m.SetStoppedByNode("b", "Evicted", "x") // not a status: nothing heard
	m.RemoveOrphans(func(types.UID) bool { return false })
	want := []string{
		"first:a=Pending/", "second:a=Pending/",
		"first:b=Running/", "second:b=Running/",
		"first:a=Pending/", "second:a=Pending/",
		"first:a=Failed/OutOfcpu", "second:a=Failed/OutOfcpu",
	}
	if strings.Join(heard, " ") != strings.Join(want, " ") {
		t.Errorf("heard\n%v\nwant\n%v", heard, want)
	}
}

// Only a change of what the status line shows is logged: phase, reason,
// readiness, IP, each container's state, reason and restarts.
func TestLoggedOncePerChange(t *testing.T) {
	var buf bytes.Buffer
	m := New(slog.New(slog.NewTextHandler(&buf, nil)))
	a := testPod("a")
	st := running("10.0.0.1")
	steps := []struct {
		name   string
		mutate func(*v1.PodStatus)
		logged bool
	}{
		{"first", func(*v1.PodStatus) {}, true},
		{"same", func(*v1.PodStatus) {}, false},
		{"condition time only", func(s *v1.PodStatus) { s.Conditions[0].LastTransitionTime = metav1.Unix(5, 0) }, false},
		{"restarts", func(s *v1.PodStatus) { s.ContainerStatuses[0].RestartCount = 1 }, true},
		{"not ready", func(s *v1.PodStatus) { s.Conditions[0].Status = v1.ConditionFalse }, true},
		{"ip", func(s *v1.PodStatus) { s.PodIP = "10.0.0.2" }, true},
		{"container waiting", func(s *v1.PodStatus) {
			s.ContainerStatuses[0].State = v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}
		}, true},
		{"waiting reason", func(s *v1.PodStatus) { s.ContainerStatuses[0].State.Waiting.Reason = "ImagePullBackOff" }, true},
		{"message only", func(s *v1.PodStatus) { s.Message = "more words" }, false},
		{"reason", func(s *v1.PodStatus) { s.Reason = "Evicted" }, true},
	}
	for _, s := range steps {
		before := strings.Count(buf.String(), "\n")
		s.mutate(&st)
		m.SetPodStatus(a, *st.DeepCopy())
		if logged := strings.Count(buf.String(), "\n") > before; logged != s.logged {
			t.Errorf("%s: logged %v, want %v", s.name, logged, s.logged)
		}
	}
}

// Changed holds one signal however many sets; TakeChanged gives copies
// the consumer may change.
func TestChangedCoalescesAndTakeCopies(t *testing.T) {
	m := New(nil)
	a := testPod("a")
	for range 5 {
		m.SetPodStatus(a, running("10.0.0.1"))
	}
	<-m.Changed()
	select {
	case <-m.Changed():
		t.Fatal("a second signal for sets before one take")
	default:
	}
	got := m.TakeChanged()
	if len(got) != 1 {
		t.Fatalf("TakeChanged = %d entries, want 1", len(got))
	}
	got[0].Status.Conditions[0].Status = v1.ConditionFalse
	got[0].Status.ContainerStatuses[0].Name = "changed"
	if st, _ := m.Get("a"); st.Conditions[0].Status != v1.ConditionTrue || st.ContainerStatuses[0].Name != "app" {
		t.Error("changing what TakeChanged gave changed the manager's status")
	}
}

// Running counts pods Running and containers by state: running, exited,
// and created (waiting with a container ID); waiting without one is not
// in the runtime and is not counted.
func TestRunningCounts(t *testing.T) {
	m := New(nil)
	st := v1.PodStatus{Phase: v1.PodPending,
		InitContainerStatuses: []v1.ContainerStatus{{Name: "i", State: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{}}}},
		ContainerStatuses: []v1.ContainerStatus{
			{Name: "created", ContainerID: "containerd://c", State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{}}},
			{Name: "pulling", State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "ErrImagePull"}}},
		}}
	m.SetPodStatus(testPod("a"), st)
	m.SetPodStatus(testPod("b"), running(""))
	pods, c := m.Running()
	want := map[string]int{metrics.ContainerStateRunning: 1, metrics.ContainerStateExited: 1, metrics.ContainerStateCreated: 1}
	if pods != 1 || len(c) != len(want) {
		t.Fatalf("Running = %d, %v; want 1, %v", pods, c, want)
	}
	for k, v := range want {
		if c[k] != v {
			t.Errorf("%s = %d, want %d", k, c[k], v)
		}
	}
}
