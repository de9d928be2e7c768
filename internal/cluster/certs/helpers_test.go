package certs

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"flag"
	"fmt"
	"log/slog"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/util/keyutil"
)

var rewrite = flag.Bool("rewrite", false, "rewrite golden files in testdata/")

// testLog sends log lines to t.
func testLog(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// testCA signs certificates, as kube-controller-manager's csrsigning
// controller would.
type testCA struct {
	key     *ecdsa.PrivateKey
	cert    *x509.Certificate
	certPEM []byte
	serial  atomic.Int64
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	ca := &testCA{key: key, cert: cert, certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
	ca.serial.Store(100)
	return ca
}

// issue signs a certificate for pub valid from notBefore to notAfter.
func (ca *testCA) issue(t *testing.T, subject pkix.Name, pub crypto.PublicKey, notBefore, notAfter time.Time, usage x509.ExtKeyUsage, req *x509.CertificateRequest) []byte {
	t.Helper()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(ca.serial.Add(1)), Subject: subject,
		NotBefore: notBefore, NotAfter: notAfter,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
	}
	if req != nil {
		tmpl.DNSNames, tmpl.IPAddresses = req.DNSNames, req.IPAddresses
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, pub, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// signCSR issues the certificate csr asks for, valid for a day.
func (ca *testCA) signCSR(t *testing.T, csr *certificatesv1.CertificateSigningRequest) []byte {
	t.Helper()
	req := parseRequest(t, csr)
	usage := x509.ExtKeyUsageClientAuth
	if csr.Spec.SignerName == ServingSigner {
		usage = x509.ExtKeyUsageServerAuth
	}
	now := time.Now()
	return ca.issue(t, req.Subject, req.PublicKey, now.Add(-time.Minute), now.Add(24*time.Hour), usage, req)
}

// clientPair makes a client certificate and key PEM valid from notBefore
// to notAfter.
func (ca *testCA) clientPair(t *testing.T, node string, notBefore, notAfter time.Time) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err = keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		t.Fatal(err)
	}
	return ca.issue(t, nodeSubject(node), key.Public(), notBefore, notAfter, x509.ExtKeyUsageClientAuth, nil), keyPEM
}

func parseRequest(t *testing.T, csr *certificatesv1.CertificateSigningRequest) *x509.CertificateRequest {
	t.Helper()
	block, _ := pem.Decode(csr.Spec.Request)
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		t.Fatalf("CSR %s: request is not a PEM CERTIFICATE REQUEST", csr.Name)
	}
	req, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// csrServer is a fake API server's CSR side: the fake clientset with a
// reactor that names created CSRs (the fake does not do generateName),
// records them, and answers as the test wants.
type csrServer struct {
	t      *testing.T
	ca     *testCA
	client *fake.Clientset
	mu     sync.Mutex
	// created are the CSRs created, in order.
	created []*certificatesv1.CertificateSigningRequest
	// answer, when set, decides what happens to a created CSR: it may
	// set its status (approve and issue, deny) or return an error.
	answer func(csr *certificatesv1.CertificateSigningRequest) error
	n      int
}

func newCSRServer(t *testing.T, ca *testCA) *csrServer {
	s := &csrServer{t: t, ca: ca, client: fake.NewClientset()}
	s.client.PrependReactor("create", "certificatesigningrequests", func(action k8stesting.Action) (bool, runtime.Object, error) {
		csr := action.(k8stesting.CreateAction).GetObject().(*certificatesv1.CertificateSigningRequest)
		s.mu.Lock()
		defer s.mu.Unlock()
		s.n++
		if csr.Name == "" {
			csr.Name = fmt.Sprintf("%s%05d", csr.GenerateName, s.n)
		}
		csr.UID = types.UID(fmt.Sprintf("uid-%d", s.n))
		if s.answer != nil {
			if err := s.answer(csr); err != nil {
				return true, nil, err
			}
		}
		s.created = append(s.created, csr.DeepCopy())
		return false, nil, nil // the tracker stores it
	})
	return s
}

// approveAll makes the server approve and issue every CSR at once, as
// kube-controller-manager does for node client CSRs.
func (s *csrServer) approveAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.answer = func(csr *certificatesv1.CertificateSigningRequest) error {
		s.issue(csr)
		return nil
	}
}

func (s *csrServer) issue(csr *certificatesv1.CertificateSigningRequest) {
	csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type: certificatesv1.CertificateApproved, Status: "True", Reason: "AutoApproved", Message: "test",
	})
	csr.Status.Certificate = s.ca.signCSR(s.t, csr)
}

func (s *csrServer) createdCSRs() []*certificatesv1.CertificateSigningRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*certificatesv1.CertificateSigningRequest(nil), s.created...)
}

