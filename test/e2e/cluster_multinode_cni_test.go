//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodelet/nodelet/internal/managed/containerd"
	"github.com/nodelet/nodelet/internal/pipeline/cri"
)

// The CNI network a DaemonSet installs on every node, as flannel's
// install-cni does: dsNetwork, on bridge dsBridgePrefix<i> on node i, in
// the file dsConfName of the node's CNI configuration directory.
// containerd (go-cni, max_conf_num 1) uses the lexically first network
// file of the directory: "05-…" comes before nodelet's "10-nodelet.conflist".
const (
	dsNetwork      = "e2e-ds"
	dsConfName     = "05-e2e-ds.conflist"
	dsBridgePrefix = "nlmncni"
	dsName         = "e2e-ds-cni"
	dsNamespace    = "kube-system"
)

// Three nodes, each on nodelet's bridge network on its Node's pod CIDR,
// each running a pod. Then a hostPath DaemonSet writes a plain bridge +
// host-local network into every node's CNI configuration directory:
// containerd switches to it, pods created afterwards are on its bridge
// with addresses from its range, the earlier pods keep running untouched
// on nodelet's bridge, every pod reaches every other across the nodes by
// pod IP, the Nodes stay Ready, and nodelet neither rewrites nor removes
// the DaemonSet's file nor its own. At the end the network is uninstalled
// (the DaemonSet deleted, its file removed): the new pods' addresses were
// released to the DaemonSet's store and their veths taken off its bridge,
// containerd is back on nodelet's network, which tears the earlier pods
// down without leftovers; the DaemonSet's bridges are deleted.
//
// The DaemonSet finds a node's directory as a CNI DaemonSet finds
// /etc/cni/net.d, except that on this one machine each node has its own:
// the nodes' root dirs are <RootsDir>/<node name>, so one hostPath of
// RootsDir with subPathExpr $(NODE_NAME)/cni/net.d (spec.nodeName from
// the downward API) mounts each node's own directory, and only it. The
// per-node part of the network (bridge, subnet, IPAM store) comes from a
// ConfigMap the test writes, one key per node, standing in for what
// flannel's daemon reads from the Node: its subnet is the upper half of
// the Node's spec.podCIDR, so that it never hands out an address
// nodelet's host-local store gave a pod already running (two stores on one
// range would), and its bridge's route (a /25) is more specific than
// nodelet's bridge's (the /24) on this shared host.
func TestMultiNodeDaemonSetCNI(t *testing.T) {
	const n = 3
	ipamDir := filepath.Join(shared.work, "mn-ds-ipam")
	var oldIPs []string
	// Registered before the cluster's own cleanup, so run after it.
	t.Cleanup(func() { dsCNITeardown(t, n, ipamDir, oldIPs) })
	m := startMultiNode(t, n)
	// Whatever happens, the network is uninstalled before the cluster's
	// teardown, so that nodelet's network tears down its own pods.
	t.Cleanup(func() { uninstallDSCNI(m) })
	ctx := clusterContext(t, 5*time.Minute)
	for i, root := range m.Roots {
		if root != filepath.Join(m.RootsDir, m.Nodes[i]) {
			t.Fatalf("node %s's root dir is %s, not %s/<node name>", m.Nodes[i], root, m.RootsDir)
		}
	}
	runtimes := make([]*cri.Client, n)
	for i, root := range m.Roots {
		rt, err := cri.Dial(ctx, containerd.DefaultConfig(root).Endpoint(), cri.DefaultTimeouts(), slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatalf("node %s's runtime: %v", m.Nodes[i], err)
		}
		t.Cleanup(func() { rt.Close() })
		runtimes[i] = rt
		if got := loadedNetwork(ctx, rt); got != "nodelet" {
			t.Fatalf("node %s's containerd uses network %q before the DaemonSet, want nodelet's", m.Nodes[i], got)
		}
	}
	subnets := make([]netip.Prefix, n)
	for i, name := range m.Nodes {
		node, err := m.Admin.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cidr, err := netip.ParsePrefix(node.Spec.PodCIDR)
		if err != nil || !cidr.Addr().Is4() || cidr.Bits() >= 31 {
			t.Fatalf("Node %s's pod CIDR %q: %v", name, node.Spec.PodCIDR, err)
		}
		subnets[i] = upperHalf(cidr)
	}
	ns := "cni-ds"
	if _, err := m.Admin.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "service account "+ns+"/default", func() error {
		_, err := m.Admin.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err
	})

	// Before the DaemonSet: a pod on each node, on nodelet's network.
	for i, node := range m.Nodes {
		if _, err := m.Admin.CoreV1().Pods(ns).Create(ctx, webPodOn(fmt.Sprintf("old-%d", i), node, "old"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	olds := byNode(t, m, waitPodsReady(t, m.Admin, ns, "gen=old", n, 2*time.Minute))
	for _, p := range olds {
		oldIPs = append(oldIPs, p.Status.PodIP)
	}
	// nodelet's network masquerades for them: rules that name their IPs,
	// which their teardown must remove (dsCNITeardown).
	if rules := natRulesNaming(oldIPs); len(rules) < len(oldIPs) {
		t.Errorf("masquerading rules naming the old pods' IPs %v: %q; without them the check after teardown proves nothing", oldIPs, rules)
	}
	nodeletConfs := make([][]byte, n)
	for i, root := range m.Roots {
		b, err := os.ReadFile(filepath.Join(root, "cni", "net.d", containerd.BridgeConfName))
		if err != nil {
			t.Fatalf("node %s: nodelet's network: %v", m.Nodes[i], err)
		}
		nodeletConfs[i] = b
	}

	// The DaemonSet and its per-node networks.
	confs := map[string]string{}
	for i, node := range m.Nodes {
		confs[node] = string(dsConflist(dsBridgePrefix+strconv.Itoa(i), subnets[i], filepath.Join(ipamDir, node)))
	}
	if _, err := m.Admin.CoreV1().ConfigMaps(dsNamespace).Create(ctx, &v1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: dsName, Namespace: dsNamespace}, Data: confs,
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Admin.AppsV1().DaemonSets(dsNamespace).Create(ctx, cniDaemonSet(m.RootsDir), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	byNode(t, m, waitPodsReady(t, m.Admin, dsNamespace, "app="+dsName, n, 2*time.Minute))
	written := make([]os.FileInfo, n)
	for i, root := range m.Roots {
		path := filepath.Join(root, "cni", "net.d", dsConfName)
		b, err := os.ReadFile(path)
		if err != nil || string(b) != confs[m.Nodes[i]] {
			t.Fatalf("node %s: the DaemonSet's network %s: %v\n%s", m.Nodes[i], path, err, b)
		}
		if written[i], err = os.Stat(path); err != nil {
			t.Fatal(err)
		}
		eventually(t, time.Minute, "node "+m.Nodes[i]+"'s containerd using the DaemonSet's network", func() error {
			if got := loadedNetwork(ctx, runtimes[i]); got != dsNetwork {
				return errorf("network %q", got)
			}
			return nil
		})
	}

	// After it: a pod on each node, on the DaemonSet's network.
	for i, node := range m.Nodes {
		if _, err := m.Admin.CoreV1().Pods(ns).Create(ctx, webPodOn(fmt.Sprintf("new-%d", i), node, "new"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	news := byNode(t, m, waitPodsReady(t, m.Admin, ns, "gen=new", n, 2*time.Minute))
	for i := range m.Nodes {
		p := news[i]
		if ip := netip.MustParseAddr(p.Status.PodIP); !subnets[i].Contains(ip) {
			t.Errorf("new pod %s on %s has IP %s, not from the DaemonSet's %s", p.Name, p.Spec.NodeName, ip, subnets[i])
		}
		if got, want := podBridge(t, m, ns, p.Name), dsBridgePrefix+strconv.Itoa(i); got != want {
			t.Errorf("new pod %s on %s: its veth is on %q, want the DaemonSet's bridge %s", p.Name, p.Spec.NodeName, got, want)
		}
		o := olds[i]
		if ip := netip.MustParseAddr(o.Status.PodIP); subnets[i].Contains(ip) {
			t.Errorf("old pod %s's IP %s is in the DaemonSet's %s: the test's ranges overlap", o.Name, ip, subnets[i])
		}
		if got, want := podBridge(t, m, ns, o.Name), multiNodeBridgePrefix+strconv.Itoa(i); got != want {
			t.Errorf("old pod %s on %s: its veth is on %q, want nodelet's bridge %s", o.Name, o.Spec.NodeName, got, want)
		}
	}

	// Across the nodes, every pod answers by pod IP, old and new: asked
	// from node 1's old pod and from its new one. Not between the two on
	// one node: the old pod's address is in the node's whole /24, so it
	// takes the new one's for a neighbour on its own bridge and asks ARP
	// there (so it is on any node whose pods on a network are switched to
	// another on the same CIDR).
	all := append(append([]v1.Pod{}, olds...), news...)
	for _, client := range []v1.Pod{olds[0], news[0]} {
		var script strings.Builder
		want := map[string]string{}
		for _, p := range all {
			if p.Spec.NodeName == client.Spec.NodeName {
				continue
			}
			want[p.Status.PodIP] = p.Name
			fmt.Fprintf(&script, "echo \"%s $(%s)\"; ", p.Status.PodIP, httpGetScript(p.Status.PodIP, "8080"))
		}
		out, err := kubectl(t, m.controlPlane, time.Minute, "-n", ns, "exec", client.Name, "--", "sh", "-c", script.String())
		if err != nil {
			t.Errorf("from %s: %v\n%s", client.Name, err, out)
			continue
		}
		got := map[string]string{}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if ip, name, ok := strings.Cut(strings.TrimSpace(line), " "); ok {
				got[ip] = strings.TrimSpace(name)
			}
		}
		for ip, name := range want {
			if got[ip] != name {
				t.Errorf("from %s (%s) to %s (%s): answered %q, want its name", client.Name, client.Status.PodIP, name, ip, got[ip])
			}
		}
	}

	// The earlier pods were left alone; the Nodes stayed Ready.
	for _, o := range olds {
		p, err := m.Admin.CoreV1().Pods(ns).Get(ctx, o.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.UID != o.UID || p.Status.PodIP != o.Status.PodIP || !podReady(p) || len(p.Status.ContainerStatuses) != 1 ||
			p.Status.ContainerStatuses[0].RestartCount != 0 || p.Status.ContainerStatuses[0].ContainerID != o.Status.ContainerStatuses[0].ContainerID {
			t.Errorf("old pod %s changed: uid %s→%s, IP %s→%s, ready %v, containers %+v", o.Name, o.UID, p.UID, o.Status.PodIP, p.Status.PodIP,
				podReady(p), p.Status.ContainerStatuses)
		}
	}
	for _, name := range m.Nodes {
		waitNodeReady(t, m.Admin, name, 10*time.Second)
	}

	// Uninstall. The new pods first, on the DaemonSet's network: their
	// addresses go back to its store, their veths off its bridge.
	one := int64(1)
	if err := m.Admin.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &one},
		metav1.ListOptions{LabelSelector: "gen=new"}); err != nil {
		t.Fatal(err)
	}
	waitNoPods(t, m, ns, "gen=new")
	for i := range m.Nodes {
		bridge := dsBridgePrefix + strconv.Itoa(i)
		eventually(t, time.Minute, "the DaemonSet's network on "+m.Nodes[i]+" without the deleted pods", func() error {
			if leases := ipamLeases(filepath.Join(ipamDir, m.Nodes[i], dsNetwork)); len(leases) != 0 {
				return errorf("addresses still leased: %v", leases)
			}
			if ports, err := os.ReadDir(filepath.Join("/sys/class/net", bridge, "brif")); err != nil || len(ports) != 0 {
				return errorf("bridge %s's ports: %v, %v", bridge, ports, err)
			}
			return nil
		})
	}
	// Then the DaemonSet and its file, which nodelet never touched; and
	// nodelet's own network, which it did not rewrite beside it.
	if err := m.Admin.AppsV1().DaemonSets(dsNamespace).Delete(ctx, dsName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitNoPods(t, m, dsNamespace, "app="+dsName)
	for i, root := range m.Roots {
		dir := filepath.Join(root, "cni", "net.d")
		path := filepath.Join(dir, dsConfName)
		b, err := os.ReadFile(path)
		fi, serr := os.Stat(path)
		if err != nil || serr != nil || string(b) != confs[m.Nodes[i]] || !sameFile(fi, written[i]) {
			t.Errorf("node %s: the DaemonSet's network changed since it wrote it: %v, %v\n%s", m.Nodes[i], err, serr, b)
		}
		if b, err := os.ReadFile(filepath.Join(dir, containerd.BridgeConfName)); err != nil || !bytes.Equal(b, nodeletConfs[i]) {
			t.Errorf("node %s: nodelet's network changed beside the DaemonSet's: %v\n%s", m.Nodes[i], err, b)
		}
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		eventually(t, time.Minute, "node "+m.Nodes[i]+"'s containerd back on nodelet's network", func() error {
			if got := loadedNetwork(ctx, runtimes[i]); got != "nodelet" {
				return errorf("network %q", got)
			}
			return nil
		})
	}
	// The old pods are torn down by the cluster's cleanup, on nodelet's
	// network again: dsCNITeardown looks for what they would leave.
}

// uninstallDSCNI deletes the DaemonSet and removes its network from every
// node's CNI configuration directory, and waits (a while) for each node's
// containerd to load nodelet's again.
func uninstallDSCNI(m *multiNode) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_ = m.Admin.AppsV1().DaemonSets(dsNamespace).Delete(ctx, dsName, metav1.DeleteOptions{})
	for ctx.Err() == nil {
		list, err := m.Admin.CoreV1().Pods(dsNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app=" + dsName})
		if err == nil && len(list.Items) == 0 {
			break
		}
		time.Sleep(time.Second)
	}
	for _, root := range m.Roots {
		if err := os.Remove(filepath.Join(root, "cni", "net.d", dsConfName)); err != nil {
			continue
		}
		rt, err := cri.Dial(ctx, containerd.DefaultConfig(root).Endpoint(), cri.DefaultTimeouts(), slog.New(slog.DiscardHandler))
		if err != nil {
			continue
		}
		for ctx.Err() == nil && loadedNetwork(ctx, rt) != "nodelet" {
			time.Sleep(100 * time.Millisecond)
		}
		rt.Close()
	}
}

// dsCNITeardown runs after the cluster is down: nodelet's network
// removed what it set up for the old pods (their masquerading rules),
// and the DaemonSet's bridges are deleted, as its uninstall would.
func dsCNITeardown(t *testing.T, n int, ipamDir string, oldIPs []string) {
	if rules := natRulesNaming(oldIPs); len(rules) != 0 {
		t.Errorf("rules left naming the old pods' IPs after teardown:\n%s", strings.Join(rules, "\n"))
	}
	for i := range n {
		bridge := dsBridgePrefix + strconv.Itoa(i)
		if err := exec.Command("ip", "link", "del", bridge).Run(); err != nil && !t.Failed() {
			t.Errorf("delete the DaemonSet's bridge %s: %v", bridge, err)
		}
		if _, err := net.InterfaceByName(bridge); err == nil {
			t.Errorf("bridge %s still there", bridge)
		}
	}
	_ = os.RemoveAll(ipamDir)
}

// upperHalf is the second half of p (an IPv4 prefix shorter than /31).
func upperHalf(p netip.Prefix) netip.Prefix {
	a := p.Masked().Addr().As4()
	bit := p.Bits() // the first host bit
	a[bit/8] |= 0x80 >> (bit % 8)
	return netip.PrefixFrom(netip.AddrFrom4(a), p.Bits()+1)
}

// dsConflist is the DaemonSet's network for one node: the bridge plugin
// as the pods' gateway, host-local addresses from subnet kept under
// ipamDir/<network name>; no masquerading (the nodes route between their
// bridges).
func dsConflist(bridge string, subnet netip.Prefix, ipamDir string) []byte {
	type obj = map[string]any
	conf := obj{
		"cniVersion": "1.0.0",
		"name":       dsNetwork,
		"plugins": []any{obj{
			"type": "bridge", "bridge": bridge, "isGateway": true, "ipMasq": false, "hairpinMode": true,
			"ipam": obj{
				"type":    "host-local",
				"ranges":  []any{[]any{obj{"subnet": subnet.String()}}},
				"routes":  []any{obj{"dst": "0.0.0.0/0"}},
				"dataDir": ipamDir,
			},
		}},
	}
	b, err := json.MarshalIndent(conf, "", "  ")
	if err != nil {
		panic(err)
	}
	return append(b, '\n')
}

// cniDaemonSet writes the ConfigMap's network of its node into the
// node's CNI configuration directory, as flannel's install-cni init
// container does, atomically: a temp file libcni does not read (its
// extension is .tmp), renamed. Host network and every toleration, as a
// network DaemonSet has; no capabilities, a read-only root.
func cniDaemonSet(rootsDir string) *appsv1.DaemonSet {
	labels := map[string]string{"app": dsName}
	grace := int64(1)
	yes, no := true, false
	dir := v1.HostPathDirectory
	sc := &v1.SecurityContext{
		Capabilities:             &v1.Capabilities{Drop: []v1.Capability{"ALL"}},
		ReadOnlyRootFilesystem:   &yes,
		AllowPrivilegeEscalation: &no,
	}
	install := `set -eu
tmp=/host/net.d/.` + dsConfName + `.tmp
cp "/config/$NODE_NAME" "$tmp"
mv -f "$tmp" /host/net.d/` + dsConfName
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: dsName, Namespace: dsNamespace},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: v1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: v1.PodSpec{
					HostNetwork:                   true,
					Tolerations:                   []v1.Toleration{{Operator: v1.TolerationOpExists}},
					TerminationGracePeriodSeconds: &grace,
					InitContainers: []v1.Container{{
						Name: "install-cni", Image: "busybox:1.35", ImagePullPolicy: v1.PullIfNotPresent,
						Command: []string{"sh", "-c", install},
						Env: []v1.EnvVar{{Name: "NODE_NAME", ValueFrom: &v1.EnvVarSource{
							FieldRef: &v1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}}},
						VolumeMounts: []v1.VolumeMount{
							{Name: "cni-conf", MountPath: "/host/net.d", SubPathExpr: "$(NODE_NAME)/cni/net.d"},
							{Name: "config", MountPath: "/config", ReadOnly: true},
						},
						SecurityContext: sc,
					}},
					Containers: []v1.Container{{
						Name: "idle", Image: "busybox:1.35", ImagePullPolicy: v1.PullIfNotPresent,
						Command:         []string{"sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"},
						SecurityContext: sc,
					}},
					Volumes: []v1.Volume{
						{Name: "cni-conf", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: rootsDir, Type: &dir}}},
						{Name: "config", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
							LocalObjectReference: v1.LocalObjectReference{Name: dsName}}}},
					},
				},
			},
		},
	}
}

