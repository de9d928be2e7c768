package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// --private-registry, else <root-dir>/registries.yaml, configures the
// managed containerd's registries; a bad file stops nodelet with its line;
// credentials never reach the log.
func TestPrivateRegistryFlag(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the file must be root's")
	}
	root := t.TempDir()
	file := filepath.Join(root, "registries.yaml")
	if err := os.WriteFile(file, []byte("configs:\n  r.example:5000:\n    auth: {username: u, password: hunter2}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, logged, err := configFrom(t, "--root-dir", root)
	if err != nil {
		t.Fatal(err)
	}
	if a := cfg.Managed.Containerd.Registries.Configs["r.example:5000"].Auth; a == nil || a.Password != "hunter2" {
		t.Errorf("default file not read: %+v", cfg.Managed.Containerd.Registries)
	}
	if !strings.Contains(logged, "configs=r.example:5000") || strings.Contains(logged, "hunter2") {
		t.Errorf("log: %s", logged)
	}
	if cfg, _, err := configFrom(t); err != nil || len(cfg.Managed.Containerd.Registries.Configs) != 0 {
		t.Errorf("without a file: %v, %+v", err, cfg.Managed.Containerd.Registries)
	}
	if _, _, err := configFrom(t, "--private-registry", filepath.Join(root, "missing.yaml")); err == nil || !strings.Contains(err.Error(), "--private-registry: open ") {
		t.Errorf("a named file that is missing: %v", err)
	}
	bad := filepath.Join(root, "bad.yaml")
	if err := os.WriteFile(bad, []byte("mirrors:\n  docker.io:\n    endpoint: [\"ftp://m.example\"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := configFrom(t, "--private-registry", bad); err == nil || !strings.Contains(err.Error(), bad+": line 3: ") {
		t.Errorf("a malformed file: %v", err)
	}
	if _, _, err := configFrom(t, "--private-registry", file, "--container-runtime-endpoint", "unix:///run/containerd/containerd.sock"); err == nil || !strings.Contains(err.Error(), "configure registries in that runtime") {
		t.Errorf("with an endpoint: %v", err)
	}
	if cfg, _, err := configFrom(t, "--root-dir", root, "--container-runtime-endpoint", "unix:///run/containerd/containerd.sock"); err != nil || len(cfg.Managed.Containerd.Registries.Configs) != 0 {
		t.Errorf("the default file with an endpoint: %v, %+v", err, cfg.Managed.Containerd.Registries)
	}
}
