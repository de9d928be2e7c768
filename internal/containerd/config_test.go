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

// TestRenderGolden pins every generated file. Run with -rewrite after an
// intended change and read the diff.
func TestRenderGolden(t *testing.T) {
	cfg := DefaultConfig("/var/lib/nodelet")
	cfg.Mirror = "127.0.0.1:5050"
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
	golden := filepath.Join("testdata", "render.golden")
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
	cfg := DefaultConfig("/r")
	a, _ := Render(cfg)
	b, _ := Render(cfg)
	for p := range a {
		if string(a[p]) != string(b[p]) {
			t.Fatalf("%s differs between two renders", p)
		}
	}
}

func TestRenderWithoutMirrorKeepsUpstream(t *testing.T) {
	files, err := Render(DefaultConfig("/r"))
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
		"ipv6 cidr":         func(c *Config) { c.PodCIDR = "fd00::/64" },
		"no sandbox image":  func(c *Config) { c.SandboxImage = "" },
		"quote in path":     func(c *Config) { c.CNIBinDir = `/usr/"lib` },
	} {
		t.Run(name, func(t *testing.T) {
			cfg := DefaultConfig("/var/lib/nodelet")
			mutate(&cfg)
			if _, err := Render(cfg); err == nil {
				t.Errorf("Render accepted %s", name)
			}
		})
	}
}