// webPodOn is a busybox httpd on port 8080 bound to node, answering with
// its name, labelled gen=<gen>.
func webPodOn(name, node, gen string) *v1.Pod {
	grace := int64(1)
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"gen": gen}},
		Spec: v1.PodSpec{
			NodeName:                      node,
			TerminationGracePeriodSeconds: &grace,
			Containers: []v1.Container{{
				Name: "web", Image: "busybox:1.35", ImagePullPolicy: v1.PullIfNotPresent,
				Command: []string{"sh", "-c", "mkdir -p /www && hostname > /www/index.html && exec httpd -f -p 8080 -h /www"},
				ReadinessProbe: &v1.Probe{
					ProbeHandler:  v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: intstr.FromInt32(8080)}},
					PeriodSeconds: 1,
				},
			}},
		},
	}
}

// byNode orders pods as m.Nodes, one per node.
func byNode(t *testing.T, m *multiNode, pods []v1.Pod) []v1.Pod {
	t.Helper()
	out := make([]v1.Pod, len(m.Nodes))
	for _, p := range pods {
		i := slices.Index(m.Nodes, p.Spec.NodeName)
		if i < 0 || out[i].Name != "" {
			t.Fatalf("pod %s on node %q: want one on each of %v", p.Name, p.Spec.NodeName, m.Nodes)
		}
		out[i] = p
	}
	return out
}

