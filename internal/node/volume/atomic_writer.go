package volume

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"k8s.io/utils/clock"
)

const (
	dataDirName    = "..data"
	newDataDirName = "..data_tmp"
	// tsDirLayout names the timestamped directories (UTC).
	tsDirLayout = "..2006_01_02_15_04_05.000000000"

	maxFileNameLength = 255
	maxPathLength     = 4096
)

// fileProjection is one file of a payload: its content, mode and, when
// set, owner (the kubelet's FsUser: a service account token readable by
// the one user every container runs as).
type fileProjection struct {
	data []byte
	mode int32
	uid  *int64
}

// atomicWriter projects a payload (relative path → file) into dir with the
// kubelet's AtomicWriter layout. Names starting with ".." are reserved for
// it. It offers no concurrency guarantees: the caller serializes writes to
// one dir.
type atomicWriter struct {
	dir     string
	clock   clock.PassiveClock
	fsGroup *int64 // applied to every write when set (read-only mask)
	// afterStep, when set, is called after each step of a write that
	// changes the disk: tests crash the writer there (by panicking) to
	// check that the next write repairs whatever it left.
	afterStep func(writeStep)
}

// writeStep names a point of a write where a crash leaves the volume
// consistent (see write).
type writeStep string

const (
	stepWroteTsDir        writeStep = "wrote the timestamped directory"
	stepLinkedUserVisible writeStep = "created the user-visible links"
	stepCreatedTmpLink    writeStep = "created ..data_tmp"
	stepRenamedData       writeStep = "renamed ..data_tmp over ..data"
	stepRemovedStaleLinks writeStep = "removed stale user-visible links"
	stepRemovedOldTsDirs  writeStep = "removed old timestamped directories"
)

func (w *atomicWriter) done(s writeStep) {
	if w.afterStep != nil {
		w.afterStep(s)
	}
}

// write projects payload into w.dir and reports whether anything changed
// on disk. The steps:
//
//  1. validate the payload: relative paths, no "..", nothing reserved,
//     before and after cleaning; no two keys naming one file;
//  2. read "..data" to find the current timestamped directory;
//  3. find the paths of the current directory the payload no longer has;
//  4. compare the payload (content, mode, group) with the current files:
//     when equal and nothing is to be removed, only tidy up (below);
//  5. write the payload to a new timestamped directory, apply fsGroup;
//  6. create the missing user-visible symlinks "name -> ..data/name": a
//     new name dangles (reads as absent) until "..data" moves;
//  7. point a new "..data_tmp" symlink at the new directory and
//  8. rename(2) it over "..data": readers switch to the new content at
//     once, and the links of names the payload dropped dangle;
//  9. remove the user-visible symlinks of names the payload does not have;
//  10. remove every timestamped directory but the new one, and any stale
//     "..data_tmp".
//
// A crash after any step leaves readers seeing the whole old payload
// (before step 8) or the whole new one (after it), and the next write,
// whatever its payload, finishes or undoes what was left: steps 6, 9 and
// 10 are also the tidy-up of a write with nothing to change. As with the
// kubelet, an open(2) whose path walk resolved "..data" just before step 8
// and reaches the old directory after step 10 removed it fails with
// ENOENT; it never sees a mix of versions.
func (w *atomicWriter) write(payload map[string]fileProjection) (changed bool, err error) {
	// Step 1.
	clean, err := validatePayload(payload)
	if err != nil {
		return false, err
	}

	// Step 2.
	oldTs, err := w.currentTsDir()
	if err != nil {
		return false, err
	}

	// Steps 3 and 4.
	if oldTs != "" {
		oldPath := filepath.Join(w.dir, oldTs)
		stale, err := pathsToRemove(clean, oldPath)
		if err != nil {
			return false, err
		}
		should, err := w.shouldWrite(clean, oldPath)
		if err != nil {
			return false, err
		}
		if !should && len(stale) == 0 {
			return false, w.tidy(clean, oldTs)
		}
	}

	// Step 5.
	tsDir, err := w.newTsDir()
	if err != nil {
		return false, err
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(tsDir)
		}
	}()
	if err := writePayload(clean, tsDir); err != nil {
		return false, err
	}
	if w.fsGroup != nil {
		if err := applyFSGroup(tsDir, *w.fsGroup, true); err != nil {
			return false, err
		}
		if err := chownGroup(w.dir, *w.fsGroup); err != nil {
			return false, err
		}
	}
	w.done(stepWroteTsDir)

	// Step 6.
	if err := w.createUserVisible(clean); err != nil {
		return false, err
	}
	w.done(stepLinkedUserVisible)

	// Steps 7 and 8.
	if err := w.swapData(filepath.Base(tsDir)); err != nil {
		return false, err
	}

	// Steps 9 and 10: the new content is in place; what fails now is
	// repaired by the next write.
	return true, w.removeStale(clean, filepath.Base(tsDir))
}

