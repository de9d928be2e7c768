package server

import (
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/atomicfile"
)

// The certificate directory (<root-dir>/pki, mode 0700) holds two units,
// each replaced as a whole by one atomic rename of a symbolic link, as the
// kubelet's certificate store does:
//
//	nodelet-server-<time>-<rand>.pem  the self-signed serving certificate and its key, one file (0600)
//	nodelet-server-current.pem        -> the current one
//	admin-<time>-<rand>/              the local admin credentials (0700):
//	    ca.crt ca.key admin.crt admin.key   CA and client certificate (keys 0600)
//	admin-current                     -> the current one
//	ca.crt admin.crt admin.key        -> admin-current/<same name>, for tools
//
// A new unit is written under a fresh name and synced (files, then the
// directories), a temporary link to it is made, and renamed over the
// current link; the directory is synced again, and only then are the old
// units removed. A crash at any point leaves the current link on the old
// unit or on the new one, both complete. Names that no link points to are
// leftovers of a crash and are removed by the next start.
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

// adminFiles are the files of an admin unit, with their modes.
var adminFiles = []struct {
	name string
	mode os.FileMode
}{
	{adminCACertFile, 0o644}, {adminCAKeyFile, 0o600}, {adminCertFile, 0o644}, {adminKeyFile, 0o600},
}

// adminLinks are the stable names tools open, each a link into
// admin-current.
var adminLinks = []string{adminCACertFile, adminCertFile, adminKeyFile}

// certStore reads and replaces the units of one certificate directory.
type certStore struct {
	dir   string
	clock clock.PassiveClock
	// crashAfter, when set, is called after every step of a replacement
	// with the step's name; an error stops the replacement there as a
	// crash would: nothing is cleaned up. Tests use it to crash between
	// every two steps.
	crashAfter func(step string) error
}

func (s *certStore) step(name string) error {
	if s.crashAfter == nil {
		return nil
	}
	return s.crashAfter(name)
}

// prepare creates the directory, and makes it 0700 even if it existed.
func (s *certStore) prepare() error {
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return fmt.Errorf("create certificate directory: %w", err)
	}
	if err := os.Chmod(s.dir, 0o700); err != nil {
		return fmt.Errorf("certificate directory: %w", err)
	}
	return nil
}

// stamp names a new unit after the time it is made.
func (s *certStore) stamp() string {
	return s.clock.Now().UTC().Format("2006-01-02-15-04-05")
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
	current := filepath.Join(s.dir, ServingCurrentFile)
	if _, err := os.Lstat(current); err == nil {
		data, err := os.ReadFile(current)
		if err != nil {
			return nil, false, fmt.Errorf("read serving certificate: %w", err)
		}
		cert, err := tls.X509KeyPair(data, data)
		if err != nil {
			return nil, false, fmt.Errorf("serving certificate %s: %w", current, err)
		}
		return &servingPEM{data: data, cert: cert}, false, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, false, fmt.Errorf("serving certificate: %w", err)
	}
	certPEM, err1 := os.ReadFile(filepath.Join(s.dir, legacyServingCert))
	keyPEM, err2 := os.ReadFile(filepath.Join(s.dir, legacyServingKey))
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
	f, err := os.CreateTemp(s.dir, servingPrefix+s.stamp()+"-*.pem")
	if err != nil {
		return fmt.Errorf("write serving certificate: %w", err)
	}
	if err := writeSynced(f, pemData, 0o600); err != nil {
		return err
	}
	if err := s.step("write " + filepath.Base(f.Name())); err != nil {
		return err
	}
	if err := atomicfile.SyncDir(s.dir); err != nil {
		return err
	}
	if err := s.step("sync " + s.dir); err != nil {
		return err
	}
	return s.swapLink(ServingCurrentFile, filepath.Base(f.Name()))
}

