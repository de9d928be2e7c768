package agent

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	critest "k8s.io/cri-api/pkg/apis/testing"

	"github.com/nodelet/nodelet/internal/cri"
	"github.com/nodelet/nodelet/internal/podruntime"
)

const pod = `apiVersion: v1
kind: Pod
metadata: {name: %s}
spec:
  containers: [{name: c, image: "busybox:1.35"}]
`

type fixture struct {
	agent *Agent
	pods  *podruntime.Manager
	logs  *bytes.Buffer
	dir   string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{logs: &bytes.Buffer{}, dir: t.TempDir()}
	log := slog.New(slog.NewTextHandler(f.logs, nil))
	cfg := DefaultConfig("/var/lib/nodelet-test")
	cfg.NodeName, cfg.PodManifestPath = "n1", f.dir
	a, err := New(cfg, Deps{Log: log})
	if err != nil {
		t.Fatal(err)
	}
	is := critest.NewFakeImageService()
	is.SetFakeImageSize(1)
	rt := cri.New(critest.NewFakeRuntimeService(), is, "fake", cri.DefaultTimeouts(), log)
	f.agent, f.pods = a, podruntime.New(rt, "/var/log/pods", log)
	return f
}

func (f *fixture) write(t *testing.T, name, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(f.dir, name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) running(t *testing.T) []string {
	t.Helper()
	pods, err := f.pods.RunningPods(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, name := range pods {
		names = append(names, name)
	}
	return names
}

func TestSyncOnceRunsManifestsAndRemovesUnwanted(t *testing.T) {
	f := newFixture(t)
	ctx, reported := context.Background(), map[string]string{}
	f.write(t, "a.yaml", strings.ReplaceAll(pod, "%s", "a"))
	f.agent.syncOnce(ctx, f.pods, reported)
	if got := f.running(t); len(got) != 1 || got[0] != "default/a-n1" {
		t.Fatalf("running = %v", got)
	}
	os.Remove(filepath.Join(f.dir, "a.yaml"))
	f.agent.syncOnce(ctx, f.pods, reported)
	if got := f.running(t); len(got) != 0 {
		t.Fatalf("running after delete = %v", got)
	}
}

// A broken file is reported once, names the file, and while it is broken
// nothing is removed: it may be a half-written edit of a running pod.
func TestSyncOnceBrokenFileRemovesNothing(t *testing.T) {
	f := newFixture(t)
	ctx, reported := context.Background(), map[string]string{}
	f.write(t, "a.yaml", strings.ReplaceAll(pod, "%s", "a"))
	f.agent.syncOnce(ctx, f.pods, reported)
	f.write(t, "a.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec:\n  contai")
	f.agent.syncOnce(ctx, f.pods, reported)
	f.agent.syncOnce(ctx, f.pods, reported)
	if got := f.running(t); len(got) != 1 {
		t.Fatalf("running while the file is broken = %v", got)
	}
	if n := strings.Count(f.logs.String(), "manifest skipped"); n != 1 {
		t.Errorf("broken file logged %d times, want once:\n%s", n, f.logs)
	}
	if !strings.Contains(f.logs.String(), "a.yaml") {
		t.Errorf("log does not name the file:\n%s", f.logs)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	for name, mutate := range map[string]func(*Config){
		"relative root": func(c *Config) { c.RootDir = "var/lib" },
		"no node name":  func(c *Config) { c.NodeName = "" },
		"zero period":   func(c *Config) { c.FileCheckFrequency = 0 },
	} {
		cfg := DefaultConfig("/var/lib/nodelet")
		cfg.NodeName = "n"
		mutate(&cfg)
		if _, err := New(cfg, Deps{}); err == nil {
			t.Errorf("%s: New accepted it", name)
		}
	}
}
