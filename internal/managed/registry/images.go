package registry

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"runtime"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// epoch is the time stamp of every file and config the built images carry,
// so that the same inputs always give the same digest.
func epoch() time.Time { return time.Unix(0, 0).UTC() }

// defaultPath is the PATH of the built images.
const defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// fileEntry is one entry of a built layer. Paths are relative ("bin/sh").
type fileEntry struct {
	path     string
	mode     int64
	typeflag byte
	linkname string
	data     []byte
}

// rootfs collects the entries of a layer by path; later additions of the
// same path replace earlier ones.
type rootfs map[string]fileEntry

func (r rootfs) file(p string, mode int64, data []byte) {
	r[p] = fileEntry{path: p, mode: mode, typeflag: tar.TypeReg, data: data}
}

func (r rootfs) dir(p string, mode int64) {
	r[p] = fileEntry{path: p, mode: mode, typeflag: tar.TypeDir}
}

func (r rootfs) symlink(p, target string) {
	r[p] = fileEntry{path: p, mode: 0o777, typeflag: tar.TypeSymlink, linkname: target}
}

// addParents adds a 0755 directory for every missing parent of an entry.
func (r rootfs) addParents() {
	for p := range r {
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			if _, ok := r[d]; !ok {
				r.dir(d, 0o755)
			}
		}
	}
}

// tar renders the entries sorted by path, owned by root, all stamped with
// the epoch.
func (r rootfs) tar() ([]byte, error) {
	r.addParents()
	paths := make([]string, 0, len(r))
	for p := range r {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range paths {
		if err := writeEntry(tw, r[p]); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("closing layer tar: %w", err)
	}
	return buf.Bytes(), nil
}

func writeEntry(tw *tar.Writer, e fileEntry) error {
	name := e.path
	if e.typeflag == tar.TypeDir {
		name += "/"
	}
	hdr := &tar.Header{
		Typeflag: e.typeflag,
		Name:     name,
		Linkname: e.linkname,
		Mode:     e.mode,
		Size:     int64(len(e.data)),
		ModTime:  epoch(),
		Format:   tar.FormatPAX,
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return fmt.Errorf("adding %s to layer: %w", e.path, err)
	}
	if _, err := tw.Write(e.data); err != nil {
		return fmt.Errorf("adding %s to layer: %w", e.path, err)
	}
	return nil
}

// buildImage makes a single-layer linux image for the host architecture
// from files, with the given process configuration.
func buildImage(files rootfs, cfg v1.Config, createdBy string) (v1.Image, error) {
	data, err := files.tar()
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
	if err != nil {
		return nil, fmt.Errorf("compressing layer: %w", err)
	}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	base, err = mutate.ConfigFile(base, &v1.ConfigFile{
		Architecture: runtime.GOARCH,
		OS:           "linux",
		Created:      v1.Time{Time: epoch()},
		Config:       cfg,
		RootFS:       v1.RootFS{Type: "layers"},
	})
	if err != nil {
		return nil, fmt.Errorf("setting image config: %w", err)
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

// PauseImage builds the sandbox image around our pause program: /pause as
// the only file and the entrypoint, running as root.
func PauseImage(pauseBinary string) (v1.Image, error) {
	bin, err := os.ReadFile(pauseBinary)
	if err != nil {
		return nil, fmt.Errorf("reading pause binary: %w", err)
	}
	files := rootfs{}
	files.file("pause", 0o755, bin)
	img, err := buildImage(files, v1.Config{
		Entrypoint: []string{"/pause"},
		Env:        []string{defaultPath},
	}, "nodelet: pause from "+path.Base(pauseBinary))
	if err != nil {
		return nil, fmt.Errorf("building pause image: %w", err)
	}
	return img, nil
}

// BusyboxImage builds a busybox image from a static busybox binary: the
// binary as /bin/busybox, a symlink to it for every applet at the path
// `busybox --list-full` gives and under /bin, and a minimal /etc, /tmp,
// /root, /home and /var/www.
func BusyboxImage(busyboxBinary string) (v1.Image, error) {
	bin, err := os.ReadFile(busyboxBinary)
	if err != nil {
		return nil, fmt.Errorf("reading busybox binary: %w", err)
	}
	applets, err := busyboxApplets(busyboxBinary)
	if err != nil {
		return nil, err
	}
	img, err := buildImage(busyboxRootfs(bin, applets), v1.Config{
		Cmd: []string{"sh"},
		Env: []string{defaultPath},
	}, "nodelet: busybox from "+path.Base(busyboxBinary))
	if err != nil {
		return nil, fmt.Errorf("building busybox image: %w", err)
	}
	return img, nil
}

// busyboxApplets runs `busybox --list-full` and returns the applet paths it
// prints (relative, e.g. "usr/bin/wget").
func busyboxApplets(busybox string) ([]string, error) {
	out, err := exec.Command(busybox, "--list-full").Output()
	if err != nil {
		return nil, fmt.Errorf("listing applets of %s: %w", busybox, err)
	}
	var applets []string
	for _, line := range strings.Split(string(out), "\n") {
		p := path.Clean(strings.TrimPrefix(strings.TrimSpace(line), "/"))
		if p == "." || p == ".." || strings.HasPrefix(p, "../") {
			continue
		}
		applets = append(applets, p)
	}
	if len(applets) == 0 {
		return nil, fmt.Errorf("listing applets of %s: it printed none", busybox)
	}
	return applets, nil
}

func busyboxRootfs(bin []byte, applets []string) rootfs {
	const self = "bin/busybox"
	files := rootfs{}
	for _, p := range applets {
		files.symlink(p, "/"+self)
	}
	for _, p := range applets {
		short := "bin/" + path.Base(p)
		if _, ok := files[short]; !ok {
			files.symlink(short, "/"+self)
		}
	}
	files.file(self, 0o755, bin)
	files.file("etc/passwd", 0o644, []byte(busyboxPasswd))
	files.file("etc/group", 0o644, []byte(busyboxGroup))
	files.dir("tmp", 0o1777)
	files.dir("root", 0o700)
	files.dir("home", 0o755)
	files.dir("var/www", 0o755)
	return files
}

const busyboxPasswd = `root:x:0:0:root:/root:/bin/sh
daemon:x:1:1:daemon:/usr/sbin:/bin/false
bin:x:2:2:bin:/bin:/bin/false
sys:x:3:3:sys:/dev:/bin/false
sync:x:4:100:sync:/bin:/bin/sync
mail:x:8:8:mail:/var/spool/mail:/bin/false
www-data:x:33:33:www-data:/var/www:/bin/false
operator:x:37:37:Operator:/var:/bin/false
nobody:x:65534:65534:nobody:/home:/bin/false
`

const busyboxGroup = `root:x:0:
daemon:x:1:
bin:x:2:
sys:x:3:
adm:x:4:
tty:x:5:
disk:x:6:
lp:x:7:
mail:x:8:
kmem:x:9:
wheel:x:10:root
cdrom:x:11:
dialout:x:18:
floppy:x:19:
video:x:28:
audio:x:29:
www-data:x:33:
operator:x:37:
users:x:100:
nogroup:x:65534:
nobody:x:65534:
`
