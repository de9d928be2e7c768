//go:build e2e

package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/nodelet/nodelet/internal/serve/server"
)

// TestClusterKubeletAPIAuthorization is issue 23's first part: in cluster
// mode, nodelet's API authorizes as the kubelet's does by default, so that
// a pod's own service-account token, another node's certificate or a user
// granted nodes/log get what RBAC gives them on nodes/<name> and no more.
// The same requests go to the upstream kubelet of the same release, joined
// to the same control plane with kubeadm's configuration, and must get the
// same codes.
//
// nodelet joins with no authorization setting at all (no --config): its
// cluster-mode defaults are under test. Every request goes to 127.0.0.1.
// Last, nodelet is restarted with --authorization-mode=NodeletGroups on
// purpose: the pod's token then reads /pods (what the default prevents),
// and the Node gets a Warning event saying so.
func TestClusterKubeletAPIAuthorization(t *testing.T) {
	cp := startCluster(t)
	cp.logsOnFailure(t)
	ctx := clusterContext(t, 6*time.Minute)
	const ns = "authz-e2e"
	if _, err := cp.Admin.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cp.Admin.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
	})
	logReader := grantNodeLog(t, cp)
	other := issueClusterCert(t, cp, "system:node:authz-elsewhere", "system:nodes")
	apiserver, err := tls.LoadX509KeyPair(filepath.Join(cp.Dir, "pki", "apiserver-kubelet-client.crt"), filepath.Join(cp.Dir, "pki", "apiserver-kubelet-client.key"))
	if err != nil {
		t.Fatal(err)
	}

	type request struct {
		who, method, path string
		want              int
	}
	matrix := func(a *authzAgent) []request {
		logs := fmt.Sprintf("/containerLogs/%s/%s/main", ns, a.pod.Name)
		exec := fmt.Sprintf("/exec/%s/%s/main?command=true&output=1", ns, a.pod.Name)
		return []request{
			{"pod", "GET", logs, http.StatusForbidden},
			{"pod", "GET", "/pods", http.StatusForbidden},
			{"pod", "GET", "/configz", http.StatusForbidden},
			{"pod", "POST", exec, http.StatusForbidden},
			{"pod", "GET", "/stats/summary", http.StatusForbidden},
			{"other-node", "GET", logs, http.StatusForbidden},
			{"other-node", "GET", "/pods", http.StatusForbidden},
			{"other-node", "GET", "/configz", http.StatusForbidden},
			{"other-node", "POST", exec, http.StatusForbidden},
			{"node-log", "GET", "/logs/", http.StatusOK},
			{"node-log", "GET", logs, http.StatusForbidden},
			{"node-log", "GET", "/pods", http.StatusForbidden},
			{"node-log", "GET", "/stats/summary", http.StatusForbidden},
			{"anonymous", "GET", "/pods", http.StatusUnauthorized},
			{"apiserver", "GET", "/pods", http.StatusOK},
			{"apiserver", "GET", logs, http.StatusOK},
			{"apiserver", "GET", "/configz", http.StatusOK},
		}
	}
	got := map[string]map[string]int{} // agent → "who method path" → code
	// probe runs a's pod, takes its token and sends the requests.
	probe := func(a *authzAgent) {
		a.pod = runTokenPod(t, cp, ns, a.node)
		a.token = podToken(t, a.rootDir, a.pod)
		waitAnswering(t, a.base, apiserver)
		clients := map[string]*authzClient{
			"pod":        {client: tlsClient(nil), token: a.token},
			"other-node": {client: tlsClient(&other)},
			"node-log":   {client: tlsClient(&logReader)},
			"anonymous":  {client: tlsClient(nil)},
			"apiserver":  {client: tlsClient(&apiserver)},
		}
		got[a.label] = map[string]int{}
		for _, r := range matrix(a) {
			code, body := clients[r.who].do(t, r.method, a.base+r.path)
			key := r.who + " " + r.method + " " + strings.Split(r.path, "?")[0]
			got[a.label][key] = code
			if code != r.want {
				t.Errorf("%s: %s: %d, want %d (%s)", a.label, key, code, r.want, firstLine(body))
			}
			if a.label == "nodelet" && r.who == "pod" && code == http.StatusForbidden {
				// The refusal names who asked and for what, as the kubelet's.
				want := fmt.Sprintf("Forbidden (user=system:serviceaccount:%s:default, verb=", ns)
				if !strings.Contains(body, want) || !strings.Contains(body, "resource=nodes, subresource=") {
					t.Errorf("nodelet: %s: body %q, want it to say %q...resource=nodes, subresource=...", key, body, want)
				}
			}
		}
	}

	// The agents share the test runtime and each stops the pods it does
	// not know: one runs at a time. First nodelet, in cluster mode with
	// the client CA only.
	name := "authz-nodelet"
	port := freePort(t)
	rootDir := filepath.Join(shared.work, "root-"+name)
	proc := startNodelet(t, "--container-runtime-endpoint", shared.endpoint, "--root-dir", rootDir,
		"--bootstrap-kubeconfig", cp.BootstrapKubeconfig, "--kubeconfig", filepath.Join(rootDir, "kubelet.kubeconfig"),
		"--client-ca-file", cp.CAFile, "--hostname-override", name, "--node-ip", "127.0.0.1", "--address", "127.0.0.1",
		"--port", port, "--healthz-port", "0", "--pod-logs-dir", filepath.Join(shared.work, "logs-"+name))
	t.Cleanup(func() { deleteNode(cp.Admin, name) })
	waitNodeReady(t, cp.Admin, name, 2*time.Minute)
	nodelet := &authzAgent{label: "nodelet", node: name, base: "https://127.0.0.1:" + port, rootDir: rootDir}
	probe(nodelet)
	if err := proc.stop(t); err != nil {
		t.Logf("nodelet exit: %v", err)
	}

	// Then the upstream kubelet: kubeadm's configuration (hack/cluster.sh's).
	kubelet := startClusterKubelet(t, cp, "authz-kubelet")
	probe(&authzAgent{label: "kubelet", node: kubelet.node, base: "https://127.0.0.1:" + kubelet.port, rootDir: kubelet.rootDir})
	kubelet.stop(t)

	for key, code := range got["nodelet"] {
		if k, ok := got["kubelet"][key]; ok && k != code {
			t.Errorf("%s: nodelet %d, kubelet %d", key, code, k)
		}
	}
	t.Logf("%d requests per agent, same codes from nodelet and the kubelet v1.37: %v", len(got["nodelet"]), got["nodelet"])

	// NodeletGroups chosen on purpose: the hole is back, and said.
	proc = startNodelet(t, append(slices.Clone(proc.args), "--authorization-mode", "NodeletGroups")...)
	defer proc.stop(t)
	pod := &authzClient{client: tlsClient(nil), token: nodelet.token}
	eventually(t, time.Minute, "the pod's token reads /pods under NodeletGroups", func() error {
		code, body, err := pod.try("GET", nodelet.base+"/pods")
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("%d: %s", code, firstLine(body))
		}
		return err
	})
	eventually(t, time.Minute, "a Warning event on the Node", func() error {
		sel := fields.Set{"involvedObject.kind": "Node", "involvedObject.name": name, "reason": server.InsecureAuthorizationReason}.AsSelector().String()
		list, err := cp.Admin.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: sel})
		if err != nil {
			return err
		}
		for _, e := range list.Items {
			if e.Type == v1.EventTypeWarning && strings.Contains(e.Message, "service-account token of the cluster (pods' own included)") &&
				strings.Contains(e.Message, "every container's logs") {
				return nil
			}
		}
		return fmt.Errorf("%d events %s", len(list.Items), sel)
	})
	if !strings.Contains(proc.stderr.String(), "authorization mode NodeletGroups in cluster mode") {
		t.Errorf("nodelet did not log the warning; its log:\n%s", tailString(proc.stderr.String(), 20))
	}
}

