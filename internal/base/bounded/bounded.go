// Package bounded is a shared leaf beside the pipeline: the one way
// nodelet reads what it does not control to the end (machine files,
// cgroup files, its own state files, manifests, response bodies). Every
// read has a limit, and more than the limit is an error that names what
// was read, never a silent truncation that a parser would then take for
// the whole.
package bounded

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
)

// ErrTooLarge is what a read past its limit fails with (errors.Is).
var ErrTooLarge = errors.New("too large")

// ReadAll reads r to its end, refusing more than limit bytes; what names
// r in the error.
func ReadAll(r io.Reader, limit int64, what string) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", what, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s is larger than %d bytes: %w", what, limit, ErrTooLarge)
	}
	return data, nil
}

// ReadFile reads the file at path, refusing more than limit bytes. An
// error opening it is returned as os.Open's (errors.Is(err,
// fs.ErrNotExist) holds for a missing file).
func ReadFile(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ReadAll(f, limit, path)
}

// ReadFS is ReadFile within fsys.
func ReadFS(fsys fs.FS, name string, limit int64) ([]byte, error) {
	f, err := fsys.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ReadAll(f, limit, name)
}
