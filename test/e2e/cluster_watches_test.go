//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"
)

// What one node costs the API server with pods of one namespace (issue
// 28): N pods (10, or $NODELET_E2E_WATCH_PODS) that each mount the
// namespace's kube-root-ca.crt through the service-account volume, beside
// a Service with a cluster IP and a headless one. Counted from the API
// server's audit log (the requests of the node's user only) and its
// Events, and asserted:
//
//   - the node watches kube-root-ca.crt once for all N pods (one
//     list-and-watch, one watch open), a watch of that one ConfigMap
//     (fieldSelector metadata.name=kube-root-ca.crt), and that watch ends
//     once the last of the pods is gone;
//   - the node watches Services without the headless ones
//     (fieldSelector spec.clusterIP!=None, the kubelet's since 1.31), and a
//     pod's environment still has the variables of the Service with a
//     cluster IP and the API server's, none of the headless one;
//   - each pod start sends the API the kubelet's events, Pulled, Created and
//     Started, once each and nothing more (nodelet's own steps stay on the
//     node);
//   - the node patches no pod status while nothing changes.
//
// It logs the node's open watches by resource and its requests per pod
// start by kind.
func TestClusterNodeWatches(t *testing.T) {
	cp := startCluster(t)
	cp.logsOnFailure(t)
	const node = "watches-a"
	joinNode(t, cp, node)
	c := cp.Admin
	ctx := clusterContext(t, 10*time.Minute)
	user := "system:node:" + node
	pods := 10
	if v := os.Getenv("NODELET_E2E_WATCH_PODS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 2 || n > 100 {
			t.Fatalf("NODELET_E2E_WATCH_PODS=%q: want 2 to 100", v)
		}
		pods = n
	}
	if _, err := shared.rt.PullImage(ctx, &runtimeapi.ImageSpec{Image: "docker.io/library/busybox:1.35"}, nil, nil); err != nil {
		t.Fatal(err)
	}

	ns := "watches-" + randomHex(t, 3)
	clusterNamespace(t, c, ns)
	t.Cleanup(func() {
		_ = c.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
	})
	eventually(t, time.Minute, "ConfigMap "+ns+"/kube-root-ca.crt", func() error {
		_, err := c.CoreV1().ConfigMaps(ns).Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
		return err
	})
	ports := []v1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: v1.ProtocolTCP}}
	for _, s := range []*v1.Service{
		{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: v1.ServiceSpec{Selector: map[string]string{"app": "web"}, Ports: ports}},
		{ObjectMeta: metav1.ObjectMeta{Name: "peers"}, Spec: v1.ServiceSpec{ClusterIP: v1.ClusterIPNone, Selector: map[string]string{"app": "web"}, Ports: ports}},
	} {
		if _, err := c.CoreV1().Services(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	web, err := c.CoreV1().Services(ns).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// N pods at once; the first prints its environment.
	t0 := time.Now()
	for i := range pods {
		script := "true"
		if i == 0 {
			script = "env | sort"
		}
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("w-%d", i), Labels: map[string]string{"app": "watches"}},
			Spec: v1.PodSpec{NodeSelector: map[string]string{v1.LabelHostname: node}, DNSPolicy: v1.DNSDefault,
				TerminationGracePeriodSeconds: ptr.To[int64](2), Containers: []v1.Container{shellContainer("main", script)}}}
		if _, err := c.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitPodsReady(t, c, ns, "app=watches", pods, 5*time.Minute)
	t1 := time.Now()
	t.Logf("%d pods Ready in %v", pods, t1.Sub(t0).Round(100*time.Millisecond))

	// The watches.
	watches, err := nodeWatches(cp.AuditLog, user)
	if err != nil {
		t.Fatal(err)
	}
	logOpenWatches(t, watches)
	var rootCA, services []nodeWatch
	for _, w := range watches {
		switch {
		case w.resource == "configmaps" && w.namespace == ns:
			rootCA = append(rootCA, w)
			if w.fieldSelector != "metadata.name=kube-root-ca.crt" {
				t.Errorf("a watch of ConfigMaps of %s with field selector %q, want metadata.name=kube-root-ca.crt", ns, w.fieldSelector)
			}
		case w.resource == "services" && w.open:
			services = append(services, w)
		}
	}
	// One list-and-watch of the ConfigMap for all the pods: client-go's
	// reflector first asks for a watch list (sendInitialEvents=true), and
	// falls back to a list and a plain watch when the API server cannot
	// serve one (here: an etcd without watch progress requests). Either way
	// one watch stays open.
	open, lists, plain := 0, 0, 0
	for _, w := range rootCA {
		if w.open {
			open++
		}
		if w.watchList {
			lists++
		} else {
			plain++
		}
	}
	if open != 1 || lists > 1 || plain > 1 {
		t.Errorf("%d pods made %d watches of ConfigMaps of %s (%d open, %d watch lists, %d plain: %+v), want one list-and-watch, open", pods, len(rootCA), ns, open, lists, plain, rootCA)
	}
	if len(services) != 1 || services[0].namespace != "" || services[0].fieldSelector != "spec.clusterIP!=None" {
		t.Errorf("open watches of Services %+v, want one of every namespace with field selector spec.clusterIP!=None", services)
	}

	// The environment: the Service with a cluster IP and the API server's,
	// not the headless one.
	logs, err := c.CoreV1().Pods(ns).GetLogs("w-0", &v1.PodLogOptions{Container: "main"}).DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	env := string(logs)
	for _, want := range []string{"WEB_SERVICE_HOST=" + web.Spec.ClusterIP + "\n", "WEB_SERVICE_PORT=80\n", "WEB_PORT=tcp://" + web.Spec.ClusterIP + ":80\n", "KUBERNETES_SERVICE_HOST="} {
		if !strings.Contains(env, want) {
			t.Errorf("the environment lacks %q:\n%s", want, env)
		}
	}
	if strings.Contains(env, "PEERS_") {
		t.Errorf("the headless Service made variables:\n%s", env)
	}

	// The events each pod start sent: the kubelet's, once each.
	evs, err := c.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	perPod := map[string]map[string]int32{}
	byReason := map[string]int32{}
	for _, e := range evs.Items {
		if e.Source.Component != "kubelet" || e.InvolvedObject.Kind != "Pod" {
			continue
		}
		if e.Source.Host != node {
			t.Errorf("event %s %s from host %q", e.Reason, e.InvolvedObject.Name, e.Source.Host)
		}
		if perPod[e.InvolvedObject.Name] == nil {
			perPod[e.InvolvedObject.Name] = map[string]int32{}
		}
		perPod[e.InvolvedObject.Name][e.Reason] += e.Count
		byReason[e.Reason] += e.Count
	}
	t.Logf("events from the node for %d pod starts: %v (%.2f per pod)", pods, byReason, float64(sum(byReason))/float64(pods))
	for i := range pods {
		name := fmt.Sprintf("w-%d", i)
		if got, want := perPod[name], map[string]int32{"Pulled": 1, "Created": 1, "Started": 1}; !maps.Equal(got, want) {
			t.Errorf("pod %s: events %v, want the kubelet's %v", name, got, want)
		}
	}

	// The requests of the start, by kind, per pod.
	counts, err := countNodeRequests(cp.AuditLog, user, []window{{t0, t1}})
	if err != nil {
		t.Fatal(err)
	}
	logRequestKinds(t, fmt.Sprintf("requests of %s while %d pods started (%v), per pod", user, pods, t1.Sub(t0).Round(100*time.Millisecond)), counts[0], pods)

	// No status patch while nothing changes: a quiet spell once the pods
	// are Ready (a pod's status settles at its first sync after Ready).
	// Short, to keep make test short: statussync's unit tests hold the
	// rule itself (TestPatchesOnlyChanges).
	time.Sleep(5 * time.Second)
	q0 := time.Now()
	time.Sleep(10 * time.Second)
	q1 := time.Now()
	counts, err = countNodeRequests(cp.AuditLog, user, []window{{q0, q1}})
	if err != nil {
		t.Fatal(err)
	}
	logRequestKinds(t, fmt.Sprintf("requests of %s over %v with %d pods Ready and nothing changing", user, q1.Sub(q0).Round(time.Second), pods), counts[0], 1)
	if n := counts[0].byKind["patch pods/status"]; n != 0 {
		t.Errorf("%d pod status patches while nothing changed", n)
	}

	// The watch of kube-root-ca.crt ends with the last pod.
	if err := c.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "app=watches"}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, "the pods gone from the API", func() error {
		list, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		if len(list.Items) != 0 {
			return fmt.Errorf("%d pods left", len(list.Items))
		}
		return nil
	})
	eventually(t, time.Minute, "the watch of kube-root-ca.crt to end", func() error {
		watches, err := nodeWatches(cp.AuditLog, user)
		if err != nil {
			return err
		}
		for _, w := range watches {
			if w.resource == "configmaps" && w.namespace == ns && w.open {
				return fmt.Errorf("still open: %+v", w)
			}
		}
		return nil
	})
}

