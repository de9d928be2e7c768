package containerd

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/pelletier/go-toml/v2"
)

// exampleRegistries is the README's example, with every setting.
const exampleRegistries = `# /var/lib/nodelet/registries.yaml
mirrors:
  docker.io:
    endpoint:
      - "https://mirror.example.com:5000"
      - "http://10.0.0.7:5000/v2"
  "*":
    endpoint:
      - "https://cache.example.com"
configs:
  "mirror.example.com:5000":
    auth:
      username: puller
      password: "s3cret \"quoted\" \\ back"
    tls:
      ca_file: /etc/nodelet/certs/mirror-ca.pem
      cert_file: /etc/nodelet/certs/client.pem
      key_file: /etc/nodelet/certs/client-key.pem
  registry.example.org:
    auth:
      identity_token: tok-123
  cache.example.com:
    tls:
      insecure_skip_verify: true
`

func TestParseRegistries(t *testing.T) {
	got, err := ParseRegistries("registries.yaml", []byte(exampleRegistries))
	if err != nil {
		t.Fatal(err)
	}
	want := Registries{
		Mirrors: map[string]Mirror{
			"docker.io": {Endpoints: []string{"https://mirror.example.com:5000", "http://10.0.0.7:5000/v2"}},
			"*":         {Endpoints: []string{"https://cache.example.com"}},
		},
		Configs: map[string]RegistryConfig{
			"mirror.example.com:5000": {
				Auth: &RegistryAuth{Username: "puller", Password: `s3cret "quoted" \ back`},
				TLS:  &RegistryTLS{CAFile: "/etc/nodelet/certs/mirror-ca.pem", CertFile: "/etc/nodelet/certs/client.pem", KeyFile: "/etc/nodelet/certs/client-key.pem"},
			},
			"registry.example.org": {Auth: &RegistryAuth{IdentityToken: "tok-123"}},
			"cache.example.com":    {TLS: &RegistryTLS{InsecureSkipVerify: true}},
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ParseRegistries =\n%#v\nwant\n%#v", got, want)
	}
	loop := "mirrors:\n  docker.io:\n    endpoint: [\"http://127.0.0.1:5000\", \"http://[::1]:5001\"]\nconfigs:\n  127.0.0.1:5000:\n    auth: {username: u, password: p}\n  \"[::1]:5001\":\n    auth: {username: u, password: p}\n"
	if _, err := ParseRegistries("r.yaml", []byte(loop)); err != nil {
		t.Errorf("credentials for loopback registries over plain HTTP: %v", err)
	}
	for _, empty := range []string{"", "# nothing yet\n", "mirrors: {}\nconfigs: {}\n"} {
		if r, err := ParseRegistries("r.yaml", []byte(empty)); err != nil || len(r.Mirrors)+len(r.Configs) != 0 {
			t.Errorf("ParseRegistries(%q) = %v, %v; want nothing configured", empty, r, err)
		}
	}
}

// TestParseRegistriesRefuses: every mistake is refused with the file, the
// line and what is wrong.
func TestParseRegistriesRefuses(t *testing.T) {
	for _, tc := range []struct{ name, yaml, want string }{
		{"unknown top-level field", "mirrors: {}\nmirror:\n  docker.io: {}\n", "r.yaml: yaml: unmarshal errors: line 2: field mirror not found"},
		{"unknown mirror field", "mirrors:\n  docker.io:\n    endpoints: [https://m.example]\n", "line 3: field endpoints not found"},
		{"unknown tls field", "configs:\n  r.example:\n    tls:\n      ca: /ca.pem\n", "line 4: field ca not found"},
		{"k3s-style identitytoken", "configs:\n  r.example:\n    auth:\n      identitytoken: x\n", "line 4: field identitytoken not found"},
		{"key given twice", "mirrors:\n  docker.io: {}\n  docker.io: {}\n", `line 3: mapping key "docker.io" already defined at line 2`},
		{"wrong type", "configs:\n  r.example:\n    tls:\n      insecure_skip_verify: maybe\n", "line 4: cannot unmarshal !!str `maybe` into bool"},
		{"not YAML", "mirrors: [\n", "r.yaml: yaml: line 1"},
		{"two documents", "mirrors: {}\n---\nconfigs: {}\n", "line 2: a second YAML document"},
		{"endpoint scheme", "mirrors:\n  docker.io:\n    endpoint:\n      - https://ok.example\n      - ftp://m.example\n", `line 5: mirrors."docker.io".endpoint[1]: "ftp://m.example": the scheme must be http or https`},
		{"endpoint without scheme", "mirrors:\n  docker.io:\n    endpoint: [m.example:5000]\n", `line 3: mirrors."docker.io".endpoint[0]`},
		{"endpoint credentials", "mirrors:\n  docker.io:\n    endpoint: [\"https://u:p@m.example\"]\n", "line 3: mirrors.\"docker.io\".endpoint[0]: an endpoint carries no credentials"},
		{"endpoint query", "mirrors:\n  docker.io:\n    endpoint: [\"https://m.example/?x=1\"]\n", "without query or fragment"},
		{"endpoint quote", "mirrors:\n  docker.io:\n    endpoint: ['https://m.example/a\"b']\n", "quote or backslash"},
		{"mirror host", "mirrors:\n  docker.io: {}\n  \"bad host\": {}\n", `line 3: mirrors: "bad host" is not a registry host`},
		{"mirror host path", "mirrors:\n  \"r.example/../x\": {}\n", "is not a registry host"},
		{"port 0", "configs:\n  \"r.example:0\":\n    tls: {insecure_skip_verify: true}\n", "line 2: configs: \"r.example:0\" is not a registry host: port 0"},
		{"port too large", "mirrors:\n  \"r.example:70000\": {}\n", "port 70000 is not 1 to 65535"},
		{"bad IPv6", "mirrors:\n  \"[::g]:5000\": {}\n", "is not a registry host"},
		{"rewrite", "mirrors:\n  docker.io:\n    endpoint: [https://m.example]\n    rewrite:\n      \"^rancher/(.*)\": \"mirror/$1\"\n", "line 5: mirrors.\"docker.io\".rewrite: rewrites are a feature of k3s's own containerd"},
		{"wildcard config", "configs:\n  \"*\":\n    tls: {insecure_skip_verify: true}\n", `line 2: configs."*": a wildcard would send the credentials`},
		{"username alone", "configs:\n  r.example:\n    auth:\n      username: u\n", `line 4: configs."r.example".auth: username and password go together`},
		{"password alone", "configs:\n  r.example:\n    auth: {password: p}\n", "username and password go together"},
		{"two forms", "configs:\n  r.example:\n    auth: {username: u, password: p, identity_token: t}\n", "give one of username and password, auth, or identity_token"},
		{"empty auth", "configs:\n  r.example:\n    auth: {}\n", "no credentials"},
		{"auth not base64", "configs:\n  r.example:\n    auth: {auth: \"not base64!\"}\n", `auth must be the base64 of "username:password"`},
		{"auth without colon", "configs:\n  r.example:\n    auth: {auth: dXNlcg==}\n", `auth must be the base64 of "username:password"`},
		{"control character", "configs:\n  r.example:\n    auth: {username: u, password: \"a\\nb\"}\n", "password contains a control character"},
		{"relative CA", "configs:\n  r.example:\n    tls:\n      ca_file: certs/ca.pem\n", `line 4: configs."r.example".tls.ca_file: "certs/ca.pem" must be an absolute path`},
		{"credentials over plain HTTP", "mirrors:\n  docker.io:\n    endpoint: [\"http://m.example:5000\"]\nconfigs:\n  m.example:5000:\n    auth: {username: u, password: p}\n", `line 6: configs."m.example:5000".auth: m.example:5000 is reached over plain HTTP (http://m.example:5000), which would send the credentials in clear text`},
		{"cert without key", "configs:\n  r.example:\n    tls:\n      cert_file: /c.pem\n", `line 4: configs."r.example".tls: a client certificate needs both cert_file and key_file`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseRegistries("r.yaml", []byte(tc.yaml))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ParseRegistries error = %v\nwant one containing %q", err, tc.want)
			}
			if !strings.HasPrefix(err.Error(), "r.yaml: ") || strings.Contains(err.Error(), "\n") {
				t.Errorf("error %q: want one line starting with the file name", err)
			}
		})
	}
}