// tidy finishes what an interrupted write left, when the payload is
// already in current: user-visible links missing or stale, timestamped
// directories and "..data_tmp" left over.
func (w *atomicWriter) tidy(payload map[string]fileProjection, current string) error {
	return errors.Join(w.createUserVisible(payload), w.removeStale(payload, current))
}

// removeStale removes the user-visible links the payload does not have
// (step 9), then every timestamped directory but current and a stale
// "..data_tmp" (step 10).
func (w *atomicWriter) removeStale(payload map[string]fileProjection, current string) error {
	linksErr := w.removeUserVisible(payload)
	w.done(stepRemovedStaleLinks)
	dirsErr := w.removeOldTsDirs(current)
	w.done(stepRemovedOldTsDirs)
	return errors.Join(linksErr, dirsErr)
}

// validatePayload checks every path, as given and cleaned, and returns the
// payload keyed by cleaned paths. Two keys that clean to one path, or a
// path that is both a file and another's directory, are refused: one of
// them would be lost.
func validatePayload(payload map[string]fileProjection) (map[string]fileProjection, error) {
	clean := make(map[string]fileProjection, len(payload))
	given := make(map[string]string, len(payload)) // cleaned → as given
	for p, f := range payload {
		if err := validatePath(p); err != nil {
			return nil, err
		}
		c := filepath.Clean(p)
		if c != p {
			if err := validatePath(c); err != nil {
				return nil, fmt.Errorf("invalid path %q (%q once cleaned): %w", p, c, err)
			}
		}
		if other, dup := given[c]; dup {
			return nil, fmt.Errorf("invalid paths %q and %q: both name %q", min(p, other), max(p, other), c)
		}
		given[c] = p
		clean[c] = f
	}
	for c := range clean {
		for d := filepath.Dir(c); d != "."; d = filepath.Dir(d) {
			if _, file := clean[d]; file {
				return nil, fmt.Errorf("invalid paths %q and %q: %q is a file and a directory", given[d], given[c], d)
			}
		}
	}
	return clean, nil
}

// validatePath rejects an empty, absolute or over-long path, a path with a
// ".." element or over-long element, one starting with "..", and one
// naming the volume itself.
func validatePath(p string) error {
	switch {
	case p == "":
		return errors.New("invalid path: must not be empty")
	case filepath.IsAbs(p):
		return fmt.Errorf("invalid path %q: must be relative", p)
	case len(p) > maxPathLength:
		return fmt.Errorf("invalid path: must be at most %d characters", maxPathLength)
	}
	items := strings.Split(p, "/")
	for _, item := range items {
		if item == ".." {
			return fmt.Errorf("invalid path %q: must not contain '..'", p)
		}
		if len(item) > maxFileNameLength {
			return fmt.Errorf("invalid path: file names must be at most %d characters", maxFileNameLength)
		}
	}
	if strings.HasPrefix(items[0], "..") && len(items[0]) > 2 {
		return fmt.Errorf("invalid path %q: must not start with '..'", p)
	}
	if filepath.Clean(p) == "." {
		return fmt.Errorf("invalid path %q: names the volume itself", p)
	}
	return nil
}

