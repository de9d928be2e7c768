package certs

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha512"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/certificate"
	"k8s.io/client-go/util/certificate/csr"
	"k8s.io/client-go/util/keyutil"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/base/certstore"
)

// The signers of the node's certificates.
const (
	ClientSigner  = certificatesv1.KubeAPIServerClientKubeletSignerName // kubernetes.io/kube-apiserver-client-kubelet
	ServingSigner = certificatesv1.KubeletServingSignerName             // kubernetes.io/kubelet-serving
)

// nodeSubject is the subject of both of the node's certificates: the
// Node authorizer and NodeRestriction know the node by it.
func nodeSubject(nodeName string) pkix.Name {
	return pkix.Name{CommonName: "system:node:" + nodeName, Organization: []string{"system:nodes"}}
}

// clientTemplate is the request of the node's client certificate: the
// subject only (the approver refuses any subject alternative name).
func clientTemplate(nodeName string) *x509.CertificateRequest {
	return &x509.CertificateRequest{Subject: nodeSubject(nodeName)}
}

// servingTemplate is the request of the secure port's certificate: the
// node's subject, its host names as DNS names and its addresses as IP
// addresses, each once and sorted. nil (no request yet) when addrs has
// neither.
func servingTemplate(nodeName string, addrs []v1.NodeAddress) *x509.CertificateRequest {
	var dns []string
	var ips []net.IP
	addIP := func(ip net.IP) {
		if !slices.ContainsFunc(ips, ip.Equal) {
			ips = append(ips, ip)
		}
	}
	for _, a := range addrs {
		ip := net.ParseIP(a.Address)
		switch a.Type {
		case v1.NodeHostName:
			if ip != nil {
				addIP(ip)
			} else if a.Address != "" && !slices.Contains(dns, a.Address) {
				dns = append(dns, a.Address)
			}
		case v1.NodeInternalIP, v1.NodeExternalIP:
			if ip != nil {
				addIP(ip)
			}
		case v1.NodeInternalDNS, v1.NodeExternalDNS:
			if a.Address != "" && !slices.Contains(dns, a.Address) {
				dns = append(dns, a.Address)
			}
		}
	}
	if len(dns) == 0 && len(ips) == 0 {
		return nil
	}
	slices.Sort(dns)
	slices.SortFunc(ips, func(a, b net.IP) int { return cmpIP(a.String(), b.String()) })
	return &x509.CertificateRequest{Subject: nodeSubject(nodeName), DNSNames: dns, IPAddresses: ips}
}

func cmpIP(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// StaticAddresses are the addresses a serving certificate is requested
// for when nothing better is known: the node name as its host name and
// each of ips as an internal IP.
func StaticAddresses(nodeName string, ips ...string) func() []v1.NodeAddress {
	addrs := []v1.NodeAddress{{Type: v1.NodeHostName, Address: nodeName}}
	for _, ip := range ips {
		if ip != "" {
			addrs = append(addrs, v1.NodeAddress{Type: v1.NodeInternalIP, Address: ip})
		}
	}
	return func() []v1.NodeAddress { return addrs }
}

// csrName names a bootstrap CSR after what it asks for: the same key,
// subject and usages give the same name, so that a nodelet restarted
// while it waits finds its request again instead of sending another. The
// digest covers each part base64-encoded and delimited, so that no two
// different requests share an input.
func csrName(pub crypto.PublicKey, subject pkix.Name, usages []certificatesv1.KeyUsage) (string, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", fmt.Errorf("CSR name: %w", err)
	}
	h := sha512.New512_256()
	write := func(b []byte) {
		h.Write([]byte(base64.RawURLEncoding.EncodeToString(b)))
		h.Write([]byte{'|'})
	}
	write(der)
	write([]byte(subject.CommonName))
	for _, o := range subject.Organization {
		write([]byte(o))
	}
	for _, u := range usages {
		write([]byte(u))
	}
	return "node-csr-" + base64.RawURLEncoding.EncodeToString(h.Sum(nil)), nil
}

// loadOrCreateKey returns the private key in the store's file name, or a
// new ECDSA P-256 key written there first (0600, atomically). A file that
// does not hold a key is replaced.
func loadOrCreateKey(store *certstore.Store, name string) ([]byte, crypto.Signer, error) {
	if data, err := store.ReadFile(name); err == nil {
		if key, err := keyutil.ParsePrivateKeyPEM(data); err == nil {
			if signer, ok := key.(crypto.Signer); ok {
				return data, signer, nil
			}
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate key: %w", err)
	}
	data, err := keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		return nil, nil, err
	}
	if err := store.WriteFile(name, data, 0o600); err != nil {
		return nil, nil, err
	}
	return data, key, nil
}

