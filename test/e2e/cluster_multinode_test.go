//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodelet/nodelet/internal/managed/containerd"
	"github.com/nodelet/nodelet/internal/pipeline/cri"
)

// A cluster of several nodes on this machine, as `make cluster-run NODES=n`
// brings one up: hack/cluster.sh with NODES and CLUSTER_ADDONS=1 in a
// temporary CLUSTER_DIR, on free ports, each node a nodelet with its own
// managed containerd, registry, bridge and pod CIDR, kube-proxy on each
// and CoreDNS. Its bridges, pod CIDRs and the API relay's namespace are
// the tests' own (multiNode* below), not those of a `make cluster-run`
// cluster; but all kube-proxies of the machine share the host's iptables
// chains, and down's kube-proxy --cleanup removes them all, so the test
// refuses to run beside a cluster with add-ons.
const (
	multiNodeBridgePrefix = "nlmne2e"
	multiNodeCIDR         = "10.248.0.0/16"
	multiNodeRelayNetns   = "nodelet-e2e-api"
	multiNodeRelayLink    = "nle2eapi0"
	multiNodeRelayNet     = "10.243.254"
	multiNodeName         = "nle2e-mn"
	// What a `make cluster-run` cluster's relay namespace is called.
	userRelayNetns = "nodelet-cluster-api"
)

// multiNode is a running cluster of several nodes.
type multiNode struct {
	*controlPlane
	Nodes []string // node names, node 1 first
	Roots []string // their root dirs: RootsDir/<node name>
	// RootsDir holds the nodes' root dirs, each named as its node, so a
	// hostPath DaemonSet finds a node's own with subPathExpr $(NODE_NAME).
	RootsDir string
}

// startMultiNode brings up a control plane and n nodes with the add-ons,
// and takes them down (every pod first) when the test ends. env is more
// of hack/cluster.sh's environment (such as
// CLUSTER_NODE_MONITOR_GRACE_PERIOD); it comes last and so wins.
func startMultiNode(t testing.TB, n int, env ...string) *multiNode {
	t.Helper()
	if _, err := os.Stat(filepath.Join("/run/netns", userRelayNetns)); err == nil {
		t.Fatalf("a cluster with add-ons runs on this machine (/run/netns/%s): its kube-proxies and this test's would "+
			"share the host's iptables chains; make cluster-down first", userRelayNetns)
	}
	// Node i's root dir is NODELET_ROOT_DIR-i and its name
	// NODELET_NODE_NAME-i: <roots>/<node name>.
	dir, roots := filepath.Join(shared.work, "multinode"), filepath.Join(shared.work, "mn-nodes")
	root := filepath.Join(roots, multiNodeName)
	start := time.Now()
	cp, err := scriptUp(dir, append([]string{
		"NODES=" + strconv.Itoa(n),
		"CLUSTER_ADDONS=1",
		"CLUSTER_NODE_PORTS=" + strconv.Itoa(freeNodePortBlock(t, n)),
		"CLUSTER_CIDR=" + multiNodeCIDR,
		"CLUSTER_BRIDGE_PREFIX=" + multiNodeBridgePrefix,
		"CLUSTER_RELAY_NETNS=" + multiNodeRelayNetns,
		"CLUSTER_RELAY_LINK=" + multiNodeRelayLink,
		"CLUSTER_RELAY_NET=" + multiNodeRelayNet,
		"NODELET_BIN=" + shared.nodelet,
		"NODELET_ROOT_DIR=" + root,
		"NODELET_NODE_NAME=" + multiNodeName,
		"NODELET_POD_LOGS_DIR=" + filepath.Join(shared.work, "mn-pod-logs"),
	}, env...)...)
	if err != nil {
		t.Fatalf("%d nodes: %v", n, err)
	}
	t.Logf("control plane, %d nodes, kube-proxy and CoreDNS up in %v", n, time.Since(start).Round(100*time.Millisecond))
	m := &multiNode{controlPlane: cp, RootsDir: roots}
	for i := 1; i <= n; i++ {
		name, r := multiNodeName, root
		if i > 1 {
			name += "-" + strconv.Itoa(i)
			r += "-" + strconv.Itoa(i)
		}
		m.Nodes, m.Roots = append(m.Nodes, name), append(m.Roots, r)
		// hack/cluster.sh gives each node --cgroup-root /<node name>.
		claimCgroupTops(name)
	}
	t.Cleanup(func() { m.down(t) })
	m.logsOnFailure(t)
	return m
}

