//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/client-go/util/retry"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/internal/pure/podspec"
)

// What users of a cluster node count on (issue 11, "Resilience"): the API
// server away for a minute, nodelet restarted, and nothing asked of the API
// server that the Node authorizer or NodeRestriction refuses.
//
// The harness leaves the controller manager's node-monitor grace period
// (50 s) and the pods' not-ready and unreachable tolerations (300 s) at
// their defaults: a minute without the API server may get the node marked
// unreachable, its pods NotReady and the node tainted, but no pod is
// evicted before these tests end.

// The API server stopped for 60 s: the node's pods keep running and the
// file source keeps syncing meanwhile; once it is back, the lease, the
// Node's Ready and the pods' status catch up within seconds, the static
// pod added meanwhile gets its mirror pod, and nothing was restarted.
func TestClusterAPIServerOutage(t *testing.T) {
	const node, ns = "resil-api", "resil-api"
	cp, n, c := resilNode(t, node)
	written := time.Now()
	writeManifest(t, n.manifests, "static-a.yaml", resilStaticPod(ns, "static-a"))
	waitContainerRunning(t, time.Minute, "static-a-"+node, "main")
	runs := time.Since(written)
	// A missing mirror pod fails the test but lets it go on: what the
	// outage does to the rest is worth knowing too.
	mirrorA := mirrorRunning(t, c, ns, "static-a-"+node, time.Minute)
	t.Logf("a static pod added with the API server up runs after %v, its mirror pod shows it Running after %v",
		runs.Round(100*time.Millisecond), time.Since(written).Round(100*time.Millisecond))
	resilCreate(t, c, resilWeb(ns, "web", node, 3))
	pods := waitPodsReady(t, c, ns, "app=web", 3, 2*time.Minute)
	before := runtimeContainers(t, ns)
	checkAPIContainers(t, "before the outage", append(pods, mirrorA...), before)

	stopped := time.Now()
	if out, err := cp.script("stop-apiserver"); err != nil {
		t.Fatalf("hack/cluster.sh stop-apiserver: %v\n%s", err, out)
	}
	// Back for the tests that follow if this one ends early.
	t.Cleanup(func() { cp.script("start-apiserver") })
	written = time.Now()
	writeManifest(t, n.manifests, "static-b.yaml", resilStaticPod(ns, "static-b"))
	waitContainerRunning(t, 50*time.Second, "static-b-"+node, "main")
	took := time.Since(written)
	t.Logf("a static pod added without the API server runs after %v", took.Round(100*time.Millisecond))
	// The file source needs no API server: ten times the check frequency
	// (2 s, joinNode's) is plenty (it fails the test, which goes on).
	if took > 20*time.Second {
		t.Errorf("a static pod added without the API server runs only after %v (with it: a second)", took.Round(100*time.Millisecond))
	}
	time.Sleep(time.Until(stopped.Add(60 * time.Second)))
	checkSameContainers(t, "after 60 s without the API server", before, runtimeContainers(t, ns))

	if out, err := cp.script("start-apiserver"); err != nil {
		t.Fatalf("hack/cluster.sh start-apiserver: %v\n%s", err, out)
	}
	back := time.Now()
	t.Logf("API server away for %v", back.Sub(stopped).Round(100*time.Millisecond))
	// The controller manager's verdict on the node comes within seconds of
	// the return: Unknown, and the node's pods NotReady, if it saw no lease
	// renewed for its grace period. nodelet has to put both right, within
	// seconds: two status updates (10 s each) are plenty.
	readyLog := watchNodeReady(t, c, node)
	podLog, podsAtReturn := watchPodChanges(t, c, ns, "")
	// Whether the controller does so depends on who is first after the
	// return, it or nodelet's lease renewal. So the test writes what it
	// would, at once, while nodelet's pod informer is still reconnecting
	// (with back-off, up to a minute): every pod that ran before the
	// outage marked NotReady, as the controller's MarkPodsNotReady.
	markNotReady(t, c, ns, before.pods())
	leaseAt := waitLeaseRenewed(t, c, node, stopped, time.Minute).Sub(back)
	time.Sleep(time.Until(back.Add(30 * time.Second)))
	changes := readyLog.finish(t)
	podEvents := podLog.finish(t)
	t.Logf("after the API server answered /readyz: lease renewed at %+.1fs; Node Ready: %s; pods' Ready: %s",
		leaseAt.Seconds(), readyHistory(changes, back), podReadyHistory(podsAtReturn, podEvents, back))
	if last := changes[len(changes)-1]; last.status != v1.ConditionTrue {
		t.Errorf("Node not Ready 30 s after the API server returned: %s", readyHistory(changes, back))
	}
	list, err := c.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range list.Items {
		for _, cond := range p.Status.Conditions {
			if slices.Contains(before.pods(), p.Name) && cond.Type == v1.PodReady && cond.Status != v1.ConditionTrue {
				t.Errorf("pod %s not Ready 30 s after the API server returned: Ready %s since %v (%s)", p.Name, cond.Status,
					cond.LastTransitionTime.Time.Format(time.TimeOnly), cond.Reason)
			}
		}
	}
	// A mirror pod pass (every 10 s), then the status patched onto the
	// mirror pod created, are plenty for the static pod added meanwhile;
	// waited for up to a minute, to tell how long it takes.
	mirrorB := mirrorRunning(t, c, ns, "static-b-"+node, time.Until(back.Add(time.Minute)))
	mirrorIn := time.Since(back)
	for _, p := range podsAtReturn {
		if p.Name == "static-b-"+node && p.Status.Phase == v1.PodRunning && podReady(&p) {
			mirrorIn = 0 // already when the watch started
		}
	}
	for _, e := range podEvents {
		if mirrorIn == 0 {
			break
		}
		if p, ok := e.obj.(*v1.Pod); ok && p.Name == "static-b-"+node && p.Status.Phase == v1.PodRunning && podReady(p) {
			mirrorIn = e.at.Sub(back)
			break
		}
	}
	t.Logf("the mirror pod of static-b shows it Running %v after the return", mirrorIn.Round(100*time.Millisecond))
	if len(mirrorB) == 1 && mirrorIn > 30*time.Second {
		t.Errorf("the mirror pod of the static pod added during the outage shows it Running only %v after the API server returned", mirrorIn.Round(100*time.Millisecond))
	}

	after := runtimeContainers(t, ns)
	checkSameContainers(t, "after the outage", before, after)
	if list, err = c.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app=web"}); err != nil {
		t.Fatal(err)
	}
	for _, p := range list.Items {
		if !slices.Contains(before.pods(), p.Name) {
			t.Errorf("pod %s is new: the Deployment's pods were replaced", p.Name)
		}
	}
	checkAPIContainers(t, "after the outage", list.Items, before)
	if len(mirrorA) == 1 {
		p, err := c.CoreV1().Pods(ns).Get(context.Background(), mirrorA[0].Name, metav1.GetOptions{})
		if err != nil || p.UID != mirrorA[0].UID {
			t.Errorf("mirror pod %s recreated or gone: %v", mirrorA[0].Name, err)
		} else {
			checkAPIContainers(t, "after the outage", []v1.Pod{*p}, before)
		}
	}
	checkAPIContainers(t, "static pod added during the outage", mirrorB, after)
}