type authzAgent struct {
	label, node, base, rootDir string
	pod                        *v1.Pod
	token                      string
}

// authzClient sends requests as one identity: a client certificate, a
// bearer token, or nothing.
type authzClient struct {
	client *http.Client
	token  string
}

func (c *authzClient) do(t *testing.T, method, url string) (int, string) {
	t.Helper()
	code, body, err := c.try(method, url)
	if err != nil {
		t.Fatal(err)
	}
	return code, body
}

func (c *authzClient) try(method, url string) (int, string, error) {
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		return 0, "", err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return 0, "", fmt.Errorf("%s %s: %w", method, url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, strings.TrimSpace(string(body)), nil
}

// tlsClient trusts any serving certificate (the test is about who may do
// what, not whom it talks to) and shows cert, if any.
func tlsClient(cert *tls.Certificate) *http.Client {
	cfg := &tls.Config{InsecureSkipVerify: true}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	return &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true}}
}

// waitAnswering waits until the agent's port completes a handshake and
// answers the API server's client certificate (a serving certificate may
// first have to be issued).
func waitAnswering(t *testing.T, base string, cert tls.Certificate) {
	t.Helper()
	c := &authzClient{client: tlsClient(&cert)}
	eventually(t, 2*time.Minute, base+" serving", func() error {
		req, _ := http.NewRequest("GET", base+"/healthz", nil)
		resp, err := c.client.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/healthz: %d", resp.StatusCode)
		}
		return nil
	})
}

// runTokenPod runs a pod on node with its service account's token mounted
// (the default), and waits for it to run.
func runTokenPod(t *testing.T, cp *controlPlane, ns, node string) *v1.Pod {
	t.Helper()
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "token-" + node, Namespace: ns, Labels: map[string]string{"authz": node}},
		Spec: v1.PodSpec{NodeName: node, Containers: []v1.Container{{Name: "main", Image: "busybox:1.35",
			Command: []string{"sh", "-c", "echo started; exec sleep 3600"}}}},
	}
	ctx := clusterContext(t, 3*time.Minute)
	if _, err := cp.Admin.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return &waitPodsReady(t, cp.Admin, ns, "authz="+node, 1, 2*time.Minute)[0]
}

