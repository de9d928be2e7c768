// Package images builds, offline, the container images the upstream e2e
// NodeConformance suites (e2e_node.test, e2e.test) run, and stores them in
// nodelet's image store under their upstream references, so that the
// managed containerd pulls them through nodelet's registry mirror as it
// would pull them from registry.k8s.io.
//
// Each image is built from host files (static programs built from the
// k8s.io/kubernetes release the suites come from, Debian's busybox-static,
// nodelet's pause, and Debian programs copied with the shared libraries ldd
// lists) and carries the configuration its upstream Dockerfile sets as far
// as the tests can observe it. The images are deterministic: the same host
// files give the same digests, so building again stores nothing new.
package images

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/nodelet/nodelet/internal/managed/registry"
)

// The upstream references (k8s.io/kubernetes v1.37.2,
// test/utils/image/manifest.go).
const (
	e2eRegistry = "registry.k8s.io/e2e-test-images/"

	AgnhostRef         = e2eRegistry + "agnhost:2.66.1"
	AgnhostPrevRef     = e2eRegistry + "agnhost:2.55"
	BusyboxRef         = e2eRegistry + "busybox:1.37.0-2"
	PauseRef           = "registry.k8s.io/pause:3.10.2"
	NginxRef           = e2eRegistry + "nginx:1.27.0-2"
	NonewprivsRef      = e2eRegistry + "nonewprivs:1.4"
	NonrootRef         = e2eRegistry + "nonroot:1.5"
	IPCUtilsRef        = e2eRegistry + "ipc-utils:1.4"
	GlibcDNSTestingRef = e2eRegistry + "glibc-dns-testing:2.1.1"
	KittenRef          = e2eRegistry + "kitten:1.8"
)

// Image is one reference Build stores and what its image is built from.
type Image struct {
	Ref  string
	From string
}

// Images lists the references Build stores, in the order it stores them.
func Images() []Image {
	return []Image{
		{BusyboxRef, "static busybox (Debian busybox-static) with every applet under /bin, as registry.BusyboxImage, plus /bin/nmeter (./nmeter: the applet Debian's build lacks); Cmd sh"},
		{PauseRef, "nodelet's pause program (bin/pause) as /pause, as registry.PauseImage"},
		{AgnhostRef, "busybox base + static agnhost of k8s.io/kubernetes v1.37.2 as /agnhost (and /agnhost-2), porter's localhost.crt/.key, /uploads, user-defined-in-image (1000) in group-defined-in-image (50000), Debian curl, bash (also as /bin/sh: busybox's sh prefers its applets to PATH) and netcat-openbsd (as /usr/bin/nc) and glibc's getent with their libraries, ./dig as /usr/bin/dig; Entrypoint /agnhost, Cmd pause"},
		{AgnhostPrevRef, "the same image as " + AgnhostRef + " (one agnhost binary serves both tags)"},
		{NginxRef, "busybox base + Debian nginx with its libraries, nginx.conf serving /usr/share/nginx/html on port 80 as user nginx (101), logs to stdout/stderr; Cmd nginx -g 'daemon off;'"},
		{NonewprivsRef, "busybox base + static nnp (test/images/nonewprivs) setuid root at /usr/local/bin/nnp; Cmd nnp"},
		{NonrootRef, "busybox base with User 1234"},
		{IPCUtilsRef, "busybox base + Debian util-linux ipcmk, ipcs, ipcrm, lsipc with their libraries"},
		{GlibcDNSTestingRef, "busybox base + Debian hostname, bash and getent with glibc, /etc/nsswitch.conf (hosts: files dns), so that hostname -f resolves as glibc does; ./dig as /usr/bin/dig"},
		{KittenRef, "the agnhost image + kitten.jpg and data.json of k8s.io/kubernetes v1.37.2's test/images/kitten, and an /etc/os-release naming Alpine Linux (upstream's agnhost base, which the image volume specs read back); Cmd test-webserver"},
	}
}

