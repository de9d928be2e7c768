//go:build e2e

package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// clusterNode is a nodelet joined to the shared control plane.
type clusterNode struct {
	name, rootDir, manifests string
	args                     []string
	proc                     *nodeletProc
}

// joinNode starts a nodelet on the shared runtime that joins the control
// plane through TLS bootstrap, as hack/cluster.sh starts one (the
// bootstrap kubeconfig and kubeadm's KubeletConfiguration), with its own
// root dir, manifest directory and kubelet port on 127.0.0.1 (the API
// server reaches it there for logs, exec and port-forward). It waits for
// the Node to be Ready and for its port to serve a certificate the API
// server accepts: the cluster CA's, issued through the node's
// kubernetes.io/kubelet-serving CSR (serverTLSBootstrap; hack/cluster.sh's
// approver approves it), for 127.0.0.1. Until then the port refuses TLS
// handshakes, and kubectl logs and exec would fail.
func joinNode(t *testing.T, cp *controlPlane, name string, extra ...string) *clusterNode {
	t.Helper()
	n := &clusterNode{name: name, rootDir: filepath.Join(shared.work, "root-"+name), manifests: filepath.Join(shared.work, "manifests-"+name)}
	if err := os.MkdirAll(n.manifests, 0o755); err != nil {
		t.Fatal(err)
	}
	n.args = append([]string{"--container-runtime-endpoint", shared.endpoint, "--root-dir", n.rootDir,
		"--bootstrap-kubeconfig", cp.BootstrapKubeconfig, "--kubeconfig", filepath.Join(n.rootDir, "kubelet.kubeconfig"),
		"--config", cp.NodeletConfig, "--hostname-override", name, "--node-ip", "127.0.0.1", "--address", "127.0.0.1",
		"--port", freePort(t), "--healthz-port", "0", "--pod-manifest-path", n.manifests, "--file-check-frequency", "2s",
		"--pod-logs-dir", filepath.Join(shared.work, "logs-"+name)}, extra...)
	n.start(t)
	waitNodeReady(t, cp.Admin, name, 2*time.Minute)
	waitServing(t, cp, net.JoinHostPort("127.0.0.1", lastFlag(n.args, "--port")), time.Minute)
	t.Cleanup(func() { deleteNode(cp.Admin, name) })
	return n
}

// start runs (again) the node's nodelet with its flags.
func (n *clusterNode) start(t *testing.T) { n.proc = startNodelet(t, n.args...) }

// deleteNode removes the Node and the pods bound to it, so that the next
// test starts clean.
func deleteNode(c kubernetes.Interface, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	zero := int64(0)
	pods, _ := c.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + name})
	if pods != nil {
		for _, p := range pods.Items {
			_ = c.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
		}
	}
	_ = c.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{})
}

// waitServing waits until addr (host:port, the host a node IP) serves a
// certificate of the cluster CA for that IP, as the API server
// (--kubelet-certificate-authority) verifies a node's.
func waitServing(t testing.TB, cp *controlPlane, addr string, timeout time.Duration) {
	t.Helper()
	eventually(t, timeout, addr+" serving a certificate of the cluster CA", func() error {
		return servingVerified(cp, addr)
	})
}

func servingVerified(cp *controlPlane, addr string) error {
	roots, err := cp.roots()
	if err != nil {
		return err
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr,
		&tls.Config{RootCAs: roots, ServerName: host, MinVersion: tls.VersionTLS12})
	if err != nil {
		return err
	}
	return conn.Close()
}

func waitNodeReady(t *testing.T, c kubernetes.Interface, name string, timeout time.Duration) *v1.Node {
	t.Helper()
	var node *v1.Node
	eventually(t, timeout, "node "+name+" Ready", func() error {
		n, err := c.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == v1.NodeReady && cond.Status == v1.ConditionTrue {
				node = n
				return nil
			}
		}
		return fmt.Errorf("conditions %v", n.Status.Conditions)
	})
	return node
}

// waitPodsReady waits until the pods matching selector in ns are n, all
// Running and Ready in the API, and returns them.
func waitPodsReady(t *testing.T, c kubernetes.Interface, ns, selector string, n int, timeout time.Duration) []v1.Pod {
	t.Helper()
	var out []v1.Pod
	eventually(t, timeout, fmt.Sprintf("%d pods %q Ready", n, selector), func() error {
		list, err := c.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return err
		}
		ready := 0
		var states []string
		for _, p := range list.Items {
			if p.Status.Phase == v1.PodRunning && podReady(&p) && p.DeletionTimestamp == nil {
				ready++
			}
			states = append(states, p.Name+"="+string(p.Status.Phase))
		}
		if ready != n || len(list.Items) != n {
			return fmt.Errorf("%d of %d ready: %v", ready, len(list.Items), states)
		}
		out = list.Items
		return nil
	})
	return out
}

func podReady(p *v1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == v1.PodReady {
			return c.Status == v1.ConditionTrue
		}
	}
	return false
}

