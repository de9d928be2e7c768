//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/nodelet/nodelet/internal/managed/containerd"
)

// A cluster node with the managed runtime and an empty CNI configuration
// directory: its Node is Ready=False with the kubelet's
// NetworkPluginNotReady message until the controller manager allocates
// its pod CIDR; nodelet then writes its bridge network on that CIDR, the
// Node turns Ready, and a pod's IP is in the Node's spec.podCIDRs. With
// the containerd make build makes (2.x: two plug-in directories) and, where
// the machine has it, Debian's 1.6 (one: the first holding bridge).
func TestClusterPodCIDRFromTheNode(t *testing.T) {
	cp := startCluster(t)
	t.Run("containerd 2.x", func(t *testing.T) {
		cidr, ip := testPodCIDRFromTheNode(t, cp, "cidr-node-2", "nlcidr2")
		checkCIDRChangeRefused(t, cp, "cidr-node-2", cidr, ip)
	})
	t.Run("containerd 1.6", func(t *testing.T) {
		if _, err := os.Stat(debianContainerd); err != nil {
			t.Skipf("no distribution containerd: %v", err)
		}
		_, _ = testPodCIDRFromTheNode(t, cp, "cidr-node-1", "nlcidr1", "--containerd-binary", debianContainerd)
	})
}

// testPodCIDRFromTheNode returns the Node's pod CIDR and the pod's IP.
func testPodCIDRFromTheNode(t *testing.T, cp *controlPlane, name, bridge string, extra ...string) (netip.Prefix, netip.Addr) {
	confDir := filepath.Join(shared.work, "cni-"+name)
	readies := watchReady(t, cp, name)
	startManagedClusterNode(t, cp, name, bridge, confDir, extra...)

	node := waitNodeReady(t, cp.Admin, name, 2*time.Minute)
	if len(node.Spec.PodCIDRs) != 1 {
		t.Fatalf("Node spec.podCIDRs = %q, want one from the controller manager", node.Spec.PodCIDRs)
	}
	cidr := netip.MustParsePrefix(node.Spec.PodCIDRs[0])
	if !netip.MustParsePrefix(clusterCIDR()).Overlaps(cidr) || cidr.Bits() != 24 {
		t.Errorf("Node's pod CIDR %s is not a /24 of the cluster's %s", cidr, clusterCIDR())
	}
	seen := readies.finish(t)
	want := "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:"
	if len(seen) == 0 || seen[0].Status != v1.ConditionFalse || seen[0].Reason != "KubeletNotReady" || !strings.Contains(seen[0].Message, want) {
		t.Errorf("the Node was first %+v; want Ready=False, KubeletNotReady, %q (all seen: %+v)", seen[:min(1, len(seen))], want, seen)
	}
	conf, err := os.ReadFile(filepath.Join(confDir, containerd.BridgeConfName))
	if err != nil || !bytes.Contains(conf, []byte(`"subnet": "`+cidr.String()+`"`)) {
		t.Errorf("bridge network in %s: %v\n%s", confDir, err, conf)
	}

	ip := runPodOn(t, cp, name, name+"-pod")
	if !cidr.Contains(ip) {
		t.Errorf("pod IP %s is not in the Node's pod CIDR %s", ip, cidr)
	}
	return cidr, ip
}