// waitNoPods waits until no pod matches selector in ns.
func waitNoPods(t *testing.T, m *multiNode, ns, selector string) {
	t.Helper()
	eventually(t, 2*time.Minute, "pods "+selector+" in "+ns+" gone", func() error {
		list, err := m.Admin.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return err
		}
		if len(list.Items) != 0 {
			return errorf("%d left", len(list.Items))
		}
		return nil
	})
}

// loadedNetwork is the name of the network containerd sets pods up on:
// its CRI status (verbose) shows the CNI configuration it loaded, the
// loopback and the default network. "" when it cannot tell.
func loadedNetwork(ctx context.Context, rt *cri.Client) string {
	st, err := rt.Status(ctx, true)
	if err != nil {
		return ""
	}
	var conf struct {
		Networks []struct {
			Config struct{ Name string }
			IFName string
		}
	}
	if json.Unmarshal([]byte(st.GetInfo()["cniconfig"]), &conf) != nil {
		return ""
	}
	for _, nw := range conf.Networks {
		if nw.IFName == "eth0" {
			return nw.Config.Name
		}
	}
	return ""
}

// podBridge is the bridge the host end of the pod's eth0 is a port of:
// eth0's iflink is its veth peer's index in the host's namespace.
func podBridge(t *testing.T, m *multiNode, ns, pod string) string {
	t.Helper()
	out, err := kubectl(t, m.controlPlane, 30*time.Second, "-n", ns, "exec", pod, "--", "cat", "/sys/class/net/eth0/iflink")
	if err != nil {
		t.Errorf("pod %s's eth0: %v\n%s", pod, err, out)
		return ""
	}
	index, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil {
		t.Errorf("pod %s's eth0 iflink %q: %v", pod, out, err)
		return ""
	}
	veth, err := net.InterfaceByIndex(index)
	if err != nil {
		t.Errorf("pod %s's veth (index %d): %v", pod, index, err)
		return ""
	}
	master, err := os.Readlink(filepath.Join("/sys/class/net", veth.Name, "master"))
	if err != nil {
		return "" // on no bridge
	}
	return filepath.Base(master)
}

