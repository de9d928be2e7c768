package volume

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/types"
)

// TearDown unmounts and removes everything of the pod: the tmpfs of
// memory-backed volumes, the subPath bind mounts and the pod directory
// <rootDir>/pods/<uid> with all it holds. Call it once no container of the
// pod runs any more. It never follows a symlink out of the pod directory
// and removes nothing outside it; while anything below the pod directory
// stays mounted, nothing is removed and an error is returned (try again
// later). A pod without a directory is already torn down. Once the pod is
// torn down, its cached service account tokens are forgotten.
//
// The steps:
//
//  1. open the pod directory without following a symlink (a symlink in its
//     place is removed as such);
//  2. unmount every mount below it, deepest and newest first, each opened
//     below the pod directory without following symlinks;
//  3. remove the tree through directory descriptors, never following a
//     symlink and refusing to descend into anything still mounted.
func (m *Manager) TearDown(ctx context.Context, podUID types.UID) error {
	if err := checkPathElement("pod UID", string(podUID)); err != nil {
		return err
	}
	unlock := m.locks.lock(podUID)
	defer unlock()
	if err := m.tearDown(ctx, podUID); err != nil {
		return fmt.Errorf("tear down volumes of pod %s: %w", podUID, err)
	}
	if m.tokens != nil {
		m.tokens.Forget(podUID)
	}
	return nil
}

func (m *Manager) tearDown(ctx context.Context, uid types.UID) error {
	// Step 1.
	podsFD, err := unix.Open(m.podsDir(), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("opening %s: %w", m.podsDir(), err)
	}
	defer unix.Close(podsFD)
	name := string(uid)
	podFD, err := unix.Openat(podsFD, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, unix.ENOENT):
		return nil
	case errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.ELOOP):
		// Not a directory (a symlink, say): remove the entry itself.
		if err := unix.Unlinkat(podsFD, name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("removing %s: %w", m.podDir(uid), err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("opening %s: %w", m.podDir(uid), err)
	}
	defer unix.Close(podFD)

	// Step 2.
	if err := unmountAll(ctx, podFD); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}

	// Step 3.
	parentMnt, err := mountKeyOf(podsFD)
	if err != nil {
		return err
	}
	if err := removeAllAt(podsFD, name, m.podDir(uid), parentMnt); err != nil {
		return err
	}
	m.log.Info("Removed pod volumes", "podUID", uid)
	return nil
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
	mounts, err := readMountInfo()
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
		rel, ok := relBelow(dir, mi.mountPoint)
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

// mountKey identifies the mount a file is on: the mount ID where statx has
// it, else only the device.
type mountKey struct {
	mntID uint64
	dev   uint64
}

func mountKeyOf(fd int) (mountKey, error) {
	var stx unix.Statx_t
	if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH, unix.STATX_TYPE|unix.STATX_MNT_ID, &stx); err != nil {
		return mountKey{}, fmt.Errorf("statx: %w", err)
	}
	k := mountKey{dev: unix.Mkdev(stx.Dev_major, stx.Dev_minor)}
	if stx.Mask&unix.STATX_MNT_ID != 0 {
		k.mntID = stx.Mnt_id
	}
	return k, nil
}

// removeAllAt removes the entry name of the directory open as parent and,
// for a directory, everything below it. It opens each directory with
// O_NOFOLLOW relative to its parent's descriptor, so a symlink is removed
// as a symlink and never followed, and it refuses to enter a directory on
// another mount than parentMnt. path is for messages only.
func removeAllAt(parent int, name, path string, parentMnt mountKey) error {
	fd, err := unix.Openat(parent, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, unix.ENOENT):
		return nil
	case errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.ELOOP):
		if err := unix.Unlinkat(parent, name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("removing %s: %w", path, err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("opening %s: %w", path, err)
	}
	dir := os.NewFile(uintptr(fd), path)
	defer dir.Close()

	mnt, err := mountKeyOf(fd)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if mnt != parentMnt {
		return fmt.Errorf("%s is on another mount: not removed", path)
	}
	var errs []error
	for {
		names, err := dir.Readdirnames(1024)
		for _, n := range names {
			if err := removeAllAt(fd, n, filepath.Join(path, n), mnt); err != nil {
				errs = append(errs, err)
			}
		}
		if errors.Is(err, io.EOF) || len(names) == 0 {
			break
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("listing %s: %w", path, err))
			break
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if err := unix.Unlinkat(parent, name, unix.AT_REMOVEDIR); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("removing %s: %w", path, err)
	}
	return nil
}

// Pods lists the UIDs of the pod directories under <rootDir>/pods
// (anything there, a symlink included, is treated as a pod directory, so
// that TearDown removes it), for housekeeping to tear down the orphans.
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
		uids = append(uids, types.UID(e.Name()))
	}
	return uids, nil
}
