package certs

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	v1 "k8s.io/api/core/v1"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/base/testutil"
)

// Until the serving CSR is issued, GetCertificate fails (the handshake
// does not serve a wrong certificate); once issued, it serves it, for the
// node's name and IPs.
func TestServingCertificate(t *testing.T) {
	ca := newTestCA(t)
	srv := newCSRServer(t, ca)
	dir := t.TempDir()
	s, err := NewServing(ServingConfig{NodeName: "node-a", CertDir: dir, Addresses: StaticAddresses("node-a", "10.0.0.5", "fd00::5")},
		srv.client, Deps{Clock: testingclock.NewFakeClock(time.Now()), Log: testLog(t)})
	if err != nil {
		t.Fatal(err)
	}
	if c, err := s.GetCertificate(&tls.ClientHelloInfo{}); c != nil || err == nil {
		t.Fatalf("before Run: %v, %v; want no certificate", c, err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	testutil.Eventually(t, "the serving CSR is created", func() bool { return len(srv.createdCSRs()) == 1 })
	if c, err := s.GetCertificate(&tls.ClientHelloInfo{}); c != nil || err == nil || !strings.Contains(err.Error(), "kubelet-serving") {
		t.Fatalf("while the CSR waits: %v, %v; want an error naming the signer", c, err)
	}
	checkGolden(t, "serving-csr.golden", describeCSR(t, srv.createdCSRs()[0]))
	if n := srv.approvePending(t); n != 1 {
		t.Fatalf("approved %d", n)
	}
	var got *tls.Certificate
	testutil.Eventually(t, "the serving certificate is issued", func() bool {
		got, _ = s.GetCertificate(&tls.ClientHelloInfo{})
		return got != nil
	})
	if got.Leaf.Subject.CommonName != "system:node:node-a" || !slices.Equal(got.Leaf.DNSNames, []string{"node-a"}) || len(got.Leaf.IPAddresses) != 2 {
		t.Errorf("serving certificate %s dns %v ips %v", got.Leaf.Subject, got.Leaf.DNSNames, got.Leaf.IPAddresses)
	}
	target, err := os.Readlink(filepath.Join(dir, "kubelet-server-current.pem"))
	if err != nil {
		t.Fatal(err)
	}
	target = filepath.Join(dir, target) // the store links within the directory
	if m := fileMode(t, target); m != 0o600 {
		t.Errorf("serving pair mode %o", m)
	}
	cancel()
	<-done
}

// A serving certificate already in the cert dir is served at once after a
// restart, with no new CSR.
func TestServingCertificateAfterRestart(t *testing.T) {
	ca := newTestCA(t)
	srv := newCSRServer(t, ca)
	srv.approveAll()
	dir := t.TempDir()
	deps := Deps{Log: testLog(t)}
	cfg := ServingConfig{NodeName: "node-a", CertDir: dir, Addresses: StaticAddresses("node-a", "10.0.0.5")}
	s, err := NewServing(cfg, srv.client, deps)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	testutil.Eventually(t, "the serving certificate is issued", func() bool { c, _ := s.GetCertificate(nil); return c != nil })
	cancel()
	<-done
	first, _ := s.GetCertificate(nil)

	again, err := NewServing(cfg, srv.client, deps)
	if err != nil {
		t.Fatal(err)
	}
	c, err := again.GetCertificate(nil)
	if err != nil || c.Leaf.SerialNumber.Cmp(first.Leaf.SerialNumber) != 0 {
		t.Errorf("after restart: %v, %v; want the stored certificate", c, err)
	}
	if n := len(srv.createdCSRs()); n != 1 {
		t.Errorf("%d CSRs, want 1", n)
	}
}

func TestServingTemplate(t *testing.T) {
	if got := servingTemplate("n", nil); got != nil {
		t.Errorf("no addresses: %v, want no request", got)
	}
	got := servingTemplate("n", []v1.NodeAddress{
		{Type: v1.NodeInternalIP, Address: "10.0.0.5"},
		{Type: v1.NodeHostName, Address: "n"},
		{Type: v1.NodeExternalIP, Address: "10.0.0.5"},
		{Type: v1.NodeExternalIP, Address: "192.0.2.1"},
		{Type: v1.NodeInternalDNS, Address: "n.internal"},
		{Type: v1.NodeHostName, Address: "10.0.0.9"},
		{Type: v1.NodeInternalIP, Address: "not-an-ip"},
	})
	if got.Subject.CommonName != "system:node:n" || !slices.Equal(got.Subject.Organization, []string{"system:nodes"}) {
		t.Errorf("subject %v", got.Subject)
	}
	if !slices.Equal(got.DNSNames, []string{"n", "n.internal"}) {
		t.Errorf("dns %v", got.DNSNames)
	}
	var ips []string
	for _, ip := range got.IPAddresses {
		ips = append(ips, ip.String())
	}
	if !slices.Equal(ips, []string{"10.0.0.5", "10.0.0.9", "192.0.2.1"}) {
		t.Errorf("ips %v", ips)
	}
}

// Key encipherment only for RSA keys, as the approvers want.
func TestUsages(t *testing.T) {
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	rsa := rsaKey(t)
	for _, tc := range []struct {
		signer string
		rsa    bool
		want   []certificatesv1.KeyUsage
	}{
		{ClientSigner, false, []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth}},
		{ClientSigner, true, []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageKeyEncipherment, certificatesv1.UsageClientAuth}},
		{ServingSigner, false, []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth}},
		{ServingSigner, true, []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageKeyEncipherment, certificatesv1.UsageServerAuth}},
	} {
		var got []certificatesv1.KeyUsage
		if tc.rsa {
			got = usagesFor(tc.signer, rsa)
		} else {
			got = usagesFor(tc.signer, ec)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s rsa=%v: %v, want %v", tc.signer, tc.rsa, got, tc.want)
		}
	}
}

func TestStaticAddresses(t *testing.T) {
	got := StaticAddresses("node-a", "10.0.0.5", "")()
	want := []v1.NodeAddress{{Type: v1.NodeHostName, Address: "node-a"}, {Type: v1.NodeInternalIP, Address: "10.0.0.5"}}
	if !slices.Equal(got, want) {
		t.Errorf("%v", got)
	}
}
