//go:build !linux

package podsource

import (
	"fmt"
	"os"
)

// manifestHandle is a manifest file found by openManifest. Elsewhere than
// on Linux, where nodelet runs, it is opened again by its path to be read
// (tools that read manifests build there); see open_linux.go.
type manifestHandle struct {
	path string
	id   fileID
}

func openManifest(path string) (*manifestHandle, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	switch {
	case info.IsDir():
		return nil, errIsDir
	case !info.Mode().IsRegular():
		return nil, fmt.Errorf("%s is not a regular file", info.Mode().Type())
	}
	return &manifestHandle{path: path, id: fileID{size: info.Size(), mtime: info.ModTime().UnixNano()}}, nil
}

func (h *manifestHandle) read(limit int) ([]byte, error) {
	f, err := os.Open(h.path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readLimited(f, limit, "file")
}

func (h *manifestHandle) close() {}