// down deletes every pod through the API (graceful: the nodes stop them
// and confirm), removes what is left in each node's runtime (the
// sandboxes, whose shims would outlive the nodes), then stops the cluster
// and removes its state and the nodes' bridges.
func (m *multiNode) down(t testing.TB) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	one := int64(1)
	namespaces, err := m.Admin.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err == nil {
		for _, ns := range namespaces.Items {
			_ = m.Admin.AppsV1().Deployments(ns.Name).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
			_ = m.Admin.AppsV1().DaemonSets(ns.Name).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
			_ = m.Admin.CoreV1().Pods(ns.Name).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &one}, metav1.ListOptions{})
		}
		for ctx.Err() == nil {
			pods, err := m.Admin.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
			if err == nil && len(pods.Items) == 0 {
				break
			}
			time.Sleep(time.Second)
		}
	}
	log := slog.New(slog.DiscardHandler)
	for _, root := range m.Roots {
		rt, err := cri.Dial(ctx, containerd.DefaultConfig(root).Endpoint(), cri.DefaultTimeouts(), log)
		if err != nil {
			t.Logf("node runtime under %s: %v", root, err)
			continue
		}
		removeAllPods(rt)
		rt.Close()
	}
	if out, err := m.script("down", "--purge"); err != nil {
		t.Errorf("hack/cluster.sh down: %v\n%s", err, out)
	}
	for i := range m.Nodes {
		exec.Command("ip", "link", "del", multiNodeBridgePrefix+strconv.Itoa(i)).Run()
	}
}

// logsOnFailure shows the end of the nodes' and kube-proxies' logs when
// the test fails (the control plane's, too).
func (m *multiNode) logsOnFailure(t testing.TB) {
	m.controlPlane.logsOnFailure(t)
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for i := range m.Nodes {
			suffix := ""
			if i > 0 {
				suffix = "-" + strconv.Itoa(i+1)
			}
			for _, name := range []string{"nodelet" + suffix, "kube-proxy" + suffix} {
				b, err := os.ReadFile(filepath.Join(m.Dir, "logs", name+".log"))
				if err != nil {
					t.Logf("%s log: %v", name, err)
					continue
				}
				lines := strings.Split(strings.TrimSpace(string(b)), "\n")
				t.Logf("the end of %s's log:\n%s", name, strings.Join(lines[max(0, len(lines)-20):], "\n"))
			}
		}
	})
}

// freeNodePortBlock finds a base B for hack/cluster.sh's node ports
// (B+100*(i-1) + 247..256 for node i) where all of them are free. The
// ports lie below the kernel's ephemeral range (32768 and up), from which
// the tests' own connections take local ports: a port found free there
// could be some connection's by the time kube-proxy binds it. Above
// cluster.sh's default block (20000) and below the NodePort range (30000).
func freeNodePortBlock(t testing.TB, n int) int {
	t.Helper()
	for range 50 {
		base := 21000 + 100*rand.IntN(88-n)
		if nodePortsFree(base, n) {
			return base
		}
	}
	t.Fatal("no free block of node ports")
	return 0
}

func nodePortsFree(base, n int) bool {
	for i := range n {
		for _, off := range []int{247, 248, 249, 250, 255, 256} {
			l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(base+100*i+off)))
			if err != nil {
				return false
			}
			l.Close()
		}
	}
	return true
}

// TestMultiNode runs the tests of a three-node cluster (node-monitor grace
// period 30 s) on one cluster, one after the other, each in a namespace
// of its own that is emptied when it ends: bringing up a cluster with its
// add-ons takes half a minute. A part that fails may leave the cluster in
// any state, so the parts after it are skipped.
func TestMultiNode(t *testing.T) {
	m := startMultiNode(t, 3, "CLUSTER_NODE_MONITOR_GRACE_PERIOD=30s")
	for _, part := range []struct {
		name string
		run  func(*testing.T, *multiNode)
	}{
		{"Drain", multiNodeDrain},
		{"NodeLost", multiNodeNodeLost},
		{"Network", multiNodeNetwork},
	} {
		if !t.Run(part.name, func(t *testing.T) { part.run(t, m) }) {
			t.Logf("%s failed: the parts after it are skipped", part.name)
			return
		}
	}
}

