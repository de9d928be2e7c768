package server

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"slices"
	"strconv"
	"time"

	"k8s.io/utils/clock"
)

// File names of the local admin credentials (see certStore for the
// layout of the certificate directory).
const (
	adminCACertFile = "ca.crt"
	adminCAKeyFile  = "ca.key"
	adminCertFile   = "admin.crt"
	adminKeyFile    = "admin.key"
)

// AdminUser and AdminGroup are the identity of the local admin client
// certificate made by EnsureAdminCredentials.
const (
	AdminUser  = "nodelet-admin"
	AdminGroup = "system:masters"
)

const (
	leafValidity = 365 * 24 * time.Hour
	caValidity   = 10 * 365 * 24 * time.Hour
	// backdate covers small clock differences between client and server.
	backdate = 5 * time.Minute
)

// LoadOrCreateServingCert returns the certificate the secure port serves.
// When certFile and keyFile are given it loads them (both or neither must
// be set). Otherwise it uses the self-signed certificate persisted under
// dir (see certStore), generating it first (ECDSA P-256, valid one year,
// SANs for hosts, 127.0.0.1 and localhost) when it is missing, expired or
// lacks one of hosts. dir is made 0700.
func LoadOrCreateServingCert(dir, certFile, keyFile string, hosts []string, clk clock.PassiveClock) (tls.Certificate, error) {
	if certFile != "" || keyFile != "" {
		if certFile == "" || keyFile == "" {
			return tls.Certificate{}, errors.New("serving certificate: both the certificate and the key file must be given")
		}
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return tls.Certificate{}, fmt.Errorf("load serving certificate %s: %w", certFile, err)
		}
		return cert, nil
	}
	s, err := openCertStore(dir, clk, nil)
	if err != nil {
		return tls.Certificate{}, err
	}
	return s.servingCert(hosts)
}

func (s *certStore) servingCert(hosts []string) (tls.Certificate, error) {
	names := servingNames(hosts)
	pair, legacy, err := s.loadServing()
	if err != nil {
		return tls.Certificate{}, err
	}
	if pair == nil || !usable(&pair.cert, s.clock.Now()) || !coversNames(pair.cert.Leaf, names) {
		if pair, err = newServingPair(names, s.clock.Now()); err != nil {
			return tls.Certificate{}, err
		}
		legacy = true // not installed yet
	}
	if legacy {
		if err := s.installServing(pair.data); err != nil {
			return tls.Certificate{}, err
		}
	}
	if err := s.cleanServing(); err != nil {
		return tls.Certificate{}, err
	}
	return pair.cert, nil
}

// newServingPair makes a self-signed serving certificate for names.
func newServingPair(names []string, now time.Time) (*servingPEM, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate serving key: %w", err)
	}
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: names[0] + "@" + strconv.FormatInt(now.Unix(), 10)},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(leafValidity),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	certPEM, err := signCert(tmpl, key, nil, key)
	if err != nil {
		return nil, fmt.Errorf("self-sign serving certificate: %w", err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, err
	}
	data := append(certPEM, keyPEM...)
	cert, err := tls.X509KeyPair(data, data)
	if err != nil {
		return nil, fmt.Errorf("parse generated serving certificate: %w", err)
	}
	return &servingPEM{data: data, cert: cert}, nil
}

// servingNames is hosts plus 127.0.0.1 and localhost, without empties or
// duplicates, in order.
func servingNames(hosts []string) []string {
	var names []string
	for _, h := range append(slices.Clone(hosts), "localhost", "127.0.0.1") {
		if h != "" && !slices.Contains(names, h) {
			names = append(names, h)
		}
	}
	return names
}

func coversNames(c *x509.Certificate, names []string) bool {
	for _, n := range names {
		if c.VerifyHostname(n) != nil {
			return false
		}
	}
	return true
}

func validAt(c *x509.Certificate, t time.Time) bool {
	return !t.Before(c.NotBefore) && t.Before(c.NotAfter)
}

// Credentials are the paths of the local admin CA and of the admin client
// certificate it signed.
type Credentials struct {
	// CACert is the CA the secure port trusts for the local admin; add it
	// to the client CA pool.
	CACert string
	CAKey  string
	// ClientCert and ClientKey authenticate as AdminUser in AdminGroup.
	ClientCert string
	ClientKey  string
}