// ipamLeases are the addresses host-local's store dir has leased (a file
// per address; besides them only its lock and last_reserved_ip.*).
func ipamLeases(dir string) []string {
	entries, _ := os.ReadDir(dir)
	var out []string
	for _, e := range entries {
		if _, err := netip.ParseAddr(e.Name()); err == nil {
			out = append(out, e.Name())
		}
	}
	return out
}

// natRulesNaming are the host's NAT rules (iptables, either backend, and
// nftables) that name one of ips as an address of its own.
func natRulesNaming(ips []string) []string {
	var dump strings.Builder
	for _, cmd := range [][]string{{"iptables-save", "-t", "nat"}, {"iptables-legacy-save", "-t", "nat"}, {"nft", "list", "ruleset"}} {
		out, _ := exec.Command(cmd[0], cmd[1:]...).Output()
		dump.Write(out)
	}
	var rules []string
	for _, line := range strings.Split(dump.String(), "\n") {
		for _, ip := range ips {
			if regexp.MustCompile(`(^|[^0-9.])` + regexp.QuoteMeta(ip) + `([^0-9.]|$)`).MatchString(line) {
				rules = append(rules, strings.TrimSpace(line))
			}
		}
	}
	return rules
}

// sameFile: the same inode, not replaced since (a rename over it would
// give a new one), with the same modification time and size.
func sameFile(a, b os.FileInfo) bool {
	sa, oka := a.Sys().(*syscall.Stat_t)
	sb, okb := b.Sys().(*syscall.Stat_t)
	return oka && okb && sa.Ino == sb.Ino && a.ModTime().Equal(b.ModTime()) && a.Size() == b.Size()
}
