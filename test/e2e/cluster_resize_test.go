//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/internal/pure/podspec"
)

// resizeValues are one container's CPU and memory requests and limits.
type resizeValues struct{ cpuReq, cpuLim, memReq, memLim string }

func (r resizeValues) requirements() v1.ResourceRequirements {
	return v1.ResourceRequirements{
		Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse(r.cpuReq), v1.ResourceMemory: resource.MustParse(r.memReq)},
		Limits:   v1.ResourceList{v1.ResourceCPU: resource.MustParse(r.cpuLim), v1.ResourceMemory: resource.MustParse(r.memLim)},
	}
}

// patch is the resize subresource's patch of container main, as
// `kubectl patch --subresource resize` sends it.
func (r resizeValues) patch() []byte {
	return fmt.Appendf(nil, `{"spec":{"containers":[{"name":"main","resources":{"requests":{"cpu":%q,"memory":%q},"limits":{"cpu":%q,"memory":%q}}}]}}`,
		r.cpuReq, r.memReq, r.cpuLim, r.memLim)
}

// TestClusterInPlaceResize resizes running pods through the API server's
// resize subresource on a nodelet node of the real control plane and
// containerd, and reads back what the kernel enforces (the cgroup v1
// files of the pod and of its container):
//   - CPU and memory up, then down, in place: the container keeps running
//     (same ID, no restart), the pod and container cgroups carry the new
//     values, status.containerStatuses[].resources and allocatedResources
//     follow, and the resize conditions go; the time from the patch to
//     the status is printed;
//   - resizePolicy RestartContainer for memory: the container is
//     restarted with the new limit;
//   - more CPU than the node has at all: the API server refuses it (v1.37
//     checks the Node's allocatable), nothing changes;
//   - a resize deferred for want of CPU that another pod holds
//     (PodResizePending Deferred, with the predicate's message, as the
//     kubelet v1.37) goes through once that pod is deleted (the retry of
//     deferred resizes);
//   - nodelet restarted: the resized pod is neither restarted nor
//     resized back (the allocation checkpoint).
func TestClusterInPlaceResize(t *testing.T) {
	cp := startCluster(t)
	cp.logsOnFailure(t)
	const node, ns = "resize-a", "resize-test"
	n := joinNode(t, cp, node)
	c := cp.Admin
	ctx := clusterContext(t, 15*time.Minute)
	clusterNamespace(t, c, ns)
	onNode := map[string]string{"kubernetes.io/hostname": node}
	create := func(t *testing.T, name string, r resizeValues, policy ...v1.ContainerResizePolicy) *v1.Pod {
		t.Helper()
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": name}},
			Spec: v1.PodSpec{NodeSelector: onNode, TerminationGracePeriodSeconds: ptr.To[int64](1),
				Containers: []v1.Container{{Name: "main", Image: "busybox:1.35", Command: []string{"sleep", "3600"},
					Resources: r.requirements(), ResizePolicy: policy}}}}
		if _, err := c.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = c.CoreV1().Pods(ns).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		})
		return &waitPodsReady(t, c, ns, "app="+name, 1, 2*time.Minute)[0]
	}
	patch := func(t *testing.T, name string, r resizeValues) time.Time {
		t.Helper()
		at := time.Now()
		if _, err := c.CoreV1().Pods(ns).Patch(ctx, name, types.StrategicMergePatchType, r.patch(), metav1.PatchOptions{}, "resize"); err != nil {
			t.Fatalf("resize %s to %+v: %v", name, r, err)
		}
		return at
	}
	var latencies []time.Duration
	// resized waits for the pod's status to report r, with no resize
	// condition left, and returns the pod and how long it took from since.
	resized := func(t *testing.T, name string, r resizeValues, since time.Time) *v1.Pod {
		t.Helper()
		want := r.requirements()
		var got *v1.Pod
		eventually(t, 2*time.Minute, "pod "+name+" resized to "+fmt.Sprint(r), func() error {
			p, err := c.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if err := statusReports(p, want); err != nil {
				return err
			}
			got = p
			return nil
		})
		took := time.Since(since)
		latencies = append(latencies, took)
		t.Logf("pod %s resized to %+v: status %v after the patch", name, r, took.Round(time.Millisecond))
		return got
	}

	t.Run("InPlace", func(t *testing.T) {
		start := resizeValues{"100m", "200m", "64Mi", "128Mi"}
		p := create(t, "inplace", start)
		if err := statusReports(p, start.requirements()); err != nil {
			t.Fatalf("before any resize: %v", err)
		}
		id := p.Status.ContainerStatuses[0].ContainerID
		checkCgroups(t, p, start)
		for _, r := range []resizeValues{
			{"150m", "300m", "96Mi", "192Mi"}, // up
			{"100m", "200m", "64Mi", "96Mi"},  // down, the memory limit below what it was at the start
		} {
			p = resized(t, "inplace", r, patch(t, "inplace", r))
			cs := p.Status.ContainerStatuses[0]
			if cs.ContainerID != id || cs.RestartCount != 0 || cs.State.Running == nil {
				t.Errorf("after the resize to %+v: container %s (was %s), %d restarts, state %+v", r, cs.ContainerID, id, cs.RestartCount, cs.State)
			}
			checkCgroups(t, p, r)
		}
	})

	t.Run("RestartContainer", func(t *testing.T) {
		start := resizeValues{"100m", "200m", "64Mi", "128Mi"}
		p := create(t, "restart", start,
			v1.ContainerResizePolicy{ResourceName: v1.ResourceCPU, RestartPolicy: v1.NotRequired},
			v1.ContainerResizePolicy{ResourceName: v1.ResourceMemory, RestartPolicy: v1.RestartContainer})
		id := p.Status.ContainerStatuses[0].ContainerID
		r := resizeValues{"100m", "200m", "64Mi", "160Mi"}
		p = resized(t, "restart", r, patch(t, "restart", r))
		eventually(t, time.Minute, "container of pod restart running again", func() error {
			got, err := c.CoreV1().Pods(ns).Get(ctx, "restart", metav1.GetOptions{})
			if err != nil {
				return err
			}
			cs := got.Status.ContainerStatuses[0]
			if cs.ContainerID == id || cs.RestartCount != 1 || cs.State.Running == nil {
				return fmt.Errorf("container %s (was %s), %d restarts, state %+v", cs.ContainerID, id, cs.RestartCount, cs.State)
			}
			p = got
			return nil
		})
		checkCgroups(t, p, r)
		// CPU is NotRequired: in place, no second restart.
		r2 := resizeValues{"150m", "250m", "64Mi", "160Mi"}
		p = resized(t, "restart", r2, patch(t, "restart", r2))
		if cs := p.Status.ContainerStatuses[0]; cs.RestartCount != 1 {
			t.Errorf("after a CPU resize: %d restarts, want 1", cs.RestartCount)
		}
		checkCgroups(t, p, r2)
	})

	t.Run("BeyondAllocatable", func(t *testing.T) {
		// v1.37's API server refuses a resize beyond the Node's
		// allocatable itself (the kubelet v1.37.2 has no Infeasible for
		// capacity either): the node sees nothing.
		start := resizeValues{"100m", "200m", "64Mi", "128Mi"}
		p := create(t, "huge", start)
		_, err := c.CoreV1().Pods(ns).Patch(ctx, "huge", types.StrategicMergePatchType,
			resizeValues{"100", "100", "64Mi", "128Mi"}.patch(), metav1.PatchOptions{}, "resize")
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "node didn't have enough allocatable resources: cpu, requested: 100000") {
			t.Fatalf("resize beyond allocatable: %v, want the API server's refusal", err)
		}
		time.Sleep(3 * time.Second)
		got, err := c.CoreV1().Pods(ns).Get(ctx, "huge", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := statusReports(got, start.requirements()); err != nil || got.Status.ContainerStatuses[0].ContainerID != p.Status.ContainerStatuses[0].ContainerID {
			t.Errorf("after a refused resize: %v", err)
		}
		checkCgroups(t, got, start)
	})

	t.Run("DeferredUntilFreed", func(t *testing.T) {
		// The earlier subtests' pods gone from the runtime too: the
		// node's admission counts a pod until it has stopped.
		eventually(t, time.Minute, "the earlier pods stopped", func() error {
			sbs, err := shared.rt.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{
				State:         &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY},
				LabelSelector: map[string]string{podspec.LabelPodNamespace: ns}})
			if err != nil {
				return err
			}
			if len(sbs) > 0 {
				return fmt.Errorf("%d sandboxes ready", len(sbs))
			}
			return nil
		})
		nd, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// hog takes all the CPU but 300m of what the pods on the node
		// leave; small's resize to 400m waits for it to go.
		free := nd.Status.Allocatable.Cpu().MilliValue() - requestedCPU(t, c, node)
		hogCPU := fmt.Sprintf("%dm", free-300)
		create(t, "hog", resizeValues{hogCPU, hogCPU, "16Mi", "16Mi"})
		create(t, "small", resizeValues{"100m", "200m", "32Mi", "64Mi"})
		r := resizeValues{"400m", "500m", "32Mi", "64Mi"}
		patch(t, "small", r)
		var cond *v1.PodCondition
		var generation int64
		eventually(t, time.Minute, "small's resize Deferred", func() error {
			got, err := c.CoreV1().Pods(ns).Get(ctx, "small", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if cond = findCondition(got, v1.PodResizePending); cond == nil {
				return fmt.Errorf("conditions %+v", got.Status.Conditions)
			}
			generation = got.Generation
			return nil
		})
		if cond.Reason != v1.PodReasonDeferred || cond.ObservedGeneration != generation ||
			!strings.HasPrefix(cond.Message, "Node didn't have enough resource: cpu, requested: 400, used: ") {
			t.Errorf("PodResizePending %s %q at generation %d (pod's %d); want Deferred with the predicate's message",
				cond.Reason, cond.Message, cond.ObservedGeneration, generation)
		}
		deleted := time.Now()
		if err := c.CoreV1().Pods(ns).Delete(ctx, "hog", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
			t.Fatal(err)
		}
		p := resized(t, "small", r, deleted)
		checkCgroups(t, p, r)
	})

	t.Run("NodeletRestart", func(t *testing.T) {
		start := resizeValues{"100m", "200m", "64Mi", "128Mi"}
		create(t, "kept", start)
		r := resizeValues{"200m", "400m", "96Mi", "192Mi"}
		p := resized(t, "kept", r, patch(t, "kept", r))
		id := p.Status.ContainerStatuses[0].ContainerID
		if err := n.proc.stop(t); err != nil {
			t.Fatalf("nodelet exit: %v", err)
		}
		stopped := time.Now()
		n.start(t)
		waitLeaseRenewed(t, c, node, stopped, time.Minute)
		// Two housekeeping rounds and a sync of every pod.
		time.Sleep(15 * time.Second)
		got, err := c.CoreV1().Pods(ns).Get(ctx, "kept", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cs := got.Status.ContainerStatuses[0]
		if cs.ContainerID != id || cs.RestartCount != 0 || cs.State.Running == nil {
			t.Errorf("after the restart: container %s (was %s), %d restarts, state %+v", cs.ContainerID, id, cs.RestartCount, cs.State)
		}
		if err := statusReports(got, r.requirements()); err != nil {
			t.Errorf("after the restart: %v", err)
		}
		checkCgroups(t, got, r)
		if _, err := os.Stat(filepath.Join(n.rootDir, "allocated_pods_state")); err != nil {
			t.Errorf("allocation checkpoint: %v", err)
		}
	})

	if len(latencies) > 0 {
		sort.Slice(latencies, func(i, j int) bool { return latencies[i] < latencies[j] })
		t.Logf("resize latency, patch to status, %d resizes: min %v, median %v, max %v", len(latencies),
			latencies[0].Round(time.Millisecond), latencies[len(latencies)/2].Round(time.Millisecond), latencies[len(latencies)-1].Round(time.Millisecond))
	}
}

