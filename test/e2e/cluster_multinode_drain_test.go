//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/internal/managed/containerd"
	"github.com/nodelet/nodelet/internal/pipeline/cri"
	"github.com/nodelet/nodelet/internal/pure/podspec"
)

// What a container of these tests writes to its termination log when it
// gets SIGTERM, before it exits 0 by itself.
const termMessage = "SIGTERM"

// Three nodes; node 3 drained with `kubectl drain`. Three replicas of a
// Deployment run there (the other nodes cordoned while they were placed),
// under a PodDisruptionBudget of minAvailable 2: the drain evicts one pod
// through the Eviction API at once and each next one only after a
// replacement is Ready on another node, so the replicas Ready and not
// being deleted are never fewer than 2. nodelet stops each evicted pod
// within its grace period: the container gets SIGTERM (its trap writes
// the termination log and exits 0) and the pod object is gone before its
// deletionTimestamp. Before that, nodelet reports it as the kubelet does
// for a pod that ended for good: phase Succeeded (every container exited
// 0), the container terminated with its message, Ready False, and the
// DisruptionTarget condition the API server set kept. Once drained, the
// node is cordoned (a pod for it stays unschedulable) until `kubectl
// uncordon`, and then that pod runs there.
func multiNodeDrain(t *testing.T, m *multiNode) {
	ctx := clusterContext(t, 4*time.Minute)
	ns, target := "drain", m.Nodes[2]
	multiNodeNamespace(t, m, ns)
	const minAvailable = 2
	// A replacement turns Ready 3 s after it starts, so that the budget
	// stays spent for a while after each eviction: the evictions kubectl
	// sends at once for all three pods find it so (429), and kubectl
	// retries them. Without the delay a replacement could be Ready, and
	// the budget recomputed, while the API server still retried the
	// conflicting update of another eviction (every 500 ms): that
	// eviction then passes without a refusal, as it did once in CI.
	web := terminatingDeployment(ns, "web", 3, 30, nil)
	web.Spec.Template.Spec.Containers[0].ReadinessProbe = &v1.Probe{
		ProbeHandler:        v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"true"}}},
		InitialDelaySeconds: 3, PeriodSeconds: 1,
	}
	dep := m.placeOn(t, target, web)

	pdb, err := m.Admin.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: ptr.To(intstr.FromInt32(minAvailable)),
			Selector:     dep.Spec.Selector,
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Evictions before the disruption controller counted the pods would
	// be refused for a budget it has not computed yet.
	eventually(t, time.Minute, "PodDisruptionBudget web computed", func() error {
		p, err := m.Admin.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, pdb.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.ObservedGeneration != p.Generation || p.Status.CurrentHealthy != 3 || p.Status.DisruptionsAllowed != 1 {
			return fmt.Errorf("status %+v", p.Status)
		}
		return nil
	})

	podLog, before := watchPodChanges(t, m.Admin, ns, "app=web")
	start := time.Now()
	out, err := kubectl(t, m.controlPlane, 3*time.Minute, "drain", target,
		"--ignore-daemonsets", "--delete-emptydir-data", "--timeout=150s")
	if err != nil {
		t.Fatalf("kubectl drain %s: %v\n%s", target, err, out)
	}
	t.Logf("kubectl drain %s took %v", target, time.Since(start).Round(100*time.Millisecond))
	// kubectl retries an eviction the budget refuses (429), and says so.
	// How often depends on timing, so it is reported, not asserted: what
	// the budget promises (never fewer than minAvailable) is checked below.
	t.Logf("kubectl drain was refused %d evictions for the disruption budget, and retried", strings.Count(out, "disruption budget"))
	after := waitPodsReady(t, m.Admin, ns, "app=web", 3, 2*time.Minute)
	events := podLog.finish(t)

	checkBudgetKept(t, before, events, minAvailable)
	for _, p := range before {
		checkStopped(t, p, events, "EvictionByEvictionAPI", true)
	}
	for _, p := range after {
		if p.Spec.NodeName == target {
			t.Errorf("pod %s runs on the drained node %s", p.Name, target)
		}
	}

	// Cordoned: a pod for the node is not scheduled, until uncordon.
	pinned := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "pinned", Namespace: ns},
		Spec: v1.PodSpec{
			NodeSelector:                  map[string]string{v1.LabelHostname: target},
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers:                    []v1.Container{{Name: "main", Image: "busybox:1.35", Command: []string{"sleep", "3600"}}},
		},
	}
	if _, err := m.Admin.CoreV1().Pods(ns).Create(ctx, pinned, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "pod pinned found unschedulable", func() error {
		p, err := m.Admin.CoreV1().Pods(ns).Get(ctx, pinned.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range p.Status.Conditions {
			if c.Type == v1.PodScheduled && c.Status == v1.ConditionFalse && c.Reason == v1.PodReasonUnschedulable {
				return nil
			}
		}
		return fmt.Errorf("node %q, conditions %v", p.Spec.NodeName, p.Status.Conditions)
	})
	if out, err := kubectl(t, m.controlPlane, 30*time.Second, "uncordon", target); err != nil {
		t.Fatalf("kubectl uncordon %s: %v\n%s", target, err, out)
	}
	eventually(t, time.Minute, "pod pinned running on "+target, func() error {
		p, err := m.Admin.CoreV1().Pods(ns).Get(ctx, pinned.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Spec.NodeName != target || p.Status.Phase != v1.PodRunning {
			return fmt.Errorf("on node %q, phase %s", p.Spec.NodeName, p.Status.Phase)
		}
		return nil
	})
}

// Three nodes; node 3's nodelet stopped (SIGTERM, nothing else): the node
// lifecycle controller (node-monitor grace period 30 s here) finds its
// lease expired, marks the Node's Ready Unknown and taints it unreachable;
// the taint manager evicts its pods, which tolerate that for 0 s, and the
// Deployment's replacements run on the other nodes. Meanwhile the evicted
// pods' containers keep running: only their node agent is away. When
// nodelet returns it sees the pods marked for deletion, stops them as the
// kubelet does (SIGTERM, exit 0 within the grace period), reports them
// terminated and deletes them, and its garbage collection removes their
// containers and sandboxes; the Node is Ready again; and in the end
// no pod has containers on two nodes, nor two running containers for
// one of its containers, and every container running on any node
// belongs to a pod the API binds to that node.
func multiNodeNodeLost(t *testing.T, m *multiNode) {
	ctx := clusterContext(t, 4*time.Minute)
	ns, target := "lost", m.Nodes[2]
	multiNodeNamespace(t, m, ns)
	var tolerations []v1.Toleration
	for _, key := range []string{v1.TaintNodeUnreachable, v1.TaintNodeNotReady} {
		tolerations = append(tolerations, v1.Toleration{Key: key, Operator: v1.TolerationOpExists,
			Effect: v1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](0)})
	}
	m.placeOn(t, target, terminatingDeployment(ns, "lost", 2, 5, tolerations))
	before := waitPodsReady(t, m.Admin, ns, "app=lost", 2, time.Minute)
	procs := map[types.UID]process{}
	for _, p := range before {
		if len(p.Status.ContainerStatuses) != 1 {
			t.Fatalf("pod %s: container statuses %+v", p.Name, p.Status.ContainerStatuses)
		}
		procs[p.UID] = containerInit(t, strings.TrimPrefix(p.Status.ContainerStatuses[0].ContainerID, "containerd://"))
	}
	podLog, _ := watchPodChanges(t, m.Admin, ns, "app=lost")
	readyLog := watchNodeReady(t, m.Admin, target)

	stopped, away := time.Now(), true
	// Before the cluster goes down, if the test ends early: the node's
	// runtime (which stops with nodelet) removes what its pods left.
	t.Cleanup(func() {
		if away {
			if out, err := m.script("start-node", "3"); err != nil {
				t.Errorf("hack/cluster.sh start-node 3: %v\n%s", err, out)
			}
		}
	})
	if out, err := m.script("stop-node", "3"); err != nil {
		t.Fatalf("hack/cluster.sh stop-node 3: %v\n%s", err, out)
	}
	eventually(t, 2*time.Minute, "the pods of "+target+" marked for deletion and replaced on other nodes", func() error {
		list, err := m.Admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=lost"})
		if err != nil {
			return err
		}
		marked, replaced := 0, 0
		for _, p := range list.Items {
			switch {
			case p.Spec.NodeName == target && p.DeletionTimestamp != nil:
				marked++
			case p.Spec.NodeName != target && p.DeletionTimestamp == nil && podReady(&p):
				replaced++
			}
		}
		if marked != 2 || replaced != 2 {
			return fmt.Errorf("%d marked for deletion, %d Ready elsewhere", marked, replaced)
		}
		return nil
	})
	t.Logf("pods of %s evicted and replaced %v after its nodelet stopped", target, time.Since(stopped).Round(100*time.Millisecond))
	// Only the node agent is away: its pods' processes are as they were.
	for uid, proc := range procs {
		if !proc.alive() {
			t.Errorf("pod %s: its container's process %d ended while nodelet was away", uid, proc.pid)
		}
	}

	restarted := time.Now()
	out, err := m.script("start-node", "3")
	if err != nil {
		t.Fatalf("hack/cluster.sh start-node 3: %v\n%s", err, out)
	}
	away = false
	t.Logf("%s Ready again %v after its nodelet started", target, time.Since(restarted).Round(100*time.Millisecond))
	eventually(t, time.Minute, "the evicted pods deleted from the API", func() error {
		for _, p := range before {
			if _, err := m.Admin.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("pod %s still there (%v)", p.Name, err)
			}
		}
		return nil
	})
	t.Logf("evicted pods gone %v after nodelet started", time.Since(restarted).Round(100*time.Millisecond))
	events := podLog.finish(t)
	history := readyLog.finish(t)
	t.Logf("%s Ready: %s", target, readyHistory(history, stopped))
	if !slices.ContainsFunc(history, func(c readyChange) bool { return c.status == v1.ConditionUnknown }) {
		t.Errorf("node %s never Unknown while its nodelet was away: %s", target, readyHistory(history, stopped))
	}
	if last := history[len(history)-1]; last.status != v1.ConditionTrue {
		t.Errorf("node %s Ready %s (%s) at the end", target, last.status, last.reason)
	}
	for _, p := range before {
		// Its deletionTimestamp passed while nodelet was away; the grace
		// period starts anew when the node sees the deletion, as the
		// kubelet's does.
		checkStopped(t, p, events, "DeletionByTaintManager", false)
		if procs[p.UID].alive() {
			t.Errorf("pod %s: its container's process %d still runs after the pod was deleted", p.Name, procs[p.UID].pid)
		}
	}
	// The kubelet's container garbage collection (every minute) removes
	// what is left of a deleted pod: its dead containers and sandbox.
	// A minute's wait: make chaos makes it, make test does not (the
	// collector's decisions are unit-tested in internal/node/gc).
	if chaosLong() {
		var uids []string
		for _, p := range before {
			uids = append(uids, string(p.UID))
		}
		eventually(t, 90*time.Second, "the evicted pods' containers and sandboxes removed from "+target+"'s runtime", func() error {
			return m.leftOf(2, uids)
		})
		t.Logf("evicted pods' containers and sandboxes removed %v after nodelet started", time.Since(restarted).Round(100*time.Millisecond))
	}
	waitPodsReady(t, m.Admin, ns, "app=lost", 2, time.Minute)
	m.checkNoPodTwice(t)
}

