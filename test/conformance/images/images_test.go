package images

import (
	"archive/tar"
	"debug/elf"
	"errors"
	"io"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"github.com/nodelet/nodelet/internal/managed/registry"
)

// testSources are the host's Debian programs (hack/setup.sh installs them)
// and, for the programs built from the upstream release, copies of the
// static busybox: the test checks where files land, not what they do.
func testSources(t *testing.T) Sources {
	t.Helper()
	dir := t.TempDir()
	src := HostSources(
		filepath.Join(dir, "agnhost"), filepath.Join(dir, "nnp"), filepath.Join(dir, "nmeter"), filepath.Join(dir, "dig"), filepath.Join(dir, "pause"),
		filepath.Join(dir, "kubernetes"))
	for _, p := range append([]string{src.Busybox, src.Nginx, src.Curl, src.Bash, src.Netcat, src.Hostname, src.Getent}, src.IPCTools...) {
		if _, err := os.Stat(p); err != nil {
			t.Skipf("host program missing (run hack/setup.sh): %v", err)
		}
	}
	bb, err := os.ReadFile(src.Busybox)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{src.Agnhost, src.Nonewprivs, src.Nmeter, src.Dig, src.Pause} {
		if err := os.WriteFile(p, bb, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	porter := filepath.Join(src.Upstream, "test", "images", "agnhost", "porter")
	if err := os.MkdirAll(porter, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"localhost.crt", "localhost.key"} {
		if err := os.WriteFile(filepath.Join(porter, name), []byte(name+"\n"), 0o400); err != nil {
			t.Fatal(err)
		}
	}
	html := filepath.Join(src.Upstream, "test", "images", "kitten", "html")
	if err := os.MkdirAll(html, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"kitten.jpg", "data.json"} {
		if err := os.WriteFile(filepath.Join(html, name), []byte(name+"\n"), 0o400); err != nil {
			t.Fatal(err)
		}
	}
	return src
}

func newStore(t *testing.T) *registry.Store {
	t.Helper()
	store, err := registry.OpenStore(filepath.Join(t.TempDir(), "images"), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return store
}

// fsOf flattens img: the header of every path, and the content of files.
type fsOf struct {
	hdr  map[string]*tar.Header
	data map[string][]byte
}

func flatten(t *testing.T, img v1.Image) fsOf {
	t.Helper()
	fs := fsOf{hdr: map[string]*tar.Header{}, data: map[string][]byte{}}
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return fs
		}
		if err != nil {
			t.Fatal(err)
		}
		p := "/" + path.Clean(strings.TrimPrefix(hdr.Name, "/"))
		fs.hdr[p] = hdr
		if hdr.Typeflag == tar.TypeReg {
			data, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			fs.data[p] = data
		}
	}
}

func (fs fsOf) file(t *testing.T, p string, mode int64) []byte {
	t.Helper()
	h, ok := fs.hdr[p]
	switch {
	case !ok:
		t.Errorf("%s missing", p)
	case h.Typeflag != tar.TypeReg:
		t.Errorf("%s: type %q, want a regular file", p, h.Typeflag)
	case h.Mode != mode:
		t.Errorf("%s: mode %o, want %o", p, h.Mode, mode)
	}
	return fs.data[p]
}

func (fs fsOf) symlink(t *testing.T, p, target string) {
	t.Helper()
	h, ok := fs.hdr[p]
	if !ok || h.Typeflag != tar.TypeSymlink || h.Linkname != target {
		t.Errorf("%s: want a symlink to %s, got %+v", p, target, h)
	}
}

func (fs fsOf) dir(t *testing.T, p string, mode int64, uid int) {
	t.Helper()
	h, ok := fs.hdr[p]
	if !ok || h.Typeflag != tar.TypeDir || h.Mode != mode || h.Uid != uid {
		t.Errorf("%s: want a directory, mode %o, owner %d; got %+v", p, mode, uid, h)
	}
}

// program checks that the host program src is at p with its dynamic
// loader and libc.
func (fs fsOf) program(t *testing.T, p, src string) {
	t.Helper()
	want, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if got := fs.file(t, p, 0o755); string(got) != string(want) {
		t.Errorf("%s is not %s", p, src)
	}
	f, err := elf.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type != elf.PT_INTERP {
			continue
		}
		interp, err := io.ReadAll(prog.Open())
		if err != nil {
			t.Fatal(err)
		}
		loader := strings.TrimRight(string(interp), "\x00")
		if h, ok := fs.hdr[loader]; !ok || h.Typeflag != tar.TypeReg {
			t.Errorf("%s: its loader %s is missing", p, loader)
		}
	}
	found := false
	for q := range fs.hdr {
		if strings.HasSuffix(q, "/libc.so.6") && fs.hdr[q].Typeflag == tar.TypeReg {
			found = true
		}
	}
	if !found {
		t.Errorf("%s: no libc.so.6 in the image", p)
	}
}