// Sources names the host files the images are built from.
type Sources struct {
	// Agnhost is the static agnhost of the suites' release
	// (hack/build-upstream.sh agnhost).
	Agnhost string
	// Nonewprivs is the static nnp program (hack/build-upstream.sh
	// nonewprivs).
	Nonewprivs string
	// Pause is nodelet's static pause program (bin/pause).
	Pause string
	// Busybox is a static busybox (Debian busybox-static: /bin/busybox).
	Busybox string
	// Nmeter is the static nmeter program of ./nmeter: Debian's busybox
	// has no nmeter applet, and the node suite's container lifecycle specs
	// take their timestamps from it.
	Nmeter string
	// Dig is the static dig program of ./dig: upstream's agnhost and
	// glibc-dns-testing carry dnsutils, and the DNS specs query with dig.
	Dig string
	// Upstream is the k8s.io/kubernetes source tree of the suites' release,
	// its directory in the module cache (`go list -m -f '{{.Dir}}'
	// k8s.io/kubernetes` in test/cluster); agnhost's TLS certificate and
	// key come from its test/images/agnhost/porter.
	Upstream string
	// Nginx is Debian's nginx program (package nginx: /usr/sbin/nginx).
	Nginx string
	// Curl, Bash and Netcat (netcat-openbsd's nc) go into agnhost
	// (upstream's has them); Bash also into glibc-dns-testing.
	Curl, Bash, Netcat string
	// IPCTools are the util-linux programs of ipc-utils (ipcmk, ipcs, ...).
	IPCTools []string
	// Hostname is Debian's glibc hostname program (package hostname).
	Hostname string
	// Getent is glibc's getent (package libc-bin), which goes into agnhost
	// and glibc-dns-testing: the DNS specs check names with `getent hosts`,
	// and busybox has no getent. glibc since 2.34 has its files and dns
	// NSS modules in libc itself, so the program and its libraries do.
	Getent string
}

// HostSources returns the Sources of a Debian host with the packages of
// hack/setup.sh, given the programs built from the upstream release, the
// pause program and the upstream source tree.
func HostSources(agnhost, nonewprivs, nmeter, dig, pause, upstream string) Sources {
	return Sources{
		Agnhost:    agnhost,
		Nonewprivs: nonewprivs,
		Nmeter:     nmeter,
		Dig:        dig,
		Pause:      pause,
		Busybox:    "/bin/busybox",
		Upstream:   upstream,
		Nginx:      "/usr/sbin/nginx",
		Curl:       "/usr/bin/curl",
		Bash:       "/bin/bash",
		Netcat:     "/bin/nc.openbsd",
		IPCTools:   []string{"/usr/bin/ipcmk", "/usr/bin/ipcs", "/usr/bin/ipcrm", "/usr/bin/lsipc"},
		Hostname:   "/bin/hostname",
		Getent:     "/usr/bin/getent",
	}
}

// Build builds every image of Images and stores it in store under its
// reference; it returns the references stored, in the order of Images.
func Build(store *registry.Store, src Sources, log *slog.Logger) ([]string, error) {
	built, err := build(src)
	if err != nil {
		return nil, err
	}
	refs := make([]string, 0, len(built))
	for _, im := range Images() {
		img := built[im.Ref]
		changed, err := store.Put(im.Ref, img)
		if err != nil {
			return refs, fmt.Errorf("storing %s: %w", im.Ref, err)
		}
		digest, err := img.Digest()
		if err != nil {
			return refs, fmt.Errorf("hashing %s: %w", im.Ref, err)
		}
		if changed {
			log.Info("stored test image", "ref", im.Ref, "digest", digest.String())
		} else {
			log.Debug("test image up to date", "ref", im.Ref, "digest", digest.String())
		}
		refs = append(refs, im.Ref)
	}
	return refs, nil
}

