package gc

import (
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/pure/podspec"
)

var now = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

const (
	exited  = runtimeapi.ContainerState_CONTAINER_EXITED
	running = runtimeapi.ContainerState_CONTAINER_RUNNING
	created = runtimeapi.ContainerState_CONTAINER_CREATED
	unknown = runtimeapi.ContainerState_CONTAINER_UNKNOWN
)

func labels(uid string) map[string]string {
	return map[string]string{
		podspec.LabelManagedBy:    podspec.ManagedByValue,
		podspec.LabelPodUID:       uid,
		podspec.LabelPodName:      "pod-" + uid,
		podspec.LabelPodNamespace: "ns",
	}
}

// ctr is a nodelet container of pod uid in sandbox sb, created age ago.
func ctr(id, sb, uid, name string, state runtimeapi.ContainerState, age time.Duration) *runtimeapi.Container {
	l := labels(uid)
	l[podspec.LabelContainerName] = name
	return &runtimeapi.Container{
		Id: id, PodSandboxId: sb, State: state, Labels: l,
		Metadata:  &runtimeapi.ContainerMetadata{Name: name},
		CreatedAt: now.Add(-age).UnixNano(),
	}
}

// sbx is a nodelet sandbox of pod uid, created age ago.
func sbx(id, uid string, ready bool, age time.Duration) *runtimeapi.PodSandbox {
	state := runtimeapi.PodSandboxState_SANDBOX_NOTREADY
	if ready {
		state = runtimeapi.PodSandboxState_SANDBOX_READY
	}
	return &runtimeapi.PodSandbox{
		Id: id, State: state, Labels: labels(uid),
		Metadata:  &runtimeapi.PodSandboxMetadata{Name: "pod-" + uid, Namespace: "ns", Uid: uid},
		CreatedAt: now.Add(-age).UnixNano(),
	}
}

func unmanaged[T interface{ GetLabels() map[string]string }](o T) T {
	delete(o.GetLabels(), podspec.LabelManagedBy)
	return o
}

func activeSet(uids ...string) func(types.UID) bool {
	return func(uid types.UID) bool { return slices.Contains(uids, string(uid)) }
}

