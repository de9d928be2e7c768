// Package registry is beside the pipeline: the node-local image store and
// the registry mirror in front of it. nodelet runs on machines without
// internet access, so in managed mode it keeps the images pods need in an OCI
// image layout under its root directory (Store), fills it from the host
// (Seed: the pause and busybox images) and from archives (Import), and serves
// it read-only to containerd over the registry protocol on a loopback address
// (Server), which containerd's hosts.toml names as the mirror for docker.io,
// registry.k8s.io and every other registry. Only writers on the file system
// (nodelet itself, `nodelet images import`) add images.
package registry

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"syscall"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/nodelet/nodelet/internal/base/atomicfile"
	"github.com/nodelet/nodelet/internal/base/bounded"
)

// StoreDir is the OCI layout holding the node's local images under
// nodelet's root dir.
func StoreDir(rootDir string) string { return filepath.Join(rootDir, "images") }

// ErrNotFound is returned (wrapped) when the store holds no image under a
// reference.
var ErrNotFound = errors.New("image not found")

// RefNameAnnotation is the index.json annotation that names a stored image.
const RefNameAnnotation = "org.opencontainers.image.ref.name"

const (
	indexFile  = "index.json"
	layoutFile = "oci-layout"
	lockName   = ".lock"
	layoutJSON = `{"imageLayoutVersion":"1.0.0"}`

	// maxIndexBytes bounds index.json: thousands of images.
	maxIndexBytes = 16 << 20
)

// Entry is one image held by the store.
type Entry struct {
	// Ref is the full normalized reference, e.g.
	// "docker.io/library/busybox:1.35".
	Ref string
	// Digest is the digest of the image manifest.
	Digest v1.Hash
}

// Store is an OCI image layout on disk holding images by reference. Only
// its owner can enter its directory (0700). Blobs and index.json are
// written to a temp file, synced and renamed into place, so readers never
// see a partial file and a crash leaves the old or the new one. Every
// read-modify-write of index.json holds an exclusive flock on the store's
// lock file, so writers in different processes (nodelet seeding, `nodelet
// images import`) never lose each other's images. Blobs are never
// deleted, so readers need no lock.
type Store struct {
	dir string
	log *slog.Logger

	// Test hooks: indexRead runs in Put between reading and writing
	// index.json, with the lock held; lockWait runs when another holder
	// makes Put wait for the lock.
	indexRead func()
	lockWait  func()
}

// OpenStore opens the image layout in dir, creating an empty one if dir has
// none, and makes dir private to its owner. log receives warnings about
// damaged blobs that Put repairs; nil discards them.
func OpenStore(dir string, log *slog.Logger) (*Store, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Store{dir: dir, log: log}
	if err := s.initLayout(); err != nil {
		return nil, fmt.Errorf("opening image store %s: %w", dir, err)
	}
	return s, nil
}

// Dir is the layout directory.
func (s *Store) Dir() string { return s.dir }

// BlobsDir is the directory holding the content-addressed blobs
// (<dir>/blobs), laid out as <algorithm>/<hex>.
func (s *Store) BlobsDir() string { return filepath.Join(s.dir, "blobs") }

func (s *Store) initLayout() error {
	if err := os.MkdirAll(filepath.Dir(s.dir), 0o755); err != nil {
		return fmt.Errorf("creating parent directory: %w", err)
	}
	if err := os.Mkdir(s.dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("creating store directory: %w", err)
	}
	if err := makePrivate(s.dir); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(s.BlobsDir(), "sha256"), 0o700); err != nil {
		return fmt.Errorf("creating blobs directory: %w", err)
	}
	return s.withLock(func() error {
		if err := createIfMissing(filepath.Join(s.dir, layoutFile), func() ([]byte, error) { return []byte(layoutJSON), nil }); err != nil {
			return err
		}
		return createIfMissing(filepath.Join(s.dir, indexFile), func() ([]byte, error) {
			return encodeIndex(&v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex})
		})
	})
}

// makePrivate checks that dir is a directory of the user nodelet runs as
// and takes away any access of other users (stores of older versions were
// 0755): the store is nodelet's, served to others only through the
// read-only registry.
func makePrivate(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("%s belongs to uid %d, not to uid %d that nodelet runs as", dir, st.Uid, os.Geteuid())
	}
	if fi.Mode().Perm() != 0o700 {
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("making %s private: %w", dir, err)
		}
	}
	return nil
}

func createIfMissing(path string, content func() ([]byte, error)) error {
	_, err := os.Lstat(path)
	if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	data, err := content()
	if err != nil {
		return err
	}
	return atomicfile.Write(path, data, 0o600)
}

// withLock runs fn holding the store's cross-process lock.
func (s *Store) withLock(fn func() error) error {
	l, err := lockFile(filepath.Join(s.dir, lockName), func() {
		s.log.Info("waiting for another process writing the image store", "dir", s.dir)
		if s.lockWait != nil {
			s.lockWait()
		}
	})
	if err != nil {
		return err
	}
	err = fn()
	if uerr := l.unlock(); err == nil && uerr != nil {
		err = fmt.Errorf("unlocking image store: %w", uerr)
	}
	return err
}