// statusReports says why p's status does not report that its container
// main runs with want (resources and allocatedResources), nor that no
// resize is pending or in progress.
func statusReports(p *v1.Pod, want v1.ResourceRequirements) error {
	if len(p.Status.ContainerStatuses) != 1 {
		return fmt.Errorf("%d container statuses", len(p.Status.ContainerStatuses))
	}
	cs := p.Status.ContainerStatuses[0]
	if cs.Resources == nil {
		return fmt.Errorf("no status.containerStatuses[].resources")
	}
	for _, name := range []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory} {
		got, w := cs.Resources.Requests[name], want.Requests[name]
		if got.Cmp(w) != 0 {
			return fmt.Errorf("status requests %s %s, want %s", name, got.String(), w.String())
		}
		got, w = cs.Resources.Limits[name], want.Limits[name]
		if got.Cmp(w) != 0 {
			return fmt.Errorf("status limits %s %s, want %s", name, got.String(), w.String())
		}
		got, w = cs.AllocatedResources[name], want.Requests[name]
		if got.Cmp(w) != 0 {
			return fmt.Errorf("allocatedResources %s %s, want %s", name, got.String(), w.String())
		}
	}
	for _, t := range []v1.PodConditionType{v1.PodResizePending, v1.PodResizeInProgress} {
		if c := findCondition(p, t); c != nil {
			return fmt.Errorf("condition %s %s: %s", t, c.Reason, c.Message)
		}
	}
	return nil
}