// checkCIDRChangeRefused deletes the Node while its pod runs: nodelet
// registers it again, the controller manager allocates it the next free
// CIDR, and nodelet refuses to move the running pod's network onto it (a
// PodCIDRChangeRefused event on the Node); the pod keeps its IP and the
// bridge network its CIDR.
func checkCIDRChangeRefused(t *testing.T, cp *controlPlane, name string, old netip.Prefix, ip netip.Addr) {
	t.Helper()
	ctx := context.Background()
	confPath := filepath.Join(shared.work, "cni-"+name, containerd.BridgeConfName)
	conf, err := os.ReadFile(confPath)
	if err != nil {
		t.Fatal(err)
	}
	first, err := cp.Admin.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := cp.Admin.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var next netip.Prefix
	eventually(t, time.Minute, "Node "+name+" registered again with a pod CIDR", func() error {
		n, err := cp.Admin.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if n.UID == first.UID || len(n.Spec.PodCIDRs) == 0 {
			return errorf("uid %s, pod CIDRs %q", n.UID, n.Spec.PodCIDRs)
		}
		next, err = netip.ParsePrefix(n.Spec.PodCIDRs[0])
		return err
	})
	if next == old {
		t.Skipf("the controller manager gave the Node %s again: no change to refuse", old)
	}
	eventually(t, time.Minute, "a PodCIDRChangeRefused event on Node "+name, func() error {
		evs, err := cp.Admin.CoreV1().Events("default").List(ctx, metav1.ListOptions{
			FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + name + ",reason=PodCIDRChangeRefused"})
		if err != nil {
			return err
		}
		for _, e := range evs.Items {
			if e.Type == v1.EventTypeWarning && strings.Contains(e.Message, old.String()+" to "+next.String()) {
				return nil
			}
		}
		return errorf("%d events, none about %s to %s", len(evs.Items), old, next)
	})
	pod, err := cp.Admin.CoreV1().Pods("default").Get(ctx, name+"-pod", metav1.GetOptions{})
	if err != nil || pod.Status.PodIP != ip.String() || pod.Status.Phase != v1.PodRunning {
		t.Errorf("pod after the refused change: %v, %s %s (want Running, %s)", err, pod.Status.Phase, pod.Status.PodIP, ip)
	}
	if now, err := os.ReadFile(confPath); err != nil || !bytes.Equal(now, conf) {
		t.Errorf("the bridge network changed under a running pod: %v\n%s", err, now)
	}
}

// A cluster node whose CNI configuration directory already holds a
// network (as a CNI DaemonSet writes one): containerd uses it, nodelet
// writes none of its own and never changes that file, though the Node
// has a pod CIDR.
func TestClusterForeignCNIConfig(t *testing.T) {
	cp := startCluster(t)
	const name, bridge = "foreign-cni", "nlunused0"
	confDir := filepath.Join(shared.work, "cni-"+name)
	if err := os.MkdirAll(confDir, 0o755); err != nil {
		t.Fatal(err)
	}
	foreignBridge, foreignCIDRText := laneNetwork("nlforeign0", "10.247.7.0/24")
	foreignCIDR := netip.MustParsePrefix(foreignCIDRText)
	foreign := []byte(`{
  "cniVersion": "1.0.0",
  "name": "foreign",
  "plugins": [
    {"type": "bridge", "bridge": "` + foreignBridge + `", "isGateway": true, "ipMasq": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "` + foreignCIDR.String() + `"}]],
              "routes": [{"dst": "0.0.0.0/0"}], "dataDir": "` + filepath.Join(shared.work, "ipam-"+name) + `"}}
  ]
}
`)
	foreignPath := filepath.Join(confDir, "05-foreign.conflist")
	if err := os.WriteFile(foreignPath, foreign, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { exec.Command("ip", "link", "del", foreignBridge).Run() })
	proc := startManagedClusterNode(t, cp, name, bridge, confDir)

	// With a network already configured the Node is Ready before the
	// controller manager gives it a pod CIDR: wait for the CIDR and for
	// nodelet to have applied it, so the checks below see its reaction.
	waitNodeReady(t, cp.Admin, name, 2*time.Minute)
	eventually(t, time.Minute, "nodelet applied the Node's pod CIDR", func() error {
		if !strings.Contains(proc.stderr.String(), "updating pod CIDR") {
			return errorf("no \"updating pod CIDR\" in its log")
		}
		return nil
	})
	ip := runPodOn(t, cp, name, "foreign-pod")
	if !foreignCIDR.Contains(ip) {
		t.Errorf("pod IP %s is not from the foreign network's %s", ip, foreignCIDR)
	}
	if got, err := os.ReadFile(foreignPath); err != nil || !bytes.Equal(got, foreign) {
		t.Errorf("the foreign network changed: %v\n%s", err, got)
	}
	if _, err := os.Stat(filepath.Join(confDir, containerd.BridgeConfName)); !os.IsNotExist(err) {
		t.Errorf("nodelet wrote its bridge network beside a foreign one: %v", err)
	}
}