// build builds the images of Images by reference.
func build(src Sources) (map[string]v1.Image, error) {
	for _, s := range []struct{ what, path string }{
		{"agnhost", src.Agnhost}, {"nonewprivs", src.Nonewprivs}, {"pause", src.Pause}, {"busybox", src.Busybox},
		{"nmeter", src.Nmeter}, {"dig", src.Dig},
	} {
		if s.path == "" {
			return nil, fmt.Errorf("no %s program given", s.what)
		}
		if err := checkStatic(s.path); err != nil {
			return nil, fmt.Errorf("%s: %w", s.what, err)
		}
	}
	busybox, err := registry.BusyboxImage(src.Busybox)
	if err != nil {
		return nil, err
	}
	nmeter := tree{}
	if err := nmeter.hostFile("bin/nmeter", src.Nmeter); err != nil {
		return nil, err
	}
	nmeter.chmod("bin/nmeter", 0o755)
	if busybox, err = withLayer(busybox, nmeter, "nodelet: nmeter, the applet Debian's busybox lacks"); err != nil {
		return nil, err
	}
	base, err := readBase(busybox)
	if err != nil {
		return nil, err
	}
	pause, err := registry.PauseImage(src.Pause)
	if err != nil {
		return nil, err
	}
	out := map[string]v1.Image{BusyboxRef: busybox, PauseRef: pause}
	for _, b := range []struct {
		ref   string
		build func(v1.Image, baseFS, Sources) (v1.Image, error)
	}{
		{AgnhostRef, agnhost},
		{NginxRef, nginx},
		{NonewprivsRef, nonewprivs},
		{NonrootRef, nonroot},
		{IPCUtilsRef, ipcUtils},
		{GlibcDNSTestingRef, glibcDNSTesting},
	} {
		img, err := b.build(busybox, base, src)
		if err != nil {
			return nil, fmt.Errorf("building %s: %w", b.ref, err)
		}
		out[b.ref] = img
	}
	out[AgnhostPrevRef] = out[AgnhostRef]
	kitten, err := kitten(out[AgnhostRef], src)
	if err != nil {
		return nil, fmt.Errorf("building %s: %w", KittenRef, err)
	}
	out[KittenRef] = kitten
	return out, nil
}

// kitten follows test/images/kitten/Dockerfile: agnhost with the two files
// of its html directory at the root. The image volume specs mount it and
// read data.json and etc/os-release (upstream's agnhost is Alpine-based;
// ours, on busybox, gets an os-release that says what it stands in for).
func kitten(agnhost v1.Image, src Sources) (v1.Image, error) {
	t := tree{}
	html := filepath.Join(src.Upstream, "test", "images", "kitten", "html")
	for _, name := range []string{"kitten.jpg", "data.json"} {
		if err := t.hostFile(name, filepath.Join(html, name)); err != nil {
			return nil, fmt.Errorf("kitten's %s (Sources.Upstream): %w", name, err)
		}
		t.chmod(name, 0o644)
	}
	t.file("etc/os-release", 0o644, []byte(kittenOSRelease))
	img, err := withLayer(agnhost, t, "nodelet: kitten's html files")
	if err != nil {
		return nil, err
	}
	return withConfig(img, func(c *v1.Config) { c.Cmd = []string{"test-webserver"} })
}

// kittenOSRelease names the distribution of upstream's agnhost base.
const kittenOSRelease = `NAME="Alpine Linux"
ID=alpine
PRETTY_NAME="Alpine Linux (nodelet's offline stand-in: busybox base, see test/conformance/images)"
`

