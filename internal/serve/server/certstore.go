package server

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/base/certstore"
)

// The certificate directory (<root-dir>/pki, mode 0700) is a
// certstore.Store holding two units, each replaced as a whole by one
// atomic rename of a symbolic link, as the kubelet's certificate store
// does:
//
//	nodelet-server-<time>-<rand>.pem  the self-signed serving certificate and its key, one file (0600)
//	nodelet-server-current.pem        -> the current one
//	admin-<time>-<rand>/              the local admin credentials (0700):
//	    ca.crt ca.key admin.crt admin.key   CA and client certificate (keys 0600)
//	admin-current                     -> the current one
//	ca.crt admin.crt admin.key        -> admin-current/<same name>, for tools
//
// certstore says how a unit is swapped in so that a crash at any point
// leaves the current link on the old unit or on the new one, both
// complete; names that no link points to are leftovers of a crash and
// are removed by the next start.
//
// The layout before this one (nodelet.crt and nodelet.key; ca.crt,
// ca.key, admin.crt and admin.key as plain files) is read when no current
// link exists and moved into the new layout.
const (
	// ServingCurrentFile links to the current serving certificate and key.
	ServingCurrentFile = "nodelet-server-current.pem"
	servingPrefix      = "nodelet-server-"
	adminCurrent       = "admin-current"
	adminPrefix        = "admin-"

	legacyServingCert = "nodelet.crt"
	legacyServingKey  = "nodelet.key"
)

// servingPair is the self-signed serving certificate in the store, the
// old layout's nodelet.crt and nodelet.key its legacy.
var servingPair = certstore.Pair{
	Prefix: strings.TrimSuffix(servingPrefix, "-"),
	Legacy: []string{legacyServingCert, legacyServingKey},
}

// adminUnitSpec is the admin credentials in the store: the files of a
// unit with their modes, the stable names tools open, and the old
// layout's plain files of the same names.
var adminUnitSpec = certstore.Unit{
	Prefix: strings.TrimSuffix(adminPrefix, "-"),
	Files: []certstore.File{
		{Name: adminCACertFile, Mode: 0o644}, {Name: adminCAKeyFile, Mode: 0o600},
		{Name: adminCertFile, Mode: 0o644}, {Name: adminKeyFile, Mode: 0o600},
	},
	Links:  []string{adminCACertFile, adminCertFile, adminKeyFile},
	Legacy: []string{adminCACertFile, adminCAKeyFile, adminCertFile, adminKeyFile},
}

// certStore reads and replaces the units of one certificate directory
// through certstore; it decides what they hold.
type certStore struct {
	store *certstore.Store
	clock clock.PassiveClock
}

// openCertStore creates the directory (0700, even if it existed).
// afterStep is certstore.Options.AfterStep (tests crash with it).
func openCertStore(dir string, clk clock.PassiveClock, afterStep func(string) error) (*certStore, error) {
	st, err := certstore.Open(dir, certstore.Options{Clock: clk, AfterStep: afterStep})
	if err != nil {
		return nil, err
	}
	return &certStore{store: st, clock: clk}, nil
}

// --- serving certificate

// servingPEM is a serving certificate and key as one PEM file.
type servingPEM struct {
	data []byte
	cert tls.Certificate
}

// loadServing returns the current serving pair. With no current link it
// reads the old layout: legacy is then true, and a pair that is missing or
// broken (the old layout could be left with a key that does not match its
// certificate) is nil. A broken current pair is an error.
func (s *certStore) loadServing() (pair *servingPEM, legacy bool, err error) {
	data, _, err := s.store.Current(servingPair)
	switch {
	case err == nil:
		cert, err := tls.X509KeyPair(data, data)
		if err != nil {
			return nil, false, fmt.Errorf("serving certificate %s: %w", filepath.Join(s.store.Path(), ServingCurrentFile), err)
		}
		return &servingPEM{data: data, cert: cert}, false, nil
	case !errors.Is(err, fs.ErrNotExist):
		return nil, false, fmt.Errorf("serving certificate: %w", err)
	}
	certPEM, err1 := s.store.ReadFile(legacyServingCert)
	keyPEM, err2 := s.store.ReadFile(legacyServingKey)
	if err1 != nil || err2 != nil {
		return nil, true, nil
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, true, nil
	}
	return &servingPEM{data: append(append([]byte{}, certPEM...), keyPEM...), cert: cert}, true, nil
}

// installServing makes pemData the current serving pair.
func (s *certStore) installServing(pemData []byte) error {
	_, err := s.store.Install(servingPair, pemData)
	return err
}

// cleanServing removes the serving pairs the current link does not point
// to, the old layout's files, and temporary links.
func (s *certStore) cleanServing() error {
	return s.store.Clean(servingPair)
}