// nodelet stopped (SIGINT) and started again with 20 pods: no container
// restarts, and for 30 s after it is back no pod's Ready condition goes
// False in the API and the Node stays Ready.
func TestClusterNodeletRestart(t *testing.T) {
	const node, ns = "resil-restart", "resil-restart"
	_, n, c := resilNode(t, node)
	resilCreate(t, c, resilWeb(ns, "web", node, 20))
	pods := waitPodsReady(t, c, ns, "app=web", 20, 4*time.Minute)
	before := runtimeContainers(t, ns)
	checkAPIContainers(t, "before the restart", pods, before)

	podLog, _ := watchPodChanges(t, c, ns, "app=web")
	readyLog := watchNodeReady(t, c, node)
	begin := time.Now()
	if err := n.proc.stop(t); err != nil {
		t.Fatalf("nodelet exit: %v", err)
	}
	stopped := time.Now()
	n.start(t)
	back := waitLeaseRenewed(t, c, node, stopped, time.Minute)
	t.Logf("nodelet stopped in %v, and back (lease renewed) %v later", stopped.Sub(begin).Round(100*time.Millisecond), back.Sub(stopped).Round(100*time.Millisecond))
	time.Sleep(30 * time.Second)

	events := podLog.finish(t)
	for _, e := range events {
		p, ok := e.obj.(*v1.Pod)
		if !ok || e.typ != watch.Modified {
			if e.typ != watch.Error { // finish reported it
				t.Errorf("pod watch at +%v: %s %T", e.at.Sub(begin).Round(100*time.Millisecond), e.typ, e.obj)
			}
			continue
		}
		for _, c := range p.Status.Conditions {
			if c.Type == v1.PodReady && c.Status != v1.ConditionTrue {
				t.Errorf("pod %s Ready %s at +%v: %s: %s", p.Name, c.Status, e.at.Sub(begin).Round(100*time.Millisecond), c.Reason, c.Message)
			}
		}
		for _, cs := range p.Status.ContainerStatuses {
			if cs.RestartCount != 0 || cs.State.Running == nil {
				t.Errorf("pod %s container %s at +%v: restartCount %d, state %+v", p.Name, cs.Name, e.at.Sub(begin).Round(100*time.Millisecond), cs.RestartCount, cs.State)
			}
		}
	}
	changes := readyLog.finish(t)
	t.Logf("%d pod updates in the API during the restart; Node Ready: %s", len(events), readyHistory(changes, begin))
	for _, ch := range changes {
		if ch.status != v1.ConditionTrue {
			t.Errorf("Node Ready %s at +%v (%s)", ch.status, ch.at.Sub(begin).Round(100*time.Millisecond), ch.reason)
		}
	}
	checkSameContainers(t, "after the restart", before, runtimeContainers(t, ns))
	list, err := c.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app=web"})
	if err != nil {
		t.Fatal(err)
	}
	checkAPIContainers(t, "after the restart", list.Items, before)
}

