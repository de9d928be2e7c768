package volume

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	v1 "k8s.io/api/core/v1"
)

// checkHostPathType runs the type check of a hostPath volume, creating the
// path for DirectoryOrCreate and FileOrCreate, with the kubelet's messages.
// Symlinks in the path are followed, as the runtime will.
func checkHostPathType(src *v1.HostPathVolumeSource) error {
	path := src.Path
	if !filepath.IsAbs(path) {
		return fmt.Errorf("hostPath %q is not an absolute path", path)
	}
	if src.Type == nil {
		return nil
	}
	switch t := *src.Type; t {
	case v1.HostPathUnset:
		return nil
	case v1.HostPathDirectoryOrCreate:
		if !exists(path) {
			if err := os.MkdirAll(path, 0o755); err != nil {
				return fmt.Errorf("creating hostPath: %w", err)
			}
		}
		return hostPathIs(path, v1.HostPathDirectory, "directory")
	case v1.HostPathDirectory:
		return hostPathIs(path, v1.HostPathDirectory, "directory")
	case v1.HostPathFileOrCreate:
		if !exists(path) {
			if err := makeFile(path); err != nil {
				return fmt.Errorf("creating hostPath: %w", err)
			}
		}
		return hostPathIs(path, v1.HostPathFile, "file")
	case v1.HostPathFile:
		return hostPathIs(path, v1.HostPathFile, "file")
	case v1.HostPathSocket:
		return hostPathIs(path, v1.HostPathSocket, "socket file")
	case v1.HostPathCharDev:
		return hostPathIs(path, v1.HostPathCharDev, "character device")
	case v1.HostPathBlockDev:
		return hostPathIs(path, v1.HostPathBlockDev, "block device")
	default:
		return fmt.Errorf("%s is an invalid volume type", t)
	}
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// makeFile creates an empty file with mode 0644 and the missing parent
// directories with 0755; an existing file or directory is left alone.
func makeFile(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDONLY, 0o644)
	if err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil
		}
		return err
	}
	return f.Close()
}

// hostPathIs checks that path is of type want.
func hostPathIs(path string, want v1.HostPathType, what string) error {
	fi, err := os.Stat(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("hostPath %s doesn't exist", path)
		}
		return fmt.Errorf("hostPath type check failed, %s is not a %s, unable to determine its type: %w", path, what, err)
	}
	got, err := fileType(fi.Mode())
	if err != nil {
		return fmt.Errorf("hostPath type check failed, %s is not a %s, unable to determine its type: %w", path, what, err)
	}
	if got != want {
		return fmt.Errorf("hostPath type check failed: %s is not a %s, it's a %s", path, what, got)
	}
	return nil
}

// fileType is the hostPath type a file mode stands for.
func fileType(mode fs.FileMode) (v1.HostPathType, error) {
	switch {
	case mode.IsDir():
		return v1.HostPathDirectory, nil
	case mode.IsRegular():
		return v1.HostPathFile, nil
	case mode&fs.ModeSocket != 0:
		return v1.HostPathSocket, nil
	case mode&fs.ModeCharDevice != 0:
		return v1.HostPathCharDev, nil
	case mode&fs.ModeDevice != 0:
		return v1.HostPathBlockDev, nil
	default:
		return "", fmt.Errorf("only recognise file, directory, socket, block device and character device, not %v", mode.Type())
	}
}
