package main

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"slices"
	"strings"

	certificatesv1 "k8s.io/api/certificates/v1"
	v1 "k8s.io/api/core/v1"
)

// verdict is what the approver does with a CSR.
type verdict int

const (
	// skip: not a kubernetes.io/kubelet-serving CSR, or already decided.
	skip verdict = iota
	// wait: it may be approvable later (its Node is not registered yet).
	wait
	approve
	deny
)

func (v verdict) String() string {
	return [...]string{"skip", "wait", "approve", "deny"}[v]
}

const nodePrefix = "system:node:"

// nodeOf is the node a CSR is for: the requester's node name, "" if the
// requester is not a node.
func nodeOf(csr *certificatesv1.CertificateSigningRequest) string {
	name, ok := strings.CutPrefix(csr.Spec.Username, nodePrefix)
	if !ok {
		return ""
	}
	return name
}

// decided says whether a CSR was approved, denied or failed already.
func decided(csr *certificatesv1.CertificateSigningRequest) bool {
	return slices.ContainsFunc(csr.Status.Conditions, func(c certificatesv1.CertificateSigningRequestCondition) bool {
		return c.Type == certificatesv1.CertificateApproved || c.Type == certificatesv1.CertificateDenied ||
			c.Type == certificatesv1.CertificateFailed
	})
}

// The usages of a kubelet serving certificate, as the API server's
// validation of the signer has them: key encipherment only for RSA keys.
var servingUsages = [][]certificatesv1.KeyUsage{
	{certificatesv1.UsageDigitalSignature, certificatesv1.UsageKeyEncipherment, certificatesv1.UsageServerAuth},
	{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth},
}

// check decides on a CSR. node is the requesting node's Node, nil if it is
// not registered. It approves only a kubernetes.io/kubelet-serving CSR
// that a node (user system:node:<name> in group system:nodes) sent for
// itself: subject CN=system:node:<name>, O=system:nodes and nothing else,
// the serving usages, no e-mail or URI names, and DNS names and IP
// addresses that are all among the Node's addresses (host names and DNS
// addresses as DNS names; InternalIP and ExternalIP as IPs). Anything
// else is denied, with the reason; a CSR of a node not registered yet
// waits for it (the kubelet may ask before it registers).
func check(csr *certificatesv1.CertificateSigningRequest, node *v1.Node) (verdict, string) {
	if csr.Spec.SignerName != certificatesv1.KubeletServingSignerName || decided(csr) {
		return skip, ""
	}
	name := nodeOf(csr)
	if name == "" || !slices.Contains(csr.Spec.Groups, "system:nodes") {
		return deny, fmt.Sprintf("requested by %q (groups %v), not by a node (system:node:<name> in system:nodes)", csr.Spec.Username, csr.Spec.Groups)
	}
	block, rest := pem.Decode(csr.Spec.Request)
	if block == nil || block.Type != "CERTIFICATE REQUEST" || len(strings.TrimSpace(string(rest))) != 0 {
		return deny, "the request is not one PEM CERTIFICATE REQUEST"
	}
	req, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return deny, fmt.Sprintf("the request does not parse: %v", err)
	}
	if err := req.CheckSignature(); err != nil {
		return deny, fmt.Sprintf("the request's signature: %v", err)
	}
	// Subject.Names holds every attribute of the subject: CN and O only.
	if req.Subject.CommonName != csr.Spec.Username || !slices.Equal(req.Subject.Organization, []string{"system:nodes"}) ||
		len(req.Subject.Names) != 2 {
		return deny, fmt.Sprintf("subject %q, want CN=%s,O=system:nodes", req.Subject, csr.Spec.Username)
	}
	if !slices.ContainsFunc(servingUsages, func(u []certificatesv1.KeyUsage) bool { return sameSet(u, csr.Spec.Usages) }) {
		return deny, fmt.Sprintf("usages %v, want digital signature and server auth (and key encipherment)", csr.Spec.Usages)
	}
	if len(req.EmailAddresses) > 0 || len(req.URIs) > 0 {
		return deny, "e-mail or URI names in a serving certificate"
	}
	if len(req.DNSNames) == 0 && len(req.IPAddresses) == 0 {
		return deny, "no DNS name or IP address"
	}
	if node == nil {
		return wait, fmt.Sprintf("Node %s is not registered yet", name)
	}
	var dns []string
	var ips []net.IP
	for _, a := range node.Status.Addresses {
		ip := net.ParseIP(a.Address)
		switch {
		case ip != nil && (a.Type == v1.NodeInternalIP || a.Type == v1.NodeExternalIP || a.Type == v1.NodeHostName):
			ips = append(ips, ip)
		case ip == nil && (a.Type == v1.NodeHostName || a.Type == v1.NodeInternalDNS || a.Type == v1.NodeExternalDNS):
			dns = append(dns, a.Address)
		}
	}
	for _, d := range req.DNSNames {
		if !slices.Contains(dns, d) {
			return deny, fmt.Sprintf("DNS name %q is not an address of Node %s (%v)", d, name, node.Status.Addresses)
		}
	}
	for _, ip := range req.IPAddresses {
		if !slices.ContainsFunc(ips, ip.Equal) {
			return deny, fmt.Sprintf("IP address %s is not an address of Node %s (%v)", ip, name, node.Status.Addresses)
		}
	}
	return approve, fmt.Sprintf("serving certificate of node %s for DNS names %v, IP addresses %v", name, req.DNSNames, req.IPAddresses)
}

func sameSet(a, b []certificatesv1.KeyUsage) bool {
	if len(a) != len(b) {
		return false
	}
	for _, u := range a {
		if !slices.Contains(b, u) {
			return false
		}
	}
	return true
}