// A node's own requests are all allowed by the Node authorizer and the
// NodeRestriction admission plugin: the API server's audit log (of nodes'
// requests) shows no 403 for the node's user after a representative
// workload: a Deployment with a ConfigMap volume, a Secret in an
// environment variable and a projected service account token; a static pod
// with its mirror pod; a pod deleted with grace.
func TestClusterNodeRestriction(t *testing.T) {
	const node, ns = "resil-audit", "resil-audit"
	cp, n, c := resilNode(t, node)
	ctx := clusterContext(t, 5*time.Minute)
	if _, err := c.CoreV1().ConfigMaps(ns).Create(ctx, &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings"}, Data: map[string]string{"color": "blue"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CoreV1().Secrets(ns).Create(ctx, &v1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds"}, StringData: map[string]string{"password": "s3cret"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	d := resilWeb(ns, "web", node, 2)
	spec := &d.Spec.Template.Spec
	spec.Volumes = []v1.Volume{
		{Name: "settings", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "settings"}}}},
		{Name: "token", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{Sources: []v1.VolumeProjection{{
			ServiceAccountToken: &v1.ServiceAccountTokenProjection{Audience: "example.com/resil", ExpirationSeconds: ptr.To[int64](3600), Path: "token"}}}}}},
	}
	spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "settings", MountPath: "/etc/settings"}, {Name: "token", MountPath: "/var/run/resil"}}
	spec.Containers[0].Env = []v1.EnvVar{{Name: "PASSWORD", ValueFrom: &v1.EnvVarSource{SecretKeyRef: &v1.SecretKeySelector{
		LocalObjectReference: v1.LocalObjectReference{Name: "creds"}, Key: "password"}}}}
	resilCreate(t, c, d)
	writeManifest(t, n.manifests, "static.yaml", resilStaticPod(ns, "static"))

	graceful := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "graceful", Namespace: ns, Labels: map[string]string{"app": "graceful"}},
		Spec: v1.PodSpec{NodeSelector: map[string]string{"kubernetes.io/hostname": node}, TerminationGracePeriodSeconds: ptr.To[int64](10),
			Containers: []v1.Container{{Name: "main", Image: "busybox:1.35",
				Command: []string{"sh", "-c", "trap 'sleep 2; exit 0' TERM; while true; do sleep 1; done"}}}}}
	if _, err := c.CoreV1().Pods(ns).Create(ctx, graceful, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPodsReady(t, c, ns, "app=web", 2, 2*time.Minute)
	mirrorRunning(t, c, ns, "static-"+node, time.Minute)
	waitPodsReady(t, c, ns, "app=graceful", 1, time.Minute)
	if err := c.CoreV1().Pods(ns).Delete(ctx, "graceful", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "pod graceful deleted", func() error {
		_, err := c.CoreV1().Pods(ns).Get(context.Background(), "graceful", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there: %v", err)
	})

	user := "system:node:" + node
	counts, denied, lagged := readNodeAudit(t, cp.AuditLog, user)
	if len(counts) == 0 {
		t.Fatalf("no request of %s in the audit log %s", user, cp.AuditLog)
	}
	var lines []string
	for k, v := range counts {
		lines = append(lines, fmt.Sprintf("  %-7s %-40s %d: %d", k.verb, k.resource, k.code, v))
	}
	sort.Strings(lines)
	t.Logf("requests of %s (verb, resource, code: count):\n%s", user, strings.Join(lines, "\n"))
	for _, e := range denied {
		t.Errorf("403 for %s: %s %s: %s", user, e.Verb, e.RequestURI, e.reason())
	}
	for _, e := range lagged {
		t.Logf("403 for %s, the same request allowed later (the Node authorizer's graph lagging the binding, kubernetes#128910): %s %s: %s",
			user, e.Verb, e.RequestURI, e.reason())
	}
}

// --- workload ---------------------------------------------------------------

// resilNode is how each resilience test begins: the control plane
// (startCluster), a node named name joined to it, and a namespace of the
// same name.
func resilNode(t *testing.T, name string) (*controlPlane, *clusterNode, kubernetes.Interface) {
	t.Helper()
	cp := startCluster(t)
	cp.logsOnFailure(t)
	n := joinNode(t, cp, name)
	resilNamespace(t, cp.Admin, name)
	return cp, n, cp.Admin
}

// resilNamespace creates namespace ns, deleted when the test ends, and
// waits for its default service account.
func resilNamespace(t *testing.T, c kubernetes.Interface, ns string) {
	t.Helper()
	clusterNamespace(t, c, ns)
	t.Cleanup(func() { _ = c.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
}

// clusterNamespace creates namespace ns (or finds it there) and waits for
// its default service account, without which the API server refuses pods.
func clusterNamespace(t *testing.T, c kubernetes.Interface, ns string) {
	t.Helper()
	_, err := c.CoreV1().Namespaces().Create(context.Background(), &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "service account "+ns+"/default", func() error {
		_, err := c.CoreV1().ServiceAccounts(ns).Get(context.Background(), "default", metav1.GetOptions{})
		return err
	})
}

// resilWeb is a Deployment of busybox pods on node: a sleep loop that ends
// at SIGTERM, and a web server for the readiness probe.
func resilWeb(ns, name, node string, replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To(replicas), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: v1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: v1.PodSpec{NodeSelector: map[string]string{"kubernetes.io/hostname": node}, TerminationGracePeriodSeconds: ptr.To[int64](5),
					Containers: []v1.Container{{Name: "main", Image: "busybox:1.35",
						Command: []string{"sh", "-c", "trap 'exit 0' TERM; mkdir -p /www && echo ok >/www/index.html && httpd -p 8080 -h /www; while true; do sleep 1; done"},
						ReadinessProbe: &v1.Probe{ProbeHandler: v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Path: "/", Port: intstr.FromInt32(8080)}},
							PeriodSeconds: 2}}}}}}}
}