// TestRegistriesNeverPrintCredentials: a Config printed by mistake, in
// any verb, shows no credential; validation errors show none either.
func TestRegistriesNeverPrintCredentials(t *testing.T) {
	r, err := ParseRegistries("r.yaml", []byte(exampleRegistries))
	if err != nil {
		t.Fatal(err)
	}
	c := defaultConfig("/r")
	c.Registries = r
	for _, verb := range []string{"%v", "%+v", "%#v", "%s"} {
		out := fmt.Sprintf(verb, c)
		for _, secret := range []string{"s3cret", "tok-123"} {
			if strings.Contains(out, secret) {
				t.Errorf("%s of a Config shows a credential: %s", verb, out)
			}
		}
	}
	_, err = ParseRegistries("r.yaml", []byte("configs:\n  r.example:\n    auth: {username: u, password: \"hunter2\\u0001\"}\n"))
	if err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("validation error %v shows the password", err)
	}
}

// TestRenderRegistriesGolden pins the files of a configuration with
// every registries setting, for both config formats.
func TestRenderRegistriesGolden(t *testing.T) {
	r, err := ParseRegistries("r.yaml", []byte(exampleRegistries))
	if err != nil {
		t.Fatal(err)
	}
	for major, golden := range map[int]string{2: "render-registries.golden", 1: "render-registries-containerd1.golden"} {
		t.Run(golden, func(t *testing.T) {
			cfg := defaultConfig("/var/lib/nodelet")
			cfg.Mirror, cfg.Major, cfg.Registries = "127.0.0.1:5050", major, r
			checkGolden(t, cfg, filepath.Join("testdata", golden))
		})
	}
}

