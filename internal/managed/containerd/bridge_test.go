package containerd

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestRenderBridgeGolden pins the bridge network for one IPv4 CIDR, for
// dual-stack (IPv4 primary, then IPv6 primary) and for IPv6 alone.
func TestRenderBridgeGolden(t *testing.T) {
	cfg := defaultConfig("/var/lib/nodelet")
	var got strings.Builder
	for _, cidrs := range [][]string{
		{"10.244.1.0/24"},
		{"10.244.1.0/24", "fd00:10:244:1::/64"},
		{"fd00:10:244:1::/64", "10.244.1.0/24"},
		{"fd00:10:244:1::/64"},
	} {
		b, err := RenderBridge(cfg, cidrs)
		if err != nil {
			t.Fatalf("RenderBridge(%q): %v", cidrs, err)
		}
		got.WriteString("==> " + strings.Join(cidrs, ",") + "\n")
		got.Write(b)
	}
	golden := filepath.Join("testdata", "bridge.golden")
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
		t.Errorf("RenderBridge output differs from %s (run go test -rewrite to accept):\n%s", golden, got.String())
	}
}

func bridgeConfig(t *testing.T) Config {
	t.Helper()
	dir := t.TempDir()
	cfg := defaultConfig(dir)
	cfg.CNIConfDir = filepath.Join(dir, "net.d")
	return cfg
}

func readConf(t *testing.T, cfg Config) string {
	t.Helper()
	b, err := os.ReadFile(cfg.BridgeConfPath())
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestWriteBridge: nodelet writes its network into an empty directory,
// rewrites only what it wrote, and leaves alone a directory that holds
// someone else's network or its own file changed by someone else.
func TestWriteBridge(t *testing.T) {
	t.Run("empty directory: written, then unchanged, then rewritten for new CIDRs", func(t *testing.T) {
		cfg := bridgeConfig(t)
		mustOutcome(t, cfg, []string{"10.244.1.0/24"}, BridgeWritten)
		mustOutcome(t, cfg, []string{"10.244.1.0/24"}, BridgeUnchanged)
		mustOutcome(t, cfg, []string{"10.244.2.0/24", "fd00::/64"}, BridgeWritten)
		if conf := readConf(t, cfg); !strings.Contains(conf, "10.244.2.0/24") || !strings.Contains(conf, "fd00::/64") {
			t.Errorf("rewritten network:\n%s", conf)
		}
		if got := BridgePodCIDRs(cfg); !slices.Equal(got, []string{"10.244.2.0/24", "fd00::/64"}) {
			t.Errorf("BridgePodCIDRs = %q", got)
		}
	})
	t.Run("a foreign network: nothing written", func(t *testing.T) {
		cfg := bridgeConfig(t)
		foreign := filepath.Join(cfg.ConfDir(), "05-cilium.conflist")
		if err := os.MkdirAll(cfg.ConfDir(), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(foreign, []byte("{}"), 0o600); err != nil {
			t.Fatal(err)
		}
		mustOutcome(t, cfg, []string{"10.244.1.0/24"}, BridgeForeign)
		if _, err := os.Stat(cfg.BridgeConfPath()); !os.IsNotExist(err) {
			t.Errorf("bridge network written beside a foreign one: %v", err)
		}
		if b, _ := os.ReadFile(foreign); string(b) != "{}" {
			t.Errorf("foreign network changed: %q", b)
		}
	})
	t.Run("a foreign network after nodelet's: nodelet's stays as it was", func(t *testing.T) {
		cfg := bridgeConfig(t)
		mustOutcome(t, cfg, []string{"10.244.1.0/24"}, BridgeWritten)
		if err := os.WriteFile(filepath.Join(cfg.ConfDir(), "10-flannel.conflist"), []byte("{}"), 0o600); err != nil {
			t.Fatal(err)
		}
		mustOutcome(t, cfg, []string{"10.244.2.0/24"}, BridgeForeign)
		if !strings.Contains(readConf(t, cfg), "10.244.1.0/24") {
			t.Error("nodelet's network changed beside a foreign one")
		}
	})
	t.Run("a hidden network counts: containerd reads it, first", func(t *testing.T) {
		cfg := bridgeConfig(t)
		if err := os.MkdirAll(cfg.ConfDir(), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(cfg.ConfDir(), ".99-hidden.conflist"), []byte("{}"), 0o600); err != nil {
			t.Fatal(err)
		}
		mustOutcome(t, cfg, []string{"10.244.1.0/24"}, BridgeForeign)
		if _, err := os.Stat(cfg.BridgeConfPath()); !os.IsNotExist(err) {
			t.Errorf("bridge network written beside a hidden one: %v", err)
		}
	})
	t.Run("files that are not networks do not count", func(t *testing.T) {
		cfg := bridgeConfig(t)
		if err := os.MkdirAll(filepath.Join(cfg.ConfDir(), "multus.d"), 0o755); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"README", ".tmp-05-flannel.conflist-123", ".05-flannel.conflist.tmp"} {
			if err := os.WriteFile(filepath.Join(cfg.ConfDir(), name), []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		mustOutcome(t, cfg, []string{"10.244.1.0/24"}, BridgeWritten)
	})
	t.Run("nodelet's file edited by someone: left alone", func(t *testing.T) {
		cfg := bridgeConfig(t)
		mustOutcome(t, cfg, []string{"10.244.1.0/24"}, BridgeWritten)
		edited := strings.Replace(readConf(t, cfg), `"ipMasq": true`, `"ipMasq": false`, 1)
		if err := os.WriteFile(cfg.BridgeConfPath(), []byte(edited), 0o644); err != nil {
			t.Fatal(err)
		}
		mustOutcome(t, cfg, []string{"10.244.2.0/24"}, BridgeForeign)
		if readConf(t, cfg) != edited {
			t.Error("an edited network was replaced")
		}
		if got := BridgePodCIDRs(cfg); got != nil {
			t.Errorf("BridgePodCIDRs of an edited file = %q, want none", got)
		}
	})
	t.Run("a file of nodelet's name with no record: kept unless it is what nodelet writes", func(t *testing.T) {
		cfg := bridgeConfig(t)
		want, err := RenderBridge(cfg, []string{"10.244.1.0/24"})
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(cfg.ConfDir(), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(cfg.BridgeConfPath(), want, 0o644); err != nil {
			t.Fatal(err)
		}
		mustOutcome(t, cfg, []string{"10.244.1.0/24"}, BridgeUnchanged)
		if err := os.Remove(cfg.bridgeRecord()); err != nil {
			t.Fatal(err)
		}
		mustOutcome(t, cfg, []string{"10.244.2.0/24"}, BridgeForeign)
	})
	t.Run("invalid CIDRs: an error, nothing written", func(t *testing.T) {
		cfg := bridgeConfig(t)
		if _, _, err := WriteBridge(cfg, []string{"10.244.1.7/24"}); err == nil {
			t.Error("WriteBridge accepted host bits")
		}
		if _, err := os.Stat(cfg.BridgeConfPath()); !os.IsNotExist(err) {
			t.Errorf("written: %v", err)
		}
	})
}

func mustOutcome(t *testing.T, cfg Config, cidrs []string, want BridgeOutcome) {
	t.Helper()
	got, _, err := WriteBridge(cfg, cidrs)
	if err != nil || got != want {
		t.Fatalf("WriteBridge(%q) = %v, %v; want %v", cidrs, got, err, want)
	}
}