// kubectlBin is the control plane's kubectl: from $NODELET_CLUSTER_BIN,
// else built (cached) by hack/build-upstream.sh.
func kubectlBin(t *testing.T) string {
	t.Helper()
	if dir := os.Getenv("NODELET_CLUSTER_BIN"); dir != "" {
		return filepath.Join(dir, "kubectl")
	}
	out, err := exec.Command(filepath.Join(shared.repoRoot, "hack", "build-upstream.sh"), "kubectl").Output()
	if err != nil {
		t.Fatalf("kubectl: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// kubectl runs the control plane's kubectl as the admin.
func kubectl(t *testing.T, cp *controlPlane, timeout time.Duration, args ...string) (string, error) {
	t.Helper()
	bin := kubectlBin(t)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"--kubeconfig", cp.AdminKubeconfig}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// A node joins as the kubelet does: a CSR from the bootstrap token,
// approved and signed by the controller manager; the node's own
// kubeconfig written; the Node registered with the kubelet's labels,
// runtime and endpoint; a lease renewed in kube-node-lease; Ready.
func TestClusterJoin(t *testing.T) {
	cp := startCluster(t)
	cp.logsOnFailure(t)
	n := joinNode(t, cp, "join-a", "--node-labels", "example.com/team=edge", "--register-with-taints", "example.com/dedicated=edge:NoSchedule")
	ctx := clusterContext(t, time.Minute)

	csrs, err := cp.Admin.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, csr := range csrs.Items {
		if csr.Spec.SignerName != certificatesv1.KubeAPIServerClientKubeletSignerName || csr.Spec.Username != "system:bootstrap:"+cp.TokenID {
			continue
		}
		if block := parseCSR(t, csr.Spec.Request); block.Subject.CommonName == "system:node:join-a" {
			found = len(csr.Status.Certificate) > 0 && slices.ContainsFunc(csr.Status.Conditions, func(c certificatesv1.CertificateSigningRequestCondition) bool {
				return c.Type == certificatesv1.CertificateApproved
			})
		}
	}
	if !found {
		t.Error("no approved and issued CSR for system:node:join-a from the bootstrap token")
	}
	if fi, err := os.Stat(filepath.Join(n.rootDir, "kubelet.kubeconfig")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("kubeconfig written by the bootstrap: %v %v, want mode 0600", fi, err)
	}

	node, err := cp.Admin.CoreV1().Nodes().Get(ctx, "join-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{"kubernetes.io/hostname": "join-a", "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64", "example.com/team": "edge"} {
		if node.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, node.Labels[k], v)
		}
	}
	if !slices.ContainsFunc(node.Spec.Taints, func(tt v1.Taint) bool {
		return tt.Key == "example.com/dedicated" && tt.Effect == v1.TaintEffectNoSchedule
	}) {
		t.Errorf("taints %v lack the registered one", node.Spec.Taints)
	}
	if rv := node.Status.NodeInfo.ContainerRuntimeVersion; !strings.HasPrefix(rv, "containerd://") {
		t.Errorf("containerRuntimeVersion %q", rv)
	}
	if p := node.Status.DaemonEndpoints.KubeletEndpoint.Port; fmt.Sprint(p) != lastFlag(n.args, "--port") {
		t.Errorf("daemonEndpoints port %d, want %s", p, lastFlag(n.args, "--port"))
	}
	if len(node.Status.Addresses) == 0 || node.Status.Allocatable.Memory().IsZero() || node.Status.Capacity.Pods().IsZero() {
		t.Errorf("addresses %v, allocatable %v, capacity %v", node.Status.Addresses, node.Status.Allocatable, node.Status.Capacity)
	}
	for _, c := range []v1.NodeConditionType{v1.NodeMemoryPressure, v1.NodeDiskPressure, v1.NodePIDPressure} {
		if !slices.ContainsFunc(node.Status.Conditions, func(nc v1.NodeCondition) bool { return nc.Type == c && nc.Status == v1.ConditionFalse }) {
			t.Errorf("condition %s not False: %v", c, node.Status.Conditions)
		}
	}

	lease, err := cp.Admin.CoordinationV1().Leases("kube-node-lease").Get(ctx, "join-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != "join-a" || lease.Spec.LeaseDurationSeconds == nil || *lease.Spec.LeaseDurationSeconds != 40 ||
		len(lease.OwnerReferences) != 1 || lease.OwnerReferences[0].UID != node.UID {
		t.Errorf("lease %+v owners %+v", lease.Spec, lease.OwnerReferences)
	}
	renewed := lease.Spec.RenewTime.Time
	eventually(t, 30*time.Second, "lease renewed", func() error {
		l, err := cp.Admin.CoordinationV1().Leases("kube-node-lease").Get(context.Background(), "join-a", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !l.Spec.RenewTime.After(renewed) {
			return fmt.Errorf("renewTime still %v", l.Spec.RenewTime)
		}
		return nil
	})

	// Beyond the kubelet: a deleted Node is registered again.
	if err := cp.Admin.CoreV1().Nodes().Delete(ctx, "join-a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "node registered again", func() error {
		nn, err := cp.Admin.CoreV1().Nodes().Get(context.Background(), "join-a", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return err
		}
		if err != nil {
			return err
		}
		if nn.UID == node.UID {
			return fmt.Errorf("still the old node")
		}
		return nil
	})
	waitNodeReady(t, cp.Admin, "join-a", time.Minute)
}

func parseCSR(t *testing.T, data []byte) *x509.CertificateRequest {
	t.Helper()
	block, _ := pem.Decode(data)
	if block == nil {
		t.Fatalf("not a PEM CSR: %q", data)
	}
	req, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return req
}
