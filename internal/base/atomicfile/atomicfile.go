// Package atomicfile is beside the pipeline: how nodelet writes its own
// files (generated configuration, pid files, image store metadata, pod
// hosts files) so that a reader sees the old or the new content, never a
// part, and a crash leaves one of them on disk.
package atomicfile

import (
	"fmt"
	"os"
	"path/filepath"
)

// Write replaces path with data, with mode perm: a temp file in the same
// directory (a fresh name, so two writers never share one), written,
// fsynced, renamed over path, and the directory fsynced.
func Write(path string, data []byte, perm os.FileMode) error {
	return write(path, data, perm, true)
}

// Replace is Write without the fsyncs, for a file nodelet writes again
// before every use (a pod's hosts file, written at each container's
// creation): readers still see the old or the new content, never a part,
// but a crash of the machine may leave either, or an empty file, which the
// next write replaces before anything reads it. It spares the start of a
// container the disk's flushes.
func Replace(path string, data []byte, perm os.FileMode) error {
	return write(path, data, perm, false)
}

func write(path string, data []byte, perm os.FileMode, durable bool) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path)+"-")
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	defer os.Remove(tmp.Name()) // gone after the rename; left over only on error
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Chmod(perm)
	}
	return commit(tmp, path, err, durable)
}

// Commit finishes a write of tmp, a temp file in path's directory: unless
// err (the error of writing it) is set, it fsyncs and closes tmp, renames
// it to path and fsyncs the directory. tmp is closed in every case; the
// caller removes it when Commit fails.
func Commit(tmp *os.File, path string, err error) error {
	return commit(tmp, path, err, true)
}

func commit(tmp *os.File, path string, err error, durable bool) error {
	if err == nil && durable {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("replace %s: %w", path, err)
	}
	if !durable {
		return nil
	}
	return SyncDir(filepath.Dir(path))
}

// SyncDir makes the renames and creations in dir durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}
