package pulledimages

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/nodelet/nodelet/internal/base/atomicfile"
	"github.com/nodelet/nodelet/internal/base/bounded"
	"github.com/nodelet/nodelet/internal/pure/pullverify"
)

// The store's layout, the kubelet's: <root-dir>/image_manager/pulling holds
// an ImagePullIntent per image being pulled, pulled an ImagePulledRecord
// per image ID, each named "sha256-" and the hex SHA-256 of the image (of
// the ID), JSON of kubelet.config.k8s.io/v1beta1.
const (
	filePrefix = "sha256-"
	// maxRecordBytes bounds the read of one record: a record of 10,000
	// Secrets is about 2 MiB. A record that would be larger is not
	// written (the image is verified again, as without it).
	maxRecordBytes = 4 << 20
)

// store is the record files of one root directory. It is not safe for
// concurrent use: the Manager serializes it.
type store struct {
	pulling, pulled string
}

// openStore makes (or tightens to 0700) the store's directories below
// rootDir and removes the temp files a crash left.
func openStore(rootDir string) (*store, error) {
	if err := os.MkdirAll(rootDir, 0o700); err != nil { // only when missing: the root's own mode is not ours to change
		return nil, fmt.Errorf("create %s: %w", rootDir, err)
	}
	base := filepath.Join(rootDir, "image_manager")
	s := &store{pulling: filepath.Join(base, "pulling"), pulled: filepath.Join(base, "pulled")}
	for _, dir := range []string{base, s.pulling, s.pulled} {
		if err := ownDir(dir); err != nil {
			return nil, err
		}
	}
	for _, dir := range []string{s.pulling, s.pulled} {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", dir, err)
		}
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), ".tmp-") {
				_ = os.Remove(filepath.Join(dir, e.Name())) // a write cut short; the record it replaced is intact
			}
		}
	}
	return s, nil
}

// ownDir makes dir a 0700 directory: created if missing, refused if it is
// a symlink or not a directory, its mode tightened if wider.
func ownDir(dir string) error {
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory (%s)", dir, fi.Mode().Type())
	}
	if fi.Mode().Perm() != 0o700 {
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("restrict %s to 0700: %w", dir, err)
		}
	}
	return nil
}

// fileName is the record file name of key (an image, or an image ID).
func fileName(key string) string {
	sum := sha256.Sum256([]byte(key))
	return filePrefix + hex.EncodeToString(sum[:])
}

// errCorrupt marks a record file that exists but cannot be used.
var errCorrupt = errors.New("corrupt record")

// readFile reads one record file: a regular file (no symlink followed),
// at most maxRecordBytes. fs.ErrNotExist when missing.
func readFile(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, fmt.Errorf("%s is a symlink: %w", path, errCorrupt)
		}
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file: %w", path, errCorrupt)
	}
	data, err := bounded.ReadAll(f, maxRecordBytes, path)
	if errors.Is(err, bounded.ErrTooLarge) {
		return nil, fmt.Errorf("%w: %w", err, errCorrupt)
	}
	return data, err
}

// decode decodes a record strictly (unknown fields refused) and checks its
// kind.
func decode(path string, data []byte, kind string, into any) error {
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(into); err != nil {
		return fmt.Errorf("decode %s: %w: %w", path, err, errCorrupt)
	}
	if dec.More() {
		return fmt.Errorf("decode %s: data after the record: %w", path, errCorrupt)
	}
	var meta struct{ APIVersion, Kind string }
	_ = json.Unmarshal(data, &meta)
	if meta.APIVersion != pullverify.APIVersion || meta.Kind != kind {
		return fmt.Errorf("decode %s: %s %s, want %s %s: %w", path, meta.APIVersion, meta.Kind, pullverify.APIVersion, kind, errCorrupt)
	}
	return nil
}

// loaded is what the store held at start.
type loaded struct {
	records map[string]*pullverify.PulledRecord // by image ID
	// corrupt are the pulled record files (by name) that exist and
	// cannot be used, each with why.
	corrupt map[string]error
	intents []string // images
	// badIntents are intent files that cannot be read: each still says
	// some image was being pulled, but not which.
	badIntents map[string]error
}

// load reads every record and intent.
func (s *store) load() (loaded, error) {
	l := loaded{records: map[string]*pullverify.PulledRecord{}, corrupt: map[string]error{}, badIntents: map[string]error{}}
	err := eachFile(s.pulled, func(name, path string) {
		rec, err := s.readRecord(path)
		switch {
		case err != nil:
			l.corrupt[name] = err
		case fileName(rec.ImageRef) != name:
			l.corrupt[name] = fmt.Errorf("%s holds the record of %q, which belongs in another file: %w", path, rec.ImageRef, errCorrupt)
		default:
			l.records[rec.ImageRef] = rec
		}
	})
	if err != nil {
		return l, err
	}
	err = eachFile(s.pulling, func(name, path string) {
		var in pullverify.PullIntent
		data, err := readFile(path)
		if err == nil {
			err = decode(path, data, pullverify.KindPullIntent, &in)
		}
		switch {
		case err != nil:
			l.badIntents[name] = err
		case fileName(in.Image) != name:
			l.badIntents[name] = fmt.Errorf("%s holds the intent of %q, which belongs in another file: %w", path, in.Image, errCorrupt)
		default:
			l.intents = append(l.intents, in.Image)
		}
	})
	return l, err
}

func (s *store) readRecord(path string) (*pullverify.PulledRecord, error) {
	data, err := readFile(path)
	if err != nil {
		return nil, err
	}
	var rec pullverify.PulledRecord
	if err := decode(path, data, pullverify.KindPulledRecord, &rec); err != nil {
		return nil, err
	}
	return &rec, nil
}

// eachFile calls f for each record file of dir (named "sha256-…"; temp
// files and anything else skipped).
func eachFile(dir string, f func(name, path string)) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("list %s: %w", dir, err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), filePrefix) {
			f(e.Name(), filepath.Join(dir, e.Name()))
		}
	}
	return nil
}

func (s *store) writeRecord(rec pullverify.PulledRecord) error {
	data, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("encode the pulled record of %s: %w", rec.ImageRef, err)
	}
	if len(data) > maxRecordBytes {
		return fmt.Errorf("the pulled record of %s would be %d bytes, more than %d", rec.ImageRef, len(data), maxRecordBytes)
	}
	return atomicfile.Write(filepath.Join(s.pulled, fileName(rec.ImageRef)), data, 0o600)
}

func (s *store) removeRecordFile(name string) error {
	return removeIfPresent(filepath.Join(s.pulled, name))
}

func (s *store) writeIntent(image string) error {
	data, err := json.Marshal(pullverify.NewPullIntent(image))
	if err != nil {
		return fmt.Errorf("encode the pull intent of %s: %w", image, err)
	}
	return atomicfile.Write(filepath.Join(s.pulling, fileName(image)), data, 0o600)
}

func (s *store) removeIntent(image string) error {
	return removeIfPresent(filepath.Join(s.pulling, fileName(image)))
}

func removeIfPresent(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", path, err)
	}
	return nil
}