// Put stores img under ref (normalized, e.g. "busybox:1.35" becomes
// "docker.io/library/busybox:1.35"), replacing the image previously stored
// under that reference. Every blob of img (layers, config, manifest) is
// checked: one that is missing, not a regular file or does not hash to its
// digest (a crash, a careless hand) is written again, also when index.json
// already names the image. changed reports whether Put wrote anything: a
// blob or index.json.
func (s *Store) Put(ref string, img v1.Image) (changed bool, err error) {
	full, err := NormalizeRef(ref)
	if err != nil {
		return false, err
	}
	desc, err := partial.Descriptor(img)
	if err != nil {
		return false, fmt.Errorf("describing image %s: %w", full, err)
	}
	known := false
	if index, err := s.readIndex(); err == nil {
		d, ok := findRef(index, full)
		known = ok && d.Digest == desc.Digest
	}
	wrote, err := s.writeImage(full, img, known)
	if err != nil {
		return wrote, fmt.Errorf("writing image %s: %w", full, err)
	}
	recorded := false
	err = s.withLock(func() error {
		index, err := s.readIndex()
		if err != nil {
			return err
		}
		if s.indexRead != nil {
			s.indexRead()
		}
		if d, ok := findRef(index, full); ok && d.Digest == desc.Digest {
			return nil
		}
		setRef(index, full, *desc)
		recorded = true
		return s.writeIndex(index)
	})
	if err != nil {
		return wrote, fmt.Errorf("recording image %s: %w", full, err)
	}
	return wrote || recorded, nil
}

// List returns the stored images sorted by reference.
func (s *Store) List() ([]Entry, error) {
	index, err := s.readIndex()
	if err != nil {
		return nil, err
	}
	var entries []Entry
	for _, d := range index.Manifests {
		if ref, ok := d.Annotations[RefNameAnnotation]; ok {
			entries = append(entries, Entry{Ref: ref, Digest: d.Digest})
		}
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Ref < entries[j].Ref })
	return entries, nil
}

// Image returns the image stored under ref; the error wraps ErrNotFound when
// there is none. The image reads its blobs from disk lazily.
func (s *Store) Image(ref string) (v1.Image, error) {
	full, err := NormalizeRef(ref)
	if err != nil {
		return nil, err
	}
	index, err := s.readIndex()
	if err != nil {
		return nil, err
	}
	d, ok := findRef(index, full)
	if !ok {
		return nil, fmt.Errorf("looking up %s: %w", full, ErrNotFound)
	}
	img, err := layout.Path(s.dir).Image(d.Digest)
	if err != nil {
		return nil, fmt.Errorf("reading image %s: %w", full, err)
	}
	return img, nil
}

// readIndex reads index.json. It takes no lock: index.json is only ever
// replaced by rename.
func (s *Store) readIndex() (*v1.IndexManifest, error) {
	f, _, err := openNoFollow(filepath.Join(s.dir, indexFile))
	if err != nil {
		return nil, fmt.Errorf("reading image store index: %w", err)
	}
	defer f.Close()
	data, err := bounded.ReadAll(f, maxIndexBytes, f.Name())
	if err != nil {
		return nil, fmt.Errorf("reading image store index: %w", err)
	}
	index, err := v1.ParseIndexManifest(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("parsing image store index %s: %w", f.Name(), err)
	}
	return index, nil
}

func (s *Store) writeIndex(index *v1.IndexManifest) error {
	data, err := encodeIndex(index)
	if err != nil {
		return err
	}
	return atomicfile.Write(filepath.Join(s.dir, indexFile), data, 0o600)
}

func encodeIndex(index *v1.IndexManifest) ([]byte, error) {
	sort.SliceStable(index.Manifests, func(i, j int) bool {
		return index.Manifests[i].Annotations[RefNameAnnotation] < index.Manifests[j].Annotations[RefNameAnnotation]
	})
	data, err := json.MarshalIndent(index, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encoding image store index: %w", err)
	}
	return data, nil
}

func findRef(index *v1.IndexManifest, ref string) (v1.Descriptor, bool) {
	for _, d := range index.Manifests {
		if d.Annotations[RefNameAnnotation] == ref {
			return d, true
		}
	}
	return v1.Descriptor{}, false
}

// setRef makes desc the only descriptor of index named ref.
func setRef(index *v1.IndexManifest, ref string, desc v1.Descriptor) {
	kept := index.Manifests[:0]
	for _, d := range index.Manifests {
		if d.Annotations[RefNameAnnotation] != ref {
			kept = append(kept, d)
		}
	}
	desc.Annotations = map[string]string{RefNameAnnotation: ref}
	index.Manifests = append(kept, desc)
}