// currentTsDir is the name of the timestamped directory "..data" points
// to, "" when there is none yet.
func (w *atomicWriter) currentTsDir() (string, error) {
	target, err := os.Readlink(filepath.Join(w.dir, dataDirName))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("reading the data directory link: %w", err)
	}
	if !isTsDirName(target) {
		return "", fmt.Errorf("data directory link points to %q, not to a timestamped directory", target)
	}
	return target, nil
}

// isTsDirName reports whether name can be a timestamped directory of
// ours: one path element starting with "..", not one of the fixed names.
func isTsDirName(name string) bool {
	return strings.HasPrefix(name, "..") && name != ".." && name != dataDirName &&
		name != newDataDirName && !strings.Contains(name, "/")
}

// pathsToRemove lists the paths of the old timestamped directory that the
// payload no longer has (neither as a file nor as a parent directory).
func pathsToRemove(payload map[string]fileProjection, oldTsPath string) ([]string, error) {
	keep := map[string]bool{}
	for p := range payload {
		for ; p != "." && p != "/"; p = filepath.Dir(p) {
			keep[p] = true
		}
	}
	var stale []string
	err := filepath.WalkDir(oldTsPath, func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(oldTsPath, path)
		if err != nil || rel == "." {
			return err
		}
		if !keep[rel] {
			stale = append(stale, rel)
		}
		return nil
	})
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing the current volume contents: %w", err)
	}
	return stale, nil
}

// shouldWrite reports whether any file of the payload differs on disk in
// content, mode, owner or (with fsGroup) group.
func (w *atomicWriter) shouldWrite(payload map[string]fileProjection, oldTsPath string) (bool, error) {
	for p, f := range payload {
		full := filepath.Join(oldTsPath, p)
		fi, err := os.Lstat(full)
		if errors.Is(err, fs.ErrNotExist) {
			return true, nil
		}
		if err != nil {
			return false, fmt.Errorf("checking the current volume contents: %w", err)
		}
		if !fi.Mode().IsRegular() || fi.Mode().Perm() != w.fileMode(f.mode) || !w.groupMatches(fi) || !ownerMatches(fi, f.uid) {
			return true, nil
		}
		data, err := os.ReadFile(full)
		if err != nil {
			return false, fmt.Errorf("checking the current volume contents: %w", err)
		}
		if !bytes.Equal(data, f.data) {
			return true, nil
		}
	}
	return false, nil
}

// fileMode is the mode a payload file ends up with.
func (w *atomicWriter) fileMode(mode int32) fs.FileMode {
	m := fs.FileMode(mode) & fs.ModePerm
	if w.fsGroup != nil {
		m |= roMask
	}
	return m
}

// newTsDir creates a new timestamped directory with mode 0755 (whatever the
// umask) and returns its path.
func (w *atomicWriter) newTsDir() (string, error) {
	base := w.clock.Now().UTC().Format(tsDirLayout)
	for i := 0; i < 100; i++ {
		name := base
		if i > 0 {
			name = fmt.Sprintf("%s_%d", base, i)
		}
		dir := filepath.Join(w.dir, name)
		err := os.Mkdir(dir, 0o755)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("creating a timestamped directory: %w", err)
		}
		if err := os.Chmod(dir, 0o755); err != nil {
			_ = os.Remove(dir)
			return "", fmt.Errorf("creating a timestamped directory: %w", err)
		}
		return dir, nil
	}
	return "", fmt.Errorf("creating a timestamped directory: %s exists", base)
}

// writePayload writes every file, with its parent directories (0755), into
// dir, setting modes whatever the umask.
func writePayload(payload map[string]fileProjection, dir string) error {
	paths := make([]string, 0, len(payload))
	for p := range payload {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	for _, p := range paths {
		f := payload[p]
		if err := mkdirAllMode(dir, filepath.Dir(p), 0o755); err != nil {
			return err
		}
		full := filepath.Join(dir, p)
		mode := fs.FileMode(f.mode) & fs.ModePerm
		if err := writeNewFile(full, f.data, mode, f.uid); err != nil {
			return fmt.Errorf("writing %s: %w", p, err)
		}
	}
	return nil
}

// mkdirAllMode creates base/rel and its missing parents below base with
// mode perm.
func mkdirAllMode(base, rel string, perm fs.FileMode) error {
	if rel == "." {
		return nil
	}
	cur := base
	for _, el := range strings.Split(rel, "/") {
		cur = filepath.Join(cur, el)
		err := os.Mkdir(cur, perm)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("creating directory %s: %w", rel, err)
		}
		if err := os.Chmod(cur, perm); err != nil {
			return fmt.Errorf("creating directory %s: %w", rel, err)
		}
	}
	return nil
}