// cleanServing removes the serving pairs the current link does not point
// to, the old layout's files, and temporary links.
func (s *certStore) cleanServing() error {
	target, err := os.Readlink(filepath.Join(s.dir, ServingCurrentFile))
	if err != nil {
		return fmt.Errorf("serving certificate: %w", err)
	}
	return s.removeWhere(func(e fs.DirEntry) bool {
		n := e.Name()
		switch {
		case n == ServingCurrentFile || n == target:
			return false
		case strings.HasPrefix(n, servingPrefix) && strings.HasSuffix(n, ".pem"):
			return true
		case n == legacyServingCert || n == legacyServingKey:
			return true
		}
		return isTempOf(n, ServingCurrentFile, legacyServingCert, legacyServingKey)
	})
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
	link := filepath.Join(s.dir, adminCurrent)
	target, err := os.Readlink(link)
	if errors.Is(err, fs.ErrNotExist) {
		return s.loadLegacyAdmin(), s.dir, true, nil
	}
	if err != nil {
		return nil, "", false, fmt.Errorf("admin credentials: %w", err)
	}
	dir = filepath.Join(s.dir, target)
	u = &adminUnit{pem: map[string][]byte{}}
	for _, f := range adminFiles {
		if u.pem[f.name], err = os.ReadFile(filepath.Join(dir, f.name)); err != nil {
			return nil, "", false, fmt.Errorf("admin credentials: %w", err)
		}
	}
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

func (s *certStore) loadLegacyAdmin() *adminUnit {
	u := &adminUnit{pem: map[string][]byte{}}
	for _, f := range adminFiles {
		path := filepath.Join(s.dir, f.name)
		if fi, err := os.Lstat(path); err != nil || !fi.Mode().IsRegular() {
			continue
		}
		u.pem[f.name], _ = os.ReadFile(path)
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
	dir, err := os.MkdirTemp(s.dir, adminPrefix+s.stamp()+"-")
	if err != nil {
		return "", fmt.Errorf("write admin credentials: %w", err)
	}
	if err := s.step("mkdir " + filepath.Base(dir)); err != nil {
		return "", err
	}
	for _, f := range adminFiles {
		file, err := os.OpenFile(filepath.Join(dir, f.name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return "", fmt.Errorf("write admin credentials: %w", err)
		}
		if err := writeSynced(file, pem[f.name], f.mode); err != nil {
			return "", err
		}
		if err := s.step("write " + f.name); err != nil {
			return "", err
		}
	}
	for _, d := range []string{dir, s.dir} {
		if err := atomicfile.SyncDir(d); err != nil {
			return "", err
		}
		if err := s.step("sync " + d); err != nil {
			return "", err
		}
	}
	return dir, s.swapLink(adminCurrent, filepath.Base(dir))
}

// linkAdminFiles points the stable names (ca.crt, admin.crt, admin.key)
// into admin-current, replacing the old layout's files.
func (s *certStore) linkAdminFiles() error {
	for _, name := range adminLinks {
		target := filepath.Join(adminCurrent, name)
		if t, err := os.Readlink(filepath.Join(s.dir, name)); err == nil && t == target {
			continue
		}
		if err := s.swapLink(name, target); err != nil {
			return err
		}
	}
	return nil
}

// cleanAdmin removes the admin units the current link does not point to,
// the old layout's CA key, and temporary links.
func (s *certStore) cleanAdmin() error {
	target, err := os.Readlink(filepath.Join(s.dir, adminCurrent))
	if err != nil {
		return fmt.Errorf("admin credentials: %w", err)
	}
	return s.removeWhere(func(e fs.DirEntry) bool {
		n := e.Name()
		switch {
		case n == adminCurrent || n == target:
			return false
		case strings.HasPrefix(n, adminPrefix) && e.IsDir():
			return true
		case n == adminCAKeyFile && e.Type().IsRegular():
			return true
		}
		return isTempOf(n, adminCurrent, adminCACertFile, adminCAKeyFile, adminCertFile, adminKeyFile)
	})
}

// --- steps shared by both units

// swapLink points the link name at target: a temporary link, renamed over
// name, then the directory synced.
func (s *certStore) swapLink(name, target string) error {
	tmp := filepath.Join(s.dir, "."+name+".tmp"+randomSuffix())
	if err := os.Symlink(target, tmp); err != nil {
		return fmt.Errorf("link %s: %w", name, err)
	}
	if err := s.step("link " + name); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(s.dir, name)); err != nil {
		return fmt.Errorf("link %s: %w", name, err)
	}
	if err := s.step("rename " + name); err != nil {
		return err
	}
	if err := atomicfile.SyncDir(s.dir); err != nil {
		return err
	}
	return s.step("sync " + name)
}

// removeWhere removes the directory's entries that match, and syncs it.
func (s *certStore) removeWhere(match func(fs.DirEntry) bool) error {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return fmt.Errorf("clean certificate directory: %w", err)
	}
	removed := false
	for _, e := range entries {
		if !match(e) {
			continue
		}
		if err := os.RemoveAll(filepath.Join(s.dir, e.Name())); err != nil {
			return fmt.Errorf("clean certificate directory: %w", err)
		}
		removed = true
		if err := s.step("remove " + e.Name()); err != nil {
			return err
		}
	}
	if !removed {
		return nil
	}
	return atomicfile.SyncDir(s.dir)
}

// isTempOf reports whether name is a temporary file or link of one of
// names (".<name>.tmp…", as swapLink and the old layout's writes made).
func isTempOf(name string, names ...string) bool {
	for _, n := range names {
		if strings.HasPrefix(name, "."+n+".tmp") {
			return true
		}
	}
	return false
}

// writeSynced writes data to f, sets its mode, syncs and closes it.
func writeSynced(f *os.File, data []byte, mode os.FileMode) error {
	err := f.Chmod(mode)
	if err == nil {
		_, err = f.Write(data)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", f.Name(), err)
	}
	return nil
}

func randomSuffix() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// ServingCertPath is where a client finds the self-signed serving
// certificate under dir (to trust it): the current pair, else the old
// layout's nodelet.crt.
func ServingCertPath(dir string) string {
	if target, err := os.Readlink(filepath.Join(dir, ServingCurrentFile)); err == nil {
		return filepath.Join(dir, target)
	}
	return filepath.Join(dir, legacyServingCert)
}

// AdminCredentials returns the paths of the current admin credentials
// under dir, without making any: all four in one unit, even while nodelet
// replaces them. With the old layout it returns its paths; with none it
// returns an error that wraps fs.ErrNotExist.
func AdminCredentials(dir string) (Credentials, error) {
	unitDir := dir
	if target, err := os.Readlink(filepath.Join(dir, adminCurrent)); err == nil {
		unitDir = filepath.Join(dir, target)
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
