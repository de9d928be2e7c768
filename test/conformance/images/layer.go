package images

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// epoch stamps every file, layer history and config of the built images,
// so that the same inputs always give the same digests.
func epoch() time.Time { return time.Unix(0, 0).UTC() }

// entry is one file of a layer. Paths are relative ("usr/bin/curl").
type entry struct {
	typeflag byte
	mode     int64
	uid, gid int
	linkname string
	data     []byte
}

// tree collects the entries of one layer by path; a later entry for a path
// replaces an earlier one.
type tree map[string]entry

func (t tree) file(p string, mode int64, data []byte) {
	t[p] = entry{typeflag: tar.TypeReg, mode: mode, data: data}
}

func (t tree) dir(p string, mode int64) { t[p] = entry{typeflag: tar.TypeDir, mode: mode} }

func (t tree) symlink(p, target string) {
	t[p] = entry{typeflag: tar.TypeSymlink, mode: 0o777, linkname: target}
}

func (t tree) chmod(p string, mode int64) {
	e := t[p]
	e.mode = mode
	t[p] = e
}

func (t tree) chown(p string, uid, gid int) {
	e := t[p]
	e.uid, e.gid = uid, gid
	t[p] = e
}

// hostFile adds the host file at src, its content and permission bits, as p.
func (t tree) hostFile(p, src string) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("reading %s: %w", src, err)
	}
	info, err := os.Stat(src)
	if err != nil {
		return fmt.Errorf("reading %s: %w", src, err)
	}
	t.file(p, int64(info.Mode().Perm()), data)
	return nil
}

// tar renders the entries, and a 0755 root-owned directory for every
// missing parent, sorted by path, all stamped with the epoch.
func (t tree) tar() ([]byte, error) {
	for p := range t {
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			if _, ok := t[d]; !ok {
				t.dir(d, 0o755)
			}
		}
	}
	paths := make([]string, 0, len(t))
	for p := range t {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range paths {
		e := t[p]
		name := p
		if e.typeflag == tar.TypeDir {
			name += "/"
		}
		hdr := &tar.Header{
			Typeflag: e.typeflag,
			Name:     name,
			Linkname: e.linkname,
			Mode:     e.mode,
			Uid:      e.uid,
			Gid:      e.gid,
			Size:     int64(len(e.data)),
			ModTime:  epoch(),
			Format:   tar.FormatPAX,
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, fmt.Errorf("adding %s to layer: %w", p, err)
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, fmt.Errorf("adding %s to layer: %w", p, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("closing layer: %w", err)
	}
	return buf.Bytes(), nil
}

// withLayer returns base with t appended as one more layer.
func withLayer(base v1.Image, t tree, createdBy string) (v1.Image, error) {
	data, err := t.tar()
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
	if err != nil {
		return nil, fmt.Errorf("compressing layer: %w", err)
	}
	img, err := mutate.Append(base, mutate.Addendum{
		Layer:   layer,
		History: v1.History{Created: v1.Time{Time: epoch()}, CreatedBy: createdBy},
	})
	if err != nil {
		return nil, fmt.Errorf("adding layer: %w", err)
	}
	return img, nil
}

// withConfig returns img with its process configuration changed by edit.
func withConfig(img v1.Image, edit func(*v1.Config)) (v1.Image, error) {
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("reading image config: %w", err)
	}
	cfg := *cf.Config.DeepCopy()
	edit(&cfg)
	out, err := mutate.Config(img, cfg)
	if err != nil {
		return nil, fmt.Errorf("setting image config: %w", err)
	}
	return out, nil
}

// baseFS is what a base image holds that the images built on it extend:
// its paths, and the content of the small text files they amend.
type baseFS struct {
	paths map[string]bool
	text  map[string]string // of etcFiles
}

// etcFiles are the base files read whole, to be amended in upper layers.
var etcFiles = []string{"etc/passwd", "etc/group"}

// readBase reads the flattened filesystem of img.
func readBase(img v1.Image) (baseFS, error) {
	fs := baseFS{paths: map[string]bool{}, text: map[string]string{}}
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return fs, nil
		}
		if err != nil {
			return fs, fmt.Errorf("reading base image: %w", err)
		}
		p := path.Clean(strings.TrimPrefix(hdr.Name, "/"))
		fs.paths[p] = true
		for _, want := range etcFiles {
			if p == want && hdr.Typeflag == tar.TypeReg {
				data, err := io.ReadAll(io.LimitReader(tr, 1<<20))
				if err != nil {
					return fs, fmt.Errorf("reading %s of base image: %w", p, err)
				}
				fs.text[p] = string(data)
			}
		}
	}
}

// binDirs are where images look for commands, in PATH order.
var binDirs = []string{"usr/local/sbin", "usr/local/bin", "usr/sbin", "usr/bin", "sbin", "bin"}

// shadow points every command of the base named like p's base name, in any
// of binDirs, at p, so that the command runs p whichever way it is called.
func (t tree) shadow(base baseFS, p string) {
	name := path.Base(p)
	for _, d := range binDirs {
		q := d + "/" + name
		if q != p && base.paths[q] {
			t.symlink(q, "/"+p)
		}
	}
}