// newClientset is Deps.NewClientset: every configuration gets the fake;
// the configurations asked for are recorded.
func (s *csrServer) newClientset(seen *[]*rest.Config) func(*rest.Config) (kubernetes.Interface, error) {
	var mu sync.Mutex
	return func(c *rest.Config) (kubernetes.Interface, error) {
		mu.Lock()
		defer mu.Unlock()
		if seen != nil {
			*seen = append(*seen, c)
		}
		return s.client, nil
	}
}

// approvePending approves and issues every CSR not yet approved, as an
// administrator would.
func (s *csrServer) approvePending(t *testing.T) int {
	t.Helper()
	list, err := s.client.CertificatesV1().CertificateSigningRequests().List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for i := range list.Items {
		csr := &list.Items[i]
		if len(csr.Status.Conditions) > 0 {
			continue
		}
		s.issue(csr)
		if _, err := s.client.CertificatesV1().CertificateSigningRequests().UpdateStatus(t.Context(), csr, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		n++
	}
	return n
}

// countActions counts the API calls of verb made so far.
func (s *csrServer) countActions(verb string) int {
	n := 0
	for _, a := range s.client.Actions() {
		if a.GetVerb() == verb {
			n++
		}
	}
	return n
}

func forbidden(csr *certificatesv1.CertificateSigningRequest) error {
	return apierrors.NewForbidden(certificatesv1.Resource("certificatesigningrequests"), csr.Name, fmt.Errorf("no RBAC"))
}

// writeKubeconfigFile writes a kubeconfig for server with a token or a
// client certificate pair (as data or as files).
func writeTestKubeconfig(t *testing.T, path, server string, caPEM []byte, auth clientcmdapi.AuthInfo) {
	t.Helper()
	kc := clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{"c": {Server: server, CertificateAuthorityData: caPEM}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{"u": &auth},
		Contexts:       map[string]*clientcmdapi.Context{"x": {Cluster: "c", AuthInfo: "u"}},
		CurrentContext: "x",
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := clientcmd.WriteToFile(kc, path); err != nil {
		t.Fatal(err)
	}
}

func rsaKey(t *testing.T) *rsa.PrivateKey {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// describeCSR renders what a CSR asks for, for golden files: the parts
// that do not change from run to run (the name is checked to be the
// digest of the request when it is one, and shown as its form).
func describeCSR(t *testing.T, csr *certificatesv1.CertificateSigningRequest) string {
	t.Helper()
	req := parseRequest(t, csr)
	var b strings.Builder
	name := csr.Name
	if strings.HasPrefix(name, "node-csr-") {
		want, err := csrName(req.PublicKey, req.Subject, csr.Spec.Usages)
		if err != nil {
			t.Fatal(err)
		}
		if name != want {
			t.Errorf("CSR name %s is not the digest of its request (%s)", name, want)
		}
		name = "node-csr-<digest of key, subject, usages>"
	}
	if csr.GenerateName != "" {
		name = "generateName " + csr.GenerateName
	}
	fmt.Fprintf(&b, "name: %s\n", name)
	fmt.Fprintf(&b, "signerName: %s\n", csr.Spec.SignerName)
	usages := make([]string, len(csr.Spec.Usages))
	for i, u := range csr.Spec.Usages {
		usages[i] = string(u)
	}
	fmt.Fprintf(&b, "usages: %s\n", strings.Join(usages, ", "))
	exp := "unset"
	if csr.Spec.ExpirationSeconds != nil {
		exp = fmt.Sprint(*csr.Spec.ExpirationSeconds)
	}
	fmt.Fprintf(&b, "expirationSeconds: %s\n", exp)
	fmt.Fprintf(&b, "subject: CN=%s O=%s\n", req.Subject.CommonName, strings.Join(req.Subject.Organization, ","))
	key := fmt.Sprintf("%T", req.PublicKey)
	if k, ok := req.PublicKey.(*ecdsa.PublicKey); ok {
		key = "ECDSA " + k.Curve.Params().Name
	}
	fmt.Fprintf(&b, "key: %s\n", key)
	ips := make([]string, len(req.IPAddresses))
	for i, ip := range req.IPAddresses {
		ips[i] = ip.String()
	}
	fmt.Fprintf(&b, "dnsNames: [%s]\n", strings.Join(req.DNSNames, " "))
	fmt.Fprintf(&b, "ipAddresses: [%s]\n", strings.Join(ips, " "))
	fmt.Fprintf(&b, "emails: %d, uris: %d\n", len(req.EmailAddresses), len(req.URIs))
	sig := "valid"
	if err := req.CheckSignature(); err != nil {
		sig = err.Error()
	}
	fmt.Fprintf(&b, "signature: %s\n", sig)
	return b.String()
}

// checkGolden compares got with testdata/name (go test -rewrite writes it).
func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *rewrite {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -rewrite to write it)", err)
	}
	if got != string(want) {
		t.Errorf("differs from %s (run go test -rewrite to accept):\n--- got\n%s--- want\n%s", path, got, want)
	}
}

func fileMode(t *testing.T, path string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}