// --- admin credentials

// adminUnit is the admin CA and the client certificate it signed, as PEM
// and parsed. admin is nil when only the CA could be read.
type adminUnit struct {
	pem       map[string][]byte // by file name
	ca, admin *tls.Certificate
}

// loadAdmin returns the current admin unit and the directory it is in.
// With no current link it reads the old layout: legacy is then true, and
// what is missing or broken in it is nil. A broken current unit (a pair
// that does not match, a client certificate its CA did not sign) is an
// error.
func (s *certStore) loadAdmin() (u *adminUnit, dir string, legacy bool, err error) {
	files, name, err := s.store.CurrentUnit(adminUnitSpec)
	if errors.Is(err, fs.ErrNotExist) {
		return s.loadLegacyAdmin(), s.store.Path(), true, nil
	}
	if err != nil {
		return nil, "", false, fmt.Errorf("admin credentials: %w", err)
	}
	dir = filepath.Join(s.store.Path(), name)
	u = &adminUnit{pem: files}
	if u.ca, err = u.pair(adminCACertFile, adminCAKeyFile); err != nil {
		return nil, "", false, fmt.Errorf("admin CA in %s: %w", dir, err)
	}
	if u.admin, err = u.pair(adminCertFile, adminKeyFile); err != nil {
		return nil, "", false, fmt.Errorf("admin client certificate in %s: %w", dir, err)
	}
	if err := u.admin.Leaf.CheckSignatureFrom(u.ca.Leaf); err != nil {
		return nil, "", false, fmt.Errorf("admin client certificate in %s is not signed by its CA: %w", dir, err)
	}
	return u, dir, false, nil
}

// loadLegacyAdmin reads the old layout's plain files (never a link).
func (s *certStore) loadLegacyAdmin() *adminUnit {
	u := &adminUnit{pem: map[string][]byte{}}
	for _, f := range adminUnitSpec.Files {
		u.pem[f.Name], _ = s.store.ReadFile(f.Name)
	}
	var err error
	if u.ca, err = u.pair(adminCACertFile, adminCAKeyFile); err != nil {
		return nil
	}
	if u.admin, err = u.pair(adminCertFile, adminKeyFile); err != nil || u.admin.Leaf.CheckSignatureFrom(u.ca.Leaf) != nil {
		u.admin = nil
	}
	return u
}

func (u *adminUnit) pair(certName, keyName string) (*tls.Certificate, error) {
	c, err := tls.X509KeyPair(u.pem[certName], u.pem[keyName])
	if err != nil {
		return nil, err
	}
	return &c, nil
}

// installAdmin makes the unit's files the current admin credentials and
// returns the directory they are in.
func (s *certStore) installAdmin(pem map[string][]byte) (string, error) {
	name, err := s.store.InstallUnit(adminUnitSpec, pem)
	if err != nil {
		return "", err
	}
	return filepath.Join(s.store.Path(), name), nil
}

// cleanAdmin points the stable names (ca.crt, admin.crt, admin.key) into
// admin-current, replacing the old layout's files, and removes the admin
// units the current link does not point to, the old layout's CA key, and
// temporary links.
func (s *certStore) cleanAdmin() error {
	return s.store.CleanUnit(adminUnitSpec)
}

// ServingCertPath is where a client finds the self-signed serving
// certificate under dir (to trust it): the current pair, else the old
// layout's nodelet.crt.
func ServingCertPath(dir string) string {
	if path, err := certstore.CurrentPath(dir, servingPair); err == nil {
		return path
	}
	return filepath.Join(dir, legacyServingCert)
}

// AdminCredentials returns the paths of the current admin credentials
// under dir, without making any: all four in one unit, even while nodelet
// replaces them. With the old layout it returns its paths; with none it
// returns an error that wraps fs.ErrNotExist.
func AdminCredentials(dir string) (Credentials, error) {
	unitDir := dir
	if path, err := certstore.CurrentUnitPath(dir, adminUnitSpec); err == nil {
		unitDir = path
	}
	creds := credentialsIn(unitDir)
	if _, err := os.Stat(creds.ClientCert); err != nil {
		return Credentials{}, fmt.Errorf("admin credentials in %s: %w", dir, err)
	}
	return creds, nil
}

func credentialsIn(dir string) Credentials {
	return Credentials{
		CACert:     filepath.Join(dir, adminCACertFile),
		CAKey:      filepath.Join(dir, adminCAKeyFile),
		ClientCert: filepath.Join(dir, adminCertFile),
		ClientKey:  filepath.Join(dir, adminKeyFile),
	}
}

// usable reports whether c is valid at now.
func usable(c *tls.Certificate, now time.Time) bool {
	return c != nil && c.Leaf != nil && validAt(c.Leaf, now)
}