func findCondition(p *v1.Pod, t v1.PodConditionType) *v1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == t {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// checkCgroups reads the cgroup v1 files of p's pod cgroup and of its
// container main and compares them with r: cpu.shares from the request
// (the kubelet's MilliCPUToShares), cpu.cfs_quota_us from the limit (100ms
// periods), memory.limit_in_bytes; the pod's are its one container's.
func checkCgroups(t *testing.T, p *v1.Pod, r resizeValues) {
	t.Helper()
	if fileExists("/sys/fs/cgroup/cgroup.controllers") {
		t.Skip("cgroup v2 host: this test reads cgroup v1 files (the v2 writes are unit-tested on the fake cgroup2 file system)")
	}
	req := r.requirements()
	shares := req.Requests.Cpu().MilliValue() * 1024 / 1000
	quota := req.Limits.Cpu().MilliValue() * 100
	mem := req.Limits.Memory().Value()
	id := strings.TrimPrefix(p.Status.ContainerStatuses[0].ContainerID, "containerd://")
	cpuPod := findPodCgroup(t, "/sys/fs/cgroup/cpu", string(p.UID))
	memPod := findPodCgroup(t, "/sys/fs/cgroup/memory", string(p.UID))
	for _, f := range []struct {
		path string
		want int64
	}{
		{filepath.Join(cpuPod, "cpu.shares"), shares},
		{filepath.Join(cpuPod, "cpu.cfs_quota_us"), quota},
		{filepath.Join(memPod, "memory.limit_in_bytes"), mem},
		{filepath.Join(cpuPod, id, "cpu.shares"), shares},
		{filepath.Join(cpuPod, id, "cpu.cfs_quota_us"), quota},
		{filepath.Join(memPod, id, "memory.limit_in_bytes"), mem},
	} {
		if got := readInt(t, f.path); got != f.want {
			t.Errorf("%s = %d, want %d (%+v)", f.path, got, f.want, r)
		}
	}
}

// requestedCPU is the CPU (milliCPU) the pods bound to node request, as
// the node's admission counts them (terminated pods left out).
func requestedCPU(t *testing.T, c kubernetes.Interface, node string) int64 {
	t.Helper()
	list, err := c.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	for _, p := range list.Items {
		if p.Status.Phase == v1.PodSucceeded || p.Status.Phase == v1.PodFailed {
			continue
		}
		for _, ct := range p.Spec.Containers {
			sum += ct.Resources.Requests.Cpu().MilliValue()
		}
	}
	return sum
}