// writeImage makes sure every blob of img (layers, config, manifest, in
// that order, so the manifest lands last) is stored intact. known says
// that index.json already names img under ref, so a missing blob is damage
// worth a warning. It reports whether it wrote any blob.
func (s *Store) writeImage(ref string, img v1.Image, known bool) (wrote bool, err error) {
	layers, err := img.Layers()
	if err != nil {
		return false, fmt.Errorf("listing layers: %w", err)
	}
	ensure := func(h v1.Hash, open func() (io.ReadCloser, error)) error {
		w, err := s.ensureBlob(ref, h, known, open)
		wrote = wrote || w
		return err
	}
	for _, l := range layers {
		digest, err := l.Digest()
		if err != nil {
			return wrote, fmt.Errorf("hashing layer: %w", err)
		}
		if err := ensure(digest, l.Compressed); err != nil {
			return wrote, err
		}
	}
	cfgName, err := img.ConfigName()
	if err != nil {
		return wrote, fmt.Errorf("hashing config: %w", err)
	}
	if err := ensure(cfgName, rawOpener(img.RawConfigFile)); err != nil {
		return wrote, err
	}
	digest, err := img.Digest()
	if err != nil {
		return wrote, fmt.Errorf("hashing manifest: %w", err)
	}
	return wrote, ensure(digest, rawOpener(img.RawManifest))
}

func rawOpener(raw func() ([]byte, error)) func() (io.ReadCloser, error) {
	return func() (io.ReadCloser, error) {
		data, err := raw()
		if err != nil {
			return nil, err
		}
		return io.NopCloser(bytes.NewReader(data)), nil
	}
}

// ensureBlob writes the blob h from open unless the store holds it intact.
func (s *Store) ensureBlob(ref string, h v1.Hash, known bool, open func() (io.ReadCloser, error)) (bool, error) {
	problem := s.checkBlob(h)
	if problem == nil {
		return false, nil
	}
	if known || !errors.Is(problem, fs.ErrNotExist) {
		s.log.Warn("rewriting a damaged blob of the image store", "ref", ref, "digest", h.String(), "reason", problem.Error())
	}
	rc, err := open()
	if err != nil {
		return false, fmt.Errorf("opening blob %s: %w", h, err)
	}
	defer rc.Close()
	if err := s.writeBlob(h, rc); err != nil {
		return false, err
	}
	return true, nil
}

// checkBlob returns nil when blob h is a regular file whose content hashes
// to h; otherwise it says what is wrong (wrapping fs.ErrNotExist when the
// blob is missing). This reads the whole blob: for the seeded images at
// every start, about 1 MB of busybox layer.
func (s *Store) checkBlob(h v1.Hash) error {
	path, err := s.blobPath(h)
	if err != nil {
		return err
	}
	f, _, err := openNoFollow(path)
	if err != nil {
		return err
	}
	defer f.Close()
	got, _, err := v1.SHA256(f)
	if err != nil {
		return fmt.Errorf("reading %s: %w", path, err)
	}
	if got != h {
		return fmt.Errorf("%s holds content with digest %s", path, got)
	}
	return nil
}

// blobPath is where the store keeps blob h. It refuses anything but a
// well-formed sha256 digest, so no digest names a path outside the blobs
// directory.
func (s *Store) blobPath(h v1.Hash) (string, error) {
	if !validDigest(h) {
		return "", fmt.Errorf("unsupported blob digest %q", h.String())
	}
	return filepath.Join(s.BlobsDir(), h.Algorithm, h.Hex), nil
}

// validDigest reports whether h is sha256 with 64 lower-case hex digits.
func validDigest(h v1.Hash) bool {
	if h.Algorithm != "sha256" || len(h.Hex) != 64 {
		return false
	}
	for _, c := range h.Hex {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// openBlob opens blob h for reading, refusing a symlink or anything else
// that is not a regular file.
func (s *Store) openBlob(h v1.Hash) (*os.File, os.FileInfo, error) {
	path, err := s.blobPath(h)
	if err != nil {
		return nil, nil, err
	}
	return openNoFollow(path)
}

// readBlob reads the small blob h (a manifest), refusing one larger than
// limit or whose content does not hash to h.
func (s *Store) readBlob(h v1.Hash, limit int64) ([]byte, error) {
	f, _, err := s.openBlob(h)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := bounded.ReadAll(f, limit, "blob "+h.String())
	if err != nil {
		return nil, err
	}
	got, _, err := v1.SHA256(bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	if got != h {
		return nil, fmt.Errorf("blob %s holds content with digest %s", h, got)
	}
	return data, nil
}

// writeBlob copies r into the blob named h, verifying the digest before the
// blob becomes visible.
func (s *Store) writeBlob(h v1.Hash, r io.Reader) error {
	path, err := s.blobPath(h)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+h.Hex+"-")
	if err != nil {
		return fmt.Errorf("creating blob %s: %w", h, err)
	}
	defer os.Remove(tmp.Name())
	got, _, err := v1.SHA256(io.TeeReader(r, tmp))
	if err == nil && got != h {
		err = fmt.Errorf("content has digest %s", got)
	}
	if err := atomicfile.Commit(tmp, path, err); err != nil {
		return fmt.Errorf("writing blob %s: %w", h, err)
	}
	return nil
}
