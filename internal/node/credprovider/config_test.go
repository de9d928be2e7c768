package credprovider

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const goodConfig = `apiVersion: kubelet.config.k8s.io/v1
kind: CredentialProviderConfig
providers:
- name: fake
  matchImages: ["127.0.0.1:5000", "*.registry.example"]
  defaultCacheDuration: 10m
  apiVersion: credentialprovider.kubelet.k8s.io/v1
  args: [--flag]
  env:
  - name: REGION
    value: here
`

func TestDecodeConfig(t *testing.T) {
	ps, err := DecodeConfig([]byte(goodConfig))
	if err != nil {
		t.Fatal(err)
	}
	if errs := Validate(ps); len(errs) > 0 {
		t.Fatal(errs)
	}
	p := ps[0]
	if p.Name != "fake" || len(p.MatchImages) != 2 || p.DefaultCacheDuration != 10*time.Minute ||
		p.APIVersion != protocolV1 || p.Args[0] != "--flag" || p.Env[0] != "REGION=here" || p.Token != nil {
		t.Errorf("decoded %+v", p)
	}
}

// A bad configuration is refused with the field that is wrong named.
func TestConfigErrorsNameTheField(t *testing.T) {
	for _, c := range []struct {
		name, config, want string
	}{
		{"kind", strings.Replace(goodConfig, "kind: CredentialProviderConfig", "kind: KubeletConfiguration", 1), `kind "KubeletConfiguration"`},
		{"config version", strings.Replace(goodConfig, "kubelet.config.k8s.io/v1\n", "kubelet.config.k8s.io/v2\n", 1), `apiVersion "kubelet.config.k8s.io/v2"`},
		{"unknown field", goodConfig + "  extra: 1\n", `unknown field "providers[0].extra"`},
		{"duplicate field", goodConfig + "  name: again\n", `key "name" already set`},
		{"no providers", "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders: []\n", "providers: Required value"},
		{"name with slash", strings.Replace(goodConfig, "name: fake", "name: ../fake", 1), "providers[0].name: Invalid value"},
		{"name dotdot", strings.Replace(goodConfig, "name: fake", "name: ..", 1), "providers[0].name: Invalid value"},
		{"no match", strings.Replace(goodConfig, `matchImages: ["127.0.0.1:5000", "*.registry.example"]`, "matchImages: []", 1), "providers[0].matchImages: Required value"},
		{"bad match", strings.Replace(goodConfig, `"*.registry.example"`, `"bad host:x"`, 1), "providers[0].matchImages[1]: Invalid value"},
		{"no cache duration", strings.Replace(goodConfig, "  defaultCacheDuration: 10m\n", "", 1), "providers[0].defaultCacheDuration: Required value"},
		{"negative cache duration", strings.Replace(goodConfig, "10m", "-1m", 1), "providers[0].defaultCacheDuration: Invalid value"},
		{"protocol version", strings.Replace(goodConfig, "credentialprovider.kubelet.k8s.io/v1", "credentialprovider.kubelet.k8s.io/v2", 1), "providers[0].apiVersion: Unsupported value"},
		{"tokenAttributes in v1beta1", strings.Replace(goodConfig, "kubelet.config.k8s.io/v1\n", "kubelet.config.k8s.io/v1beta1\n", 1) +
			"  tokenAttributes: {serviceAccountTokenAudience: a, requireServiceAccount: true, cacheType: Token}\n", `unknown field "providers[0].tokenAttributes"`},
		{"token with old protocol", strings.Replace(goodConfig, "credentialprovider.kubelet.k8s.io/v1", "credentialprovider.kubelet.k8s.io/v1beta1", 1) +
			"  tokenAttributes: {serviceAccountTokenAudience: a, requireServiceAccount: true, cacheType: Token}\n", "providers[0].tokenAttributes: Forbidden"},
		{"token without audience", goodConfig + "  tokenAttributes: {requireServiceAccount: true, cacheType: Token}\n", "providers[0].tokenAttributes.serviceAccountTokenAudience: Required value"},
		{"token without require", goodConfig + "  tokenAttributes: {serviceAccountTokenAudience: a, cacheType: Token}\n", "providers[0].tokenAttributes.requireServiceAccount: Required value"},
		{"token without cacheType", goodConfig + "  tokenAttributes: {serviceAccountTokenAudience: a, requireServiceAccount: true}\n", "providers[0].tokenAttributes.cacheType: Required value"},
		{"token bad cacheType", goodConfig + "  tokenAttributes: {serviceAccountTokenAudience: a, requireServiceAccount: true, cacheType: Pod}\n", "providers[0].tokenAttributes.cacheType: Unsupported value"},
		{"required keys without require", goodConfig + "  tokenAttributes: {serviceAccountTokenAudience: a, requireServiceAccount: false, cacheType: Token, requiredServiceAccountAnnotationKeys: [a.io/b]}\n",
			"providers[0].tokenAttributes.requiredServiceAccountAnnotationKeys: Forbidden"},
		{"required and optional", goodConfig + "  tokenAttributes: {serviceAccountTokenAudience: a, requireServiceAccount: true, cacheType: Token, requiredServiceAccountAnnotationKeys: [a.io/b], optionalServiceAccountAnnotationKeys: [a.io/b]}\n",
			"annotation keys cannot be both required and optional"},
		{"bad annotation key", goodConfig + "  tokenAttributes: {serviceAccountTokenAudience: a, requireServiceAccount: true, cacheType: Token, optionalServiceAccountAnnotationKeys: ['a b']}\n",
			"providers[0].tokenAttributes.optionalServiceAccountAnnotationKeys: Invalid value"},
		{"duplicate provider", goodConfig + "- name: fake\n  matchImages: [a.example]\n  defaultCacheDuration: 0s\n  apiVersion: credentialprovider.kubelet.k8s.io/v1\n",
			"providers[1].name: Duplicate value"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ps, err := DecodeConfig([]byte(c.config))
			if err == nil {
				err = Validate(ps).ToAggregate()
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want one containing %q", err, c.want)
			}
		})
	}
}