func resilCreate(t *testing.T, c kubernetes.Interface, d *appsv1.Deployment) {
	t.Helper()
	if _, err := c.AppsV1().Deployments(d.Namespace).Create(context.Background(), d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// resilStaticPod is the manifest of a static pod: a sleep loop.
func resilStaticPod(ns, name string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
  namespace: %s
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: main
    image: busybox:1.35
    command: ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"]
`, name, ns)
}

// mirrorRunning waits for the mirror pod name in ns to show the static pod
// Running and Ready, and returns it; if it does not within timeout, it
// fails the test, lets it go on, and returns none.
func mirrorRunning(t *testing.T, c kubernetes.Interface, ns, name string, timeout time.Duration) []v1.Pod {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		p, err := c.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		switch {
		case err != nil:
		case p.Annotations[podspec.AnnotationConfigMirror] == "":
			err = fmt.Errorf("not a mirror pod: annotations %v", p.Annotations)
		case p.Status.Phase != v1.PodRunning || !podReady(p):
			err = fmt.Errorf("phase %s, conditions %v", p.Status.Phase, p.Status.Conditions)
		default:
			return []v1.Pod{*p}
		}
		if time.Now().After(deadline) {
			t.Errorf("mirror pod %s Running: not within %v: %v", name, timeout, err)
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// markNotReady sets the Ready condition of the pods names in ns False, as
// the node lifecycle controller does for the pods of a node it finds
// unreachable.
func markNotReady(t *testing.T, c kubernetes.Interface, ns string, names []string) {
	t.Helper()
	ctx := clusterContext(t, time.Minute)
	for _, name := range names {
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			p, err := c.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			for i, cond := range p.Status.Conditions {
				if cond.Type == v1.PodReady && cond.Status == v1.ConditionTrue {
					p.Status.Conditions[i].Status, p.Status.Conditions[i].Reason = v1.ConditionFalse, "NodeNotReady"
					p.Status.Conditions[i].LastTransitionTime = metav1.Now()
				}
			}
			_, err = c.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			t.Fatalf("mark pod %s NotReady: %v", name, err)
		}
	}
}

// --- what the runtime runs --------------------------------------------------

// criContainer is a container in the runtime, of pod/name.
type criContainer struct {
	pod, name string
	running   bool
}

// criContainers are the containers of a namespace's pods, whatever their
// state, by ID.
type criContainers map[string]criContainer

func runtimeContainers(t *testing.T, ns string) criContainers {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := shared.rt.ListContainers(ctx, &runtimeapi.ContainerFilter{LabelSelector: map[string]string{podspec.LabelPodNamespace: ns}})
	if err != nil {
		t.Fatal(err)
	}
	out := criContainers{}
	for _, c := range cs {
		out[c.Id] = criContainer{pod: c.Labels[podspec.LabelPodName], name: c.Metadata.GetName(), running: c.State == runtimeapi.ContainerState_CONTAINER_RUNNING}
	}
	return out
}

func (cs criContainers) pods() []string {
	var out []string
	for _, c := range cs {
		if !slices.Contains(out, c.pod) {
			out = append(out, c.pod)
		}
	}
	return out
}

// checkSameContainers fails the test unless the containers of before all
// still run, and the pods of before have no other container (a restart
// would have made one).
func checkSameContainers(t *testing.T, when string, before, now criContainers) {
	t.Helper()
	for id, c := range before {
		if n, ok := now[id]; !ok || !n.running {
			t.Errorf("%s: container %s of %s/%s is gone or stopped (in the runtime: %v, running: %v)", when, id, c.pod, c.name, ok, n.running)
		}
	}
	pods := before.pods()
	for id, c := range now {
		if _, ok := before[id]; !ok && slices.Contains(pods, c.pod) {
			t.Errorf("%s: pod %s has a new container %s/%s (running: %v): restarted", when, c.pod, id, c.name, c.running)
		}
	}
}

// checkAPIContainers fails the test unless each pod's status in the API
// reports the containers that rt (the runtime) has, never restarted.
func checkAPIContainers(t *testing.T, when string, pods []v1.Pod, rt criContainers) {
	t.Helper()
	for _, p := range pods {
		if len(p.Status.ContainerStatuses) == 0 {
			t.Errorf("%s: pod %s has no container status", when, p.Name)
		}
		for _, cs := range p.Status.ContainerStatuses {
			id := strings.TrimPrefix(cs.ContainerID, "containerd://")
			if c, ok := rt[id]; !ok || c.pod != p.Name || cs.RestartCount != 0 {
				t.Errorf("%s: pod %s container %s: %s restartCount %d; the runtime has %+v", when, p.Name, cs.Name, cs.ContainerID, cs.RestartCount, c)
			}
		}
	}
}

// --- what the API shows over time ---------------------------------------------

// waitLeaseRenewed waits until the node's lease was renewed after since,
// and returns when it was.
func waitLeaseRenewed(t *testing.T, c kubernetes.Interface, node string, since time.Time, timeout time.Duration) time.Time {
	t.Helper()
	var renewed time.Time
	eventually(t, timeout, "lease of "+node+" renewed", func() error {
		l, err := c.CoordinationV1().Leases("kube-node-lease").Get(context.Background(), node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if l.Spec.RenewTime == nil || !l.Spec.RenewTime.After(since) {
			return fmt.Errorf("renewTime %v", l.Spec.RenewTime)
		}
		renewed = l.Spec.RenewTime.Time
		return nil
	})
	return renewed
}

// watchLog keeps what a watch delivers, with the time it came, until
// finish.
type watchLog struct {
	w        watch.Interface
	mu       sync.Mutex
	events   []timedEvent
	ended    bool // the watch ended before finish
	stopping bool // finish stops it: what comes now is not the API's
	done     chan struct{}
}

type timedEvent struct {
	at  time.Time
	typ watch.EventType
	obj any
}

func startWatchLog(w watch.Interface) *watchLog {
	l := &watchLog{w: w, done: make(chan struct{})}
	go func() {
		defer close(l.done)
		for e := range w.ResultChan() {
			l.mu.Lock()
			if !l.stopping {
				l.events = append(l.events, timedEvent{at: time.Now(), typ: e.Type, obj: e.Object})
			}
			l.mu.Unlock()
		}
		l.mu.Lock()
		l.ended = !l.stopping
		l.mu.Unlock()
	}()
	return l
}

// finish stops the watch and returns what it delivered; it fails the test
// if the watch ended before (what it missed is unknown).
func (l *watchLog) finish(t *testing.T) []timedEvent {
	t.Helper()
	l.mu.Lock()
	ended := l.ended
	l.stopping = true
	l.mu.Unlock()
	if ended {
		t.Errorf("a watch ended early: what it would have shown is unknown")
	}
	l.w.Stop()
	<-l.done
	for _, e := range l.events {
		if e.typ == watch.Error {
			t.Errorf("watch error at %v: %v", e.at.Format(time.TimeOnly), apierrors.FromObject(e.obj.(runtime.Object)))
		}
	}
	return l.events
}

// retryWatch watches from resourceVersion on, across the API server's
// errors (such as a resource version its cache has not reached yet, right
// after it started).
func retryWatch(t *testing.T, resourceVersion string, w cache.WatchFuncWithContext) *watchLog {
	t.Helper()
	rw, err := watchtools.NewRetryWatcherWithContext(clusterContext(t, 10*time.Minute), resourceVersion, &cache.ListWatch{WatchFuncWithContext: w})
	if err != nil {
		t.Fatal(err)
	}
	return startWatchLog(rw)
}

// watchPodChanges watches the pods of ns matching selector from now on; it
// returns them as they are now too.
func watchPodChanges(t *testing.T, c kubernetes.Interface, ns, selector string) (*watchLog, []v1.Pod) {
	t.Helper()
	ctx := clusterContext(t, 10*time.Minute)
	list, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	return retryWatch(t, list.ResourceVersion, func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
		o.LabelSelector = selector
		return c.CoreV1().Pods(ns).Watch(ctx, o)
	}), list.Items
}

// readyLog is the history of a Node's Ready condition.
type readyLog struct {
	first readyChange
	log   *watchLog
}

type readyChange struct {
	at     time.Time
	status v1.ConditionStatus
	reason string
}

// watchNodeReady follows the node's Ready condition from now on.
func watchNodeReady(t *testing.T, c kubernetes.Interface, node string) *readyLog {
	t.Helper()
	ctx := clusterContext(t, 10*time.Minute)
	list, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + node})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 {
		t.Fatalf("node %s: %d found", node, len(list.Items))
	}
	first := nodeReady(&list.Items[0])
	first.at = time.Now()
	return &readyLog{first: first, log: retryWatch(t, list.ResourceVersion, func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
		o.FieldSelector = "metadata.name=" + node
		return c.CoreV1().Nodes().Watch(ctx, o)
	})}
}

func nodeReady(n *v1.Node) readyChange {
	for _, c := range n.Status.Conditions {
		if c.Type == v1.NodeReady {
			return readyChange{status: c.Status, reason: c.Reason}
		}
	}
	return readyChange{status: "absent"}
}

// finish returns the changes of the Node's Ready condition, starting with
// the one it had when the watch began.
func (r *readyLog) finish(t *testing.T) []readyChange {
	t.Helper()
	out := []readyChange{r.first}
	for _, e := range r.log.finish(t) {
		n, ok := e.obj.(*v1.Node)
		if !ok || e.typ != watch.Modified {
			if e.typ != watch.Error { // finish reported it
				t.Errorf("node watch: %s %T", e.typ, e.obj)
			}
			continue
		}
		ch := nodeReady(n)
		ch.at = e.at
		if last := out[len(out)-1]; ch.status != last.status || ch.reason != last.reason {
			out = append(out, ch)
		}
	}
	return out
}

// podReadyHistory shows the pods of initial that were not Ready, and when
// each pod's Ready condition changed in events.
func podReadyHistory(initial []v1.Pod, events []timedEvent, since time.Time) string {
	readiness := func(p *v1.Pod) v1.ConditionStatus {
		for _, c := range p.Status.Conditions {
			if c.Type == v1.PodReady {
				return c.Status
			}
		}
		return "absent"
	}
	last := map[string]v1.ConditionStatus{}
	var parts []string
	for _, p := range initial {
		if last[p.Name] = readiness(&p); last[p.Name] != v1.ConditionTrue {
			parts = append(parts, fmt.Sprintf("%s %s at first", p.Name, last[p.Name]))
		}
	}
	for _, e := range events {
		p, ok := e.obj.(*v1.Pod)
		if !ok {
			continue
		}
		status := readiness(p)
		if prev, seen := last[p.Name]; seen && prev == status || !seen && status == v1.ConditionTrue {
			last[p.Name] = status
			continue
		}
		last[p.Name] = status
		parts = append(parts, fmt.Sprintf("%s %s at %+.1fs", p.Name, status, e.at.Sub(since).Seconds()))
	}
	if len(parts) == 0 {
		return "all Ready throughout"
	}
	return strings.Join(parts, ", ")
}

func readyHistory(changes []readyChange, since time.Time) string {
	var parts []string
	for _, ch := range changes {
		parts = append(parts, fmt.Sprintf("%s (%s) at %+.1fs", ch.status, ch.reason, ch.at.Sub(since).Seconds()))
	}
	return strings.Join(parts, ", then ")
}

// --- the audit log ----------------------------------------------------------

// nodeAuditEvent is what the tests read of an audit event (audit.k8s.io/v1).
type nodeAuditEvent struct {
	AuditID    string `json:"auditID"`
	Stage      string `json:"stage"`
	RequestURI string `json:"requestURI"`
	Verb       string `json:"verb"`
	User       struct {
		Username string `json:"username"`
	} `json:"user"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code    int    `json:"code"`
		Reason  string `json:"reason"`
		Message string `json:"message"`
	} `json:"responseStatus"`
	Annotations map[string]string `json:"annotations"`
	// lagged: see readNodeAudit.
	lagged bool
}

// reason is why the request was refused: the authorizer's reason, or the
// message of the answer (an admission plugin's).
func (e nodeAuditEvent) reason() string {
	var parts []string
	if r := e.Annotations["authorization.k8s.io/reason"]; r != "" {
		parts = append(parts, "authorizer: "+r)
	}
	if e.ResponseStatus != nil && e.ResponseStatus.Message != "" {
		parts = append(parts, e.ResponseStatus.Message)
	}
	if len(parts) == 0 {
		return "(no reason given)"
	}
	return strings.Join(parts, "; ")
}

type nodeAuditKey struct {
	verb, resource string
	code           int
}

// request is what tells two requests for the same thing apart from others:
// verb, path and field selector (a single object's list and watch).
func (e nodeAuditEvent) request() string {
	u, err := url.Parse(e.RequestURI)
	if err != nil {
		return e.Verb + " " + e.RequestURI
	}
	return e.Verb + " " + u.Path + "?" + u.Query().Get("fieldSelector")
}

// lagReason tells the 403s of a control plane that has not seen the
// binding yet: the Node authorizer's graph ("no relationship found"), or
// NodeRestriction's pod cache, which still has the pod unscheduled when a
// token for it is asked for ("bound to a pod scheduled on a different
// node").
func lagReason(e nodeAuditEvent) bool {
	return strings.Contains(e.Annotations["authorization.k8s.io/reason"], "no relationship found") ||
		e.ResponseStatus != nil && strings.Contains(e.ResponseStatus.Message, "node requested token bound to a pod scheduled on a different node")
}

// readNodeAudit reads the audit log (at most 512 MiB, lines of at most 4 MiB)
// for the requests of user, each once (a watch still open has only
// started): their counts by verb, resource and response code, and those
// answered 403. A 403 because the control plane has not seen the binding
// yet (lagReason), for a request allowed later, is in lagged rather than
// denied: the Node authorizer's graph and NodeRestriction's pod cache are
// fed by their own pod informers and may lag the binding the node saw by
// a moment.
func readNodeAudit(t *testing.T, path, user string) (counts map[nodeAuditKey]int, denied, lagged []nodeAuditEvent) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("audit log: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(io.LimitReader(f, 512<<20))
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	requests := map[string]nodeAuditEvent{}
	var order []string
	for sc.Scan() {
		var e nodeAuditEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("audit log %s: %v in %.200q", path, err, sc.Bytes())
		}
		if e.User.Username != user {
			continue
		}
		if _, seen := requests[e.AuditID]; !seen {
			order = append(order, e.AuditID)
		}
		if e.Stage == "ResponseComplete" || requests[e.AuditID].Stage == "" {
			requests[e.AuditID] = e
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("audit log %s: %v", path, err)
	}
	counts = map[nodeAuditKey]int{}
	allowedLater := map[string]bool{}
	for i := len(order) - 1; i >= 0; i-- {
		e := requests[order[i]]
		if e.ResponseStatus != nil && e.ResponseStatus.Code < 400 {
			allowedLater[e.request()] = true
		}
		if e.ResponseStatus != nil && e.ResponseStatus.Code == 403 && allowedLater[e.request()] && lagReason(e) {
			e.lagged = true
			requests[order[i]] = e
		}
	}
	for _, id := range order {
		e := requests[id]
		k := nodeAuditKey{verb: e.Verb, resource: "(" + e.RequestURI + ")"}
		if e.ObjectRef != nil {
			k.resource = e.ObjectRef.Resource
			if e.ObjectRef.Subresource != "" {
				k.resource += "/" + e.ObjectRef.Subresource
			}
		}
		if e.ResponseStatus != nil {
			k.code = e.ResponseStatus.Code
		}
		counts[k]++
		switch {
		case k.code == 403 && e.lagged:
			lagged = append(lagged, e)
		case k.code == 403:
			denied = append(denied, e)
		}
	}
	return counts, denied, lagged
}
