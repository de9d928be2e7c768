package agent

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestNewRejectsBadConfig(t *testing.T) {
	for name, mutate := range map[string]func(*Config){
		"relative root": func(c *Config) { c.RootDir = "var/lib" },
		"no node name":  func(c *Config) { c.NodeName = "" },
		"zero period":   func(c *Config) { c.FileCheckFrequency = 0 },
		"zero relist":   func(c *Config) { c.PLEGRelistPeriod = 0 },
		"anonymous with AlwaysAllow": func(c *Config) {
			c.AnonymousAuth, c.AuthorizationMode = true, "AlwaysAllow"
		},
		"unknown authorization mode": func(c *Config) { c.AuthorizationMode = "RBAC" },
	} {
		cfg := DefaultConfig("/var/lib/nodelet")
		cfg.NodeName = "n"
		mutate(&cfg)
		if _, err := New(cfg, Deps{}); err == nil {
			t.Errorf("%s: New accepted it", name)
		}
	}
	cfg := DefaultConfig("/var/lib/nodelet")
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

// The status store logs a pod's status once per change, in one line.
func TestStatusStoreLogsChanges(t *testing.T) {
	var buf bytes.Buffer
	s := newStatusStore(slog.New(slog.NewTextHandler(&buf, nil)))
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-n", Namespace: "default", UID: "u1"}}
	running := v1.PodStatus{Phase: v1.PodRunning, PodIP: "10.42.0.3",
		Conditions:        []v1.PodCondition{{Type: v1.PodReady, Status: v1.ConditionTrue}},
		ContainerStatuses: []v1.ContainerStatus{{Name: "app", State: v1.ContainerState{Running: &v1.ContainerStateRunning{}}}}}
	s.SetPodStatus(pod, running)
	s.SetPodStatus(pod, running)
	s.Reject(pod, "OutOfcpu", "Node didn't have enough resource: cpu")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines, want 2:\n%s", len(lines), buf.String())
	}
	if !strings.Contains(lines[0], `pod=default/web-n phase=Running reason="" ready=true ip=10.42.0.3 containers="app=running/0"`) {
		t.Errorf("line 1: %s", lines[0])
	}
	if !strings.Contains(lines[1], "phase=Failed reason=OutOfcpu") {
		t.Errorf("line 2: %s", lines[1])
	}
	if st, ok := s.Get("u1"); !ok || st.Phase != v1.PodFailed {
		t.Errorf("Get = %v %v", st.Phase, ok)
	}
}
