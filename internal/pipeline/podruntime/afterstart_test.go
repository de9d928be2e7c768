package podruntime

import (
	"context"
	"errors"
	"reflect"
	"sort"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/pipeline/podworker"
	"github.com/nodelet/nodelet/internal/pipeline/statusmanager"
	"github.com/nodelet/nodelet/internal/pure/observed"
	"github.com/nodelet/nodelet/internal/pure/plan"
)

// runtimeCalls counts the runtime service's calls since the last count,
// by method, as "Method×n" sorted by name (the two lists of a look go out
// together, in no set order).
func (f *fixture) runtimeCalls() string {
	f.rs.Lock()
	defer f.rs.Unlock()
	n := map[string]int{}
	for _, c := range f.rs.Called {
		n[c]++
	}
	f.rs.Called = nil
	var out []string
	for c, k := range n {
		out = append(out, c+"×"+strings.Repeat("I", k))
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}

func onePod() *v1.Pod {
	pod := testPod()
	pod.Spec.Containers = pod.Spec.Containers[:1]
	return pod
}

// TestPodStartCRICalls: a pod's first start costs one look (the two
// lists), the sandbox with its status (for the IPs), the container's
// create and start, and one ContainerStatus for the status it publishes;
// no second look. The sync the container's start event brings next costs
// only the two lists.
func TestPodStartCRICalls(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.runtimeCalls()
	st, err := f.m.syncPod(ctx, podworker.SyncRequest{Pod: onePod()})
	if err != nil {
		t.Fatal(err)
	}
	want := "ContainerStatus×I,CreateContainer×I,ListContainers×I,ListPodSandbox×I,PodSandboxStatus×I,RunPodSandbox×I,StartContainer×I"
	if got := f.runtimeCalls(); got != want {
		t.Errorf("start of one pod called\n  %s\nwant\n  %s", got, want)
	}
	if st.Phase != v1.PodRunning || len(st.ContainerStatuses) != 1 || st.ContainerStatuses[0].State.Running == nil {
		t.Fatalf("status after the start: %+v", st)
	}
	if _, err := f.m.syncPod(ctx, podworker.SyncRequest{Pod: onePod()}); err != nil {
		t.Fatal(err)
	}
	if got := f.runtimeCalls(); got != "ListContainers×I,ListPodSandbox×I" {
		t.Errorf("the next sync called %s, want only the two lists", got)
	}
}

// TestStatusAfterStartIsWhatALookSees: the status published from what the
// start learned is the one a full look at the runtime gives: a second
// manager, which has never seen the pod, syncs it (nothing to do) and
// publishes the same status.
func TestStatusAfterStartIsWhatALookSees(t *testing.T) {
	for _, tc := range []struct {
		name string
		pod  func() *v1.Pod
	}{
		{"one container", onePod},
		{"two containers", testPod},
		{"init container", func() *v1.Pod {
			pod := onePod()
			pod.Spec.InitContainers = []v1.Container{{Name: "init", Image: "busybox:1.35", ImagePullPolicy: v1.PullIfNotPresent}}
			return pod
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			ctx := context.Background()
			started, err := f.m.syncPod(ctx, podworker.SyncRequest{Pod: tc.pod()})
			if err != nil {
				t.Fatal(err)
			}
			if got := f.runtimeCalls(); strings.Contains(got, "ListPodSandbox×II") {
				t.Errorf("the start looked twice: %s", got)
			}
			other := New(f.m.rt, f.m.opts, Deps{Clock: f.clock, Log: f.m.log, Status: statusmanager.New(nil)})
			looked, err := other.syncPod(ctx, podworker.SyncRequest{Pod: tc.pod()})
			if err != nil {
				t.Fatal(err)
			}
			if got := f.mutations(); got != "" {
				t.Fatalf("the second manager changed %s", got)
			}
			if !reflect.DeepEqual(started, looked) {
				t.Errorf("status after the start\n  %+v\na look's\n  %+v", started, looked)
			}
			// And what is kept for the next look is what a look keeps,
			// but for when the pod last changed: the start changed it.
			a, b := f.m.observed.get("uid-1"), other.observed.get("uid-1")
			if a.changedAt.IsZero() {
				t.Error("the start did not record that it changed the pod")
			}
			a.changedAt = b.changedAt
			if !reflect.DeepEqual(a, b) {
				t.Errorf("kept after the start %+v, after a look %+v", a, b)
			}
		})
	}
}

// TestFailedStartLooksAgain: when a container of the pod could not start,
// the sync's calls do not tell what the runtime has (a container created
// and not started); the status comes from a second look.
func TestFailedStartLooksAgain(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.rs.InjectError("StartContainer", errors.New("runc says no"))
	st, err := f.m.syncPod(ctx, podworker.SyncRequest{Pod: onePod()})
	if err == nil {
		t.Fatal("a failed start returned no error")
	}
	if got := f.runtimeCalls(); !strings.Contains(got, "ListPodSandbox×II") {
		t.Errorf("a failed start did not look again: %s", got)
	}
	if len(st.ContainerStatuses) != 1 || st.ContainerStatuses[0].State.Waiting == nil ||
		st.ContainerStatuses[0].State.Waiting.Reason != "RunContainerError" {
		t.Errorf("status after a failed start: %+v", st.ContainerStatuses)
	}
}

// TestStatusCallFailureLooksAgain: a ContainerStatus that fails after the
// start falls back to a full look, and the status is still published.
func TestStatusCallFailureLooksAgain(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.rs.InjectError("ContainerStatus", errors.New("busy"))
	st, err := f.m.syncPod(ctx, podworker.SyncRequest{Pod: onePod()})
	if err != nil {
		t.Fatal(err)
	}
	if got := f.runtimeCalls(); !strings.Contains(got, "ListPodSandbox×II") || !strings.Contains(got, "ContainerStatus×II") {
		t.Errorf("calls %s: want the failed ContainerStatus, then a second look", got)
	}
	if st.Phase != v1.PodRunning || st.ContainerStatuses[0].State.Running == nil {
		t.Errorf("status: %+v", st)
	}
}

func TestOnlyMadeNew(t *testing.T) {
	ready := observed.Sandbox{ID: "old", State: observed.SandboxReady}
	dead := observed.Sandbox{ID: "old", State: observed.SandboxNotReady}
	running := observed.Container{ID: "c", Name: "app", State: observed.ContainerRunning}
	exited := observed.Container{ID: "c", Name: "app", State: observed.ContainerExited}
	fresh := plan.Actions{KillPod: true, CreateSandbox: true, ContainersToStart: []plan.Start{{Index: 0}}}
	made := learned{sandbox: &runtimeapi.PodSandboxStatus{Id: "new"}, started: []string{"new"}}
	for _, tc := range []struct {
		name    string
		obs     observed.PodStatus
		actions plan.Actions
		rz      *resizing
		lrn     learned
		err     error
		want    bool
	}{
		{"first start", observed.PodStatus{}, fresh, nil, made, nil, true},
		{"new sandbox after a dead one", observed.PodStatus{Sandboxes: []observed.Sandbox{dead}, Containers: []observed.Container{exited}}, fresh, nil, made, nil, true},
		{"a ready sandbox was stopped", observed.PodStatus{Sandboxes: []observed.Sandbox{ready}}, fresh, nil, made, nil, false},
		{"a running container was killed", observed.PodStatus{Sandboxes: []observed.Sandbox{dead}, Containers: []observed.Container{running}}, fresh, nil, made, nil, false},
		{"no new sandbox", observed.PodStatus{Sandboxes: []observed.Sandbox{ready}}, plan.Actions{ContainersToStart: []plan.Start{{Index: 0}}}, nil, made, nil, false},
		{"kills", observed.PodStatus{}, plan.Actions{KillPod: true, CreateSandbox: true, ContainersToKill: []plan.Kill{{ID: "x"}}}, nil, made, nil, false},
		{"sandbox status unknown", observed.PodStatus{}, fresh, nil, learned{started: []string{"new"}}, nil, false},
		{"a start failed", observed.PodStatus{}, fresh, nil, learned{sandbox: made.sandbox, incomplete: true}, nil, false},
		{"an error", observed.PodStatus{}, fresh, nil, made, errors.New("x"), false},
		{"the pod failed", observed.PodStatus{}, plan.Actions{KillPod: true, CreateSandbox: true, PodFailed: true}, nil, made, nil, false},
		{"a resize", observed.PodStatus{}, fresh, &resizing{updated: true}, made, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := onlyMadeNew(&tc.obs, tc.actions, tc.rz, &tc.lrn, tc.err); got != tc.want {
				t.Errorf("onlyMadeNew = %v, want %v", got, tc.want)
			}
		})
	}
}
