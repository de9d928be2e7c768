package gc

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/cri"
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
func (c *Collector) RotateLogs(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()

	running, err := c.rt.ListContainers(ctx, &runtimeapi.ContainerFilter{
		State:         &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
		LabelSelector: managedSelector(),
	})
	if err != nil {
		return fmt.Errorf("rotate logs: %w", err)
	}
	var errs []error
	for _, ctr := range running {
		if ctx.Err() != nil {
			return errors.Join(append(errs, ctx.Err())...)
		}
		if !managed(ctr.GetLabels()) || ctr.GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING {
			continue
		}
		if err := c.rotateLog(ctx, ctr.GetId()); err != nil {
			errs = append(errs, fmt.Errorf("rotate log of container %s: %w", ctr.GetId(), err))
		}
	}
	return errors.Join(errs...)
}

func (c *Collector) rotateLog(ctx context.Context, id string) error {
	resp, err := c.rt.ContainerStatus(ctx, id)
	if cri.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if resp.GetStatus().GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING {
		return nil // a stopped container cannot reopen its log
	}
	path := resp.GetStatus().GetLogPath()
	if path == "" || !c.underPodLogsDir(path) {
		return nil
	}
	info, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if info.Size() < c.logPolicy.MaxSize {
		return nil
	}

	rotated := path + "." + c.clk.Now().Format(rotationTimeFormat)
	if exists(rotated) || exists(rotated+gzSuffix) {
		return nil // rotated less than a second ago: next time
	}
	if err := os.Rename(path, rotated); err != nil {
		return err
	}
	if err := c.rt.ReopenContainerLog(ctx, id); err != nil {
		// The runtime still writes to the renamed file: give it its name
		// back.
		if rerr := os.Rename(rotated, path); rerr != nil {
			return errors.Join(err, fmt.Errorf("restore log file: %w", rerr))
		}
		return err
	}
	c.log.Info("rotated container log", "container", id, "path", path, "rotated", rotated, "size", info.Size())
	return c.pruneRotated(path)
}

// pruneRotated keeps the newest MaxFiles-1 rotations of the log at path,
// compresses all of them but the newest and removes leftovers of an
// interrupted compression.
func (c *Collector) pruneRotated(path string) error {
	files, err := rotatedLogs(path)
	if err != nil {
		return err
	}
	var errs []error
	remove := func(p string) {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
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
		if err := compress(f); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// rotatedLogs lists the files beside the log at path named <log>.<...>:
// its rotations, compressed or not, and temporary files.
func rotatedLogs(path string) ([]string, error) {
	dir, base := filepath.Split(path)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list rotated logs: %w", err)
	}
	var out []string
	for _, e := range entries {
		if !e.IsDir() && strings.HasPrefix(e.Name(), base+".") {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	return out, nil
}

// compress replaces path with path.gz, written through a temporary file.
func compress(path string) (err error) {
	in, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("compress log: %w", err)
	}
	defer func() { _ = in.Close() }()
	info, err := in.Stat()
	if err != nil {
		return fmt.Errorf("compress log: %w", err)
	}
	tmp := path + gzSuffix + tmpSuffix
	out, err := os.OpenFile(tmp, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, info.Mode().Perm())
	if err != nil {
		return fmt.Errorf("compress log: %w", err)
	}
	defer func() {
		if err != nil {
			_ = out.Close()
			_ = os.Remove(tmp)
		}
	}()
	zw := gzip.NewWriter(out)
	if _, err := io.Copy(zw, in); err != nil {
		return fmt.Errorf("compress log %s: %w", path, err)
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("compress log %s: %w", path, err)
	}
	if err := out.Close(); err != nil {
		return fmt.Errorf("compress log %s: %w", path, err)
	}
	if err := os.Rename(tmp, path+gzSuffix); err != nil {
		return fmt.Errorf("compress log: %w", err)
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("compress log: %w", err)
	}
	return nil
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}