// TestRenderedRegistriesParse reads the rendered files back with the TOML
// parser containerd uses: the credentials arrive unchanged whatever
// characters they hold, and each setting lands on its host only.
func TestRenderedRegistriesParse(t *testing.T) {
	r, err := ParseRegistries("r.yaml", []byte(exampleRegistries))
	if err != nil {
		t.Fatal(err)
	}
	r.Configs["docker.io"] = RegistryConfig{Auth: &RegistryAuth{Auth: "dXNlcjpwYXNz"}}
	for _, major := range []int{1, 2} {
		cfg := defaultConfig("/r")
		cfg.Mirror, cfg.Major, cfg.Registries = "127.0.0.1:5050", major, r
		files, err := Render(cfg)
		if err != nil {
			t.Fatal(err)
		}
		var parsed map[string]any
		if err := toml.Unmarshal(files[cfg.ConfigPath()], &parsed); err != nil {
			t.Fatalf("containerd %d config.toml does not parse: %v", major, err)
		}
		section := []string{"plugins", "io.containerd.cri.v1.images", "registry", "configs"}
		if major == 1 {
			section = []string{"plugins", "io.containerd.grpc.v1.cri", "registry", "configs"}
		}
		configs := dig(t, parsed, section...)
		if got := dig(t, configs, "mirror.example.com:5000", "auth")["password"]; got != `s3cret "quoted" \ back` {
			t.Errorf("containerd %d: password read back as %q", major, got)
		}
		if got := dig(t, configs, "registry.example.org", "auth")["identitytoken"]; got != "tok-123" {
			t.Errorf("containerd %d: identity token read back as %q", major, got)
		}
		if got := dig(t, configs, dockerHubHost, "auth")["auth"]; got != "dXNlcjpwYXNz" {
			t.Errorf("containerd %d: docker.io's credentials not given for %s: %v", major, dockerHubHost, configs)
		}
		if len(configs) != 4 {
			t.Errorf("containerd %d: credentials for %d hosts, want 4: %v", major, len(configs), configs)
		}
	}

	cfg := defaultConfig("/r")
	cfg.Mirror, cfg.Registries = "127.0.0.1:5050", r
	files, _ := Render(cfg)
	type host struct {
		Capabilities []string `toml:"capabilities"`
		CA           []string `toml:"ca"`
		Client       [][]string
		SkipVerify   bool `toml:"skip_verify"`
	}
	var docker struct {
		Server string          `toml:"server"`
		Host   map[string]host `toml:"host"`
	}
	if err := toml.Unmarshal(files["/r/containerd/certs.d/docker.io/hosts.toml"], &docker); err != nil {
		t.Fatal(err)
	}
	if docker.Server != "https://registry-1.docker.io" || len(docker.Host) != 3 ||
		!reflect.DeepEqual(docker.Host["https://mirror.example.com:5000"].CA, []string{"/etc/nodelet/certs/mirror-ca.pem"}) ||
		docker.Host["http://10.0.0.7:5000/v2"].CA != nil {
		t.Errorf("docker.io hosts.toml = %+v", docker)
	}
	for path, data := range files {
		if strings.Contains(path, "cache.example.com") || path == cfg.ConfigPath() {
			continue
		}
		if strings.Contains(string(data), "skip_verify") && !strings.Contains(string(data), "cache.example.com") {
			t.Errorf("%s skips verification of a host the file did not name:\n%s", path, data)
		}
	}
	for path, data := range files {
		if path != cfg.ConfigPath() && (strings.Contains(string(data), "s3cret") || strings.Contains(string(data), "tok-123")) {
			t.Errorf("%s holds a credential; only config.toml (0600) may", path)
		}
	}
}

