package registry

import (
	"archive/tar"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"
)

func TestBusyboxImage(t *testing.T) {
	bb := requireBusybox(t)
	img, err := BusyboxImage(bb)
	if err != nil {
		t.Fatal(err)
	}
	again, err := BusyboxImage(bb)
	if err != nil {
		t.Fatal(err)
	}
	if digestOf(t, img) != digestOf(t, again) {
		t.Errorf("BusyboxImage is not deterministic: %s then %s", digestOf(t, img), digestOf(t, again))
	}

	headers, order, data := layerEntries(t, img)
	host, err := os.ReadFile(bb)
	if err != nil {
		t.Fatal(err)
	}
	assertRegular(t, headers, "bin/busybox", 0o755)
	if !slices.Equal(data["bin/busybox"], host) {
		t.Error("bin/busybox differs from the host binary")
	}
	for _, link := range []string{"bin/sh", "usr/bin/wget", "sbin/ip", "bin/wget", "bin/ip"} {
		assertSymlink(t, headers, link, "/bin/busybox")
	}
	assertDir(t, headers, "tmp/", 0o1777)
	assertDir(t, headers, "root/", 0o700)
	assertDir(t, headers, "var/www/", 0o755)
	assertDir(t, headers, "usr/bin/", 0o755)
	if !strings.HasPrefix(string(data["etc/passwd"]), "root:x:0:0:root:/root:/bin/sh\n") ||
		!strings.Contains(string(data["etc/passwd"]), "nobody:x:65534:65534:") {
		t.Errorf("etc/passwd = %q", data["etc/passwd"])
	}
	if !strings.HasPrefix(string(data["etc/group"]), "root:x:0:\n") {
		t.Errorf("etc/group = %q", data["etc/group"])
	}
	assertAllApplets(t, bb, headers)
	assertNormalizedTar(t, order, headers)

	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cfg.Config.Cmd, []string{"sh"}) || !slices.Equal(cfg.Config.Env, []string{defaultPath}) {
		t.Errorf("config Cmd = %q, Env = %q", cfg.Config.Cmd, cfg.Config.Env)
	}
	if cfg.OS != "linux" || cfg.Architecture != runtime.GOARCH || !cfg.Created.Time.Equal(time.Unix(0, 0)) {
		t.Errorf("config OS = %q, Architecture = %q, Created = %v", cfg.OS, cfg.Architecture, cfg.Created)
	}
}

func TestPauseImage(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "pause")
	if err := os.WriteFile(bin, []byte("not really a program"), 0o600); err != nil {
		t.Fatal(err)
	}
	img, err := PauseImage(bin)
	if err != nil {
		t.Fatal(err)
	}
	again, err := PauseImage(bin)
	if err != nil {
		t.Fatal(err)
	}
	if digestOf(t, img) != digestOf(t, again) {
		t.Error("PauseImage is not deterministic")
	}
	headers, order, data := layerEntries(t, img)
	if !slices.Equal(order, []string{"pause"}) {
		t.Errorf("layer entries = %q, want only pause", order)
	}
	assertRegular(t, headers, "pause", 0o755)
	if string(data["pause"]) != "not really a program" {
		t.Errorf("pause content = %q", data["pause"])
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cfg.Config.Entrypoint, []string{"/pause"}) || cfg.Config.Cmd != nil || cfg.Config.User != "" {
		t.Errorf("config Entrypoint = %q, Cmd = %q, User = %q", cfg.Config.Entrypoint, cfg.Config.Cmd, cfg.Config.User)
	}
	mt, err := img.MediaType()
	if err != nil || !mt.IsImage() {
		t.Errorf("media type = %q, %v", mt, err)
	}
}

