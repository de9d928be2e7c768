// Package certstore is beside the pipeline: the one store of nodelet's
// certificates and keys on disk, for the secure port's self-signed
// certificate and the local admin credentials under <root-dir>/pki
// (internal/serve/server) and for the node's client and serving certificates
// and keys under --cert-dir (internal/cluster/certs, as client-go's certificate
// manager's Store). It owns how material is written and swapped in, how
// the leftovers of a crash are cleaned, and how the current material is
// read; the callers own what it is and when it is replaced.
//
// What it keeps in a directory (made 0700), each replaced as a whole by
// one atomic rename of a symbolic link, as the kubelet's certificate
// store does:
//
//	<prefix>-<time>-<rand>.pem      a Pair: certificates and key in one file (0600)
//	<prefix>-current.pem            -> the current one
//	<prefix>-<time>-<rand>/         a Unit: a directory of files (0700; keys 0600)
//	<prefix>-current                -> the current one
//	<name>                          -> <prefix>-current/<name>, a Unit's stable names
//	<name>                          a single file (a key waiting for its certificate; 0600)
//
// A new pair or unit is written under a fresh name and synced (files,
// then directories), a temporary link to it is made and renamed over the
// current link; the directory is synced again, and only then are old
// ones removed. A crash at any point leaves the current link on the old
// material or on the new, both complete; Clean removes what no link
// names. client-go's file store wrote pairs as <prefix>-<time>.pem with
// an absolute link target and an interrupted swap as <prefix>-updated.pem:
// those are read and recovered too.
//
// The directory's path is trusted (the administrator's configuration);
// what is in it is not: the store follows only its own links, one hop, to
// a name of the shape it writes in this very directory, opens nothing
// through any other symlink, reads only regular files, and no more than
// MaxFileSize of each.
package certstore

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/base/beneath"
	"github.com/nodelet/nodelet/internal/base/bounded"
)

// MaxFileSize bounds what is read of one file of the store.
const MaxFileSize = 1 << 20

// ErrBadLink is wrapped when a current link does not name something of
// the shape the store writes in its own directory.
var ErrBadLink = errors.New("not a link the certificate store made")

// Options are what a Store uses.
type Options struct {
	// Clock names new pairs and units after the time they are made.
	Clock clock.PassiveClock
	// AfterStep, when set, is called after every step that changes the
	// directory, with the step's name; an error stops the change there
	// as a crash would: nothing is cleaned up. Tests crash between every
	// two steps with it.
	AfterStep func(step string) error
}

// Store is one certificate directory. It holds nothing open: each call
// opens the directory anew.
type Store struct {
	path string // absolute
	opts Options
}

// Open makes the directory (0700, even if it existed) and returns its
// store.
func Open(path string, opts Options) (*Store, error) {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("certificate directory: %w", err)
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return nil, fmt.Errorf("create certificate directory: %w", err)
	}
	if err := os.Chmod(abs, 0o700); err != nil {
		return nil, fmt.Errorf("certificate directory: %w", err)
	}
	return &Store{path: abs, opts: opts}, nil
}

// Path is the directory's absolute path.
func (s *Store) Path() string { return s.path }

func (s *Store) step(name string) error {
	if s.opts.AfterStep == nil {
		return nil
	}
	return s.opts.AfterStep(name)
}

func (s *Store) root() (*beneath.Dir, error) {
	d, err := beneath.OpenRoot(s.path)
	if err != nil {
		return nil, fmt.Errorf("certificate directory: %w", err)
	}
	return d, nil
}

// stamp names new material after the time it is made.
func (s *Store) stamp() string {
	return s.opts.Clock.Now().UTC().Format("2006-01-02-15-04-05")
}

// ReadFile reads the regular file name of the directory, following no
// symlink and refusing more than MaxFileSize bytes. A missing file is an
// error wrapping fs.ErrNotExist.
func (s *Store) ReadFile(name string) ([]byte, error) {
	d, err := s.root()
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return readIn(d, name)
}

func readIn(d *beneath.Dir, rel string) ([]byte, error) {
	f, err := d.OpenFile(rel)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return bounded.ReadAll(f, MaxFileSize, f.Name())
}