func dig(t *testing.T, m map[string]any, keys ...string) map[string]any {
	t.Helper()
	for _, k := range keys {
		next, ok := m[k].(map[string]any)
		if !ok {
			t.Fatalf("no table %q in %v", k, m)
		}
		m = next
	}
	return m
}

// TestRenderRegistriesOrder: the local mirror stays first for every
// registry, the user's endpoints come next in the file's order, the
// registry itself last; an endpoint that is the registry itself is not
// listed twice; "*" applies to every registry without its own entry.
func TestRenderRegistriesOrder(t *testing.T) {
	cfg := defaultConfig("/r")
	cfg.Mirror = "127.0.0.1:5050"
	cfg.Registries = Registries{
		Mirrors: map[string]Mirror{
			"r.example:5000": {Endpoints: []string{"https://b.example", "https://a.example", "https://r.example:5000/v2"}},
			"*":              {Endpoints: []string{"https://cache.example"}},
		},
		Configs: map[string]RegistryConfig{"tls-only.example": {TLS: &RegistryTLS{CAFile: "/ca.pem"}}},
	}
	files, err := Render(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for reg, want := range map[string][]string{
		"r.example:5000":   {"http://127.0.0.1:5050", "https://b.example", "https://a.example"},
		"_default":         {"http://127.0.0.1:5050", "https://cache.example"},
		"docker.io":        {"http://127.0.0.1:5050", "https://cache.example"},
		"tls-only.example": {"http://127.0.0.1:5050", "https://cache.example"},
	} {
		data := string(files["/r/containerd/certs.d/"+reg+"/hosts.toml"])
		var got []string
		for _, line := range strings.Split(data, "\n") {
			if h, ok := strings.CutPrefix(line, "[host."); ok {
				got = append(got, strings.Trim(h, `"]`))
			}
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s hosts = %q, want %q:\n%s", reg, got, want, data)
		}
	}
	if data := string(files["/r/containerd/certs.d/tls-only.example/hosts.toml"]); !strings.Contains(data, "server = \"https://tls-only.example\"\nca = [\"/ca.pem\"]\n") {
		t.Errorf("the registry's own CA is not on its server:\n%s", data)
	}
}

// TestValidateRegistries: a Config built in code is checked as the file
// is.
func TestValidateRegistries(t *testing.T) {
	cfg := defaultConfig("/r")
	cfg.Registries = Registries{Configs: map[string]RegistryConfig{"*": {}}}
	if _, err := Render(cfg); err == nil || !strings.Contains(err.Error(), "wildcard") {
		t.Errorf("Render with a wildcard config: %v", err)
	}
}

// TestWriteFilesRegistries: config.toml, which may hold credentials, is
// root's alone; a registry taken out of the file loses its hosts.toml;
// a hosts directory nodelet did not write stays.
func TestWriteFilesRegistries(t *testing.T) {
	dir := t.TempDir()
	cfg := defaultConfig(dir)
	cfg.Registries = Registries{Configs: map[string]RegistryConfig{"gone.example": {TLS: &RegistryTLS{InsecureSkipVerify: true}}}}
	if err := WriteFiles(cfg); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(cfg.ConfigPath())
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("config.toml: %v, %v; want mode 0600", fi.Mode(), err)
	}
	if fi, err := os.Stat(cfg.CDISpecDir()); cfg.Major == 2 && (err != nil || !fi.IsDir()) {
		t.Errorf("CDI spec directory: %v, %v", fi, err)
	}
	gone := filepath.Join(cfg.certsDir(), "gone.example")
	if _, err := os.Stat(filepath.Join(gone, "hosts.toml")); err != nil {
		t.Fatal(err)
	}
	theirs := filepath.Join(cfg.certsDir(), "theirs.example")
	if err := os.MkdirAll(theirs, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(theirs, "hosts.toml"), []byte("server = \"https://theirs.example\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	cfg.Registries = Registries{}
	if err := WriteFiles(cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(gone); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s after the registry left the file: %v; want it removed", gone, err)
	}
	if _, err := os.Stat(filepath.Join(theirs, "hosts.toml")); err != nil {
		t.Errorf("a hosts.toml nodelet did not write was removed: %v", err)
	}
	if _, err := os.Stat(filepath.Join(cfg.certsDir(), "docker.io", "hosts.toml")); err != nil {
		t.Errorf("built-in registry lost its hosts.toml: %v", err)
	}
}

// TestReadRegistries: the file and the files it names must be root's and
// private enough; a missing file is fs.ErrNotExist.
func TestReadRegistries(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: checks file ownership against root")
	}
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	key := filepath.Join(dir, "key.pem")
	cert := filepath.Join(dir, "cert.pem")
	for _, f := range []string{ca, cert} {
		if err := os.WriteFile(f, []byte("pem"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(key, []byte("pem"), 0o600); err != nil {
		t.Fatal(err)
	}
	good := fmt.Sprintf("configs:\n  r.example:\n    tls: {ca_file: %s, cert_file: %s, key_file: %s}\n", ca, cert, key)
	write := func(t *testing.T, content string, mode os.FileMode) string {
		t.Helper()
		p := filepath.Join(dir, "registries.yaml")
		_ = os.Remove(p) // a fresh file: root's, the mode given
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if r, err := ReadRegistries(write(t, good, 0o640)); err != nil || r.Configs["r.example"].TLS.CAFile != ca {
		t.Fatalf("ReadRegistries = %v, %v", r, err)
	}
	if _, err := ReadRegistries(filepath.Join(dir, "missing.yaml")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v, want fs.ErrNotExist", err)
	}
	for name, tc := range map[string]struct {
		setup func(t *testing.T) string
		want  string
	}{
		"world-writable": {func(t *testing.T) string { return write(t, good, 0o646) }, "lets every user write it"},
		"not root's": {func(t *testing.T) string {
			p := write(t, good, 0o600)
			if err := os.Chown(p, 65534, 65534); err != nil {
				t.Fatal(err)
			}
			return p
		}, "owned by uid 65534"},
		"directory": {func(t *testing.T) string { return dir }, "not a regular file"},
		"too large": {func(t *testing.T) string { return write(t, "#"+strings.Repeat("x", MaxRegistriesFileSize), 0o600) }, "larger than"},
		"malformed": {func(t *testing.T) string { return write(t, "mirrors:\n  docker.io:\n    endpoints: []\n", 0o600) }, "line 3: field endpoints not found"},
		"missing CA": {func(t *testing.T) string {
			return write(t, strings.Replace(good, ca, filepath.Join(dir, "nope.pem"), 1), 0o600)
		}, "nope.pem: no such file"},
		"world-readable key": {func(t *testing.T) string {
			if err := os.Chmod(key, 0o644); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.Chmod(key, 0o600) })
			return write(t, good, 0o600)
		}, "lets every user read this private key"},
		"world-writable CA": {func(t *testing.T) string {
			if err := os.Chmod(ca, 0o666); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.Chmod(ca, 0o644) })
			return write(t, good, 0o600)
		}, "ca.pem: mode -rw-rw-rw- lets every user write it"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ReadRegistries(tc.setup(t))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("ReadRegistries error = %v, want one containing %q", err, tc.want)
			}
		})
	}
}