// leftOf is an error naming the containers and sandboxes of the pods
// uids that node i's runtime still has.
func (m *multiNode) leftOf(i int, uids []string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rt, err := cri.Dial(ctx, containerd.DefaultConfig(m.Roots[i]).Endpoint(), cri.DefaultTimeouts(), slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	defer rt.Close()
	var left []string
	for _, uid := range uids {
		selector := map[string]string{podspec.LabelPodUID: uid}
		cs, err := rt.ListContainers(ctx, &runtimeapi.ContainerFilter{LabelSelector: selector})
		if err != nil {
			return err
		}
		for _, c := range cs {
			left = append(left, fmt.Sprintf("container %s of %s (%s)", c.Metadata.GetName(), uid, c.State))
		}
		sbs, err := rt.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{LabelSelector: selector})
		if err != nil {
			return err
		}
		for _, sb := range sbs {
			left = append(left, fmt.Sprintf("sandbox of %s (%s)", uid, sb.State))
		}
	}
	if len(left) > 0 {
		return fmt.Errorf("still there: %v", left)
	}
	return nil
}

// multiNodeNamespace creates namespace ns and waits for its service
// account; when the test ends it deletes the namespace's workloads and
// waits until none of its pods is left, so that the next test on the
// cluster sees only its own.
func multiNodeNamespace(t *testing.T, m *multiNode, ns string) {
	t.Helper()
	ctx := clusterContext(t, time.Minute)
	if _, err := m.Admin.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		one := int64(1)
		_ = m.Admin.AppsV1().Deployments(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
		_ = m.Admin.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &one}, metav1.ListOptions{})
		for {
			pods, err := m.Admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
			if err == nil && len(pods.Items) == 0 {
				return
			}
			if ctx.Err() != nil {
				t.Errorf("namespace %s: pods left when the test ended: %v", ns, err)
				return
			}
			time.Sleep(time.Second)
		}
	})
	eventually(t, time.Minute, "service account "+ns+"/default", func() error {
		_, err := m.Admin.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err
	})
}

