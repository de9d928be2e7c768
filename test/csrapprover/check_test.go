package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"net"
	"net/url"
	"strings"
	"testing"

	certificatesv1 "k8s.io/api/certificates/v1"
	v1 "k8s.io/api/core/v1"
)

func TestCheck(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	request := func(tmpl x509.CertificateRequest) []byte {
		der, err := x509.CreateCertificateRequest(rand.Reader, &tmpl, key)
		if err != nil {
			t.Fatal(err)
		}
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
	}
	subject := pkix.Name{CommonName: "system:node:n1", Organization: []string{"system:nodes"}}
	good := x509.CertificateRequest{Subject: subject, DNSNames: []string{"n1"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	csr := func(mod func(*certificatesv1.CertificateSigningRequest)) *certificatesv1.CertificateSigningRequest {
		c := &certificatesv1.CertificateSigningRequest{Spec: certificatesv1.CertificateSigningRequestSpec{
			SignerName: certificatesv1.KubeletServingSignerName,
			Username:   "system:node:n1",
			Groups:     []string{"system:nodes", "system:authenticated"},
			Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth},
			Request:    request(good),
		}}
		if mod != nil {
			mod(c)
		}
		return c
	}
	withRequest := func(mod func(*x509.CertificateRequest)) func(*certificatesv1.CertificateSigningRequest) {
		return func(c *certificatesv1.CertificateSigningRequest) {
			r := good
			r.Subject.Organization = append([]string(nil), good.Subject.Organization...)
			mod(&r)
			c.Spec.Request = request(r)
		}
	}
	node := &v1.Node{Status: v1.NodeStatus{Addresses: []v1.NodeAddress{
		{Type: v1.NodeInternalIP, Address: "127.0.0.1"}, {Type: v1.NodeHostName, Address: "n1"}}}}

	for _, tc := range []struct {
		name string
		csr  *certificatesv1.CertificateSigningRequest
		node *v1.Node
		want verdict
		why  string // in the reason
	}{
		{"the node's own", csr(nil), node, approve, "n1"},
		{"with key encipherment", csr(func(c *certificatesv1.CertificateSigningRequest) {
			c.Spec.Usages = append(c.Spec.Usages, certificatesv1.UsageKeyEncipherment)
		}), node, approve, ""},
		{"another signer", csr(func(c *certificatesv1.CertificateSigningRequest) {
			c.Spec.SignerName = certificatesv1.KubeAPIServerClientKubeletSignerName
		}), node, skip, ""},
		{"already approved", csr(func(c *certificatesv1.CertificateSigningRequest) {
			c.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{{Type: certificatesv1.CertificateApproved}}
		}), node, skip, ""},
		{"node not registered", csr(nil), nil, wait, "not registered"},
		{"not a node", csr(func(c *certificatesv1.CertificateSigningRequest) {
			c.Spec.Username, c.Spec.Groups = "kubernetes-admin", []string{"system:masters"}
		}), node, deny, "not by a node"},
		{"node user outside system:nodes", csr(func(c *certificatesv1.CertificateSigningRequest) {
			c.Spec.Groups = []string{"system:authenticated"}
		}), node, deny, "not by a node"},
		{"for another node", csr(func(c *certificatesv1.CertificateSigningRequest) {
			c.Spec.Username = "system:node:n2"
		}), node, deny, "subject"},
		{"more in the subject", csr(withRequest(func(r *x509.CertificateRequest) {
			r.Subject.OrganizationalUnit = []string{"x"}
		})), node, deny, "subject"},
		{"other organization", csr(withRequest(func(r *x509.CertificateRequest) {
			r.Subject.Organization = []string{"system:masters"}
		})), node, deny, "subject"},
		{"client auth", csr(func(c *certificatesv1.CertificateSigningRequest) {
			c.Spec.Usages = append(c.Spec.Usages, certificatesv1.UsageClientAuth)
		}), node, deny, "usages"},
		{"no server auth", csr(func(c *certificatesv1.CertificateSigningRequest) {
			c.Spec.Usages = []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageKeyEncipherment}
		}), node, deny, "usages"},
		{"an IP not the node's", csr(withRequest(func(r *x509.CertificateRequest) {
			r.IPAddresses = append(r.IPAddresses, net.ParseIP("10.1.2.3"))
		})), node, deny, "10.1.2.3"},
		{"a DNS name not the node's", csr(withRequest(func(r *x509.CertificateRequest) {
			r.DNSNames = []string{"kubernetes.default.svc"}
		})), node, deny, "kubernetes.default.svc"},
		{"a URI", csr(withRequest(func(r *x509.CertificateRequest) {
			r.URIs = []*url.URL{{Scheme: "spiffe", Host: "x"}}
		})), node, deny, "URI"},
		{"no names", csr(withRequest(func(r *x509.CertificateRequest) {
			r.DNSNames, r.IPAddresses = nil, nil
		})), node, deny, "no DNS name"},
		{"not PEM", csr(func(c *certificatesv1.CertificateSigningRequest) {
			c.Spec.Request = []byte("junk")
		}), node, deny, "PEM"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, why := check(tc.csr, tc.node)
			if got != tc.want || !strings.Contains(why, tc.why) {
				t.Errorf("check = %v %q, want %v with %q", got, why, tc.want, tc.why)
			}
		})
	}
}