// WriteFile replaces the file name with data (mode perm): a temporary
// file written and synced, renamed over name, the directory synced; a
// temporary file a crash left of name is removed.
func (s *Store) WriteFile(name string, data []byte, perm os.FileMode) error {
	d, err := s.root()
	if err != nil {
		return err
	}
	defer d.Close()
	tmp := tempName(name)
	f, err := d.Create(tmp, 0o600)
	if err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := writeSynced(f, data, perm); err != nil {
		_ = d.Remove(tmp)
		return err
	}
	if err := s.step("write " + tmp); err != nil {
		return err
	}
	if err := d.Rename(tmp, name); err != nil {
		_ = d.Remove(tmp)
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := s.step("rename " + name); err != nil {
		return err
	}
	if err := d.Sync(); err != nil {
		return err
	}
	if err := s.step("sync " + name); err != nil {
		return err
	}
	return s.removeWhere(d, func(n string, _ fs.FileInfo) bool { return isTempOf(n, name) })
}

// Remove removes the file name; a missing one is no error.
func (s *Store) Remove(name string) error {
	d, err := s.root()
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return d.Sync()
}

// --- steps shared by pairs and units

// currentTarget returns the name link points to, checked: a single name
// (or an absolute path into this directory, as client-go wrote) for
// which valid holds. ok is false when link is not a symlink (then
// target is empty); a missing link is an error wrapping fs.ErrNotExist.
func (s *Store) currentTarget(d *beneath.Dir, link string, valid func(string) bool) (target string, ok bool, err error) {
	fi, err := d.Lstat(link)
	if err != nil {
		return "", false, err
	}
	if fi.Mode()&fs.ModeSymlink == 0 {
		return "", false, nil
	}
	raw, err := os.Readlink(filepath.Join(s.path, link))
	if err != nil {
		return "", false, fmt.Errorf("read link %s: %w", link, err)
	}
	target, err = checkTarget(s.path, raw, valid)
	if err != nil {
		return "", false, fmt.Errorf("%s: %w", filepath.Join(s.path, link), err)
	}
	return target, true, nil
}

// checkTarget is the name in dir that the link target raw names, if it is
// one valid accepts.
func checkTarget(dir, raw string, valid func(string) bool) (string, error) {
	name := raw
	if filepath.IsAbs(raw) {
		if filepath.Dir(filepath.Clean(raw)) != filepath.Clean(dir) {
			return "", fmt.Errorf("it points to %s, outside of the directory: %w", raw, ErrBadLink)
		}
		name = filepath.Base(raw)
	}
	if strings.ContainsRune(name, '/') || !valid(name) {
		return "", fmt.Errorf("it points to %q: %w", raw, ErrBadLink)
	}
	return name, nil
}

// swapLink points the link name at target: a temporary link, renamed
// over name, then the directory synced.
func (s *Store) swapLink(d *beneath.Dir, name, target string) error {
	tmp := tempName(name)
	if err := os.Symlink(target, filepath.Join(s.path, tmp)); err != nil {
		return fmt.Errorf("link %s: %w", name, err)
	}
	if err := s.step("link " + name); err != nil {
		return err
	}
	if err := d.Rename(tmp, name); err != nil {
		return fmt.Errorf("link %s: %w", name, err)
	}
	if err := s.step("rename " + name); err != nil {
		return err
	}
	if err := d.Sync(); err != nil {
		return err
	}
	return s.step("sync " + name)
}

// removeWhere removes the directory's entries that match (a directory
// with what it holds), and syncs it.
func (s *Store) removeWhere(d *beneath.Dir, match func(name string, fi fs.FileInfo) bool) error {
	names, err := d.Names()
	if err != nil {
		return fmt.Errorf("clean certificate directory: %w", err)
	}
	removed := false
	for _, n := range names {
		fi, err := d.Lstat(n)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return fmt.Errorf("clean certificate directory: %w", err)
		}
		if !match(n, fi) {
			continue
		}
		if fi.IsDir() {
			err = os.RemoveAll(filepath.Join(s.path, n))
		} else {
			err = d.Remove(n)
		}
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("clean certificate directory: %w", err)
		}
		removed = true
		if err := s.step("remove " + n); err != nil {
			return err
		}
	}
	if !removed {
		return nil
	}
	return d.Sync()
}

// tempName is a fresh temporary name of name.
func tempName(name string) string {
	return "." + name + ".tmp" + randomSuffix()
}

// isTempOf reports whether name is a temporary file or link of one of
// names (".<name>.tmp…", as tempName, and the old layout's writes, made).
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

// readLink is the checked target of link in dir, read without opening
// the store; a link missing or not a symlink is an error.
func readLink(dir, link string, valid func(string) bool) (string, error) {
	raw, err := os.Readlink(filepath.Join(dir, link))
	if err != nil {
		return "", err
	}
	target, err := checkTarget(dir, raw, valid)
	if err != nil {
		return "", fmt.Errorf("%s: %w", filepath.Join(dir, link), err)
	}
	return target, nil
}