// Three nodes: a Deployment of three replicas spreads one per node
// (topologySpreadConstraints on kubernetes.io/hostname, DoNotSchedule);
// from the pod on one node, each other pod answers by its pod IP (across
// the nodes' bridges), and every pod answers through the ClusterIP Service
// (kube-proxy's rules) and through the address CoreDNS gives the Service's
// name. busybox's own resolver (nslookup) asks the cluster DNS: Debian's
// static busybox cannot resolve names through glibc (no NSS in the image),
// so the name is resolved first and then dialled.
func multiNodeNetwork(t *testing.T, m *multiNode) {
	ctx := clusterContext(t, 3*time.Minute)
	ns := "spread"
	multiNodeNamespace(t, m, ns)
	labels := map[string]string{"app": "spread"}
	replicas, grace := int32(3), int64(1)
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "spread", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: v1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: v1.PodSpec{
					TerminationGracePeriodSeconds: &grace,
					TopologySpreadConstraints: []v1.TopologySpreadConstraint{{
						MaxSkew: 1, TopologyKey: v1.LabelHostname, WhenUnsatisfiable: v1.DoNotSchedule,
						LabelSelector: &metav1.LabelSelector{MatchLabels: labels},
					}},
					Containers: []v1.Container{{
						Name: "web", Image: "busybox:1.35", ImagePullPolicy: v1.PullIfNotPresent,
						// Answers with the pod's name (its hostname).
						Command: []string{"sh", "-c", "mkdir -p /www && hostname > /www/index.html && exec httpd -f -p 8080 -h /www"},
						Ports:   []v1.ContainerPort{{ContainerPort: 8080}},
						ReadinessProbe: &v1.Probe{
							ProbeHandler:  v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: intstr.FromInt32(8080)}},
							PeriodSeconds: 1,
						},
					}},
				},
			},
		},
	}
	if _, err := m.Admin.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc, err := m.Admin.CoreV1().Services(ns).Create(ctx, &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "spread", Namespace: ns},
		Spec:       v1.ServiceSpec{Selector: labels, Ports: []v1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pods := waitPodsReady(t, m.Admin, ns, "app=spread", 3, 2*time.Minute)

	// One per node.
	var onNodes []string
	for _, p := range pods {
		onNodes = append(onNodes, p.Spec.NodeName)
	}
	slices.Sort(onNodes)
	if want := slices.Sorted(slices.Values(m.Nodes)); !slices.Equal(onNodes, want) {
		t.Fatalf("pods on nodes %v, want one on each of %v", onNodes, want)
	}
	client, others := pods[0], pods[1:]
	t.Logf("client %s on %s (%s)", client.Name, client.Spec.NodeName, client.Status.PodIP)
	run := func(script string) (string, error) {
		return kubectl(t, m.controlPlane, 30*time.Second, "-n", ns, "exec", client.Name, "--", "sh", "-c", script)
	}

	// By pod IP, across the nodes' bridges.
	for _, p := range others {
		out, err := run(httpGetScript(p.Status.PodIP, "8080"))
		if err != nil || strings.TrimSpace(out) != p.Name {
			t.Errorf("%s (%s, on %s) by pod IP: %q, %v; want its name", p.Name, p.Status.PodIP, p.Spec.NodeName, out, err)
		}
	}

	// Through the ClusterIP Service, and through the address the cluster
	// DNS gives its name: every pod answers, each node's among them.
	fqdn := "spread." + ns + ".svc.cluster.local"
	var resolved string
	eventually(t, time.Minute, fqdn+" resolved by the cluster DNS", func() error {
		out, err := run("nslookup " + fqdn)
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		if resolved = nslookupAddress(out, fqdn); resolved == "" {
			return errors.New(out)
		}
		return nil
	})
	if resolved != svc.Spec.ClusterIP {
		t.Errorf("%s resolved to %s, want the Service's ClusterIP %s", fqdn, resolved, svc.Spec.ClusterIP)
	}
	for _, target := range []struct{ what, addr string }{{"ClusterIP", svc.Spec.ClusterIP}, {"DNS name", resolved}} {
		seen := map[string]bool{}
		eventually(t, time.Minute, "every pod answering through the "+target.what+" "+target.addr, func() error {
			out, _ := run("for i in $(seq 1 30); do " + httpGetScript(target.addr, "80") + "; done")
			for _, line := range strings.Fields(out) {
				seen[line] = true
			}
			for _, p := range pods {
				if !seen[p.Name] {
					return fmt.Errorf("answers so far from %v, none from %s", seen, p.Name)
				}
			}
			return nil
		})
	}
}

// httpGetScript is a shell command that prints the body's last line of
// an HTTP GET of / at ip:port. busybox's nc, not its wget: Debian's static
// busybox wget looks the service up through glibc's NSS, which the image
// does not have, and crashes.
func httpGetScript(ip, port string) string {
	return fmt.Sprintf(`printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 3 %s %s | tail -n 1`, ip, port)
}

// nslookupAddress is the first address busybox's nslookup gives for name.
func nslookupAddress(out, name string) string {
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		if strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), "Name:")) != name || !strings.HasPrefix(strings.TrimSpace(l), "Name:") {
			continue
		}
		for _, next := range lines[i+1:] {
			if a, ok := strings.CutPrefix(strings.TrimSpace(next), "Address:"); ok {
				return strings.TrimSpace(a)
			}
		}
	}
	return ""
}
