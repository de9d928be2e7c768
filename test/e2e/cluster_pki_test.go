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
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// The control plane's PKI is one a production cluster could copy: the
// bootstrap token expires after kubeadm's 24 hours (and up replaces an
// expired one), the API server verifies the serving certificates of
// nodes against the cluster CA, and those come from kubelet-serving CSRs
// that hack/cluster.sh's approver approves only for a node's own names.
func TestClusterPKI(t *testing.T) {
	cp := startCluster(t)
	cp.logsOnFailure(t)
	ctx := clusterContext(t, 5*time.Minute)

	// The bootstrap token expires in about 24 hours.
	checkTokenExpiration(t, cp)

	// The API server refuses a node whose serving certificate is not the
	// cluster CA's: a "kubelet" with a self-signed certificate gets no
	// request for a pod's log.
	refusesSelfSigned(t, cp)

	// nodelet's serving certificate: issued through its kubelet-serving
	// CSR, which the approver approved, for its name and node IP; the
	// port serves it.
	const name = "pki-a"
	n := joinNode(t, cp, name)
	csrs, err := cp.Admin.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var issued []byte
	for _, csr := range csrs.Items {
		if csr.Spec.SignerName != certificatesv1.KubeletServingSignerName || csr.Spec.Username != "system:node:"+name {
			continue
		}
		if !slices.Contains(csr.Spec.Groups, "system:nodes") {
			t.Errorf("CSR %s: groups %v", csr.Name, csr.Spec.Groups)
		}
		if slices.ContainsFunc(csr.Status.Conditions, func(c certificatesv1.CertificateSigningRequestCondition) bool {
			return c.Type == certificatesv1.CertificateApproved && c.Reason == "NodeServingCertificate"
		}) && len(csr.Status.Certificate) > 0 {
			issued = csr.Status.Certificate
		}
	}
	if issued == nil {
		t.Fatalf("no kubelet-serving CSR of system:node:%s approved by the approver and issued", name)
	}
	cert := parseCertificate(t, issued)
	if cert.Subject.CommonName != "system:node:"+name || !slices.Equal(cert.Subject.Organization, []string{"system:nodes"}) ||
		!slices.Equal(cert.DNSNames, []string{name}) || len(cert.IPAddresses) != 1 || !cert.IPAddresses[0].Equal(net.IPv4(127, 0, 0, 1)) {
		t.Errorf("serving certificate: subject %q, DNS %v, IPs %v", cert.Subject, cert.DNSNames, cert.IPAddresses)
	}
	roots := caPool(t, cp)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: "127.0.0.1", KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Errorf("the issued serving certificate does not verify for 127.0.0.1: %v", err)
	}
	addr := net.JoinHostPort("127.0.0.1", lastFlag(n.args, "--port"))
	conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatalf("TLS to %s with the cluster CA: %v", addr, err)
	}
	served := conn.ConnectionState().PeerCertificates[0]
	conn.Close()
	if !served.Equal(cert) {
		t.Errorf("%s serves %q (serial %v), not the certificate its CSR was issued (serial %v)", addr, served.Subject, served.SerialNumber, cert.SerialNumber)
	}

	// The approver denies kubelet-serving CSRs that are not a node's for
	// its own addresses: one a node sends with an IP that is not its own,
	// one the admin sends for the node.
	nodeClient := cp.client(t, filepath.Join(n.rootDir, "kubelet.kubeconfig"))
	checkIdentity(t, nodeClient, "system:node:"+name, "system:nodes")
	foreign := net.ParseIP("10.254.254.254")
	denied(t, cp, servingCSR(t, nodeClient, name, foreign), foreign.String())
	denied(t, cp, servingCSR(t, cp.Admin, name, nil), "not by a node")

	// up replaces an expired bootstrap token: a new one, valid for 24
	// hours, in bootstrap.kubeconfig; the old one's Secret deleted.
	renewsExpiredToken(t, cp)
}

func caPool(t *testing.T, cp *controlPlane) *x509.CertPool {
	t.Helper()
	roots, err := cp.roots()
	if err != nil {
		t.Fatal(err)
	}
	return roots
}

// checkTokenExpiration: the Secret of the current bootstrap token expires
// in 24 hours less the time since up made it.
func checkTokenExpiration(t *testing.T, cp *controlPlane) {
	t.Helper()
	s, err := cp.Admin.CoreV1().Secrets("kube-system").Get(clusterContext(t, time.Minute), "bootstrap-token-"+cp.TokenID, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the bootstrap token's Secret: %v", err)
	}
	exp, err := time.Parse(time.RFC3339, string(s.Data["expiration"]))
	if err != nil {
		t.Fatalf("the bootstrap token's expiration %q: %v", s.Data["expiration"], err)
	}
	if left := time.Until(exp); left < 23*time.Hour || left > 24*time.Hour+time.Minute {
		t.Errorf("the bootstrap token expires at %v, in %v; want about 24h", exp, left.Round(time.Second))
	}
}

