package gc

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/base/beneath"
	"github.com/nodelet/nodelet/internal/pipeline/cri"
	"github.com/nodelet/nodelet/internal/pure/podspec"
)

// rotationTimeFormat suffixes a rotated log file: <log>.<time>.
const rotationTimeFormat = "20060102-150405"

const (
	gzSuffix  = ".gz"
	tmpSuffix = ".tmp"
)

// RotateLogs rotates the log of every running nodelet container whose file
// has reached LogPolicy.MaxSize: the file is renamed to <log>.<time>, the
// runtime is asked to reopen the log (so it writes a new file), rotations
// but the newest are gzipped and the oldest beyond LogPolicy.MaxFiles-1 are
// deleted. If the runtime cannot reopen, the file is renamed back. A
// failure on one container does not stop the others.
//
// The pod logs directory is writable by pods that mount it, so nothing in
// it is trusted: a log path outside it is refused, the log's directory is
// opened without following any symlink and every rename, unlink and
// creation happens relative to it; only regular files are rotated or
// read for compression (a symlink or a FIFO in their place is an error).
func (c *Collector) RotateLogs(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()

	running, err := c.rt.ListContainers(ctx, &runtimeapi.ContainerFilter{
		State:         &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
		LabelSelector: podspec.ManagedSelector(),
	})
	if err != nil {
		return fmt.Errorf("rotate logs: %w", err)
	}
	var errs []error
	paths := make(map[string]string, len(running))
	for _, ctr := range running {
		if ctx.Err() != nil {
			return errors.Join(append(errs, ctx.Err())...)
		}
		if !podspec.IsManaged(ctr.GetLabels()) || ctr.GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING {
			continue
		}
		path, err := c.rotateLog(ctx, ctr.GetId())
		if err != nil {
			errs = append(errs, fmt.Errorf("rotate log of container %s: %w", ctr.GetId(), err))
		}
		if path != "" {
			paths[ctr.GetId()] = path
		}
	}
	c.logPaths = paths // the running containers' only: no entry outlives its container
	return errors.Join(errs...)
}

// rotateLog rotates the log of the running container id if it is due, and
// returns the log's path ("" when unknown). A container's log path is set
// when it is created: it is asked of the runtime once per container, not
// every round (ContainerStatus for every container every 10 s was most of
// nodelet's CRI calls with idle pods). Nothing is done while the log file
// is smaller than the limit, which one lstat tells; the rest, from opening
// the log's directory without following symlinks on, is for a log due.
func (c *Collector) rotateLog(ctx context.Context, id string) (string, error) {
	path, known := c.logPaths[id]
	if !known {
		resp, err := c.rt.ContainerStatus(ctx, id)
		if cri.IsNotFound(err) {
			return "", nil
		}
		if err != nil {
			return "", err
		}
		if resp.GetStatus().GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING {
			return "", nil // a stopped container cannot reopen its log
		}
		path = resp.GetStatus().GetLogPath()
	}
	if path == "" {
		return "", nil
	}
	if _, err := beneath.Rel(c.policy.PodLogsDir, path); err != nil {
		return path, fmt.Errorf("log %s not rotated: %w", path, err)
	}
	if info, err := os.Lstat(path); err == nil && info.Mode().IsRegular() && info.Size() < c.logPolicy.MaxSize {
		return path, nil // not due; whether it is safe to rotate is asked when it is
	}
	return path, c.rotateDue(ctx, id, path)
}

// rotateDue rotates the log at path of the container id if it has reached
// the limit.
func (c *Collector) rotateDue(ctx context.Context, id, path string) error {
	dir, name, err := c.openLogDir(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("log %s not rotated: %w", path, err)
	}
	defer dir.Close()
	info, err := dir.Lstat(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("log %s not rotated: %w", path, err)
	}
	switch {
	case info.Mode()&fs.ModeSymlink != 0:
		return fmt.Errorf("log %s not rotated: %w: the log is a symlink", path, beneath.ErrSymlink)
	case !info.Mode().IsRegular():
		return fmt.Errorf("log %s not rotated: %w: its mode is %s", path, beneath.ErrNotRegular, info.Mode())
	}
	if info.Size() < c.logPolicy.MaxSize {
		return nil
	}

	rotated := name + "." + c.clk.Now().Format(rotationTimeFormat)
	if exists(dir, rotated) || exists(dir, rotated+gzSuffix) {
		return nil // rotated less than a second ago: next time
	}
	if err := dir.Rename(name, rotated); err != nil {
		return err
	}
	if err := c.rt.ReopenContainerLog(ctx, id); err != nil {
		// The runtime still writes to the renamed file: give it its name
		// back.
		if rerr := dir.Rename(rotated, name); rerr != nil {
			return errors.Join(err, fmt.Errorf("restore log file: %w", rerr))
		}
		return err
	}
	c.log.Info("rotated container log", "container", id, "path", path, "rotated", rotated, "size", info.Size())
	return c.pruneRotated(dir, name)
}