// nodeWatch is one WATCH request of a node, from the audit log.
type nodeWatch struct {
	resource, namespace, fieldSelector string
	watchList                          bool // sendInitialEvents=true: a list as a watch
	open                               bool // started, not yet complete
	code                               int  // the response's status code
	uri                                string
}

// nodeWatches reads the WATCH requests of user from the audit log (every
// request of a node has an event at ResponseStarted and one at
// ResponseComplete), in the order they started.
func nodeWatches(path, user string) ([]nodeWatch, error) {
	byID := map[string]int{}
	var out []nodeWatch
	var bad error
	err := scanAudit(path, user, []byte(`"verb":"watch"`), func(e *auditEvent) {
		if bad != nil || e.Verb != "watch" || e.ObjectRef == nil {
			return
		}
		i, seen := byID[e.AuditID]
		if !seen {
			u, err := url.ParseRequestURI(e.RequestURI)
			if err != nil {
				bad = fmt.Errorf("audit log %s: %w", path, err)
				return
			}
			res := e.ObjectRef.Resource
			if e.ObjectRef.APIGroup != "" {
				res += "." + e.ObjectRef.APIGroup
			}
			q := u.Query()
			out = append(out, nodeWatch{resource: res, namespace: e.ObjectRef.Namespace, fieldSelector: q.Get("fieldSelector"),
				watchList: q.Get("sendInitialEvents") == "true", open: true, uri: e.RequestURI})
			i = len(out) - 1
			byID[e.AuditID] = i
		}
		if e.ResponseStatus != nil {
			out[i].code = e.ResponseStatus.Code
		}
		if e.Stage == "ResponseComplete" || e.Stage == "Panic" {
			out[i].open = false
		}
	})
	if err = errors.Join(err, bad); err != nil {
		return nil, err
	}
	return out, nil
}