// agnhost follows test/images/agnhost/Dockerfile.
func agnhost(busybox v1.Image, base baseFS, src Sources) (v1.Image, error) {
	t := tree{}
	if err := t.hostFile("agnhost", src.Agnhost); err != nil {
		return nil, err
	}
	t.chmod("agnhost", 0o755)
	t.symlink("agnhost-2", "agnhost")
	t.dir("uploads", 0o755)
	porter := filepath.Join(src.Upstream, "test", "images", "agnhost", "porter")
	for _, name := range []string{"localhost.crt", "localhost.key"} {
		if err := t.hostFile(name, filepath.Join(porter, name)); err != nil {
			return nil, fmt.Errorf("porter's certificate (Sources.Upstream): %w", err)
		}
		t.chmod(name, 0o644)
	}
	// adduser -u 1000 -D user-defined-in-image; addgroup -g 50000
	// group-defined-in-image; addgroup user-defined-in-image
	// group-defined-in-image.
	t.file("etc/passwd", 0o644, []byte(base.text["etc/passwd"]+
		"user-defined-in-image:x:1000:1000:Linux User,,,:/home/user-defined-in-image:/bin/sh\n"))
	t.file("etc/group", 0o644, []byte(base.text["etc/group"]+
		"user-defined-in-image:x:1000:\ngroup-defined-in-image:x:50000:user-defined-in-image\n"))
	t.dir("home/user-defined-in-image", 0o755)
	t.chown("home/user-defined-in-image", 1000, 1000)
	// netcat-openbsd as upstream's: busybox's nc has no -u (UDP), which the
	// networking specs use; /usr/bin comes first on PATH.
	if err := t.tools(base, map[string]string{"usr/bin/curl": src.Curl, "bin/bash": src.Bash, "usr/bin/nc": src.Netcat, "usr/bin/getent": src.Getent}); err != nil {
		return nil, err
	}
	// /bin/sh is bash here: Debian's busybox sh runs its own applets before
	// anything on PATH (its nc, not the netcat above), where upstream's
	// alpine sh looks PATH up as any shell does.
	t.symlink("bin/sh", "bash")
	if err := t.dig(src); err != nil {
		return nil, err
	}
	img, err := withLayer(busybox, t, "nodelet: agnhost from "+filepath.Base(src.Agnhost))
	if err != nil {
		return nil, err
	}
	return withConfig(img, func(c *v1.Config) {
		c.Entrypoint = []string{"/agnhost"}
		c.Cmd = []string{"pause"}
		c.ExposedPorts = ports("80/tcp", "8080/tcp", "8081/tcp", "9376/tcp", "5000/tcp")
	})
}

// nginx follows the nginx:1.27-alpine image the upstream one is: nginx in
// the foreground, workers as user nginx, the default server on port 80
// serving /usr/share/nginx/html, logs to the container's stdout and stderr.
// It has no /docker-entrypoint.sh (which only runs templates and scripts a
// user mounts in /docker-entrypoint.d).
func nginx(busybox v1.Image, base baseFS, src Sources) (v1.Image, error) {
	t := tree{}
	if err := t.tools(base, map[string]string{"usr/sbin/nginx": src.Nginx}); err != nil {
		return nil, err
	}
	t.file("etc/nginx/nginx.conf", 0o644, []byte(nginxConf))
	t.file("etc/nginx/conf.d/default.conf", 0o644, []byte(nginxDefaultConf))
	t.file("etc/nginx/mime.types", 0o644, []byte(nginxMimeTypes))
	t.file("usr/share/nginx/html/index.html", 0o644, []byte(nginxIndex))
	t.file("etc/passwd", 0o644, []byte(base.text["etc/passwd"]+"nginx:x:101:101:nginx:/var/cache/nginx:/sbin/nologin\n"))
	t.file("etc/group", 0o644, []byte(base.text["etc/group"]+"nginx:x:101:nginx\n"))
	t.dir("var/log/nginx", 0o755)
	t.symlink("var/log/nginx/access.log", "/dev/stdout")
	t.symlink("var/log/nginx/error.log", "/dev/stderr")
	t.dir("var/cache/nginx", 0o755)
	t.dir("var/lib/nginx", 0o755) // the Debian build's temp paths
	t.dir("run", 0o755)
	t.dir("var/lock", 0o755)
	img, err := withLayer(busybox, t, "nodelet: nginx from "+src.Nginx)
	if err != nil {
		return nil, err
	}
	return withConfig(img, func(c *v1.Config) {
		c.Cmd = []string{"nginx", "-g", "daemon off;"}
		c.ExposedPorts = ports("80/tcp")
		c.StopSignal = "SIGQUIT"
	})
}

// nonewprivs follows test/images/nonewprivs/Dockerfile: nnp setuid root.
func nonewprivs(busybox v1.Image, _ baseFS, src Sources) (v1.Image, error) {
	t := tree{}
	if err := t.hostFile("usr/local/bin/nnp", src.Nonewprivs); err != nil {
		return nil, err
	}
	t.chmod("usr/local/bin/nnp", 0o4755)
	img, err := withLayer(busybox, t, "nodelet: nnp from "+filepath.Base(src.Nonewprivs))
	if err != nil {
		return nil, err
	}
	return withConfig(img, func(c *v1.Config) { c.Cmd = []string{"nnp"} })
}