func TestSeed(t *testing.T) {
	bb := requireBusybox(t)
	s, _ := openTestStore(t)
	spec := SeedSpec{PauseBinary: bb, BusyboxBinary: bb}
	changed, err := Seed(s, spec, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{PauseRef, BusyboxRef, BusyboxLatestRef}
	if !reflect.DeepEqual(changed, want) {
		t.Errorf("first Seed changed %q, want %q", changed, want)
	}
	entries, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	var refs []string
	for _, e := range entries {
		refs = append(refs, e.Ref)
	}
	sort.Strings(want)
	if !slices.Equal(refs, want) {
		t.Errorf("List refs = %q, want %q", refs, want)
	}
	changed, err = Seed(s, spec, testLogger(t))
	if err != nil || len(changed) != 0 {
		t.Errorf("second Seed = %q, %v; want nothing changed", changed, err)
	}
}

func TestSeedMissingBinaries(t *testing.T) {
	bb := requireBusybox(t)
	s, _ := openTestStore(t)
	missing := filepath.Join(t.TempDir(), "nope")
	tests := []struct {
		name string
		spec SeedSpec
		want []string
	}{
		{"pause missing", SeedSpec{PauseBinary: missing, BusyboxBinary: bb}, []string{missing, "run make build"}},
		{"busybox missing", SeedSpec{PauseBinary: bb, BusyboxBinary: missing}, []string{missing, "install busybox-static"}},
		{"pause unset", SeedSpec{BusyboxBinary: bb}, []string{"pause", "run make build"}},
		{"busybox not an ELF", SeedSpec{PauseBinary: bb, BusyboxBinary: writeFile(t, "script", "#!/bin/sh\n")}, []string{"not an ELF", "install busybox-static"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Seed(s, tt.spec, testLogger(t))
			if err == nil {
				t.Fatal("Seed succeeded")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestSeedRejectsDynamicBinary(t *testing.T) {
	bb := requireBusybox(t)
	dynamic := "/bin/ls"
	if err := checkStatic(dynamic, "x", "y"); err == nil {
		t.Skipf("%s is not dynamically linked here", dynamic)
	}
	s, _ := openTestStore(t)
	_, err := Seed(s, SeedSpec{PauseBinary: bb, BusyboxBinary: dynamic}, testLogger(t))
	if err == nil || !strings.Contains(err.Error(), "dynamically linked") {
		t.Errorf("Seed with a dynamic busybox: %v", err)
	}
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// assertAllApplets checks that every path `busybox --list-full` prints is
// in the layer.
func assertAllApplets(t *testing.T, bb string, headers map[string]*tar.Header) {
	t.Helper()
	applets, err := busyboxApplets(bb)
	if err != nil {
		t.Fatal(err)
	}
	if len(applets) < 100 {
		t.Errorf("only %d applets listed", len(applets))
	}
	for _, a := range applets {
		if headers[a] == nil {
			t.Errorf("applet %s missing from the layer", a)
		}
	}
}

// assertNormalizedTar checks the properties that make the layer
// reproducible: sorted entries, root ownership, epoch time stamps.
func assertNormalizedTar(t *testing.T, order []string, headers map[string]*tar.Header) {
	t.Helper()
	if !sort.StringsAreSorted(order) {
		t.Error("layer entries are not sorted")
	}
	for name, h := range headers {
		if h.Uid != 0 || h.Gid != 0 || !h.ModTime.Equal(time.Unix(0, 0)) {
			t.Errorf("%s: uid %d gid %d mtime %v", name, h.Uid, h.Gid, h.ModTime)
		}
	}
}

func assertRegular(t *testing.T, headers map[string]*tar.Header, name string, mode int64) {
	t.Helper()
	h := headers[name]
	if h == nil || h.Typeflag != tar.TypeReg || h.Mode != mode {
		t.Errorf("%s = %+v, want a regular file with mode %o", name, h, mode)
	}
}

func assertSymlink(t *testing.T, headers map[string]*tar.Header, name, target string) {
	t.Helper()
	h := headers[name]
	if h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != target {
		t.Errorf("%s = %+v, want a symlink to %s", name, h, target)
	}
}

func assertDir(t *testing.T, headers map[string]*tar.Header, name string, mode int64) {
	t.Helper()
	h := headers[name]
	if h == nil || h.Typeflag != tar.TypeDir || h.Mode != mode {
		t.Errorf("%s = %+v, want a directory with mode %o", name, h, mode)
	}
}
