package podsource

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/internal/base/bounded"
)

// errIsDir is a manifest path entry that turned out to be a directory (a
// symlink to one, say): not a manifest, and not worth an error.
var errIsDir = errors.New("is a directory")

// fileID is one version of one file, as fstat tells it. ctime is in it
// because mtime is not enough: anyone who can write the file can also set
// its mtime back (touch -d, cp -p, tar), but nobody can set ctime.
type fileID struct {
	dev, ino     uint64
	size         int64
	mtime, ctime int64 // nanoseconds
}

// parsed is what one manifest file defines, or why it cannot be used.
type parsed struct {
	pods    []*v1.Pod
	objects Objects
	class   string // Reason* of err
	err     error
}

// cacheEntry is the last parse of one path.
type cacheEntry struct {
	id  fileID
	sum [sha256.Size]byte // of the content parsed
	parsed
}

// manifestCache keeps the last parse of each manifest file, so that an
// unchanged file is not decoded again at each rescan: decoding is most of
// the cost of a rescan. The parse of a path is reused when
//   - its fileID is the same and the caller trusts it (trustStat), without
//     reading the file, or
//   - its content has the same SHA-256, after reading it.
//
// trustStat is the caller's to give, because the fileID alone can miss a
// change: a file rewritten in place with the same size within one tick of
// the file system's clock (a few milliseconds) keeps its fileID. The
// FileSource trusts it only for a file no event named since the last scan.
//
// The parsed pods and objects are shared by every read that reuses them:
// nobody may modify them.
type manifestCache struct {
	nodeName string
	entries  map[string]*cacheEntry

	// reads and decodes count the files read and decoded (tests).
	reads, decodes int
}

func newManifestCache(nodeName string) *manifestCache {
	return &manifestCache{nodeName: nodeName, entries: map[string]*cacheEntry{}}
}

// read returns what the manifest file at path defines. A path that is gone
// is an error that matches fs.ErrNotExist, a directory errIsDir; neither is
// kept in the cache, nor is a file that cannot be read.
func (c *manifestCache) read(path string, trustStat bool) parsed {
	h, err := openManifest(path)
	if err != nil {
		delete(c.entries, path)
		return parsed{class: ReasonRead, err: explainOpenError(path, err)}
	}
	defer h.close()
	e := c.entries[path]
	if e != nil && trustStat && e.id == h.id {
		return e.parsed
	}
	data, err := c.readContent(h)
	if err != nil {
		delete(c.entries, path)
		return parsed{class: errorClass(err, ReasonRead), err: err}
	}
	sum := sha256.Sum256(data)
	if e != nil && e.sum == sum {
		e.id = h.id
		return e.parsed
	}
	c.decodes++
	e = &cacheEntry{id: h.id, sum: sum, parsed: c.parse(path, data)}
	c.entries[path] = e
	return e.parsed
}

func (c *manifestCache) readContent(h *manifestHandle) ([]byte, error) {
	if h.id.size > MaxManifestSize {
		return nil, tooLarge("file", MaxManifestSize)
	}
	c.reads++
	return h.read(MaxManifestSize)
}

// parse decodes, checks and gives the static identity to what a file
// defines.
func (c *manifestCache) parse(path string, data []byte) parsed {
	var objects Objects
	pods, class, err := parseManifests(data, false, &objects, fileLimits, c.nodeName, SourceFile, path)
	if err != nil {
		return parsed{class: class, err: err}
	}
	if err := objects.validate(); err != nil {
		return parsed{class: ReasonValidate, err: err}
	}
	return parsed{pods: pods, objects: objects}
}

// keepOnly drops the entries of the paths not in files.
func (c *manifestCache) keepOnly(files []candidate) {
	listed := make(map[string]bool, len(files))
	for _, f := range files {
		listed[f.path] = true
	}
	for path := range c.entries {
		if !listed[path] {
			delete(c.entries, path)
		}
	}
}

// explainOpenError tells a dangling symlink (an error) from a file removed
// since it was listed (fs.ErrNotExist, not an error).
func explainOpenError(path string, err error) error {
	if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if info, lerr := os.Lstat(path); lerr == nil && info.Mode()&fs.ModeSymlink != 0 {
		target, _ := os.Readlink(path)
		return fmt.Errorf("symlink to %q, which does not exist", target)
	}
	return err
}

// readLimited reads r to its end, refusing more than limit bytes; what
// names r in the error.
func readLimited(r io.Reader, limit int, what string) ([]byte, error) {
	data, err := bounded.ReadAll(r, int64(limit), what)
	if errors.Is(err, bounded.ErrTooLarge) {
		return nil, tooLarge(what, limit)
	}
	return data, err
}
