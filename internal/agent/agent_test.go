package agent

import (
	"testing"

	"github.com/nodelet/nodelet/internal/nodeconfig"
)

func TestNewRejectsBadConfig(t *testing.T) {
	for name, mutate := range map[string]func(*nodeconfig.Config){
		"relative root": func(c *nodeconfig.Config) { c.RootDir = "var/lib" },
		"no node name":  func(c *nodeconfig.Config) { c.NodeName = "" },
		"zero period":   func(c *nodeconfig.Config) { c.FileCheckFrequency = 0 },
		"zero relist":   func(c *nodeconfig.Config) { c.PLEGRelistPeriod = 0 },
		"anonymous with AlwaysAllow": func(c *nodeconfig.Config) {
			c.AnonymousAuth, c.AuthorizationMode = true, "AlwaysAllow"
		},
		"unknown authorization mode": func(c *nodeconfig.Config) { c.AuthorizationMode = "RBAC" },
	} {
		cfg := nodeconfig.DefaultConfig("/var/lib/nodelet")
		cfg.NodeName = "n"
		mutate(&cfg)
		if _, err := New(cfg, Deps{}); err == nil {
			t.Errorf("%s: New accepted it", name)
		}
	}
	cfg := nodeconfig.DefaultConfig("/var/lib/nodelet")
	cfg.NodeName = "n"
	if _, err := New(cfg, Deps{}); err != nil {
		t.Errorf("defaults rejected: %v", err)
	}
	// Anonymous requests are fine with a mode that authorizes.
	cfg.AnonymousAuth = true
	if _, err := New(cfg, Deps{}); err != nil {
		t.Errorf("anonymous with %s rejected: %v", cfg.AuthorizationMode, err)
	}
}
