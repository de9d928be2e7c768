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
	"strings"

	"golang.org/x/sys/unix"
)

// ImportLimits bound what Import reads from an archive, so that no archive
// (a tar bomb: sparse entries, huge declared sizes, a flood of entries) can
// fill the disk or the memory.
type ImportLimits struct {
	// MaxArchiveBytes is the largest archive Import reads. Extraction
	// writes at most the archive's size, since every entry must fit in it.
	MaxArchiveBytes int64
	// MaxEntries is the most tar entries an archive may hold.
	MaxEntries int
}

// DefaultImportLimits are 8 GiB and 10,000 entries (an image has a few
// files per layer and at most 127 layers).
func DefaultImportLimits() ImportLimits {
	return ImportLimits{MaxArchiveBytes: 8 << 30, MaxEntries: 10_000}
}

// ErrArchiveTooLarge is returned (wrapped) for an archive over
// ImportLimits.MaxArchiveBytes.
var ErrArchiveTooLarge = errors.New("archive too large")

// maxJSONBytes bounds every JSON document of an archive that is read into
// memory whole: manifest.json, index.json, manifests and configs.
const maxJSONBytes = 8 << 20

type archiveFormat int

const (
	dockerArchive archiveFormat = iota
	ociArchive
)

// archive is an opened archive whose headers have been checked. Every
// later pass reads f up to the size it had when opened, and checks each
// entry again against what the first pass saw, so an archive changed
// during the import is refused rather than trusted.
type archive struct {
	f      *os.File
	size   int64
	kind   archiveFormat
	sizes  map[string]int64 // largest declared size of each entry, by clean name
	limits ImportLimits
}

// openArchive opens archivePath, checks its size and every tar header, and
// tells a docker save archive (manifest.json; Docker 25 and later also
// write index.json, the RepoTags are the better names) from an OCI layout
// archive (index.json and oci-layout). Nothing is extracted yet.
func openArchive(archivePath string, limits ImportLimits) (_ *archive, retErr error) {
	f, err := os.Open(archivePath)
	if err != nil {
		return nil, fmt.Errorf("opening archive: %w", err)
	}
	defer func() {
		if retErr != nil {
			f.Close()
		}
	}()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("opening archive: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("archive is %v, not a regular file", fi.Mode().Type())
	}
	if fi.Size() > limits.MaxArchiveBytes {
		return nil, fmt.Errorf("%w: it is %d bytes, over the limit of %d bytes", ErrArchiveTooLarge, fi.Size(), limits.MaxArchiveBytes)
	}
	a := &archive{f: f, size: fi.Size(), limits: limits}
	if magic, _ := bufio.NewReader(a.reader()).Peek(2); bytes.Equal(magic, []byte{0x1f, 0x8b}) {
		return nil, errors.New("archive is gzip-compressed; decompress it first")
	}
	sizes := map[string]int64{}
	err = a.walk(func(hdr *tar.Header, _ io.Reader) error {
		name := cleanName(hdr.Name)
		sizes[name] = max(sizes[name], hdr.Size)
		return nil
	})
	if err != nil {
		return nil, err
	}
	a.sizes = sizes
	switch {
	case a.has("manifest.json"):
		a.kind = dockerArchive
	case a.has("index.json") && a.has("oci-layout"):
		a.kind = ociArchive
	default:
		return nil, errors.New("archive is neither a docker save archive (no manifest.json) nor an OCI image layout (no index.json and oci-layout)")
	}
	return a, nil
}

// reader reads the archive from its start, up to its size when opened.
func (a *archive) reader() io.Reader { return io.NewSectionReader(a.f, 0, a.size) }

