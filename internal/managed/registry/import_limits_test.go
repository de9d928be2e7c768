package registry

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// A docker save archive whose config is a sparse entry declaring 64 MiB
// in a few KiB of archive: tarball reads a config into memory whole, so a
// larger declaration would exhaust memory. It is refused before anything
// is read.
func TestImportRefusesSparseEntry(t *testing.T) {
	archive := filepath.Join(t.TempDir(), "bomb.tar")
	img := randomImage(t)
	if err := tarball.WriteToFile(archive, mustTag(t, "example.com/bomb:v1"), img); err != nil {
		t.Fatal(err)
	}
	cfgName, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	files := readTar(t, archive)
	var buf bytes.Buffer
	for _, n := range sortedNames(files) {
		if n == cfgName.String() {
			writeSparseEntry(t, &buf, n, 64<<20)
			continue
		}
		writeRegularEntry(t, &buf, n, files[n])
	}
	buf.Write(make([]byte, 1024)) // end of archive
	if err := os.WriteFile(archive, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	assertImportFails(t, archive, "sparse")
}

// An entry that declares more bytes than the archive holds (a sparse or a
// truncated archive) is refused before extraction writes anything.
func TestImportRefusesOversizedEntry(t *testing.T) {
	archive := filepath.Join(t.TempDir(), "big.tar")
	var buf bytes.Buffer
	writeRegularEntry(t, &buf, "oci-layout", []byte(layoutJSON))
	writeRegularEntry(t, &buf, "index.json", []byte(`{"schemaVersion":2,"manifests":[]}`))
	hdr := tarHeader(t, &tar.Header{Name: "blobs/sha256/huge", Mode: 0o644, Size: 1 << 40, Typeflag: tar.TypeReg, Format: tar.FormatGNU})
	buf.Write(hdr)
	buf.Write(make([]byte, 4096))
	if err := os.WriteFile(archive, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	assertImportFails(t, archive, "more than the archive holds")
}

// An archive of very many (empty) entries is refused: extracting it would
// exhaust inodes for nothing an image needs.
func TestImportRefusesTooManyEntries(t *testing.T) {
	archive := filepath.Join(t.TempDir(), "many.tar")
	var buf bytes.Buffer
	writeRegularEntry(t, &buf, "oci-layout", []byte(layoutJSON))
	writeRegularEntry(t, &buf, "index.json", []byte(`{"schemaVersion":2,"manifests":[]}`))
	for i := range 10_001 {
		writeRegularEntry(t, &buf, fmt.Sprintf("junk/%05d", i), nil)
	}
	buf.Write(make([]byte, 1024))
	if err := os.WriteFile(archive, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	assertImportFails(t, archive, "entries")
}

func sortedNames(files map[string][]byte) []string {
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	for i := 1; i < len(names); i++ {
		for j := i; j > 0 && names[j] < names[j-1]; j-- {
			names[j], names[j-1] = names[j-1], names[j]
		}
	}
	return names
}

// tarHeader is the raw header block(s) tar.Writer writes for hdr.
func tarHeader(t *testing.T, hdr *tar.Header) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(hdr); err != nil {
		t.Fatal(err)
	}
	// Flush would complain about the missing content; the header is in buf.
	return buf.Bytes()
}

func writeRegularEntry(t *testing.T, buf *bytes.Buffer, name string, data []byte) {
	t.Helper()
	buf.Write(tarHeader(t, &tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg}))
	buf.Write(data)
	if pad := len(data) % 512; pad != 0 {
		buf.Write(make([]byte, 512-pad))
	}
}

// writeSparseEntry writes an old-GNU sparse entry ('S') of realSize bytes
// whose only data is one byte at its end: tar.Writer cannot write sparse
// files, so the header block is patched by hand.
func writeSparseEntry(t *testing.T, buf *bytes.Buffer, name string, realSize int64) {
	t.Helper()
	blk := tarHeader(t, &tar.Header{Name: name, Mode: 0o644, Size: 1, Typeflag: tar.TypeReg, Format: tar.FormatGNU})
	if len(blk) != 512 {
		t.Fatalf("header is %d bytes, want one block", len(blk))
	}
	blk[156] = tar.TypeGNUSparse
	octal := func(field []byte, v int64) {
		s := strconv.FormatInt(v, 8)
		copy(field, bytes.Repeat([]byte("0"), len(field)-1-len(s)))
		copy(field[len(field)-1-len(s):], s)
		field[len(field)-1] = 0
	}
	octal(blk[386:398], realSize-1) // sparse[0].offset
	octal(blk[398:410], 1)          // sparse[0].numbytes
	octal(blk[483:495], realSize)   // realsize
	copy(blk[148:156], "        ")
	var sum int64
	for _, b := range blk {
		sum += int64(b)
	}
	octal(blk[148:155], sum)
	blk[155] = ' '
	buf.Write(blk)
	data := make([]byte, 512)
	data[0] = 'x'
	buf.Write(data)
}

// An archive over the size limit is refused before it is read, with an
// error that names the limit.
func TestImportRefusesLargeArchive(t *testing.T) {
	archive := filepath.Join(t.TempDir(), "images.tar")
	if err := tarball.WriteToFile(archive, mustTag(t, "example.com/big:v1"), randomImage(t)); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(archive)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := openTestStore(t)
	limits := DefaultImportLimits()
	limits.MaxArchiveBytes = fi.Size() - 1
	refs, err := Import(s, archive, limits)
	if !errors.Is(err, ErrArchiveTooLarge) {
		t.Fatalf("Import = %q, %v; want ErrArchiveTooLarge", refs, err)
	}
	if want := fmt.Sprintf("over the limit of %d bytes", fi.Size()-1); !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), archive) {
		t.Errorf("error %q should name %s and say %q", err, archive, want)
	}
	limits.MaxArchiveBytes = fi.Size()
	if _, err := Import(s, archive, limits); err != nil {
		t.Errorf("Import of an archive at the limit: %v", err)
	}
}

// An archive whose entry count is at the limit imports; one more entry is
// refused.
func TestImportEntryLimit(t *testing.T) {
	dir := t.TempDir()
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	appendImage(t, lp, randomImage(t), map[string]string{RefNameAnnotation: "example.com/app:v1"})
	archive := tarDir(t, dir)
	entries := len(readTar(t, archive))
	s, _ := openTestStore(t)
	limits := DefaultImportLimits()
	limits.MaxEntries = entries
	if _, err := Import(s, archive, limits); err != nil {
		t.Fatalf("Import with %d entries at the limit: %v", entries, err)
	}
	limits.MaxEntries = entries - 1
	if _, err := Import(s, archive, limits); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("more than %d entries", entries-1)) {
		t.Errorf("Import over the entry limit: %v", err)
	}
}