// csrRequest is one certificate signing request to send and wait for.
type csrRequest struct {
	client  kubernetes.Interface
	clock   clock.Clock
	log     *slog.Logger
	signer  string
	tmpl    *x509.CertificateRequest
	key     crypto.Signer
	timeout time.Duration
	// hint says what to check when nobody issues the certificate.
	hint func(name string) string
}

// createRetry is how long a failed CSR creation waits before the next,
// doubling up to createRetryMax.
const (
	createRetry    = 2 * time.Second
	createRetryMax = 32 * time.Second
)

// do sends the request under a name derived from it (reusing a request
// of the same name and key already there) and waits until the signer has
// issued the certificate, which it returns (PEM). All of it takes at most
// r.timeout; a request that cannot be sent because the API server cannot
// be reached is sent again until then. Credentials the API server refuses,
// a denied or failed request, and the timeout are errors that name the
// request and say what to check.
func (r csrRequest) do(ctx context.Context) ([]byte, error) {
	csrPEM, err := certutil.MakeCSRFromTemplate(r.key, r.tmpl)
	if err != nil {
		return nil, fmt.Errorf("make CSR: %w", err)
	}
	usages := usagesFor(r.signer, r.key)
	name, err := csrName(r.key.Public(), r.tmpl.Subject, usages)
	if err != nil {
		return nil, err
	}
	ctx, cancel := withClockTimeout(ctx, r.clock, r.timeout)
	defer cancel()

	var uid types.UID
	for wait := createRetry; ; wait = min(2*wait, createRetryMax) {
		var createErr error
		if _, uid, createErr = csr.RequestCertificateWithContext(ctx, r.client, csrPEM, name, r.signer, nil, usages, r.key); createErr == nil {
			break
		}
		switch {
		case apierrors.IsUnauthorized(createErr):
			return nil, fmt.Errorf("CSR %s: the API server does not accept the credentials: %w", name, createErr)
		case apierrors.IsForbidden(createErr):
			return nil, fmt.Errorf("CSR %s: the credentials may not create certificate signing requests: %w", name, createErr)
		}
		r.log.Warn("cannot send the certificate signing request; retrying", "csr", name, "signer", r.signer, "retryIn", wait, "err", createErr)
		select {
		case <-ctx.Done():
			if timedOut(ctx) {
				return nil, fmt.Errorf("CSR %s could not be sent within %s: %w", name, r.timeout, createErr)
			}
			return nil, ctx.Err()
		case <-r.clock.After(wait):
		}
	}
	r.log.Info("waiting for the certificate signing request to be approved and issued", "csr", name, "signer", r.signer, "timeout", r.timeout)
	cert, err := csr.WaitForCertificate(ctx, r.client, name, uid)
	switch {
	case err == nil:
		return cert, nil
	case timedOut(ctx):
		return nil, fmt.Errorf("CSR %s (signer %s) was not approved and issued within %s: %s", name, r.signer, r.timeout, r.hint(name))
	case ctx.Err() != nil:
		return nil, ctx.Err()
	}
	return nil, fmt.Errorf("CSR %s (signer %s): %w", name, r.signer, err)
}

// usagesFor are the key usages the approvers want for signer and key:
// digital signature and client or server auth, plus key encipherment for
// an RSA key.
func usagesFor(signer string, key crypto.Signer) []certificatesv1.KeyUsage {
	if signer == ServingSigner {
		return certificate.DefaultKubeletServingGetUsages(key)
	}
	return certificate.DefaultKubeletClientGetUsages(key)
}

// clientHint says what to check when nobody issues the client CSR.
func clientHint(name string) string {
	return fmt.Sprintf("see whether it is pending (kubectl get csr %s) and approve it by hand (kubectl certificate approve %s), "+
		"or check that kube-controller-manager runs the csrapproving and csrsigning controllers (with the cluster CA) "+
		"and that the --bootstrap-kubeconfig user's group may create node client CSRs "+
		"(the ClusterRole system:certificates.k8s.io:certificatesigningrequests:nodeclient, bound to system:bootstrappers)", name, name)
}
