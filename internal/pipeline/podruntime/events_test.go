package podruntime

import (
	"context"
	"reflect"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/pipeline/podworker"
)

// What a runtime event tells of a sandbox (its status and its containers'
// statuses, as containerd sends them) is what a relist lists of it.
func TestEventSandboxIsWhatARelistLists(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if _, err := f.m.syncPod(ctx, podworker.SyncRequest{Pod: testPod()}); err != nil {
		t.Fatal(err)
	}
	listed, err := f.m.ListPods(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pod := listed["uid-1"]
	if pod == nil || len(pod.Sandboxes) != 1 || len(pod.Containers) != 2 {
		t.Fatalf("listed %+v, want the pod with its sandbox and two containers", pod)
	}
	sandboxID := pod.Sandboxes[0].ID
	sb, err := f.rs.PodSandboxStatus(ctx, sandboxID, false)
	if err != nil {
		t.Fatal(err)
	}
	ev := &runtimeapi.ContainerEventResponse{ContainerId: pod.Containers[0].ID, ContainerEventType: runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT,
		CreatedAt: 1, PodSandboxStatus: sb.GetStatus()}
	for _, c := range pod.Containers {
		s, err := f.rs.ContainerStatus(ctx, c.ID, false)
		if err != nil {
			t.Fatal(err)
		}
		ev.ContainersStatuses = append(ev.ContainersStatuses, s.GetStatus())
	}

	v, ours := EventSandbox(ev)
	if !ours || v == nil {
		t.Fatalf("EventSandbox = %v, %v; want the sandbox, ours", v, ours)
	}
	if v.UID != pod.UID || v.Name != pod.Name || v.Namespace != pod.Namespace || v.Subject != ev.ContainerId || v.Deleted {
		t.Errorf("view %s %s/%s subject %s deleted %v; want pod %s %s/%s, subject %s",
			v.UID, v.Namespace, v.Name, v.Subject, v.Deleted, pod.UID, pod.Namespace, pod.Name, ev.ContainerId)
	}
	if !reflect.DeepEqual(v.Sandbox, pod.Sandboxes[0]) {
		t.Errorf("sandbox\n got %+v\nwant %+v (listed)", v.Sandbox, pod.Sandboxes[0])
	}
	byID := map[string]bool{}
	for _, c := range v.Containers {
		byID[c.ID] = true
		for _, l := range pod.Containers {
			if l.ID == c.ID && !reflect.DeepEqual(c, l) {
				t.Errorf("container\n got %+v\nwant %+v (listed)", c, l)
			}
		}
	}
	if len(byID) != 2 || !byID[pod.Containers[0].ID] || !byID[pod.Containers[1].ID] {
		t.Errorf("containers %+v, want the two listed", v.Containers)
	}

	ev.ContainerEventType = runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT
	if v, _ := EventSandbox(ev); !v.Deleted {
		t.Error("a deleted event is not Deleted")
	}
	foreign := &runtimeapi.ContainerEventResponse{ContainerId: "x", PodSandboxStatus: &runtimeapi.PodSandboxStatus{Id: "x",
		Labels: map[string]string{"io.kubernetes.pod.uid": "other"}}}
	if v, ours := EventSandbox(foreign); ours || v != nil {
		t.Errorf("someone else's sandbox: %v, %v; want nil, not ours", v, ours)
	}
	if v, ours := EventSandbox(&runtimeapi.ContainerEventResponse{ContainerId: sandboxID}); !ours || v != nil {
		t.Errorf("no sandbox status: %v, %v; want nil, maybe ours (a relist tells)", v, ours)
	}
}