// logOpenWatches logs the open watches by resource, namespace and field
// selector.
func logOpenWatches(t *testing.T, watches []nodeWatch) {
	t.Helper()
	open := map[string]int{}
	total := 0
	for _, w := range watches {
		if w.open {
			open[fmt.Sprintf("%s ns=%q fieldSelector=%q", w.resource, w.namespace, w.fieldSelector)]++
			total++
		}
	}
	keys := make([]string, 0, len(open))
	for k := range open {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "\n  %d  %s", open[k], k)
	}
	t.Logf("the node's open watches: %d (%d started in all)%s", total, len(watches), b.String())
	for _, w := range watches {
		if !w.open {
			t.Logf("ended: code %d %s", w.code, w.uri)
		}
	}
}

// logRequestKinds logs a window's requests by kind, divided by per.
func logRequestKinds(t *testing.T, title string, c requestCount, per int) {
	t.Helper()
	keys := make([]string, 0, len(c.byKind))
	for k := range c.byKind {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "\n  %6.2f  %s (%d)", float64(c.byKind[k])/float64(per), k, c.byKind[k])
	}
	t.Logf("%s: %.2f in all%s", title, float64(c.total)/float64(per), b.String())
}

func sum(m map[string]int32) int32 {
	var n int32
	for _, v := range m {
		n += v
	}
	return n
}
