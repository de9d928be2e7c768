package registry

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// containerdNameAnnotation carries the full image name in OCI archives
// written by containerd and Docker, whose ref.name holds only the tag.
const containerdNameAnnotation = "io.containerd.image.name"

// Import loads the images of an archive into store and returns the
// references it stored. The archive is either a `docker save` tarball (its
// manifest.json RepoTags name the images) or a tar of an OCI image layout
// (its index.json descriptors are named by the io.containerd.image.name or
// org.opencontainers.image.ref.name annotation). An archive that names no
// image, or that breaks limits, is an error.
func Import(store *Store, archivePath string, limits ImportLimits) (refs []string, err error) {
	a, err := openArchive(archivePath, limits)
	if err != nil {
		return nil, fmt.Errorf("importing %s: %w", archivePath, err)
	}
	defer a.f.Close()
	switch a.kind {
	case dockerArchive:
		refs, err = importDocker(store, a)
	default:
		refs, err = importOCI(store, a)
	}
	if err != nil {
		return refs, fmt.Errorf("importing %s: %w", archivePath, err)
	}
	return refs, nil
}

func importDocker(store *Store, a *archive) ([]string, error) {
	opener := a.open
	if err := a.checkJSON("manifest.json"); err != nil {
		return nil, err
	}
	manifest, err := tarball.LoadManifest(opener)
	if err != nil {
		return nil, fmt.Errorf("reading manifest.json: %w", err)
	}
	var refs []string
	for _, entry := range manifest {
		if err := a.checkJSON(entry.Config); err != nil {
			return refs, err
		}
		for _, repoTag := range entry.RepoTags {
			ref, err := importDockerTag(store, opener, repoTag)
			if err != nil {
				return refs, err
			}
			refs = append(refs, ref)
		}
	}
	if len(refs) == 0 {
		return nil, errors.New("manifest.json has no RepoTags; save the image by name (docker save NAME:TAG)")
	}
	return refs, nil
}

func importDockerTag(store *Store, opener tarball.Opener, repoTag string) (string, error) {
	tag, err := name.NewTag(repoTag)
	if err != nil {
		return "", fmt.Errorf("parsing RepoTag %q: %w", repoTag, err)
	}
	img, err := tarball.Image(opener, &tag)
	if err != nil {
		return "", fmt.Errorf("reading image %s: %w", repoTag, err)
	}
	return putImported(store, repoTag, img)
}

func putImported(store *Store, ref string, img v1.Image) (string, error) {
	full, err := NormalizeRef(ref)
	if err != nil {
		return "", err
	}
	if _, err := store.Put(full, img); err != nil {
		return "", fmt.Errorf("storing %s: %w", full, err)
	}
	return full, nil
}

func importOCI(store *Store, a *archive) ([]string, error) {
	if err := a.checkJSON("index.json"); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(store.Dir(), ".import-")
	if err != nil {
		return nil, fmt.Errorf("creating extraction directory: %w", err)
	}
	defer os.RemoveAll(dir)
	if err := a.extract(dir); err != nil {
		return nil, err
	}
	if err := checkLayoutFile(filepath.Join(dir, "index.json")); err != nil {
		return nil, err
	}
	index, err := layout.Path(dir).ImageIndex()
	if err != nil {
		return nil, fmt.Errorf("reading OCI layout: %w", err)
	}
	im, err := index.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("reading OCI layout index.json: %w", err)
	}
	var refs []string
	for _, desc := range im.Manifests {
		ref := ociRefName(desc)
		if ref == "" {
			continue
		}
		img, err := ociImage(dir, index, desc)
		if err != nil {
			return refs, fmt.Errorf("reading image %s: %w", ref, err)
		}
		full, err := putImported(store, ref, img)
		if err != nil {
			return refs, err
		}
		refs = append(refs, full)
	}
	if len(refs) == 0 {
		return nil, fmt.Errorf("index.json names no image (no %s or %s annotation with a full reference)", containerdNameAnnotation, RefNameAnnotation)
	}
	return refs, nil
}

// ociRefName is the full reference a layout descriptor names, or "" when it
// names none. A ref.name that is only a tag ("1.35", "latest") does not
// count: it could be mistaken for a repository.
func ociRefName(desc v1.Descriptor) string {
	if ref := desc.Annotations[containerdNameAnnotation]; ref != "" {
		return ref
	}
	ref := desc.Annotations[RefNameAnnotation]
	if strings.ContainsAny(ref, ":/@") {
		return ref
	}
	return ""
}

// ociImage returns the image desc points at; for an image index, the
// linux image for the host architecture. The layout in dir reads
// manifests, indexes and configs into memory whole, so each is checked
// against maxJSONBytes first.
func ociImage(dir string, index v1.ImageIndex, desc v1.Descriptor) (v1.Image, error) {
	if err := checkLayoutJSON(dir, desc.Digest); err != nil {
		return nil, err
	}
	switch {
	case desc.MediaType.IsImage():
		return layoutImage(dir, index, desc.Digest)
	case desc.MediaType.IsIndex():
		child, err := index.ImageIndex(desc.Digest)
		if err != nil {
			return nil, err
		}
		return hostPlatformImage(dir, child)
	}
	return nil, fmt.Errorf("unsupported media type %s", desc.MediaType)
}

func hostPlatformImage(dir string, index v1.ImageIndex) (v1.Image, error) {
	im, err := index.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("reading image index: %w", err)
	}
	for _, d := range im.Manifests {
		if d.MediaType.IsImage() && d.Platform != nil && d.Platform.OS == "linux" && d.Platform.Architecture == runtime.GOARCH {
			if err := checkLayoutJSON(dir, d.Digest); err != nil {
				return nil, err
			}
			return layoutImage(dir, index, d.Digest)
		}
	}
	return nil, fmt.Errorf("image index has no linux/%s image", runtime.GOARCH)
}

// layoutImage returns the image h of index after checking the size of its
// config.
func layoutImage(dir string, index v1.ImageIndex, h v1.Hash) (v1.Image, error) {
	img, err := index.Image(h)
	if err != nil {
		return nil, err
	}
	m, err := img.Manifest()
	if err != nil {
		return nil, fmt.Errorf("reading manifest %s: %w", h, err)
	}
	if err := checkLayoutJSON(dir, m.Config.Digest); err != nil {
		return nil, err
	}
	return img, nil
}

// checkLayoutJSON refuses a blob of the extracted layout in dir that is
// over maxJSONBytes or not a regular file.
func checkLayoutJSON(dir string, h v1.Hash) error {
	if !validDigest(h) {
		return fmt.Errorf("unsupported digest %q", h.String())
	}
	return checkLayoutFile(filepath.Join(dir, "blobs", h.Algorithm, h.Hex))
}

// checkLayoutFile refuses a file of the extracted layout that is read
// into memory whole when it is over maxJSONBytes or not a regular file.
func checkLayoutFile(path string) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", filepath.Base(path))
	}
	if fi.Size() > maxJSONBytes {
		return fmt.Errorf("%s is %d bytes, over the limit of %d bytes for a JSON document", filepath.Base(path), fi.Size(), maxJSONBytes)
	}
	return nil
}
