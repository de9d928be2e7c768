package containerd

import (
	"flag"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

var rewrite = flag.Bool("rewrite", false, "rewrite golden files in testdata/")

// defaultConfig is DefaultConfig for containerd 2.x.
func defaultConfig(rootDir string) Config {
	c := DefaultConfig(rootDir)
	c.Major = 2
	return c
}

// TestRenderGolden pins every generated file, for both config formats. Run
// with -rewrite after an intended change and read the diff.
func TestRenderGolden(t *testing.T) {
	for major, golden := range map[int]string{2: "render.golden", 1: "render-containerd1.golden"} {
		t.Run(golden, func(t *testing.T) {
			cfg := defaultConfig("/var/lib/nodelet")
			cfg.Mirror, cfg.Major = "127.0.0.1:5050", major
			checkGolden(t, cfg, filepath.Join("testdata", golden))
		})
	}
}

// TestRenderClusterGolden pins the configuration of cluster mode: the
// standard CNI directories (two plugin directories on 2.x, the one
// Manager.Start picked on 1.x) and no network at start.
func TestRenderClusterGolden(t *testing.T) {
	for major, golden := range map[int]string{2: "render-cluster.golden", 1: "render-cluster-containerd1.golden"} {
		t.Run(golden, func(t *testing.T) {
			cfg := defaultConfig("/var/lib/nodelet")
			cfg.Mirror, cfg.Major, cfg.PodCIDR = "127.0.0.1:5050", major, ""
			cfg.CNIConfDir, cfg.CNIBinDirs = "/etc/cni/net.d", []string{"/opt/cni/bin", "/usr/lib/cni"}
			if major == 1 {
				cfg.CNIBinDirs = []string{"/usr/lib/cni"}
			}
			checkGolden(t, cfg, filepath.Join("testdata", golden))
		})
	}
}

func checkGolden(t *testing.T, cfg Config, golden string) {
	t.Helper()
	files, err := Render(cfg)
	if err != nil {
		t.Fatal(err)
	}
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var got strings.Builder
	for _, p := range paths {
		got.WriteString("==> " + p + "\n")
		got.Write(files[p])
	}
	if *rewrite {
		if err := os.WriteFile(golden, []byte(got.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got.String() != string(want) {
		t.Errorf("Render output differs from %s (run go test -rewrite to accept):\n%s", golden, got.String())
	}
}

func TestRenderIsDeterministic(t *testing.T) {
	cfg := defaultConfig("/r")
	a, _ := Render(cfg)
	b, _ := Render(cfg)
	for p := range a {
		if string(a[p]) != string(b[p]) {
			t.Fatalf("%s differs between two renders", p)
		}
	}
}

func TestRenderWithoutMirrorKeepsUpstream(t *testing.T) {
	files, err := Render(defaultConfig("/r"))
	if err != nil {
		t.Fatal(err)
	}
	hosts := string(files["/r/containerd/certs.d/docker.io/hosts.toml"])
	if !strings.Contains(hosts, `server = "https://registry-1.docker.io"`) || strings.Contains(hosts, "[host.") {
		t.Errorf("hosts.toml without mirror = %q", hosts)
	}
}

func TestValidate(t *testing.T) {
	for name, mutate := range map[string]func(*Config){
		"relative dir":      func(c *Config) { c.Dir = "rel" },
		"long socket path":  func(c *Config) { c.Dir = "/" + strings.Repeat("x", 100) },
		"long bridge name":  func(c *Config) { c.BridgeName = "a-very-long-bridge" },
		"empty bridge name": func(c *Config) { c.BridgeName = "" },
		"bad cidr":          func(c *Config) { c.PodCIDR = "10.0.0.0" },
		"host bits in cidr": func(c *Config) { c.PodCIDR = "10.0.0.1/24" },
		"relative conf dir": func(c *Config) { c.CNIConfDir = "etc/cni" },
		"relative bin dir":  func(c *Config) { c.CNIBinDirs = []string{"lib/cni"} },
		"no bin dir":        func(c *Config) { c.CNIBinDirs = nil },
		"1.x two bin dirs":  func(c *Config) { c.Major, c.CNIBinDirs = 1, []string{"/opt/cni/bin", "/usr/lib/cni"} },
		"no sandbox image":  func(c *Config) { c.SandboxImage = "" },
		"quote in path":     func(c *Config) { c.CNIBinDirs = []string{"/opt/cni/bin", `/usr/"lib`} },
		"unknown major":     func(c *Config) { c.Major = 3 },
		"major not asked":   func(c *Config) { c.Major = 0 },
	} {
		t.Run(name, func(t *testing.T) {
			cfg := defaultConfig("/var/lib/nodelet")
			mutate(&cfg)
			if _, err := Render(cfg); err == nil {
				t.Errorf("Render accepted %s", name)
			}
		})
	}
}

func TestRenderSystemdCgroup(t *testing.T) {
	for _, major := range []int{1, 2} {
		cfg := defaultConfig("/r")
		cfg.Major, cfg.SystemdCgroup = major, true
		files, err := Render(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if toml := string(files[cfg.ConfigPath()]); !strings.Contains(toml, "SystemdCgroup = true") {
			t.Errorf("containerd %d config without SystemdCgroup = true:\n%s", major, toml)
		}
	}
}

func TestParseMajor(t *testing.T) {
	for line, want := range map[string]int{
		"containerd github.com/containerd/containerd/v2 v2.2.9 6f0b5ba\n":             2,
		"containerd github.com/containerd/containerd/v2 2.2.9+unknown \n":             2,
		"containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+deb12u3": 1,
		"containerd containerd.io 1.7.27 05044ec0a9a75232cad458027ca83437aae3f4da":    1,
	} {
		got, err := parseMajor(line)
		if err != nil || got != want {
			t.Errorf("parseMajor(%q) = %d, %v; want %d", line, got, err, want)
		}
	}
	for _, line := range []string{"", "runc version 1.1.5", "containerd x", "containerd pkg vX.1", "containerd pkg -1.2"} {
		if got, err := parseMajor(line); err == nil {
			t.Errorf("parseMajor(%q) = %d, want an error", line, got)
		}
	}
}

func TestBinaryDirFirst(t *testing.T) {
	env := binaryDirFirst([]string{"A=1", "PATH=/usr/bin:/bin"}, "/opt/nodelet/bin/containerd")
	want := []string{"A=1", "PATH=/opt/nodelet/bin:/usr/bin:/bin"}
	if strings.Join(env, " ") != strings.Join(want, " ") {
		t.Errorf("env = %q, want %q", env, want)
	}
	if env := binaryDirFirst([]string{"PATH=/bin"}, "containerd"); strings.Join(env, " ") != "PATH=/bin" {
		t.Errorf("a bare binary name changed PATH: %q", env)
	}
	if env := binaryDirFirst([]string{"A=1"}, "/x/containerd"); strings.Join(env, " ") != "A=1 PATH=/x" {
		t.Errorf("env without PATH = %q", env)
	}
}