// startManagedClusterNode starts a nodelet in cluster mode with its own
// managed containerd, CNI configuration directory (confDir; the plug-in
// directories are cluster mode's defaults) and bridge name. When the
// test ends the Node and its pods are deleted, the runtime's pods removed
// and the bridge deleted.
func startManagedClusterNode(t *testing.T, cp *controlPlane, name, bridge, confDir string, extra ...string) *nodeletProc {
	t.Helper()
	bridge = laneBridge(bridge)
	root := filepath.Join(shared.work, "root-"+name)
	// Runs after the nodelet stopped (cleanups run last first).
	t.Cleanup(func() { cleanUpManagedCluster(t, root, bridge, confDir) })
	proc := startNodelet(t, append([]string{"--root-dir", root, "--cni-conf-dir", confDir, "--cni-bridge-name", bridge,
		"--pause-binary", shared.pause, "--image-registry-address", "127.0.0.1:0",
		"--bootstrap-kubeconfig", cp.BootstrapKubeconfig, "--kubeconfig", filepath.Join(root, "kubelet.kubeconfig"),
		"--config", cp.NodeletConfig, "--hostname-override", name, "--node-ip", "127.0.0.1", "--address", "127.0.0.1",
		"--port", freePort(t), "--healthz-port", "0", "--pod-logs-dir", filepath.Join(shared.work, "logs-"+name)}, extra...)...)
	t.Cleanup(func() { deleteNode(cp.Admin, name) })
	return proc
}

// cleanUpManagedCluster starts the node's managed containerd once more,
// on the same CNI directory, removes the pods and stops it.
func cleanUpManagedCluster(t *testing.T, root, bridge, confDir string) {
	cfg := containerd.DefaultConfig(root)
	cfg.BridgeName, cfg.PodCIDR, cfg.CNIConfDir = bridge, "", confDir
	cleanUpManaged(t, cfg)
}

// runPodOn runs a sleeping busybox pod bound to node and returns its IP.
func runPodOn(t *testing.T, cp *controlPlane, node, name string) netip.Addr {
	t.Helper()
	ctx := context.Background()
	grace := int64(1)
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: v1.PodSpec{
			NodeName:                      node,
			TerminationGracePeriodSeconds: &grace,
			Containers: []v1.Container{{Name: "main", Image: "busybox:1.35",
				Command: []string{"sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"}}},
		},
	}
	if _, err := cp.Admin.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var ip netip.Addr
	eventually(t, 2*time.Minute, "pod "+name+" running with an IP", func() error {
		p, err := cp.Admin.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase != v1.PodRunning || p.Status.PodIP == "" {
			return errorf("phase %s, IP %q", p.Status.Phase, p.Status.PodIP)
		}
		ip, err = netip.ParseAddr(p.Status.PodIP)
		return err
	})
	return ip
}

// nodeReadyConditions follows Node name's Ready condition from before
// the Node exists (across the API server's watch errors); finish returns
// every one it was seen with.
type nodeReadyConditions struct{ log *watchLog }

func watchReady(t *testing.T, cp *controlPlane, name string) *nodeReadyConditions {
	t.Helper()
	sel := "metadata.name=" + name
	list, err := cp.Admin.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		t.Fatal(err)
	}
	return &nodeReadyConditions{log: retryWatch(t, list.ResourceVersion, func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
		o.FieldSelector = sel
		return cp.Admin.CoreV1().Nodes().Watch(ctx, o)
	})}
}

func (r *nodeReadyConditions) finish(t *testing.T) []v1.NodeCondition {
	t.Helper()
	var out []v1.NodeCondition
	for _, e := range r.log.finish(t) {
		if n, ok := e.obj.(*v1.Node); ok {
			for _, c := range n.Status.Conditions {
				if c.Type == v1.NodeReady {
					out = append(out, c)
				}
			}
		}
	}
	return out
}