// openLogDir opens the directory of the log file at path, below the pod
// logs directory and without following any symlink, and returns it with
// the file's name. Everything done to the log then happens relative to
// that directory. A path outside the pod logs directory is refused
// (beneath.ErrOutside), so is a symlink on the way (beneath.ErrSymlink).
func (c *Collector) openLogDir(path string) (*beneath.Dir, string, error) {
	rel, err := beneath.Rel(c.policy.PodLogsDir, path)
	if err != nil {
		return nil, "", err
	}
	root, err := beneath.OpenRoot(c.policy.PodLogsDir)
	if err != nil {
		return nil, "", err
	}
	defer root.Close()
	dir, err := root.OpenDir(filepath.Dir(rel))
	if err != nil {
		return nil, "", err
	}
	return dir, filepath.Base(rel), nil
}

// pruneRotated keeps the newest MaxFiles-1 rotations of the log name in
// dir, compresses all of them but the newest and removes leftovers of an
// interrupted compression.
func (c *Collector) pruneRotated(dir *beneath.Dir, name string) error {
	files, err := rotatedLogs(dir, name)
	if err != nil {
		return err
	}
	var errs []error
	remove := func(f string) {
		if err := dir.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	has := map[string]bool{}
	for _, f := range files {
		has[f] = true
	}
	var rotations []string
	for _, f := range files {
		switch {
		case strings.HasSuffix(f, tmpSuffix):
			remove(f)
		case !strings.HasSuffix(f, gzSuffix) && has[f+gzSuffix]:
			remove(f) // compressed, but the original was not removed
		default:
			rotations = append(rotations, f)
		}
	}
	// Names differ only by the fixed-width time: name order is time order.
	slices.Sort(rotations)
	if excess := len(rotations) - (c.logPolicy.MaxFiles - 1); excess > 0 {
		for _, f := range rotations[:excess] {
			remove(f)
		}
		rotations = rotations[excess:]
	}
	for i, f := range rotations {
		if i == len(rotations)-1 || strings.HasSuffix(f, gzSuffix) {
			continue // the newest stays plain, as the kubelet does
		}
		if err := compress(dir, f); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// rotatedLogs lists the entries of dir named <name>.<...>, directories
// aside: the log's rotations, compressed or not, and temporary files.
func rotatedLogs(dir *beneath.Dir, name string) ([]string, error) {
	names, err := dir.Names()
	if err != nil {
		return nil, fmt.Errorf("list rotated logs: %w", err)
	}
	var out []string
	for _, n := range names {
		if !strings.HasPrefix(n, name+".") {
			continue
		}
		if fi, err := dir.Lstat(n); err != nil || fi.IsDir() {
			continue
		}
		out = append(out, n)
	}
	return out, nil
}

// compress replaces the rotated log name in dir with name.gz, written
// through a temporary file that is synced before it is renamed. Only a
// regular file is read; a symlink or a FIFO in its place is an error.
func compress(dir *beneath.Dir, name string) (err error) {
	in, err := dir.OpenFile(name)
	if err != nil {
		return fmt.Errorf("compress log: %w", err)
	}
	defer func() { _ = in.Close() }()
	info, err := in.Stat()
	if err != nil {
		return fmt.Errorf("compress log: %w", err)
	}
	tmp := name + gzSuffix + tmpSuffix
	if err := dir.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("compress log: %w", err)
	}
	out, err := dir.Create(tmp, info.Mode().Perm())
	if err != nil {
		return fmt.Errorf("compress log: %w", err)
	}
	closed := false
	defer func() {
		if err != nil {
			if !closed {
				_ = out.Close()
			}
			_ = dir.Remove(tmp)
		}
	}()
	zw := gzip.NewWriter(out)
	if _, err := io.Copy(zw, in); err != nil {
		return fmt.Errorf("compress log %s: %w", in.Name(), err)
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("compress log %s: %w", in.Name(), err)
	}
	if err := out.Sync(); err != nil {
		return fmt.Errorf("compress log %s: %w", in.Name(), err)
	}
	closed = true
	if err := out.Close(); err != nil {
		return fmt.Errorf("compress log %s: %w", in.Name(), err)
	}
	if err := dir.Rename(tmp, name+gzSuffix); err != nil {
		return fmt.Errorf("compress log: %w", err)
	}
	if err := dir.Sync(); err != nil {
		return fmt.Errorf("compress log: %w", err)
	}
	if err := dir.Remove(name); err != nil {
		return fmt.Errorf("compress log: %w", err)
	}
	return nil
}

func exists(dir *beneath.Dir, name string) bool {
	_, err := dir.Lstat(name)
	return err == nil
}
