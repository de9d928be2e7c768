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
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"k8s.io/utils/clock"
)

// File names under the certificate directory.
const (
	// ServingCertFile and ServingKeyFile hold the self-signed serving
	// certificate when no --tls-cert-file/--tls-private-key-file is given.
	ServingCertFile = "nodelet.crt"
	ServingKeyFile  = "nodelet.key"

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
// dir, generating it first (ECDSA P-256, valid one year, SANs for hosts,
// 127.0.0.1 and localhost) when it is missing, expired or lacks one of
// hosts.
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
	names := servingNames(hosts)
	certPath, keyPath := filepath.Join(dir, ServingCertFile), filepath.Join(dir, ServingKeyFile)
	if cert, err := tls.LoadX509KeyPair(certPath, keyPath); err == nil {
		if leaf := cert.Leaf; leaf != nil && validAt(leaf, clk.Now()) && coversNames(leaf, names) {
			return cert, nil
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return tls.Certificate{}, fmt.Errorf("load self-signed serving certificate %s: %w", certPath, err)
	}

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("generate serving key: %w", err)
	}
	now := clk.Now()
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
		return tls.Certificate{}, fmt.Errorf("self-sign serving certificate: %w", err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return tls.Certificate{}, err
	}
	if err := writePair(dir, certPath, certPEM, keyPath, keyPEM); err != nil {
		return tls.Certificate{}, err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("parse generated serving certificate: %w", err)
	}
	return cert, nil
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

// EnsureAdminCredentials makes, once, a local admin CA under dir (ca.crt,
// ca.key; ten years) and an admin client certificate signed by it
// (admin.crt, admin.key; CN nodelet-admin, O system:masters; one year).
// Existing files are kept; the admin certificate is reissued from the
// existing CA when it is missing or expired, and everything is remade when
// the CA is missing or expired.
func EnsureAdminCredentials(dir string, clk clock.PassiveClock) (Credentials, error) {
	creds := Credentials{
		CACert:     filepath.Join(dir, adminCACertFile),
		CAKey:      filepath.Join(dir, adminCAKeyFile),
		ClientCert: filepath.Join(dir, adminCertFile),
		ClientKey:  filepath.Join(dir, adminKeyFile),
	}
	now := clk.Now()
	ca, caErr := tls.LoadX509KeyPair(creds.CACert, creds.CAKey)
	switch {
	case caErr == nil && ca.Leaf != nil && ca.Leaf.IsCA && validAt(ca.Leaf, now):
		admin, err := tls.LoadX509KeyPair(creds.ClientCert, creds.ClientKey)
		if err == nil && admin.Leaf != nil && validAt(admin.Leaf, now) && admin.Leaf.CheckSignatureFrom(ca.Leaf) == nil {
			return creds, nil
		}
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return Credentials{}, fmt.Errorf("load admin client certificate %s: %w", creds.ClientCert, err)
		}
	case caErr != nil && !errors.Is(caErr, fs.ErrNotExist):
		return Credentials{}, fmt.Errorf("load admin CA %s: %w", creds.CACert, caErr)
	default:
		var err error
		if ca, err = createAdminCA(dir, creds, now); err != nil {
			return Credentials{}, err
		}
	}
	if err := issueAdminCert(dir, creds, ca, now); err != nil {
		return Credentials{}, err
	}
	return creds, nil
}

func createAdminCA(dir string, creds Credentials, now time.Time) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("generate admin CA key: %w", err)
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
		return tls.Certificate{}, fmt.Errorf("self-sign admin CA: %w", err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return tls.Certificate{}, err
	}
	if err := writePair(dir, creds.CACert, certPEM, creds.CAKey, keyPEM); err != nil {
		return tls.Certificate{}, err
	}
	ca, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("parse generated admin CA: %w", err)
	}
	return ca, nil
}

func issueAdminCert(dir string, creds Credentials, ca tls.Certificate, now time.Time) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("generate admin client key: %w", err)
	}
	signer, ok := ca.PrivateKey.(crypto.Signer)
	if !ok {
		return fmt.Errorf("admin CA key %s cannot sign", creds.CAKey)
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: AdminUser, Organization: []string{AdminGroup}},
		NotBefore:   now.Add(-backdate),
		NotAfter:    now.Add(leafValidity),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	certPEM, err := signCert(tmpl, key, ca.Leaf, signer)
	if err != nil {
		return fmt.Errorf("sign admin client certificate: %w", err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return err
	}
	return writePair(dir, creds.ClientCert, certPEM, creds.ClientKey, keyPEM)
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

// writePair writes a certificate (0644) and its key (0600), key first so
// that a certificate on disk always has its key.
func writePair(dir, certPath string, certPEM []byte, keyPath string, keyPEM []byte) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create certificate directory: %w", err)
	}
	if err := writeFileAtomic(keyPath, keyPEM, 0o600); err != nil {
		return err
	}
	return writeFileAtomic(certPath, certPEM, 0o644)
}

func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // after a successful rename this fails harmlessly
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
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