// podToken reads the pod's own service-account token where its agent
// mounted it (kubelet and nodelet share the layout).
func podToken(t *testing.T, rootDir string, pod *v1.Pod) string {
	t.Helper()
	matches, _ := filepath.Glob(filepath.Join(rootDir, "pods", string(pod.UID), "volumes", "kubernetes.io~projected", "*", "token"))
	if len(matches) != 1 {
		t.Fatalf("the token of pod %s under %s: found %v", pod.Name, rootDir, matches)
	}
	b, err := os.ReadFile(matches[0])
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// grantNodeLog binds a ClusterRole allowing only get nodes/log to a user,
// and returns that user's client certificate.
func grantNodeLog(t *testing.T, cp *controlPlane) tls.Certificate {
	t.Helper()
	ctx := clusterContext(t, time.Minute)
	const name, user = "authz-e2e-node-log", "authz-e2e-log-reader"
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes/log"}, Verbs: []string{"get"}}}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: user}}}
	if _, err := cp.Admin.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if _, err := cp.Admin.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cp.Admin.RbacV1().ClusterRoleBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
		_ = cp.Admin.RbacV1().ClusterRoles().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return issueClusterCert(t, cp, user)
}

// issueClusterCert signs a client certificate for cn in groups with the
// cluster CA, as an administrator would for a user.
func issueClusterCert(t *testing.T, cp *controlPlane, cn string, groups ...string) tls.Certificate {
	t.Helper()
	caPair, err := tls.LoadX509KeyPair(cp.CAFile, filepath.Join(cp.Dir, "pki", "ca.key"))
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caPair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: cn, Organization: groups},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caPair.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// clusterKubelet is the upstream kubelet joined to the control plane.
type clusterKubelet struct {
	node, port, rootDir string
	agent               *clusterAgent
	cp                  *controlPlane
}

// stop removes the kubelet's pods through the API and waits until the
// kubelet has stopped them (the test runtime is shared), then stops the
// kubelet and removes its Node.
func (k *clusterKubelet) stop(t *testing.T) {
	t.Helper()
	ctx := clusterContext(t, 2*time.Minute)
	pods, err := k.cp.Admin.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + k.node})
	if err == nil {
		for _, p := range pods.Items {
			_ = k.cp.Admin.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{})
		}
	}
	eventually(t, 90*time.Second, "the kubelet's pods gone", func() error {
		pods, err := k.cp.Admin.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + k.node})
		if err == nil && len(pods.Items) > 0 {
			err = fmt.Errorf("%d pods left", len(pods.Items))
		}
		return err
	})
	if err := k.agent.stop(); err != nil {
		t.Logf("kubelet: %v", err)
	}
	deleteNode(k.cp.Admin, k.node)
}

// startClusterKubelet runs the upstream kubelet of the control plane's
// release on the shared containerd, joined as hack/cluster.sh joins
// nodelet (the bootstrap token and kubeadm's KubeletConfiguration), its
// API on 127.0.0.1; it waits for the Node to be Ready. stop, or the end
// of the test, stops it and removes the Node. config are more lines of
// its KubeletConfiguration (YAML, "field: value").
func startClusterKubelet(t *testing.T, cp *controlPlane, node string, config ...string) *clusterKubelet {
	t.Helper()
	bin := upstreamKubelet(t)
	work := filepath.Join(shared.work, node)
	if err := os.MkdirAll(work, 0o700); err != nil {
		t.Fatal(err)
	}
	base, err := os.ReadFile(cp.NodeletConfig)
	if err != nil {
		t.Fatal(err)
	}
	k := &clusterKubelet{node: node, port: freePort(t), rootDir: filepath.Join(work, "root"), cp: cp}
	configFile := filepath.Join(work, "config.yaml")
	machine := kubeletMachineConfig(shared.endpoint, filepath.Join(work, "logs"), freePort(t), "0", k.port, shared.cgroupRoot)
	for _, line := range config {
		machine += line + "\n"
	}
	if err := os.WriteFile(configFile, append(base, machine...), 0o600); err != nil {
		t.Fatal(err)
	}
	a := &clusterAgent{label: "kubelet", node: node, work: work, logPath: filepath.Join(work, "kubelet.log")}
	a.command = func() *exec.Cmd {
		return exec.Command(bin, "--config", configFile, "--root-dir", k.rootDir, "--cert-dir", filepath.Join(k.rootDir, "pki"),
			"--bootstrap-kubeconfig", cp.BootstrapKubeconfig, "--kubeconfig", filepath.Join(k.rootDir, "kubelet.kubeconfig"),
			"--hostname-override", node, "--node-ip", conformanceNodeIP(t), "--v", kubeletVerbosity())
	}
	if err := a.start(); err != nil {
		t.Fatal(err)
	}
	k.agent = a
	t.Cleanup(func() {
		deleteNode(cp.Admin, node)
		if err := a.stop(); err != nil {
			t.Logf("kubelet: %v", err)
		}
		if t.Failed() {
			t.Logf("the end of the kubelet's log:\n%s", tail(a.logPath, 30))
		}
	})
	waitNodeReady(t, cp.Admin, node, 2*time.Minute)
	return k
}
