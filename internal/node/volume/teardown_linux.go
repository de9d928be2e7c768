package volume

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/internal/base/beneath"
	"github.com/nodelet/nodelet/internal/base/mountinfo"
)

// TearDown unmounts and removes the pod's volumes: the tmpfs of
// memory-backed volumes, the subPath bind mounts, and the pod directory's
// volumes and volume-subpaths subtrees with all they hold (the pod
// directory itself and anything else in it belong to the pod directory
// hook). Call it once no container of the pod runs any more. It never
// follows a symlink and removes nothing outside those subtrees; while
// anything below them stays mounted, nothing mounted is removed and an
// error is returned (try again later). A pod without them is already torn
// down. Once the pod is torn down, its cached service account tokens are
// forgotten.
//
// The steps, for each subtree:
//
//  1. open the pod directory, then the subtree, without following a
//     symlink (a symlink in the subtree's place is removed as such; a pod
//     directory that is not a directory holds no volumes);
//  2. (volumes) have the CSI drivers unpublish their volumes (csi.Mounter's
//     TearDown, which also unstages a volume no other pod uses); then
//     unmount every mount below it, deepest and newest first, each opened
//     below it without following symlinks;
//  3. remove the tree through directory descriptors
//     (beneath.RemoveAll), never following a symlink and refusing to
//     descend into anything still mounted.
func (m *Manager) TearDown(ctx context.Context, podUID types.UID) error {
	if err := checkPathElement("pod UID", string(podUID)); err != nil {
		return err
	}
	unlock := m.locks.lock(podUID)
	defer unlock()
	if err := m.tearDown(ctx, podUID); err != nil {
		return fmt.Errorf("tear down volumes of pod %s: %w", podUID, err)
	}
	m.claimed.forget(podUID)
	if m.tokens != nil {
		m.tokens.Forget(podUID)
	}
	return nil
}

// volumeSubtrees are the volume manager's entries in a pod directory.
// The subPath bind mounts go first, so that nothing holds a CSI volume
// when its driver unstages it.
var volumeSubtrees = []string{subPathsDirName, volumesDirName}

func (m *Manager) tearDown(ctx context.Context, uid types.UID) error {
	// Step 1.
	podFD, err := m.openPodDir(uid)
	if err != nil || podFD < 0 {
		return err
	}
	defer unix.Close(podFD)
	removed := false
	for _, name := range volumeSubtrees {
		path := filepath.Join(m.podDir(uid), name)
		subFD, err := openSubtree(podFD, name, path)
		if err != nil {
			return err
		}
		if subFD < 0 {
			continue
		}
		if name == volumesDirName {
			if err := m.tearDownCSI(ctx, uid); err != nil {
				unix.Close(subFD)
				return err
			}
		}
		// Step 2.
		err = unmountAll(ctx, subFD)
		unix.Close(subFD)
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		// Step 3.
		if err := beneath.RemoveAll(podFD, name, path); err != nil {
			return err
		}
		removed = true
	}
	if removed {
		m.log.Info("Removed pod volumes", "podUID", uid)
	}
	return nil
}

// openPodDir opens the pod's directory with O_PATH, following no symlink;
// -1 when there is none or it is not a directory (then it holds no
// volumes, and is not the volume manager's to remove).
func (m *Manager) openPodDir(uid types.UID) (int, error) {
	podsFD, err := unix.Open(m.podsDir(), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return -1, nil
	}
	if err != nil {
		return -1, fmt.Errorf("opening %s: %w", m.podsDir(), err)
	}
	defer unix.Close(podsFD)
	fd, err := unix.Openat(podsFD, string(uid), unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.ELOOP):
		return -1, nil
	case err != nil:
		return -1, fmt.Errorf("opening %s: %w", m.podDir(uid), err)
	}
	return fd, nil
}

// openSubtree opens the directory name of the pod directory open as podFD
// with O_PATH, following no symlink; -1 when there is none. Anything else
// in its place (a symlink, say) is removed as such.
func openSubtree(podFD int, name, path string) (int, error) {
	fd, err := unix.Openat(podFD, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, unix.ENOENT):
		return -1, nil
	case errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.ELOOP):
		if err := unix.Unlinkat(podFD, name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
			return -1, fmt.Errorf("removing %s: %w", path, err)
		}
		return -1, nil
	case err != nil:
		return -1, fmt.Errorf("opening %s: %w", path, err)
	}
	return fd, nil
}

// unmountAll unmounts everything mounted at or below the directory open as
// podFD, in passes until nothing is left (mounts can be stacked).
func unmountAll(ctx context.Context, podFD int) error {
	realDir, err := os.Readlink(procFD(podFD))
	if err != nil {
		return fmt.Errorf("resolving the pod directory: %w", err)
	}
	for range 16 {
		if err := ctx.Err(); err != nil {
			return err
		}
		rels, err := mountsBelow(realDir)
		if err != nil || len(rels) == 0 {
			return err
		}
		var errs []error
		for _, rel := range rels {
			if err := unmountBelow(podFD, rel); err != nil {
				errs = append(errs, err)
			}
		}
		if len(errs) == len(rels) {
			return errors.Join(errs...)
		}
	}
	return fmt.Errorf("mounts remain below %s", realDir)
}

// mountsBelow lists the mount points at or below dir, relative to it,
// deepest first and, at one depth, newest first.
func mountsBelow(dir string) ([]string, error) {
	mounts, err := mountinfo.Read()
	if err != nil {
		return nil, err
	}
	type found struct {
		rel   string
		id    int
		depth int
	}
	var list []found
	for i, mi := range mounts {
		rel, ok := relBelow(dir, mi.MountPoint)
		if !ok {
			continue
		}
		// Lines are in mount order; the index breaks ties between
		// stacked mounts.
		list = append(list, found{rel: rel, id: i, depth: strings.Count(rel, "/")})
	}
	slices.SortFunc(list, func(a, b found) int {
		return cmp.Or(cmp.Compare(b.depth, a.depth), cmp.Compare(len(b.rel), len(a.rel)), cmp.Compare(b.id, a.id))
	})
	out := make([]string, len(list))
	for i, f := range list {
		out[i] = f.rel
	}
	return out, nil
}

// relBelow is path relative to dir when it is dir or below it.
func relBelow(dir, path string) (string, bool) {
	if path == dir {
		return ".", true
	}
	rest, ok := strings.CutPrefix(path, dir+"/")
	return rest, ok && rest != ""
}

// Pods lists the UIDs of the pod directories under <rootDir>/pods that
// hold volumes (anything in the place of the volumes or volume-subpaths
// subtree, a symlink included, counts, so that TearDown removes it), for
// housekeeping to tear down the orphans.
func (m *Manager) Pods() ([]types.UID, error) {
	entries, err := os.ReadDir(m.podsDir())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing pod directories: %w", err)
	}
	uids := make([]types.UID, 0, len(entries))
	for _, e := range entries {
		for _, name := range volumeSubtrees {
			if _, err := os.Lstat(filepath.Join(m.podsDir(), e.Name(), name)); err == nil {
				uids = append(uids, types.UID(e.Name()))
				break
			}
		}
	}
	return uids, nil
}