// EnsureAdminCredentials makes, once, a local admin CA under dir (ten
// years) and an admin client certificate signed by it (CN nodelet-admin,
// O system:masters; one year), as one unit (see certStore). An existing
// unit is kept; the admin certificate is reissued from the existing CA
// when it is missing or expired, and everything is remade when the CA is
// missing or expired. The paths returned are those of the current unit.
func EnsureAdminCredentials(dir string, clk clock.PassiveClock) (Credentials, error) {
	s, err := openCertStore(dir, clk, nil)
	if err != nil {
		return Credentials{}, err
	}
	return s.adminCredentials()
}

func (s *certStore) adminCredentials() (Credentials, error) {
	u, unitDir, legacy, err := s.loadAdmin()
	if err != nil {
		return Credentials{}, err
	}
	now := s.clock.Now()
	caOK := u != nil && u.ca.Leaf.IsCA && usable(u.ca, now)
	if !caOK || !usable(u.admin, now) {
		if !caOK {
			if u, err = newAdminCA(now); err != nil {
				return Credentials{}, err
			}
		}
		if err := u.issueAdmin(now); err != nil {
			return Credentials{}, err
		}
		legacy = true // not installed yet
	}
	if legacy {
		if unitDir, err = s.installAdmin(u.pem); err != nil {
			return Credentials{}, err
		}
	}
	if err := s.cleanAdmin(); err != nil {
		return Credentials{}, err
	}
	return credentialsIn(unitDir), nil
}

// newAdminCA makes a unit with a new CA and no admin certificate.
func newAdminCA(now time.Time) (*adminUnit, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate admin CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: "nodelet-admin-ca@" + strconv.FormatInt(now.Unix(), 10)},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	certPEM, err := signCert(tmpl, key, nil, key)
	if err != nil {
		return nil, fmt.Errorf("self-sign admin CA: %w", err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, err
	}
	u := &adminUnit{pem: map[string][]byte{adminCACertFile: certPEM, adminCAKeyFile: keyPEM}}
	if u.ca, err = u.pair(adminCACertFile, adminCAKeyFile); err != nil {
		return nil, fmt.Errorf("parse generated admin CA: %w", err)
	}
	return u, nil
}

// issueAdmin signs a new admin client certificate with the unit's CA.
func (u *adminUnit) issueAdmin(now time.Time) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("generate admin client key: %w", err)
	}
	signer, ok := u.ca.PrivateKey.(crypto.Signer)
	if !ok {
		return errors.New("admin CA key cannot sign")
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: AdminUser, Organization: []string{AdminGroup}},
		NotBefore:   now.Add(-backdate),
		NotAfter:    now.Add(leafValidity),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	certPEM, err := signCert(tmpl, key, u.ca.Leaf, signer)
	if err != nil {
		return fmt.Errorf("sign admin client certificate: %w", err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return err
	}
	u.pem[adminCertFile], u.pem[adminKeyFile] = certPEM, keyPEM
	if u.admin, err = u.pair(adminCertFile, adminKeyFile); err != nil {
		return fmt.Errorf("parse generated admin client certificate: %w", err)
	}
	return nil
}

// signCert signs tmpl for key with parent (nil: self-signed) and returns
// the PEM encoding.
func signCert(tmpl *x509.Certificate, key *ecdsa.PrivateKey, parent *x509.Certificate, signer crypto.Signer) ([]byte, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("serial number: %w", err)
	}
	tmpl.SerialNumber = serial
	if parent == nil {
		parent = tmpl
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, key.Public(), signer)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

func encodeKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encode private key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// LoadCertPool reads PEM CA bundles (e.g. --client-ca-file and the admin
// CA) into one pool; empty paths are skipped. It returns nil when no path
// is given, which disables client certificate authentication.
func LoadCertPool(paths ...string) (*x509.CertPool, error) {
	var pool *x509.CertPool
	for _, p := range paths {
		if p == "" {
			continue
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("read CA bundle: %w", err)
		}
		if pool == nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(bytes.TrimSpace(data)) {
			return nil, fmt.Errorf("CA bundle %s holds no PEM certificate", p)
		}
	}
	return pool, nil
}