// writeNewFile creates path (which must not exist) with data and mode,
// owned by uid when it is set.
func writeNewFile(path string, data []byte, mode fs.FileMode, uid *int64) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		return err
	}
	if uid != nil {
		if err := f.Chown(int(*uid), -1); err != nil {
			_ = f.Close()
			return err
		}
	}
	if err := f.Chmod(mode); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// swapData points "..data" at tsName atomically (steps 7 and 8).
func (w *atomicWriter) swapData(tsName string) error {
	tmp := filepath.Join(w.dir, newDataDirName)
	if err := os.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing a stale %s: %w", newDataDirName, err)
	}
	if err := os.Symlink(tsName, tmp); err != nil {
		return fmt.Errorf("creating %s: %w", newDataDirName, err)
	}
	w.done(stepCreatedTmpLink)
	if err := os.Rename(tmp, filepath.Join(w.dir, dataDirName)); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("renaming %s over %s: %w", newDataDirName, dataDirName, err)
	}
	w.done(stepRenamedData)
	return nil
}

// createUserVisible creates the symlink "name -> ..data/name" for the top
// path element of every file that has none.
func (w *atomicWriter) createUserVisible(payload map[string]fileProjection) error {
	for p := range payload {
		name, _, _ := strings.Cut(p, "/")
		visible := filepath.Join(w.dir, name)
		if _, err := os.Readlink(visible); !errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err := os.Symlink(filepath.Join(dataDirName, name), visible); err != nil {
			return fmt.Errorf("creating the user-visible link %s: %w", name, err)
		}
	}
	return nil
}

// removeUserVisible removes the user-visible links ("name -> ..data/name")
// whose name is the top element of no path of the payload. It reads the
// directory, not the old timestamped one, so that it also removes the
// links an interrupted write left.
func (w *atomicWriter) removeUserVisible(payload map[string]fileProjection) error {
	keep := map[string]bool{}
	for p := range payload {
		name, _, _ := strings.Cut(p, "/")
		keep[name] = true
	}
	entries, err := os.ReadDir(w.dir)
	if err != nil {
		return fmt.Errorf("listing user-visible links: %w", err)
	}
	var errs []error
	for _, e := range entries {
		name := e.Name()
		if keep[name] || strings.HasPrefix(name, "..") || e.Type()&fs.ModeSymlink == 0 {
			continue
		}
		if target, err := os.Readlink(filepath.Join(w.dir, name)); err != nil || target != filepath.Join(dataDirName, name) {
			continue // not one of ours
		}
		if err := os.Remove(filepath.Join(w.dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("removing the old user-visible link %s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

// removeOldTsDirs removes every timestamped directory but current (the
// previous one and any left behind by an interrupted write) and a
// "..data_tmp" an interrupted write left.
func (w *atomicWriter) removeOldTsDirs(current string) error {
	entries, err := os.ReadDir(w.dir)
	if err != nil {
		return fmt.Errorf("listing old data directories: %w", err)
	}
	var errs []error
	for _, e := range entries {
		if name := e.Name(); e.IsDir() && isTsDirName(name) && name != current {
			if err := os.RemoveAll(filepath.Join(w.dir, name)); err != nil {
				errs = append(errs, fmt.Errorf("removing old data directory %s: %w", name, err))
			}
		}
	}
	if err := os.Remove(filepath.Join(w.dir, newDataDirName)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, fmt.Errorf("removing a stale %s: %w", newDataDirName, err))
	}
	return errors.Join(errs...)
}
