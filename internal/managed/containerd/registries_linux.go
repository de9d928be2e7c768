package containerd

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"

	"github.com/nodelet/nodelet/internal/base/bounded"
)

// ReadRegistries reads the registries file at path (at most
// MaxRegistriesFileSize) and checks it and the files it names. The file
// holds credentials and decides where images come from, so it must be a
// regular file owned by root (or the user nodelet runs as) that nobody
// else may write; a TLS file it names must be a regular file nobody else
// may write, a private key one nobody else may read either. A missing
// file is fs.ErrNotExist (errors.Is), for the caller to decide.
func ReadRegistries(path string) (Registries, error) {
	f, err := os.Open(path)
	if err != nil {
		return Registries{}, err
	}
	defer f.Close()
	fi, err := f.Stat() // the file opened, not what the path names later
	if err != nil {
		return Registries{}, err
	}
	if err := checkPrivate(path, fi, false); err != nil {
		return Registries{}, err
	}
	data, err := bounded.ReadAll(f, MaxRegistriesFileSize, path)
	if err != nil {
		return Registries{}, err
	}
	r, err := ParseRegistries(path, data)
	if err != nil {
		return Registries{}, err
	}
	keys := r.KeyFiles()
	for _, name := range r.Files() {
		fi, err := os.Stat(name)
		if err != nil {
			return Registries{}, fmt.Errorf("%s names %s: %w", path, name, err)
		}
		if err := checkPrivate(name, fi, keys[name]); err != nil {
			return Registries{}, fmt.Errorf("%s names %w", path, err)
		}
	}
	return r, nil
}

// checkPrivate refuses a file that is not regular, is owned by someone
// other than root or nodelet's user, or that others may write (or, for
// secret, read).
func checkPrivate(path string, fi fs.FileInfo, secret bool) error {
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s: not a regular file", path)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return errors.New(path + ": cannot tell its owner")
	}
	if st.Uid != 0 && int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("%s: owned by uid %d; it must be owned by root", path, st.Uid)
	}
	if fi.Mode().Perm()&0o002 != 0 {
		return fmt.Errorf("%s: mode %v lets every user write it; chmod o-w", path, fi.Mode().Perm())
	}
	if secret && fi.Mode().Perm()&0o004 != 0 {
		return fmt.Errorf("%s: mode %v lets every user read this private key; chmod o-r", path, fi.Mode().Perm())
	}
	return nil
}