// walk reads the archive from its start and calls fn with every entry
// and its content. It refuses more entries than the limit, sparse
// entries, and entries that together declare more bytes than the archive
// holds (which only sparse or truncated archives do); after the first
// pass, also an entry larger than the first pass saw.
func (a *archive) walk(fn func(hdr *tar.Header, content io.Reader) error) error {
	tr := tar.NewReader(a.reader())
	budget := a.size
	for entries := 1; ; entries++ {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading archive: %w", err)
		}
		if entries > a.limits.MaxEntries {
			return fmt.Errorf("archive has more than %d entries", a.limits.MaxEntries)
		}
		if err := checkEntry(hdr); err != nil {
			return err
		}
		if hdr.Size > budget {
			return fmt.Errorf("archive entry %q declares %d bytes: the entries declare more than the archive holds (%d bytes)", hdr.Name, hdr.Size, a.size)
		}
		budget -= hdr.Size
		if a.sizes != nil && hdr.Size > a.sizes[cleanName(hdr.Name)] {
			return fmt.Errorf("archive entry %q changed while importing", hdr.Name)
		}
		if err := fn(hdr, io.LimitReader(tr, hdr.Size)); err != nil {
			return err
		}
	}
}

// checkEntry refuses sparse entries: a sparse entry reads as far more
// bytes than it takes in the archive, and no image archive has one.
func checkEntry(hdr *tar.Header) error {
	sparse := hdr.Typeflag == tar.TypeGNUSparse
	for k := range hdr.PAXRecords {
		sparse = sparse || strings.HasPrefix(k, "GNU.sparse.")
	}
	if sparse {
		return fmt.Errorf("archive entry %q is a sparse file; image archives have none", hdr.Name)
	}
	if hdr.Size < 0 {
		return fmt.Errorf("archive entry %q has a negative size", hdr.Name)
	}
	return nil
}

func cleanName(name string) string { return path.Clean(strings.TrimPrefix(name, "/")) }

func (a *archive) has(name string) bool {
	_, ok := a.sizes[name]
	return ok
}

// checkJSON refuses an entry that would be read into memory whole when
// it is over maxJSONBytes.
func (a *archive) checkJSON(name string) error {
	if size := a.sizes[cleanName(name)]; size > maxJSONBytes {
		return fmt.Errorf("archive entry %q is %d bytes, over the limit of %d bytes for a JSON document", name, size, maxJSONBytes)
	}
	return nil
}

// open returns the archive as a tar stream of only the entries walk
// accepts (regular files, directories and links, headers rewritten
// plainly), for go-containerregistry's tarball reader, which opens the
// archive once per file it reads and must not see a sparse entry.
func (a *archive) open() (io.ReadCloser, error) {
	pr, pw := io.Pipe()
	go func() {
		tw := tar.NewWriter(pw)
		err := a.walk(func(hdr *tar.Header, content io.Reader) error {
			plain := &tar.Header{Name: hdr.Name, Typeflag: hdr.Typeflag, Mode: hdr.Mode, Linkname: hdr.Linkname}
			switch hdr.Typeflag {
			case tar.TypeReg:
				plain.Size = hdr.Size
			case tar.TypeDir, tar.TypeSymlink, tar.TypeLink:
			default:
				return nil
			}
			if err := tw.WriteHeader(plain); err != nil {
				return err
			}
			_, err := io.Copy(tw, content)
			return err
		})
		if err == nil {
			err = tw.Close()
		}
		pw.CloseWithError(err)
	}()
	return pr, nil
}

// extract unpacks the regular files and directories of the archive into
// dir (private: 0700 directories, 0600 files), refusing entries that
// would land outside it.
func (a *archive) extract(dir string) error {
	return a.walk(func(hdr *tar.Header, content io.Reader) error {
		rel := cleanName(hdr.Name)
		if rel == "." {
			return nil
		}
		if rel == ".." || strings.HasPrefix(rel, "../") {
			return fmt.Errorf("archive entry %q leaves the archive", hdr.Name)
		}
		target := filepath.Join(dir, filepath.FromSlash(rel))
		switch hdr.Typeflag {
		case tar.TypeDir:
			return os.MkdirAll(target, 0o700)
		case tar.TypeReg:
			return extractFile(content, target)
		}
		return nil
	})
}

func extractFile(r io.Reader, target string) error {
	if err := os.MkdirAll(filepath.Dir(target), 0o700); err != nil {
		return fmt.Errorf("extracting %s: %w", target, err)
	}
	out, err := os.OpenFile(target, os.O_CREATE|os.O_TRUNC|os.O_WRONLY|unix.O_NOFOLLOW, 0o600)
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
