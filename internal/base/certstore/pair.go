package certstore

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"

	"github.com/nodelet/nodelet/internal/base/beneath"
)

// Pair names the certificate and key pairs of one use: each is one PEM
// file <Prefix>-<time>-<rand>.pem (0600), and <Prefix>-current.pem links
// to the one in use.
type Pair struct {
	Prefix string
	// KeepReplaced keeps the pairs the current link no longer names, as
	// the kubelet keeps its rotated certificates; otherwise Clean removes
	// them.
	KeepReplaced bool
	// Legacy are files of an older layout in the directory that Clean
	// removes once a current pair exists (regular files only), with the
	// temporary files of their writes.
	Legacy []string
}

// Link is the name of the link to the current pair.
func (p Pair) Link() string { return p.Prefix + "-current.pem" }

// updatedLink is client-go's link to a pair being swapped in.
func (p Pair) updatedLink() string { return p.Prefix + "-updated.pem" }

// isPair reports whether name is of a pair's shape: <Prefix>-….pem,
// neither link.
func (p Pair) isPair(name string) bool {
	return strings.HasPrefix(name, p.Prefix+"-") && strings.HasSuffix(name, ".pem") &&
		name != p.Link() && name != p.updatedLink()
}

// Current returns the current pair's PEM data and the name of its file.
// The link must name a pair in this directory; a regular file in the
// link's place (client-go read one) is read as the pair. No current pair
// is an error wrapping fs.ErrNotExist.
func (s *Store) Current(p Pair) (data []byte, name string, err error) {
	d, err := s.root()
	if err != nil {
		return nil, "", err
	}
	defer d.Close()
	target, isLink, err := s.currentTarget(d, p.Link(), p.isPair)
	if err != nil {
		return nil, "", err
	}
	if !isLink {
		target = p.Link()
	}
	if data, err = readIn(d, target); err != nil {
		return nil, "", fmt.Errorf("read %s: %w", p.Link(), err)
	}
	return data, target, nil
}

// CurrentPath is the path of the current pair's file in dir, without
// opening the store (for a client to trust it). It checks the link as
// Current does.
func CurrentPath(dir string, p Pair) (string, error) {
	target, err := readLink(dir, p.Link(), p.isPair)
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, target), nil
}

// Install makes data the current pair and returns the name of its file.
// A current pair that is not a link (not the store's) is not replaced.
func (s *Store) Install(p Pair, data []byte) (string, error) {
	d, err := s.root()
	if err != nil {
		return "", err
	}
	defer d.Close()
	if fi, err := d.Lstat(p.Link()); err == nil && fi.Mode()&fs.ModeSymlink == 0 {
		return "", fmt.Errorf("%s is not a link: not replacing it", filepath.Join(s.path, p.Link()))
	}
	name := p.Prefix + "-" + s.stamp() + "-" + randomSuffix() + ".pem"
	f, err := d.Create(name, 0o600)
	if err != nil {
		return "", fmt.Errorf("write %s: %w", name, err)
	}
	if err := writeSynced(f, data, 0o600); err != nil {
		return "", err
	}
	if err := s.step("write " + name); err != nil {
		return "", err
	}
	if err := d.Sync(); err != nil {
		return "", err
	}
	if err := s.step("sync " + s.path); err != nil {
		return "", err
	}
	return name, s.swapLink(d, p.Link(), name)
}

// Clean removes what a crash left of p: temporary links and, unless
// KeepReplaced, the pairs the current link does not name; with a current
// pair, the Legacy files too. A swap client-go left half done (the
// current link missing, the updated one there) is finished first.
func (s *Store) Clean(p Pair) error {
	d, err := s.root()
	if err != nil {
		return err
	}
	defer d.Close()
	if err := s.recoverUpdated(d, p); err != nil {
		return err
	}
	target, isLink, err := s.currentTarget(d, p.Link(), p.isPair)
	hasCurrent := err == nil
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if hasCurrent && !isLink {
		target = p.Link()
	}
	return s.removeWhere(d, func(n string, fi fs.FileInfo) bool {
		switch {
		case n == p.Link() || n == target:
			return false
		case isTempOf(n, p.Link()):
			return true
		case n == p.updatedLink():
			return hasCurrent && fi.Mode()&fs.ModeSymlink != 0
		case !hasCurrent:
			return false
		case p.isPair(n):
			return !p.KeepReplaced && fi.Mode().IsRegular()
		}
		for _, l := range p.Legacy {
			if (n == l && fi.Mode().IsRegular()) || isTempOf(n, l) {
				return true
			}
		}
		return false
	})
}

// recoverUpdated renames client-go's updated link over the missing
// current one, as client-go's store did when it started.
func (s *Store) recoverUpdated(d *beneath.Dir, p Pair) error {
	if _, err := d.Lstat(p.Link()); !errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if _, err := readLink(s.path, p.updatedLink(), p.isPair); err != nil {
		return nil // nothing to recover
	}
	if err := d.Rename(p.updatedLink(), p.Link()); err != nil {
		return fmt.Errorf("recover %s: %w", p.Link(), err)
	}
	return d.Sync()
}
