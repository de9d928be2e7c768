//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// The node out of the cluster (issue 11, "Resilience"): nodelet frozen
// (SIGSTOP, as a node cut off or hung) until the control plane finds its
// lease expired, marks the Node unreachable and evicts the pods that do
// not tolerate that. Frozen, nodelet stops nothing. Once it runs again it
// stops the evicted pod as the kubelet does, within its grace period,
// reports its containers terminated, then deletes it for good; the pod
// that tolerates the taint and the static pod keep running, never
// restarted, and the Node and the kept pod are Ready again.
//
// The controller manager runs with its defaults: 50 s of node-monitor
// grace period, then the unreachable NoExecute taint; the evicted pod
// tolerates it for 0 s. It evicts nothing when every node of a zone is
// unreachable (it takes that for its own outage), so a peer Node, its
// lease renewed by the test, stays Ready meanwhile.
func TestClusterNodeLost(t *testing.T) {
	const node, ns = "resil-lost", "resil-lost"
	_, n, c := resilNode(t, node)
	peerNode(t, c, node+"-peer")
	ctx := clusterContext(t, 10*time.Minute)
	writeManifest(t, n.manifests, "static.yaml", resilStaticPod(ns, "static"))
	for _, p := range []*v1.Pod{lostPod(ns, "evicted", node, ptr.To[int64](0)), lostPod(ns, "kept", node, nil)} {
		if _, err := c.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitPodsReady(t, c, ns, "app=lost", 2, 2*time.Minute)
	mirrorRunning(t, c, ns, "static-"+node, time.Minute)
	before := runtimeContainers(t, ns)
	podLog, _ := watchPodChanges(t, c, ns, "app=lost")

	proc := n.proc.cmd.Process
	if err := proc.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	frozen := time.Now()
	resume := func() { _ = proc.Signal(syscall.SIGCONT) }
	t.Cleanup(resume) // before the cleanup that stops nodelet
	eventually(t, 3*time.Minute, "pod evicted marked for deletion by the control plane", func() error {
		p, err := c.CoreV1().Pods(ns).Get(ctx, "evicted", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.DeletionTimestamp == nil {
			return fmt.Errorf("not marked; conditions %v", p.Status.Conditions)
		}
		return nil
	})
	node0, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("pod evicted marked for deletion %v after nodelet froze; the Node's taints: %v",
		time.Since(frozen).Round(100*time.Millisecond), node0.Spec.Taints)
	checkSameContainers(t, "nodelet frozen, the pod evicted", before, runtimeContainers(t, ns))

	resume()
	resumed := time.Now()
	// Its grace period (5 s), a status report and the final delete.
	eventually(t, time.Minute, "pod evicted deleted from the API", func() error {
		_, err := c.CoreV1().Pods(ns).Get(ctx, "evicted", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there: %v", err)
	})
	t.Logf("pod evicted gone from the API %v after nodelet resumed", time.Since(resumed).Round(100*time.Millisecond))

	var last *v1.Pod
	for _, e := range podLog.finish(t) {
		if p, ok := e.obj.(*v1.Pod); ok && p.Name == "evicted" && e.typ != watch.Deleted {
			last = p
		}
	}
	switch {
	case last == nil:
		t.Error("no change of pod evicted seen")
	case len(last.Status.ContainerStatuses) != 1 || last.Status.ContainerStatuses[0].State.Terminated == nil:
		t.Errorf("pod evicted deleted without its container reported terminated: %+v", last.Status.ContainerStatuses)
	default:
		t.Logf("pod evicted last reported: phase %s, container terminated (%s, exit code %d)", last.Status.Phase,
			last.Status.ContainerStatuses[0].State.Terminated.Reason, last.Status.ContainerStatuses[0].State.Terminated.ExitCode)
	}

	now := runtimeContainers(t, ns)
	kept := criContainers{}
	for id, ct := range before {
		if ct.pod != "evicted" {
			kept[id] = ct
		}
	}
	checkSameContainers(t, "after the eviction", kept, now)
	for id, ct := range now {
		if ct.pod == "evicted" && ct.running {
			t.Errorf("container %s of the evicted pod still runs", id)
		}
	}
	waitNodeReady(t, c, node, time.Minute)
	pods := waitPodsReady(t, c, ns, "app=lost", 1, time.Minute)
	checkAPIContainers(t, "after the eviction", pods, now)
}

// lostPod is a busybox pod on node that ends at SIGTERM within its 5 s
// grace period, and tolerates the node unreachable or not ready for
// tolerate seconds (nil: for ever).
func lostPod(ns, name, node string, tolerate *int64) *v1.Pod {
	var tolerations []v1.Toleration
	for _, key := range []string{v1.TaintNodeUnreachable, v1.TaintNodeNotReady} {
		tolerations = append(tolerations, v1.Toleration{Key: key, Operator: v1.TolerationOpExists,
			Effect: v1.TaintEffectNoExecute, TolerationSeconds: tolerate})
	}
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": "lost"}},
		Spec: v1.PodSpec{NodeSelector: map[string]string{"kubernetes.io/hostname": node}, TerminationGracePeriodSeconds: ptr.To[int64](5),
			Tolerations: tolerations,
			Containers: []v1.Container{{Name: "main", Image: "busybox:1.35",
				Command: []string{"sh", "-c", "trap 'sleep 1; exit 0' TERM; while true; do sleep 1; done"}}}}}
}

// peerNode registers a Node that stays Ready without an agent: the test
// renews its lease every 5 s until it ends. It takes no pods (NoSchedule).
func peerNode(t *testing.T, c kubernetes.Interface, name string) {
	t.Helper()
	ctx := clusterContext(t, 15*time.Minute)
	node, err := c.CoreV1().Nodes().Create(ctx, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name,
		Labels: map[string]string{"kubernetes.io/hostname": name}},
		Spec: v1.NodeSpec{Taints: []v1.Taint{{Key: "example.com/peer", Effect: v1.TaintEffectNoSchedule}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteNode(c, name) })
	// The controllers may write the new Node at once (taints): no
	// resource version, a merge patch of the status.
	now := metav1.Now()
	status, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []v1.NodeCondition{{Type: v1.NodeReady,
		Status: v1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: now, LastTransitionTime: now}}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CoreV1().Nodes().Patch(ctx, node.Name, types.StrategicMergePatchType, status, metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
	renew := func() error {
		now := metav1.NewMicroTime(time.Now())
		l, err := c.CoordinationV1().Leases(v1.NamespaceNodeLease).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = c.CoordinationV1().Leases(v1.NamespaceNodeLease).Create(ctx, &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: v1.NamespaceNodeLease},
				Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(name), LeaseDurationSeconds: ptr.To[int32](40), RenewTime: &now}},
				metav1.CreateOptions{})
			return err
		}
		if err != nil {
			return err
		}
		l.Spec.RenewTime = &now
		_, err = c.CoordinationV1().Leases(v1.NamespaceNodeLease).Update(ctx, l, metav1.UpdateOptions{})
		return err
	}
	if err := renew(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	stop := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(5 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				_ = renew() // the next one makes up for a failure
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
}