// writeFile writes a file of mode into dir.
func writeFile(t *testing.T, dir, name, content string, mode os.FileMode) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil { // past the umask
		t.Fatal(err)
	}
	return path
}

func TestLoadConfig(t *testing.T) {
	bin := t.TempDir()
	writeFile(t, bin, "fake", "#!/bin/sh\n", 0o755)
	writeFile(t, bin, "second", "#!/bin/sh\n", 0o755)
	confDir := t.TempDir()
	writeFile(t, confDir, "10-fake.yaml", goodConfig, 0o644)
	writeFile(t, confDir, "20-second.json", `{"apiVersion":"kubelet.config.k8s.io/v1beta1","kind":"CredentialProviderConfig","providers":[
		{"name":"second","matchImages":["*.example"],"defaultCacheDuration":"0s","apiVersion":"credentialprovider.kubelet.k8s.io/v1beta1"}]}`, 0o644)
	writeFile(t, confDir, "README", "not a config", 0o644)
	cfg, err := LoadConfig(confDir, bin)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Providers) != 2 || cfg.Providers[0].Name != "fake" || cfg.Providers[1].Name != "second" || !strings.HasPrefix(cfg.Hash, "sha256:") {
		t.Errorf("LoadConfig = %+v", cfg)
	}
	one, err := LoadConfig(filepath.Join(confDir, "10-fake.yaml"), bin)
	if err != nil || len(one.Providers) != 1 || one.Hash == cfg.Hash {
		t.Errorf("LoadConfig(file) = %+v, %v", one, err)
	}

	// Two files naming one provider.
	writeFile(t, confDir, "30-again.yaml", goodConfig, 0o644)
	if _, err := LoadConfig(confDir, bin); err == nil || !strings.Contains(err.Error(), `provider "fake" is also in`) {
		t.Errorf("duplicate across files: %v", err)
	}
}

// A plugin that is missing, outside the bin directory, or writable by
// anyone is refused at start.
func TestLoadConfigRefusesUnsafePlugins(t *testing.T) {
	conf := writeFile(t, t.TempDir(), "c.yaml", goodConfig, 0o644)
	outside := writeFile(t, t.TempDir(), "fake", "#!/bin/sh\n", 0o755)
	for _, c := range []struct {
		name  string
		setup func(bin string)
		want  string
	}{
		{"missing", func(string) {}, "no such file"},
		{"not executable", func(bin string) { writeFile(t, bin, "fake", "#!/bin/sh\n", 0o644) }, "not executable"},
		{"world-writable", func(bin string) { writeFile(t, bin, "fake", "#!/bin/sh\n", 0o757) }, "world-writable"},
		{"directory", func(bin string) { _ = os.Mkdir(filepath.Join(bin, "fake"), 0o755) }, "not a regular file"},
		{"symlink outside", func(bin string) { _ = os.Symlink(outside, filepath.Join(bin, "fake")) }, "outside"},
		{"world-writable dir", func(bin string) {
			writeFile(t, bin, "fake", "#!/bin/sh\n", 0o755)
			_ = os.Chmod(bin, 0o777)
		}, "--image-credential-provider-bin-dir"},
	} {
		t.Run(c.name, func(t *testing.T) {
			bin := t.TempDir()
			c.setup(bin)
			_, err := LoadConfig(conf, bin)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("LoadConfig: %v, want an error containing %q", err, c.want)
			}
		})
	}
	// A symlink to a file inside the directory is fine.
	bin := t.TempDir()
	writeFile(t, bin, "real", "#!/bin/sh\n", 0o755)
	if err := os.Symlink("real", filepath.Join(bin, "fake")); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadConfig(conf, bin); err != nil {
		t.Errorf("symlink inside: %v", err)
	}
	if _, err := LoadConfig("", bin); err == nil || !strings.Contains(err.Error(), "--image-credential-provider-config") {
		t.Errorf("no config: %v", err)
	}
	if _, err := LoadConfig(conf, ""); err == nil || !strings.Contains(err.Error(), "--image-credential-provider-bin-dir") {
		t.Errorf("no bin dir: %v", err)
	}
}
