package registry

import (
	"archive/tar"
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
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
// image is an error.
func Import(store *Store, archivePath string) (refs []string, err error) {
	kind, err := archiveKind(archivePath)
	if err != nil {
		return nil, fmt.Errorf("importing %s: %w", archivePath, err)
	}
	switch kind {
	case dockerArchive:
		refs, err = importDocker(store, archivePath)
	default:
		refs, err = importOCI(store, archivePath)
	}
	if err != nil {
		return refs, fmt.Errorf("importing %s: %w", archivePath, err)
	}
	return refs, nil
}

type archiveFormat int

const (
	dockerArchive archiveFormat = iota
	ociArchive
)

// archiveKind tells a docker save archive (manifest.json; Docker 25 and
// later also write index.json, the RepoTags are the better names) from an
// OCI layout archive (index.json and oci-layout).
func archiveKind(archivePath string) (archiveFormat, error) {
	f, err := os.Open(archivePath)
	if err != nil {
		return 0, fmt.Errorf("opening archive: %w", err)
	}
	defer f.Close()
	br := bufio.NewReader(f)
	if magic, _ := br.Peek(2); bytes.Equal(magic, []byte{0x1f, 0x8b}) {
		return 0, errors.New("archive is gzip-compressed; decompress it first")
	}
	seen := map[string]bool{}
	tr := tar.NewReader(br)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return 0, fmt.Errorf("reading archive: %w", err)
		}
		seen[path.Clean(hdr.Name)] = true
	}
	switch {
	case seen["manifest.json"]:
		return dockerArchive, nil
	case seen["index.json"] && seen["oci-layout"]:
		return ociArchive, nil
	}
	return 0, errors.New("archive is neither a docker save archive (no manifest.json) nor an OCI image layout (no index.json and oci-layout)")
}

func importDocker(store *Store, archivePath string) ([]string, error) {
	opener := func() (io.ReadCloser, error) { return os.Open(archivePath) }
	manifest, err := tarball.LoadManifest(opener)
	if err != nil {
		return nil, fmt.Errorf("reading manifest.json: %w", err)
	}
	var refs []string
	for _, entry := range manifest {
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

func importOCI(store *Store, archivePath string) ([]string, error) {
	dir, err := os.MkdirTemp(store.Dir(), ".import-")
	if err != nil {
		return nil, fmt.Errorf("creating extraction directory: %w", err)
	}
	defer os.RemoveAll(dir)
	if err := extractTar(archivePath, dir); err != nil {
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
		img, err := ociImage(index, desc)
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
// linux image for the host architecture.
func ociImage(index v1.ImageIndex, desc v1.Descriptor) (v1.Image, error) {
	switch {
	case desc.MediaType.IsImage():
		return index.Image(desc.Digest)
	case desc.MediaType.IsIndex():
		child, err := index.ImageIndex(desc.Digest)
		if err != nil {
			return nil, err
		}
		return hostPlatformImage(child)
	}
	return nil, fmt.Errorf("unsupported media type %s", desc.MediaType)
}

func hostPlatformImage(index v1.ImageIndex) (v1.Image, error) {
	im, err := index.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("reading image index: %w", err)
	}
	for _, d := range im.Manifests {
		if d.MediaType.IsImage() && d.Platform != nil && d.Platform.OS == "linux" && d.Platform.Architecture == runtime.GOARCH {
			return index.Image(d.Digest)
		}
	}
	return nil, fmt.Errorf("image index has no linux/%s image", runtime.GOARCH)
}

// extractTar unpacks the regular files and directories of archivePath into
// dir, refusing entries that would land outside it.
func extractTar(archivePath, dir string) error {
	f, err := os.Open(archivePath)
	if err != nil {
		return fmt.Errorf("opening archive: %w", err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading archive: %w", err)
		}
		if err := extractEntry(tr, hdr, dir); err != nil {
			return err
		}
	}
}

func extractEntry(r io.Reader, hdr *tar.Header, dir string) error {
	rel := path.Clean(strings.TrimPrefix(hdr.Name, "/"))
	if rel == "." {
		return nil
	}
	if rel == ".." || strings.HasPrefix(rel, "../") {
		return fmt.Errorf("archive entry %q leaves the archive", hdr.Name)
	}
	target := filepath.Join(dir, filepath.FromSlash(rel))
	switch hdr.Typeflag {
	case tar.TypeDir:
		return os.MkdirAll(target, 0o755)
	case tar.TypeReg:
		return extractFile(r, target)
	}
	return nil
}

func extractFile(r io.Reader, target string) error {
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return fmt.Errorf("extracting %s: %w", target, err)
	}
	out, err := os.OpenFile(target, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("extracting %s: %w", target, err)
	}
	_, err = io.Copy(out, r)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("extracting %s: %w", target, err)
	}
	return nil
}