func config(t *testing.T, img v1.Image) v1.Config {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	return cf.Config
}

func TestBuild(t *testing.T) {
	src := testSources(t)
	store := newStore(t)
	refs, err := Build(store, src, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, im := range Images() {
		want = append(want, im.Ref)
	}
	if !reflect.DeepEqual(refs, want) {
		t.Fatalf("stored %v, want %v", refs, want)
	}
	images := map[string]v1.Image{}
	for _, ref := range refs {
		img, err := store.Image(ref)
		if err != nil {
			t.Fatalf("stored image %s: %v", ref, err)
		}
		images[ref] = img
	}
	const path = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

	t.Run("busybox", func(t *testing.T) {
		img := images[BusyboxRef]
		if c := config(t, img); !reflect.DeepEqual(c.Cmd, []string{"sh"}) || !reflect.DeepEqual(c.Env, []string{path}) {
			t.Errorf("config %+v", c)
		}
		fs := flatten(t, img)
		fs.file(t, "/bin/busybox", 0o755)
		fs.file(t, "/bin/nmeter", 0o755)
		for _, applet := range []string{"/bin/sh", "/bin/cat", "/bin/ls", "/bin/nc", "/bin/wget", "/bin/awk", "/bin/sleep", "/bin/id"} {
			fs.symlink(t, applet, "/bin/busybox")
		}
	})
	t.Run("pause", func(t *testing.T) {
		img := images[PauseRef]
		if c := config(t, img); !reflect.DeepEqual(c.Entrypoint, []string{"/pause"}) {
			t.Errorf("config %+v", c)
		}
		flatten(t, img).file(t, "/pause", 0o755)
	})
	t.Run("agnhost", func(t *testing.T) {
		img := images[AgnhostRef]
		c := config(t, img)
		if !reflect.DeepEqual(c.Entrypoint, []string{"/agnhost"}) || !reflect.DeepEqual(c.Cmd, []string{"pause"}) {
			t.Errorf("entrypoint %q cmd %q", c.Entrypoint, c.Cmd)
		}
		if !reflect.DeepEqual(c.ExposedPorts, ports("80/tcp", "8080/tcp", "8081/tcp", "9376/tcp", "5000/tcp")) {
			t.Errorf("exposed ports %v", c.ExposedPorts)
		}
		if !reflect.DeepEqual(c.Env, []string{path}) || c.User != "" {
			t.Errorf("env %q user %q", c.Env, c.User)
		}
		fs := flatten(t, img)
		fs.file(t, "/agnhost", 0o755)
		fs.program(t, "/usr/bin/dig", src.Dig)
		fs.program(t, "/usr/bin/getent", src.Getent)
		fs.symlink(t, "/agnhost-2", "agnhost")
		fs.dir(t, "/uploads", 0o755, 0)
		fs.dir(t, "/home/user-defined-in-image", 0o755, 1000)
		if got := fs.file(t, "/localhost.crt", 0o644); string(got) != "localhost.crt\n" {
			t.Errorf("localhost.crt is %q", got)
		}
		fs.file(t, "/localhost.key", 0o644)
		passwd := string(fs.file(t, "/etc/passwd", 0o644))
		if !strings.HasPrefix(passwd, "root:x:0:0:") || !strings.Contains(passwd, "\nuser-defined-in-image:x:1000:1000:") {
			t.Errorf("/etc/passwd:\n%s", passwd)
		}
		group := string(fs.file(t, "/etc/group", 0o644))
		if !strings.HasPrefix(group, "root:x:0:") || !strings.Contains(group, "\ngroup-defined-in-image:x:50000:user-defined-in-image\n") ||
			!strings.Contains(group, "\nuser-defined-in-image:x:1000:\n") {
			t.Errorf("/etc/group:\n%s", group)
		}
		for _, applet := range []string{"/bin/cat", "/bin/wget", "/bin/sleep"} {
			fs.symlink(t, applet, "/bin/busybox")
		}
		fs.symlink(t, "/bin/sh", "bash")
		// netcat-openbsd's nc shadows busybox's, which has no -u.
		fs.symlink(t, "/bin/nc", "/usr/bin/nc")
		fs.program(t, "/usr/bin/nc", src.Netcat)
		fs.program(t, "/usr/bin/curl", src.Curl)
		fs.program(t, "/bin/bash", src.Bash)
		prev, err := images[AgnhostPrevRef].Digest()
		if err != nil {
			t.Fatal(err)
		}
		if cur, _ := img.Digest(); prev != cur {
			t.Errorf("%s is %s, want the same image as %s (%s)", AgnhostPrevRef, prev, AgnhostRef, cur)
		}
	})
	t.Run("kitten", func(t *testing.T) {
		img := images[KittenRef]
		c := config(t, img)
		if !reflect.DeepEqual(c.Entrypoint, []string{"/agnhost"}) || !reflect.DeepEqual(c.Cmd, []string{"test-webserver"}) {
			t.Errorf("entrypoint %q cmd %q", c.Entrypoint, c.Cmd)
		}
		fs := flatten(t, img)
		fs.file(t, "/agnhost", 0o755)
		for _, name := range []string{"kitten.jpg", "data.json"} {
			if got := fs.file(t, "/"+name, 0o644); string(got) != name+"\n" {
				t.Errorf("/%s is %q", name, got)
			}
		}
		// What the image volume specs read back.
		if osr := string(fs.file(t, "/etc/os-release", 0o644)); !strings.Contains(osr, "Alpine Linux") {
			t.Errorf("/etc/os-release:\n%s", osr)
		}
		if passwd := string(fs.file(t, "/etc/passwd", 0o644)); !strings.HasPrefix(passwd, "root:") {
			t.Errorf("/etc/passwd:\n%s", passwd)
		}
	})
	t.Run("nginx", func(t *testing.T) {
		img := images[NginxRef]
		c := config(t, img)
		if !reflect.DeepEqual(c.Cmd, []string{"nginx", "-g", "daemon off;"}) || len(c.Entrypoint) != 0 ||
			!reflect.DeepEqual(c.ExposedPorts, ports("80/tcp")) || c.StopSignal != "SIGQUIT" {
			t.Errorf("config %+v", c)
		}
		fs := flatten(t, img)
		fs.program(t, "/usr/sbin/nginx", src.Nginx)
		if conf := string(fs.file(t, "/etc/nginx/nginx.conf", 0o644)); !strings.Contains(conf, "user nginx;") {
			t.Errorf("nginx.conf:\n%s", conf)
		}
		if conf := string(fs.file(t, "/etc/nginx/conf.d/default.conf", 0o644)); !strings.Contains(conf, "listen 80;") {
			t.Errorf("default.conf:\n%s", conf)
		}
		fs.file(t, "/etc/nginx/mime.types", 0o644)
		fs.file(t, "/usr/share/nginx/html/index.html", 0o644)
		fs.symlink(t, "/var/log/nginx/access.log", "/dev/stdout")
		fs.dir(t, "/var/lib/nginx", 0o755, 0)
		if passwd := string(fs.file(t, "/etc/passwd", 0o644)); !strings.Contains(passwd, "\nnginx:x:101:101:") {
			t.Errorf("/etc/passwd:\n%s", passwd)
		}
		if group := string(fs.file(t, "/etc/group", 0o644)); !strings.Contains(group, "\nnginx:x:101:") {
			t.Errorf("/etc/group:\n%s", group)
		}
	})
	t.Run("nonewprivs", func(t *testing.T) {
		img := images[NonewprivsRef]
		if c := config(t, img); !reflect.DeepEqual(c.Cmd, []string{"nnp"}) || c.User != "" {
			t.Errorf("config %+v", c)
		}
		fs := flatten(t, img)
		fs.file(t, "/usr/local/bin/nnp", 0o4755)
		if h := fs.hdr["/usr/local/bin/nnp"]; h != nil && (h.Uid != 0 || h.Gid != 0) {
			t.Errorf("nnp owned by %d:%d, want root", h.Uid, h.Gid)
		}
		fs.symlink(t, "/bin/sh", "/bin/busybox")
	})
	t.Run("nonroot", func(t *testing.T) {
		img := images[NonrootRef]
		if c := config(t, img); c.User != "1234" || !reflect.DeepEqual(c.Cmd, []string{"sh"}) {
			t.Errorf("config %+v", c)
		}
		flatten(t, img).symlink(t, "/bin/sh", "/bin/busybox")
	})
	t.Run("ipc-utils", func(t *testing.T) {
		fs := flatten(t, images[IPCUtilsRef])
		for _, p := range src.IPCTools {
			fs.program(t, "/usr/bin/"+filepath.Base(p), p)
		}
		fs.symlink(t, "/bin/awk", "/bin/busybox")
	})
	t.Run("glibc-dns-testing", func(t *testing.T) {
		img := images[GlibcDNSTestingRef]
		fs := flatten(t, img)
		fs.program(t, "/bin/hostname", src.Hostname)
		fs.program(t, "/bin/bash", src.Bash)
		for _, d := range binDirs {
			if h, ok := fs.hdr["/"+d+"/hostname"]; ok && d != "bin" && (h.Typeflag != tar.TypeSymlink || h.Linkname != "/bin/hostname") {
				t.Errorf("/%s/hostname is not glibc's: %+v", d, h)
			}
		}
		if ns := string(fs.file(t, "/etc/nsswitch.conf", 0o644)); !strings.Contains(ns, "hosts: files dns\n") {
			t.Errorf("nsswitch.conf:\n%s", ns)
		}
		fs.symlink(t, "/bin/sh", "/bin/busybox")
		fs.program(t, "/usr/bin/dig", src.Dig)
		fs.program(t, "/usr/bin/getent", src.Getent)
		if c := config(t, img); !reflect.DeepEqual(c.Cmd, []string{"bash"}) {
			t.Errorf("config %+v", c)
		}
	})
}

// TestDeterministic builds twice from the same files: same digests, and
// the second Build into the same store changes nothing.
func TestDeterministic(t *testing.T) {
	src := testSources(t)
	first, err := build(src)
	if err != nil {
		t.Fatal(err)
	}
	second, err := build(src)
	if err != nil {
		t.Fatal(err)
	}
	for ref, img := range first {
		a, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		b, err := second[ref].Digest()
		if err != nil {
			t.Fatal(err)
		}
		if a != b {
			t.Errorf("%s: %s, then %s", ref, a, b)
		}
	}
}

func TestBuildRefusesDynamicStaticPrograms(t *testing.T) {
	src := testSources(t)
	src.Nonewprivs = src.Bash // dynamically linked: would not run without libc
	_, err := Build(newStore(t), src, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "dynamically linked") {
		t.Fatalf("got %v, want the dynamic nonewprivs refused", err)
	}
	src = testSources(t)
	src.Curl = filepath.Join(t.TempDir(), "missing")
	if _, err := Build(newStore(t), src, slog.New(slog.DiscardHandler)); err == nil {
		t.Fatal("built agnhost without curl")
	}
}

func TestParseLdd(t *testing.T) {
	out := "\tlinux-vdso.so.1 (0x00007ffc1d5f2000)\n" +
		"\tlibpcre2-8.so.0 => /lib/x86_64-linux-gnu/libpcre2-8.so.0 (0x00007f0c4b0d0000)\n" +
		"\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f0c4aeee000)\n" +
		"\t/lib64/ld-linux-x86-64.so.2 (0x00007f0c4b1c8000)\n" +
		"\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f0c4aeee000)\n"
	got, err := parseLdd(out)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"/lib/x86_64-linux-gnu/libc.so.6", "/lib/x86_64-linux-gnu/libpcre2-8.so.0", "/lib64/ld-linux-x86-64.so.2"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
	if _, err := parseLdd("\tlibfoo.so.1 => not found\n\tlibc.so.6 => /lib/libc.so.6 (0x1)\n"); err == nil || !strings.Contains(err.Error(), "libfoo.so.1") {
		t.Errorf("a missing library: got %v", err)
	}
	if _, err := parseLdd("\tnot a dynamic executable\n"); err == nil {
		t.Error("no libraries: want an error")
	}
}
