// Package registry is beside the pipeline: the node-local image store and
// the registry mirror in front of it. nodelet runs on machines without
// internet access, so in managed mode it keeps the images pods need in an OCI
// image layout under its root directory (Store), fills it from the host
// (Seed: the pause and busybox images) and from archives (Import), and serves
// it to containerd over the registry protocol on a loopback address (Server),
// which containerd's hosts.toml names as the mirror for docker.io and
// registry.k8s.io.
package registry

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"sync"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// ErrNotFound is returned (wrapped) when the store holds no image under a
// reference.
var ErrNotFound = errors.New("image not found")

// RefNameAnnotation is the index.json annotation that names a stored image.
const RefNameAnnotation = "org.opencontainers.image.ref.name"

const (
	indexFile  = "index.json"
	layoutFile = "oci-layout"
	layoutJSON = `{"imageLayoutVersion":"1.0.0"}`
)

// Entry is one image held by the store.
type Entry struct {
	// Ref is the full normalized reference, e.g.
	// "docker.io/library/busybox:1.35".
	Ref string
	// Digest is the digest of the image manifest.
	Digest v1.Hash
}

// Store is an OCI image layout on disk holding images by reference. Its
// index.json is replaced atomically, so readers never see a partial one;
// writers within one process are serialized.
type Store struct {
	dir string
	mu  sync.Mutex
}

// OpenStore opens the image layout in dir, creating an empty one if dir has
// none.
func OpenStore(dir string) (*Store, error) {
	s := &Store{dir: dir}
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
	if err := os.MkdirAll(filepath.Join(s.BlobsDir(), "sha256"), 0o755); err != nil {
		return fmt.Errorf("creating blobs directory: %w", err)
	}
	if _, err := os.Stat(filepath.Join(s.dir, layoutFile)); errors.Is(err, os.ErrNotExist) {
		if err := writeFileAtomic(filepath.Join(s.dir, layoutFile), []byte(layoutJSON)); err != nil {
			return err
		}
	}
	_, err := os.Stat(filepath.Join(s.dir, indexFile))
	if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return s.writeIndex(&v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex})
}

// Put stores img under ref (normalized, e.g. "busybox:1.35" becomes
// "docker.io/library/busybox:1.35"), replacing the image previously stored
// under that reference. It reports changed=false, writing nothing, when the
// same digest is already stored under ref.
func (s *Store) Put(ref string, img v1.Image) (changed bool, err error) {
	full, err := NormalizeRef(ref)
	if err != nil {
		return false, err
	}
	desc, err := partial.Descriptor(img)
	if err != nil {
		return false, fmt.Errorf("describing image %s: %w", full, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	index, err := s.readIndex()
	if err != nil {
		return false, err
	}
	if d, ok := findRef(index, full); ok && d.Digest == desc.Digest {
		return false, nil
	}
	if err := s.writeImage(img); err != nil {
		return false, fmt.Errorf("writing image %s: %w", full, err)
	}
	setRef(index, full, *desc)
	if err := s.writeIndex(index); err != nil {
		return false, fmt.Errorf("recording image %s: %w", full, err)
	}
	return true, nil
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

func (s *Store) readIndex() (*v1.IndexManifest, error) {
	f, err := os.Open(filepath.Join(s.dir, indexFile))
	if err != nil {
		return nil, fmt.Errorf("reading image store index: %w", err)
	}
	defer f.Close()
	index, err := v1.ParseIndexManifest(f)
	if err != nil {
		return nil, fmt.Errorf("parsing image store index %s: %w", f.Name(), err)
	}
	return index, nil
}

func (s *Store) writeIndex(index *v1.IndexManifest) error {
	sort.SliceStable(index.Manifests, func(i, j int) bool {
		return index.Manifests[i].Annotations[RefNameAnnotation] < index.Manifests[j].Annotations[RefNameAnnotation]
	})
	data, err := json.MarshalIndent(index, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding image store index: %w", err)
	}
	return writeFileAtomic(filepath.Join(s.dir, indexFile), data)
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

// writeImage writes the blobs of img (layers, config, manifest) that the
// store does not hold yet.
func (s *Store) writeImage(img v1.Image) error {
	layers, err := img.Layers()
	if err != nil {
		return fmt.Errorf("listing layers: %w", err)
	}
	for _, l := range layers {
		if err := s.writeLayer(l); err != nil {
			return err
		}
	}
	cfgName, err := img.ConfigName()
	if err != nil {
		return fmt.Errorf("hashing config: %w", err)
	}
	cfg, err := img.RawConfigFile()
	if err != nil {
		return fmt.Errorf("reading config: %w", err)
	}
	if err := s.writeBytes(cfgName, cfg); err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return fmt.Errorf("hashing manifest: %w", err)
	}
	manifest, err := img.RawManifest()
	if err != nil {
		return fmt.Errorf("reading manifest: %w", err)
	}
	return s.writeBytes(digest, manifest)
}

func (s *Store) writeLayer(l v1.Layer) error {
	digest, err := l.Digest()
	if err != nil {
		return fmt.Errorf("hashing layer: %w", err)
	}
	if s.hasBlob(digest) {
		return nil
	}
	rc, err := l.Compressed()
	if err != nil {
		return fmt.Errorf("opening layer %s: %w", digest, err)
	}
	defer rc.Close()
	return s.writeBlob(digest, rc)
}

func (s *Store) writeBytes(h v1.Hash, data []byte) error {
	if s.hasBlob(h) {
		return nil
	}
	return writeFileAtomic(s.blobPath(h), data)
}

func (s *Store) blobPath(h v1.Hash) string {
	return filepath.Join(s.BlobsDir(), h.Algorithm, h.Hex)
}

func (s *Store) hasBlob(h v1.Hash) bool {
	fi, err := os.Stat(s.blobPath(h))
	return err == nil && fi.Mode().IsRegular()
}

// writeBlob copies r into the blob named h, verifying the digest before the
// blob becomes visible.
func (s *Store) writeBlob(h v1.Hash, r io.Reader) error {
	dir := filepath.Dir(s.blobPath(h))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating blob directory: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".tmp-"+h.Hex+"-")
	if err != nil {
		return fmt.Errorf("creating blob %s: %w", h, err)
	}
	defer os.Remove(tmp.Name())
	got, _, err := v1.SHA256(io.TeeReader(r, tmp))
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing blob %s: %w", h, err)
	}
	if got != h {
		return fmt.Errorf("writing blob %s: content has digest %s", h, got)
	}
	if err := os.Rename(tmp.Name(), s.blobPath(h)); err != nil {
		return fmt.Errorf("publishing blob %s: %w", h, err)
	}
	return nil
}

// writeFileAtomic replaces path with data so that readers see either the
// old or the new content.
func writeFileAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path)+"-")
	if err != nil {
		return fmt.Errorf("creating %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Chmod(0o644)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("replacing %s: %w", path, err)
	}
	return nil
}