// refusesSelfSigned registers a Node whose "kubelet" on 127.0.0.1 serves a
// self-signed certificate and binds a pod to it: the API server does not
// accept the certificate, so kubectl logs of the pod fails with an x509
// error instead of showing what the fake kubelet answers.
func refusesSelfSigned(t *testing.T, cp *controlPlane) {
	t.Helper()
	ctx := clusterContext(t, time.Minute)
	fake := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "fake kubelet log\n")
	}))
	t.Cleanup(fake.Close)
	_, portStr, _ := net.SplitHostPort(fake.Listener.Addr().String())
	port, _ := strconv.Atoi(portStr)
	const node, pod = "pki-self-signed", "pki-self-signed"
	if _, err := cp.Admin.CoreV1().Nodes().Create(ctx, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteNode(cp.Admin, node) })
	// A merge patch: the node lifecycle controller updates the new Node too.
	status := fmt.Sprintf(`{"status":{"addresses":[{"type":"InternalIP","address":"127.0.0.1"},{"type":"Hostname","address":%q}],`+
		`"daemonEndpoints":{"kubeletEndpoint":{"Port":%d}}}}`, node, port)
	if _, err := cp.Admin.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(status), metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
	p := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: pod, Namespace: "default"},
		Spec:       v1.PodSpec{NodeName: node, Containers: []v1.Container{{Name: "c", Image: "example.invalid/none"}}},
	}
	if _, err := cp.Admin.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// deleteNode (above) deletes the pod too, without a grace period.
	out, err := cp.Admin.CoreV1().Pods("default").GetLogs(pod, &v1.PodLogOptions{Container: "c"}).DoRaw(ctx)
	// The API server's reason is in the Status it answers with.
	if err == nil || !strings.Contains(err.Error()+string(out), "x509: certificate signed by unknown authority") {
		t.Errorf("logs of a pod on a node with a self-signed serving certificate: %v %q; want an x509 error", err, out)
	}
}

// servingCSR sends a kubelet-serving CSR for node with client c: subject
// and usages right, DNS name the node's, IP addresses 127.0.0.1 and extra.
func servingCSR(t *testing.T, c kubernetes.Interface, node string, extra net.IP) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ips := []net.IP{net.IPv4(127, 0, 0, 1)}
	if extra != nil {
		ips = append(ips, extra)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject:  pkix.Name{CommonName: "system:node:" + node, Organization: []string{"system:nodes"}},
		DNSNames: []string{node}, IPAddresses: ips,
	}, key)
	if err != nil {
		t.Fatal(err)
	}
	ctx := clusterContext(t, time.Minute)
	csr, err := c.CertificatesV1().CertificateSigningRequests().Create(ctx, &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "pki-test-"},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
			SignerName: certificatesv1.KubeletServingSignerName,
			Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create a kubelet-serving CSR: %v", err)
	}
	t.Cleanup(func() {
		cp := sharedCluster.cp
		if cp != nil {
			cp.Admin.CertificatesV1().CertificateSigningRequests().Delete(context.Background(), csr.Name, metav1.DeleteOptions{})
		}
	})
	return csr.Name
}

// denied waits for CSR name to be denied by the approver, the reason
// mentioning why, and never approved.
func denied(t *testing.T, cp *controlPlane, name, why string) {
	t.Helper()
	eventually(t, 30*time.Second, "CSR "+name+" denied", func() error {
		csr, err := cp.Admin.CertificatesV1().CertificateSigningRequests().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range csr.Status.Conditions {
			switch c.Type {
			case certificatesv1.CertificateApproved:
				t.Fatalf("CSR %s approved: %s", name, c.Message)
			case certificatesv1.CertificateDenied:
				if !strings.Contains(c.Message, why) {
					t.Errorf("CSR %s denied for %q; want %q in it", name, c.Message, why)
				}
				return nil
			}
		}
		return fmt.Errorf("conditions %v", csr.Status.Conditions)
	})
}

// renewsExpiredToken makes the current token look expired to up (its
// pki/bootstrap-token.expiration in the past) and runs up again.
func renewsExpiredToken(t *testing.T, cp *controlPlane) {
	t.Helper()
	old := cp.TokenID
	oldClient := cp.client(t, cp.BootstrapKubeconfig)
	checkIdentity(t, oldClient, "system:bootstrap:"+old, "system:bootstrappers")
	exp := filepath.Join(cp.Dir, "pki", "bootstrap-token.expiration")
	if err := os.WriteFile(exp, []byte(time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if out, err := cp.script("up"); err != nil {
		t.Fatalf("hack/cluster.sh up on the running control plane: %v\n%s", err, out)
	}
	t.Logf("up on the running control plane, with a new token: %v", time.Since(start).Round(100*time.Millisecond))
	if err := cp.readToken(); err != nil {
		t.Fatal(err)
	}
	if cp.TokenID == old {
		t.Fatalf("up kept the expired bootstrap token %s", old)
	}
	checkTokenExpiration(t, cp)
	ctx := clusterContext(t, time.Minute)
	if _, err := cp.Admin.CoreV1().Secrets("kube-system").Get(ctx, "bootstrap-token-"+old, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the replaced token's Secret: %v, want NotFound", err)
	}
	checkIdentity(t, cp.client(t, cp.BootstrapKubeconfig), "system:bootstrap:"+cp.TokenID, "system:bootstrappers")
	eventually(t, 30*time.Second, "the replaced token refused", func() error {
		_, err := oldClient.CoreV1().Namespaces().Get(context.Background(), "default", metav1.GetOptions{})
		if apierrors.IsUnauthorized(err) {
			return nil
		}
		return fmt.Errorf("the replaced token: %v, want Unauthorized", err)
	})
}
