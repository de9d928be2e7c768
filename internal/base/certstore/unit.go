package certstore

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Unit names a set of files replaced together (a CA, its key and a
// certificate it signed): each set is a directory <Prefix>-<time>-<rand>
// (0700), <Prefix>-current links to the one in use, and each of Links is
// a stable name in the store's directory linking to
// <Prefix>-current/<name>, for tools.
type Unit struct {
	Prefix string
	// Files are the unit's files, with their modes.
	Files []File
	// Links are the names of Files linked to from the directory.
	Links []string
	// Legacy are files of an older layout in the directory that Clean
	// removes once a current unit exists (regular files only: a stable
	// link of the same name stays), with the temporary files of their
	// writes.
	Legacy []string
}

// File is a file of a unit.
type File struct {
	Name string
	Mode os.FileMode
}

// Link is the name of the link to the current unit.
func (u Unit) Link() string { return u.Prefix + "-current" }

func (u Unit) isUnit(name string) bool {
	return strings.HasPrefix(name, u.Prefix+"-") && name != u.Link() && !strings.HasSuffix(name, ".pem")
}

// CurrentUnit returns the current unit's files, by name, and the name of
// its directory. The link must name a unit's directory in this one; no
// current unit is an error wrapping fs.ErrNotExist.
func (s *Store) CurrentUnit(u Unit) (files map[string][]byte, name string, err error) {
	d, err := s.root()
	if err != nil {
		return nil, "", err
	}
	defer d.Close()
	target, isLink, err := s.currentTarget(d, u.Link(), u.isUnit)
	if err != nil {
		return nil, "", err
	}
	if !isLink {
		return nil, "", fmt.Errorf("%s: %w", filepath.Join(s.path, u.Link()), ErrBadLink)
	}
	files = map[string][]byte{}
	for _, f := range u.Files {
		if files[f.Name], err = readIn(d, filepath.Join(target, f.Name)); err != nil {
			return nil, "", err
		}
	}
	return files, target, nil
}

// CurrentUnitPath is the path of the current unit's directory in dir,
// without opening the store. It checks the link as CurrentUnit does.
func CurrentUnitPath(dir string, u Unit) (string, error) {
	target, err := readLink(dir, u.Link(), u.isUnit)
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, target), nil
}

// InstallUnit makes files (by name; one for each of u.Files) the current
// unit and returns the name of its directory.
func (s *Store) InstallUnit(u Unit, files map[string][]byte) (string, error) {
	d, err := s.root()
	if err != nil {
		return "", err
	}
	defer d.Close()
	path, err := os.MkdirTemp(s.path, u.Prefix+"-"+s.stamp()+"-")
	if err != nil {
		return "", fmt.Errorf("write %s: %w", u.Link(), err)
	}
	name := filepath.Base(path)
	if err := s.step("mkdir " + name); err != nil {
		return "", err
	}
	ud, err := d.OpenDir(name)
	if err != nil {
		return "", err
	}
	defer ud.Close()
	for _, f := range u.Files {
		file, err := ud.Create(f.Name, 0o600)
		if err != nil {
			return "", fmt.Errorf("write %s: %w", u.Link(), err)
		}
		if err := writeSynced(file, files[f.Name], f.Mode); err != nil {
			return "", err
		}
		if err := s.step("write " + f.Name); err != nil {
			return "", err
		}
	}
	if err := ud.Sync(); err != nil {
		return "", err
	}
	if err := s.step("sync " + path); err != nil {
		return "", err
	}
	if err := d.Sync(); err != nil {
		return "", err
	}
	if err := s.step("sync " + s.path); err != nil {
		return "", err
	}
	return name, s.swapLink(d, u.Link(), name)
}

// CleanUnit points u's stable names into the current unit (replacing an
// older layout's files of those names) and removes what a crash left of
// u: the units the current link does not name, temporary links, the
// Legacy files.
func (s *Store) CleanUnit(u Unit) error {
	d, err := s.root()
	if err != nil {
		return err
	}
	defer d.Close()
	target, isLink, err := s.currentTarget(d, u.Link(), u.isUnit)
	if err != nil {
		return err
	}
	if !isLink {
		return fmt.Errorf("%s: %w", filepath.Join(s.path, u.Link()), ErrBadLink)
	}
	for _, name := range u.Links {
		want := filepath.Join(u.Link(), name)
		if t, err := os.Readlink(filepath.Join(s.path, name)); err == nil && t == want {
			continue
		}
		if err := s.swapLink(d, name, want); err != nil {
			return err
		}
	}
	var temps []string
	temps = append(temps, u.Link())
	temps = append(temps, u.Links...)
	return s.removeWhere(d, func(n string, fi fs.FileInfo) bool {
		switch {
		case n == u.Link() || n == target:
			return false
		case u.isUnit(n) && fi.IsDir():
			return true
		case isTempOf(n, temps...):
			return true
		}
		for _, l := range u.Legacy {
			if (n == l && fi.Mode().IsRegular()) || isTempOf(n, l) {
				return true
			}
		}
		return false
	})
}