// terminatingDeployment is a Deployment of busybox pods labelled
// app=name whose container, at SIGTERM, writes termMessage to its
// termination log and exits 0 about a second later, well within its
// grace period.
func terminatingDeployment(ns, name string, replicas int32, grace int64, tolerations []v1.Toleration) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: v1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: v1.PodSpec{
					TerminationGracePeriodSeconds: &grace,
					Tolerations:                   tolerations,
					Containers: []v1.Container{{
						Name: "main", Image: "busybox:1.35", ImagePullPolicy: v1.PullIfNotPresent,
						Command: []string{"sh", "-c", "trap 'printf " + termMessage + " >/dev/termination-log; exit 0' TERM; " +
							"while true; do sleep 1; done"},
					}},
				},
			},
		},
	}
}

// placeOn creates dep with every node but node cordoned, so that all its
// replicas run there, waits for them to be Ready, and uncordons the
// others again.
func (m *multiNode) placeOn(t *testing.T, node string, dep *appsv1.Deployment) *appsv1.Deployment {
	t.Helper()
	ctx := clusterContext(t, 3*time.Minute)
	for _, n := range m.Nodes {
		if n != node {
			m.setUnschedulable(t, n, true)
		}
	}
	dep, err := m.Admin.AppsV1().Deployments(dep.Namespace).Create(ctx, dep, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	selector := metav1.FormatLabelSelector(dep.Spec.Selector)
	for _, p := range waitPodsReady(t, m.Admin, dep.Namespace, selector, int(*dep.Spec.Replicas), 2*time.Minute) {
		if p.Spec.NodeName != node {
			t.Fatalf("pod %s on %s, not on %s, the only schedulable node", p.Name, p.Spec.NodeName, node)
		}
	}
	for _, n := range m.Nodes {
		if n != node {
			m.setUnschedulable(t, n, false)
		}
	}
	return dep
}

func (m *multiNode) setUnschedulable(t *testing.T, node string, on bool) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"unschedulable":%v}}`, on)
	if _, err := m.Admin.CoreV1().Nodes().Patch(clusterContext(t, time.Minute), node, types.StrategicMergePatchType,
		[]byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// checkBudgetKept replays the pod events from the pods as they were
// before and fails the test if the pods Ready and not being deleted were
// ever fewer than minAvailable. One watch delivers one resource's changes
// in the order the API server made them, so each step is a state the
// cluster was in.
func checkBudgetKept(t *testing.T, before []v1.Pod, events []timedEvent, minAvailable int) {
	t.Helper()
	pods := map[types.UID]*v1.Pod{}
	for i := range before {
		pods[before[i].UID] = &before[i]
	}
	healthy := func() (n int) {
		for _, p := range pods {
			if p.DeletionTimestamp == nil && podReady(p) {
				n++
			}
		}
		return n
	}
	least := healthy()
	for _, e := range events {
		p, ok := e.obj.(*v1.Pod)
		if !ok {
			continue
		}
		if e.typ == watch.Deleted {
			delete(pods, p.UID)
		} else {
			pods[p.UID] = p
		}
		if n := healthy(); n < least {
			least = n
			if n < minAvailable {
				t.Errorf("at %v, after %s of pod %s: %d pods Ready and not being deleted, fewer than minAvailable %d",
					e.at.Format(time.TimeOnly), e.typ, p.Name, n, minAvailable)
			}
		}
	}
	t.Logf("pods Ready and not being deleted: never fewer than %d (minAvailable %d)", least, minAvailable)
}

// checkStopped fails the test unless events show pod p deleted from the
// API, last reported as the kubelet reports a pod that ended for good:
// phase Succeeded (its container exited 0), the container terminated by
// itself (exit code 0, termMessage in its termination log: it got
// SIGTERM and was not killed), Ready and ContainersReady False for
// PodCompleted, and the DisruptionTarget
// condition with reason disruption (set by whoever deleted it) kept.
// inGrace: deleted before its deletionTimestamp, the end of the grace
// period the API server gave it.
func checkStopped(t *testing.T, p v1.Pod, events []timedEvent, disruption string, inGrace bool) {
	t.Helper()
	// The first deletionTimestamp is the end of the grace period; the
	// node's final delete (grace 0) moves it to that moment.
	var last, marked *v1.Pod
	var deleted time.Time
	for _, e := range events {
		q, ok := e.obj.(*v1.Pod)
		if !ok || q.UID != p.UID {
			continue
		}
		if marked == nil && q.DeletionTimestamp != nil {
			marked = q
		}
		if e.typ == watch.Deleted {
			deleted = e.at
		} else {
			last = q
		}
	}
	if last == nil || marked == nil || deleted.IsZero() {
		t.Errorf("pod %s: seen %v, marked for deletion %v, deleted %v: not stopped and deleted", p.Name, last != nil, marked != nil, !deleted.IsZero())
		return
	}
	if dt := marked.DeletionTimestamp; inGrace && !deleted.Before(dt.Time) {
		t.Errorf("pod %s deleted at %v, not before its deletionTimestamp %v", p.Name, deleted.Format(time.TimeOnly), dt.Format(time.TimeOnly))
	} else if inGrace {
		t.Logf("pod %s gone %v before the end of its grace period (%ds)", p.Name, dt.Sub(deleted).Round(100*time.Millisecond),
			ptr.Deref(marked.DeletionGracePeriodSeconds, -1))
	}
	s := last.Status
	if len(s.ContainerStatuses) != 1 || s.ContainerStatuses[0].State.Terminated == nil {
		t.Errorf("pod %s last reported without its container terminated: %+v", p.Name, s.ContainerStatuses)
	} else if term := s.ContainerStatuses[0].State.Terminated; term.ExitCode != 0 || term.Message != termMessage {
		t.Errorf("pod %s: container terminated with exit code %d, message %q (reason %s); want 0 and %q: it did not end by its SIGTERM trap",
			p.Name, term.ExitCode, term.Message, term.Reason, termMessage)
	}
	if s.Phase != v1.PodSucceeded {
		t.Errorf("pod %s last reported in phase %s, want %s", p.Name, s.Phase, v1.PodSucceeded)
	}
	for _, typ := range []v1.PodConditionType{v1.PodReady, v1.ContainersReady} {
		if !slices.ContainsFunc(s.Conditions, func(c v1.PodCondition) bool {
			return c.Type == typ && c.Status == v1.ConditionFalse && c.Reason == "PodCompleted"
		}) {
			t.Errorf("pod %s last reported without %s False (PodCompleted): %+v", p.Name, typ, s.Conditions)
		}
	}
	if !slices.ContainsFunc(s.Conditions, func(c v1.PodCondition) bool {
		return c.Type == v1.DisruptionTarget && c.Status == v1.ConditionTrue && c.Reason == disruption
	}) {
		t.Errorf("pod %s last reported without the DisruptionTarget condition (%s): %+v", p.Name, disruption, s.Conditions)
	}
}

// checkNoPodTwice fails the test if, across the nodes' runtimes, a pod
// has containers on two nodes or two running containers of the same name,
// or a running container belongs to no pod the API binds to its node.
func (m *multiNode) checkNoPodTwice(t *testing.T) {
	t.Helper()
	ctx := clusterContext(t, time.Minute)
	list, err := m.Admin.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	bound := map[string]string{} // pod UID: its node
	for _, p := range list.Items {
		bound[string(p.UID)] = p.Spec.NodeName
	}
	nodeOf := map[string]string{}  // pod UID: the node whose runtime has its containers
	running := map[string]string{} // pod UID/container: the node running it
	for i, root := range m.Roots {
		node := m.Nodes[i]
		rt, err := cri.Dial(ctx, containerd.DefaultConfig(root).Endpoint(), cri.DefaultTimeouts(), slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatalf("node %s's runtime: %v", node, err)
		}
		cs, err := rt.ListContainers(ctx, &runtimeapi.ContainerFilter{})
		rt.Close()
		if err != nil {
			t.Fatalf("node %s's containers: %v", node, err)
		}
		for _, c := range cs {
			uid, name := c.Labels[podspec.LabelPodUID], c.Labels[podspec.LabelPodNamespace]+"/"+c.Labels[podspec.LabelPodName]
			if other, ok := nodeOf[uid]; ok && other != node {
				t.Errorf("pod %s has containers on %s and %s", name, other, node)
			}
			nodeOf[uid] = node
			if c.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
				continue
			}
			if bound[uid] != node {
				t.Errorf("container %s of pod %s (%s) runs on %s; the API binds the pod to %q", c.Metadata.GetName(), name, uid, node, bound[uid])
			}
			key := uid + "/" + c.Metadata.GetName()
			if other, ok := running[key]; ok {
				t.Errorf("pod %s: container %s runs twice (on %s and %s)", name, c.Metadata.GetName(), other, node)
			}
			running[key] = node
		}
	}
	t.Logf("%d running containers across %d nodes, each once and on its pod's node (%d pods have containers, running or not)",
		len(running), len(m.Nodes), len(nodeOf))
}

// process is one process, told from a later one with its pid by its
// start time.
type process struct {
	pid   int
	start string // field 22 of /proc/PID/stat, in clock ticks since boot
}

// containerInit is the container's first process: of those whose
// /proc/PID/cgroup names the container ID (cgroupfs and systemd drivers,
// v1 and v2 alike), the one whose parent is not among them.
func containerInit(t *testing.T, id string) process {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	in := map[int]procStat{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cgroup"))
		if err != nil || !strings.Contains(string(b), id) {
			continue
		}
		if st, ok := readProcStat(pid); ok {
			in[pid] = st
		}
	}
	for pid, st := range in {
		if _, ok := in[st.ppid]; !ok && st.state != "Z" {
			return process{pid: pid, start: st.start}
		}
	}
	t.Fatalf("container %s: no first process among %v", id, in)
	return process{}
}

// alive tells whether the process still runs (not a zombie).
func (p process) alive() bool {
	st, ok := readProcStat(p.pid)
	return ok && st.start == p.start && st.state != "Z"
}

type procStat struct {
	state, start string
	ppid         int
}

// readProcStat reads /proc/PID/stat: "pid (comm) state ppid ...", the
// command in parentheses possibly with spaces, the start time 22nd.
func readProcStat(pid int) (procStat, bool) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return procStat{}, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return procStat{}, false
	}
	f := strings.Fields(s[i+1:]) // from field 3, the state, on
	if len(f) < 20 {
		return procStat{}, false
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		return procStat{}, false
	}
	return procStat{state: f[0], ppid: ppid, start: f[19]}, true
}