func TestPlan(t *testing.T) {
	m := time.Minute
	tests := []struct {
		name       string
		policy     Policy
		active     []string
		sandboxes  []*runtimeapi.PodSandbox
		containers []*runtimeapi.Container
		wantC      []string
		wantS      []string
	}{{
		name:      "active pod keeps the newest dead instance per container",
		active:    []string{"a"},
		sandboxes: []*runtimeapi.PodSandbox{sbx("s1", "a", true, 10*m)},
		containers: []*runtimeapi.Container{
			ctr("c1", "s1", "a", "app", exited, 3*m),
			ctr("c3", "s1", "a", "app", exited, 1*m),
			ctr("c2", "s1", "a", "app", exited, 2*m),
			ctr("c4", "s1", "a", "app", running, 30*time.Second),
			ctr("d1", "s1", "a", "side", exited, 5*m),
		},
		wantC: []string{"c1", "c2"},
	}, {
		name:      "MaxPerPodContainer 2",
		policy:    Policy{MaxPerPodContainer: 2},
		active:    []string{"a"},
		sandboxes: []*runtimeapi.PodSandbox{sbx("s1", "a", true, 10*m)},
		containers: []*runtimeapi.Container{
			ctr("c1", "s1", "a", "app", exited, 3*m),
			ctr("c2", "s1", "a", "app", exited, 2*m),
			ctr("c3", "s1", "a", "app", exited, 1*m),
		},
		wantC: []string{"c1"},
	}, {
		name:      "negative MaxPerPodContainer keeps all",
		policy:    Policy{MaxPerPodContainer: -1},
		active:    []string{"a"},
		sandboxes: []*runtimeapi.PodSandbox{sbx("s1", "a", true, 10*m)},
		containers: []*runtimeapi.Container{
			ctr("c1", "s1", "a", "app", exited, 3*m),
			ctr("c2", "s1", "a", "app", exited, 2*m),
		},
	}, {
		name:      "active pod: created and unknown containers stay",
		active:    []string{"a"},
		sandboxes: []*runtimeapi.PodSandbox{sbx("s1", "a", true, 10*m)},
		containers: []*runtimeapi.Container{
			ctr("c1", "s1", "a", "app", created, 3*m),
			ctr("c2", "s1", "a", "app", created, 2*m),
			ctr("c3", "s1", "a", "app", unknown, 2*m),
			ctr("c4", "s1", "a", "app", unknown, 1*m),
		},
	}, {
		name: "inactive pod: every dead container and not-ready sandbox goes",
		sandboxes: []*runtimeapi.PodSandbox{
			sbx("s1", "gone", false, 10*m),
			sbx("s2", "gone", false, 5*m),
		},
		containers: []*runtimeapi.Container{
			ctr("c1", "s1", "gone", "app", exited, 9*m),
			ctr("c2", "s2", "gone", "app", exited, 4*m),
			ctr("c3", "s2", "gone", "side", created, 4*m),
		},
		wantC: []string{"c1", "c2", "c3"},
		wantS: []string{"s1", "s2"},
	}, {
		name:      "inactive pod: running container and ready sandbox stay",
		sandboxes: []*runtimeapi.PodSandbox{sbx("s1", "gone", false, 10*m), sbx("s2", "gone", true, 5*m)},
		containers: []*runtimeapi.Container{
			ctr("c1", "s1", "gone", "app", running, 9*m),
			ctr("c2", "s1", "gone", "app", unknown, 9*m),
			ctr("c3", "s2", "gone", "app", exited, 4*m),
		},
		wantC: []string{"c3"},
	}, {
		name:   "active pod: older not-ready sandboxes go, the newest stays",
		active: []string{"a"},
		sandboxes: []*runtimeapi.PodSandbox{
			sbx("s1", "a", false, 10*m),
			sbx("s3", "a", false, 1*m),
			sbx("s2", "a", false, 5*m),
		},
		wantS: []string{"s1", "s2"},
	}, {
		name:   "active pod: an older ready sandbox stays",
		active: []string{"a"},
		sandboxes: []*runtimeapi.PodSandbox{
			sbx("s1", "a", true, 10*m),
			sbx("s2", "a", false, 1*m),
		},
	}, {
		name:   "sandbox holding a kept container stays",
		active: []string{"a"},
		sandboxes: []*runtimeapi.PodSandbox{
			sbx("s1", "a", false, 20*m),
			sbx("s2", "a", false, 10*m),
			sbx("s3", "a", true, 1*m),
		},
		containers: []*runtimeapi.Container{
			ctr("c1", "s1", "a", "app", exited, 19*m), // removed: s1 goes
			ctr("c2", "s2", "a", "app", exited, 9*m),  // newest dead: s2 stays
		},
		wantC: []string{"c1"},
		wantS: []string{"s1"},
	}, {
		name:      "MinAge: young containers are neither removed nor counted",
		policy:    Policy{MinAge: 5 * m},
		active:    []string{"a"},
		sandboxes: []*runtimeapi.PodSandbox{sbx("s1", "a", true, 30*m), sbx("g1", "gone", false, 30*m)},
		containers: []*runtimeapi.Container{
			ctr("c1", "s1", "a", "app", exited, 20*m),
			ctr("c2", "s1", "a", "app", exited, 10*m),
			ctr("c3", "s1", "a", "app", exited, 2*m),
			ctr("g2", "g1", "gone", "app", exited, 20*m),
			ctr("g3", "g1", "gone", "app", created, 1*m),
		},
		wantC: []string{"c1", "g2"},
	}, {
		name: "objects not labelled as nodelet's are ignored",
		sandboxes: []*runtimeapi.PodSandbox{
			unmanaged(sbx("s1", "gone", false, 10*m)),
			sbx("s2", "gone", false, 10*m),
		},
		containers: []*runtimeapi.Container{
			unmanaged(ctr("c1", "s1", "gone", "app", exited, 9*m)),
			unmanaged(ctr("c2", "s2", "gone", "app", exited, 9*m)),
		},
		// s2 is held by a foreign container.
	}, {
		name: "objects without a pod UID are ignored",
		sandboxes: []*runtimeapi.PodSandbox{{
			Id: "s1", Labels: podspec.ManagedSelector(),
		}},
		containers: []*runtimeapi.Container{{
			Id: "c1", PodSandboxId: "s1", State: exited, Labels: podspec.ManagedSelector(),
		}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gotC, gotS := plan(tt.sandboxes, tt.containers, activeSet(tt.active...), tt.policy, now)
			if !slices.Equal(gotC, tt.wantC) {
				t.Errorf("containers: got %v, want %v", gotC, tt.wantC)
			}
			if !slices.Equal(gotS, tt.wantS) {
				t.Errorf("sandboxes: got %v, want %v", gotS, tt.wantS)
			}
		})
	}
}

func TestPlanAsksPodActiveOncePerPod(t *testing.T) {
	calls := map[types.UID]int{}
	active := func(uid types.UID) bool { calls[uid]++; return uid == "a" }
	plan([]*runtimeapi.PodSandbox{sbx("s1", "a", true, time.Hour), sbx("s2", "b", false, time.Hour)},
		[]*runtimeapi.Container{
			ctr("c1", "s1", "a", "x", exited, time.Hour),
			ctr("c2", "s1", "a", "x", exited, time.Hour),
			ctr("c3", "s2", "b", "x", exited, time.Hour),
		}, active, Policy{}, now)
	for uid, n := range calls {
		if n != 1 {
			t.Errorf("podActive(%s) called %d times", uid, n)
		}
	}
}
