//go:build e2e

package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// The control plane the cluster tests run against is configured as a
// production (kubeadm) cluster is: client certificates from the cluster CA,
// bootstrap tokens with their RBAC only, the root CA published into every
// namespace, and node client CSRs of bootstrap tokens approved and signed by
// the controller manager. A kubelet's TLS bootstrap works against it, done
// here by hand with the API calls the kubelet makes.
func TestClusterControlPlane(t *testing.T) {
	cp := startCluster(t)
	cp.logsOnFailure(t)
	ctx := clusterContext(t, 3*time.Minute)

	// The admin (O=system:masters) sees the namespaces the API server makes.
	nss, err := cp.Admin.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("the admin lists namespaces: %v", err)
	}
	var names []string
	for _, ns := range nss.Items {
		names = append(names, ns.Name)
	}
	for _, want := range []string{"default", "kube-system", "kube-public", "kube-node-lease"} {
		if !slices.Contains(names, want) {
			t.Errorf("namespaces %v: no %s", names, want)
		}
	}

	// The root-CA publisher puts the cluster CA into every namespace.
	ca, err := os.ReadFile(cp.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "ConfigMap default/kube-root-ca.crt", func() error {
		cm, err := cp.Admin.CoreV1().ConfigMaps("default").Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if got := cm.Data["ca.crt"]; strings.TrimSpace(got) != strings.TrimSpace(string(ca)) {
			return fmt.Errorf("ca.crt is not the cluster CA:\n%s", got)
		}
		return nil
	})

	// The bootstrap token is a bootstrap identity, with the extra group of
	// its Secret, and may not read Secrets.
	boot := cp.client(t, cp.BootstrapKubeconfig)
	bootUser := "system:bootstrap:" + cp.TokenID
	checkIdentity(t, boot, bootUser, "system:bootstrappers", "system:bootstrappers:nodelet")
	if _, err := boot.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the bootstrap token lists secrets in kube-system: got %v, want Forbidden", err)
	}
	if _, err := boot.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the bootstrap token lists nodes: got %v, want Forbidden", err)
	}

	// A kubelet's client CSR from the bootstrap identity is approved and
	// signed by the controller manager, with no one else involved.
	node := "e2e-bootstrap-" + randomHex(t, 4)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: "system:node:" + node, Organization: []string{"system:nodes"}},
	}, key)
	if err != nil {
		t.Fatal(err)
	}
	csr, err := boot.CertificatesV1().CertificateSigningRequests().Create(ctx, &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "node-csr-"},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
			SignerName: certificatesv1.KubeAPIServerClientKubeletSignerName,
			Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("the bootstrap token creates a CSR: %v", err)
	}
	t.Cleanup(func() {
		cp.Admin.CertificatesV1().CertificateSigningRequests().Delete(clusterContext(t, time.Minute), csr.Name, metav1.DeleteOptions{})
	})
	if csr.Spec.Username != bootUser {
		t.Errorf("CSR %s: requested by %q, want %q", csr.Name, csr.Spec.Username, bootUser)
	}
	var signed []byte
	eventually(t, time.Minute, "CSR "+csr.Name+" approved and signed", func() error {
		// As the kubelet does, the bootstrap identity reads its CSR back.
		got, err := boot.CertificatesV1().CertificateSigningRequests().Get(ctx, csr.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		approved := false
		for _, c := range got.Status.Conditions {
			if c.Type == certificatesv1.CertificateDenied || c.Type == certificatesv1.CertificateFailed {
				return fmt.Errorf("%s: %s: %s", c.Type, c.Reason, c.Message)
			}
			approved = approved || (c.Type == certificatesv1.CertificateApproved && c.Status == v1.ConditionTrue)
		}
		if !approved || len(got.Status.Certificate) == 0 {
			return fmt.Errorf("approved %v, %d bytes of certificate; conditions %v", approved, len(got.Status.Certificate), got.Status.Conditions)
		}
		signed = got.Status.Certificate
		return nil
	})
	cert := parseCertificate(t, signed)
	if cert.Subject.CommonName != "system:node:"+node || !slices.Equal(cert.Subject.Organization, []string{"system:nodes"}) {
		t.Errorf("certificate subject %q, want CN=system:node:%s, O=system:nodes", cert.Subject, node)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(ca) {
		t.Fatalf("no certificate in %s", cp.CAFile)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("the signed certificate is not a client certificate of the cluster CA: %v", err)
	}

	// The signed certificate is the node's identity, which the Node
	// authorizer keeps from Secrets no pod of the node uses.
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	nodeClient := clientFor(t, &rest.Config{Host: cp.Server, TLSClientConfig: rest.TLSClientConfig{
		CAFile:   cp.CAFile,
		CertData: signed,
		KeyData:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}})
	checkIdentity(t, nodeClient, "system:node:"+node, "system:nodes")
	if _, err := nodeClient.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the node lists secrets in kube-system: got %v, want Forbidden", err)
	}
}

// checkIdentity asks the API server who the client is (SelfSubjectReview).
func checkIdentity(t *testing.T, c kubernetes.Interface, user string, groups ...string) {
	t.Helper()
	review, err := c.AuthenticationV1().SelfSubjectReviews().Create(clusterContext(t, time.Minute), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Errorf("SelfSubjectReview as %s: %v", user, err)
		return
	}
	info := review.Status.UserInfo
	if info.Username != user {
		t.Errorf("authenticated as %q, want %q", info.Username, user)
	}
	for _, g := range groups {
		if !slices.Contains(info.Groups, g) {
			t.Errorf("%s: groups %v, want %s among them", user, info.Groups, g)
		}
	}
}

func parseCertificate(t *testing.T, data []byte) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE" {
		t.Fatalf("not a PEM certificate: %q", data)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

func randomHex(t testing.TB, n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}