// nonroot follows test/images/nonroot/Dockerfile: USER 1234.
func nonroot(busybox v1.Image, _ baseFS, _ Sources) (v1.Image, error) {
	return withConfig(busybox, func(c *v1.Config) { c.User = "1234" })
}

// ipcUtils follows test/images/ipc-utils/Dockerfile: util-linux's IPC
// programs.
func ipcUtils(busybox v1.Image, base baseFS, src Sources) (v1.Image, error) {
	if len(src.IPCTools) == 0 {
		return nil, fmt.Errorf("no IPC tools given")
	}
	t := tree{}
	tools := map[string]string{}
	for _, p := range src.IPCTools {
		tools["usr/bin/"+filepath.Base(p)] = p
	}
	if err := t.tools(base, tools); err != nil {
		return nil, err
	}
	return withLayer(busybox, t, "nodelet: util-linux IPC tools")
}

// glibcDNSTesting stands in for test/images/glibc-dns-testing (Debian
// with dnsutils): the suites run `hostname` and `hostname -f` in it, which
// must resolve the pod's /etc/hosts as glibc does.
func glibcDNSTesting(busybox v1.Image, base baseFS, src Sources) (v1.Image, error) {
	t := tree{}
	if err := t.tools(base, map[string]string{"bin/hostname": src.Hostname, "bin/bash": src.Bash, "usr/bin/getent": src.Getent}); err != nil {
		return nil, err
	}
	t.file("etc/nsswitch.conf", 0o644, []byte("passwd: files\ngroup: files\nhosts: files dns\n"))
	if err := t.dig(src); err != nil {
		return nil, err
	}
	img, err := withLayer(busybox, t, "nodelet: glibc hostname from "+src.Hostname)
	if err != nil {
		return nil, err
	}
	return withConfig(img, func(c *v1.Config) { c.Cmd = []string{"bash"} })
}

// dig adds the static dig stand-in (./dig) as /usr/bin/dig.
func (t tree) dig(src Sources) error {
	if err := t.hostFile("usr/bin/dig", src.Dig); err != nil {
		return err
	}
	t.chmod("usr/bin/dig", 0o755)
	return nil
}

// tools adds each host program (by its path in the image) with the
// libraries it needs, and points the base's commands of the same name at
// it.
func (t tree) tools(base baseFS, programs map[string]string) error {
	for p, src := range programs {
		if src == "" {
			return fmt.Errorf("no host program given for /%s", p)
		}
		if err := t.program(p, src); err != nil {
			return err
		}
		t.shadow(base, p)
	}
	return nil
}

func ports(ps ...string) map[string]struct{} {
	m := map[string]struct{}{}
	for _, p := range ps {
		m[p] = struct{}{}
	}
	return m
}

const nginxConf = `user nginx;
worker_processes auto;
pid /run/nginx.pid;
error_log /var/log/nginx/error.log notice;

events {
    worker_connections 1024;
}

http {
    include /etc/nginx/mime.types;
    default_type application/octet-stream;
    access_log /var/log/nginx/access.log;
    sendfile on;
    keepalive_timeout 65;
    include /etc/nginx/conf.d/*.conf;
}
`

const nginxDefaultConf = `server {
    listen 80;
    server_name localhost;

    location / {
        root /usr/share/nginx/html;
        index index.html index.htm;
    }
}
`

var nginxMimeTypes = "types {\n" + strings.Join([]string{
	"    text/html html htm shtml;",
	"    text/css css;",
	"    text/plain txt;",
	"    text/xml xml;",
	"    application/javascript js;",
	"    application/json json;",
	"    image/gif gif;",
	"    image/jpeg jpeg jpg;",
	"    image/png png;",
	"    image/svg+xml svg svgz;",
	"    image/x-icon ico;",
	"    application/octet-stream bin;",
}, "\n") + "\n}\n"

const nginxIndex = `<!DOCTYPE html>
<html>
<head>
<title>Welcome to nginx!</title>
</head>
<body>
<h1>Welcome to nginx!</h1>
<p>If you see this page, the nginx web server is successfully installed and
working.</p>
</body>
</html>
`
