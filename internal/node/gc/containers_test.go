package gc

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critest "k8s.io/cri-api/pkg/apis/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/base/beneath"
	"github.com/nodelet/nodelet/internal/pipeline/cri"
	"github.com/nodelet/nodelet/internal/pure/podspec"
)

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// world is a fake runtime with pods' log files under a temporary directory.
type world struct {
	t       *testing.T
	logsDir string
	rs      *critest.FakeRuntimeService
	gc      *Collector
}

func newWorld(t *testing.T) *world {
	t.Helper()
	w := &world{t: t, logsDir: t.TempDir(), rs: critest.NewFakeRuntimeService()}
	client := cri.New(w.rs, critest.NewFakeImageService(), "fake", cri.DefaultTimeouts(), discard())
	w.gc = New(client, Policy{PodLogsDir: w.logsDir}, LogPolicy{}, clocktesting.NewFakeClock(now), discard())
	return w
}

func (w *world) podDir(uid string) string {
	return filepath.Join(w.logsDir, "ns_pod-"+uid+"_"+uid)
}

// set fills the fake with sandboxes and containers; each container gets a
// log file (and a rotated one) under its pod's log directory.
func (w *world) set(sandboxes []*runtimeapi.PodSandbox, containers []*runtimeapi.Container) {
	w.t.Helper()
	var fs []*critest.FakePodSandbox
	for _, s := range sandboxes {
		fs = append(fs, &critest.FakePodSandbox{PodSandboxStatus: runtimeapi.PodSandboxStatus{
			Id: s.Id, Metadata: s.Metadata, State: s.State, CreatedAt: s.CreatedAt, Labels: s.Labels,
		}})
	}
	var fc []*critest.FakeContainer
	for _, c := range containers {
		log := filepath.Join(w.podDir(c.Labels[podspec.LabelPodUID]), c.Metadata.Name, c.Id+".log")
		for _, p := range []string{log, log + ".20250101-000000.gz"} {
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				w.t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte("log\n"), 0o644); err != nil {
				w.t.Fatal(err)
			}
		}
		fc = append(fc, &critest.FakeContainer{SandboxID: c.PodSandboxId, ContainerStatus: runtimeapi.ContainerStatus{
			Id: c.Id, Metadata: c.Metadata, State: c.State, CreatedAt: c.CreatedAt, Labels: c.Labels, LogPath: log,
		}})
	}
	w.rs.SetFakeSandboxes(fs)
	w.rs.SetFakeContainers(fc)
}

func (w *world) left() (containers, sandboxes []string) {
	w.rs.Lock()
	defer w.rs.Unlock()
	for id := range w.rs.Containers {
		containers = append(containers, id)
	}
	for id := range w.rs.Sandboxes {
		sandboxes = append(sandboxes, id)
	}
	slices.Sort(containers)
	slices.Sort(sandboxes)
	return containers, sandboxes
}

func (w *world) calls(name string) int {
	n := 0
	for _, c := range w.rs.GetCalls() {
		if c == name {
			n++
		}
	}
	return n
}

func (w *world) expectLeft(wantC, wantS []string) {
	w.t.Helper()
	gotC, gotS := w.left()
	if !slices.Equal(gotC, wantC) {
		w.t.Errorf("containers left: got %v, want %v", gotC, wantC)
	}
	if !slices.Equal(gotS, wantS) {
		w.t.Errorf("sandboxes left: got %v, want %v", gotS, wantS)
	}
}

func (w *world) logExists(uid, name, id string) bool {
	_, err := os.Stat(filepath.Join(w.podDir(uid), name, id+".log"))
	return err == nil
}

func exist(t *testing.T, path string) bool {
	t.Helper()
	_, err := os.Stat(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return err == nil
}

// scene: pod "live" is active, pod "gone" was deleted, "foreign" is not
// nodelet's.
func scene(w *world) {
	m := time.Minute
	w.set([]*runtimeapi.PodSandbox{
		sbx("sl", "live", true, 30*m),
		sbx("sg", "gone", false, 30*m),
		unmanaged(sbx("sf", "foreign", false, 30*m)),
	}, []*runtimeapi.Container{
		ctr("l1", "sl", "live", "app", exited, 20*m),
		ctr("l2", "sl", "live", "app", exited, 10*m),
		ctr("l3", "sl", "live", "app", running, 5*m),
		ctr("g1", "sg", "gone", "app", exited, 20*m),
		ctr("g2", "sg", "gone", "side", exited, 20*m),
		unmanaged(ctr("f1", "sf", "foreign", "app", exited, 20*m)),
	})
}

func TestCollectContainers(t *testing.T) {
	w := newWorld(t)
	scene(w)
	if err := w.gc.CollectContainers(context.Background(), activeSet("live")); err != nil {
		t.Fatal(err)
	}
	w.expectLeft([]string{"f1", "l2", "l3"}, []string{"sf", "sl"})
	if n := w.calls("RemoveContainer"); n != 3 {
		t.Errorf("RemoveContainer called %d times, want 3", n)
	}
	if n := w.calls("RemovePodSandbox"); n != 1 {
		t.Errorf("RemovePodSandbox called %d times, want 1", n)
	}
	if w.logExists("live", "app", "l1") || exist(t, filepath.Join(w.podDir("live"), "app", "l1.log.20250101-000000.gz")) {
		t.Error("log files of the removed container l1 are still there")
	}
	if !w.logExists("live", "app", "l2") || !w.logExists("live", "app", "l3") {
		t.Error("log files of kept containers were removed")
	}
	if exist(t, w.podDir("gone")) {
		t.Error("log directory of the deleted pod is still there")
	}
	if !exist(t, w.podDir("foreign")) {
		t.Error("log directory of a foreign pod was removed")
	}

	// Nothing more to do.
	before := len(w.rs.GetCalls())
	if err := w.gc.CollectContainers(context.Background(), activeSet("live")); err != nil {
		t.Fatal(err)
	}
	for _, c := range w.rs.GetCalls()[before:] {
		if strings.HasPrefix(c, "Remove") {
			t.Errorf("second collection called %s", c)
		}
	}
}

func TestCollectContainersRemoveErrorDoesNotStopTheRest(t *testing.T) {
	w := newWorld(t)
	scene(w)
	// Removals go in ID order: g1 fails, g2 and l1 still go.
	w.rs.InjectError("RemoveContainer", errors.New("boom"))
	err := w.gc.CollectContainers(context.Background(), activeSet("live"))
	if err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("got error %v, want boom", err)
	}
	w.expectLeft([]string{"f1", "g1", "l2", "l3"}, []string{"sf", "sg", "sl"})
	if !w.logExists("gone", "app", "g1") {
		t.Error("log of the container that could not be removed was deleted")
	}
	if w.logExists("gone", "side", "g2") || w.logExists("live", "app", "l1") {
		t.Error("logs of removed containers are still there")
	}
	if n := w.calls("RemovePodSandbox"); n != 0 {
		t.Errorf("the sandbox of the container left was removed (%d calls)", n)
	}
	if !exist(t, w.podDir("gone")) {
		t.Error("log directory of a pod with objects left was removed")
	}

	// The next collection finishes the job.
	if err := w.gc.CollectContainers(context.Background(), activeSet("live")); err != nil {
		t.Fatal(err)
	}
	w.expectLeft([]string{"f1", "l2", "l3"}, []string{"sf", "sl"})
	if exist(t, w.podDir("gone")) {
		t.Error("log directory of the deleted pod is still there")
	}
}

func TestCollectContainersSandboxErrorKeepsPodLogs(t *testing.T) {
	w := newWorld(t)
	scene(w)
	w.rs.InjectError("RemovePodSandbox", errors.New("busy"))
	if err := w.gc.CollectContainers(context.Background(), activeSet("live")); err == nil {
		t.Fatal("no error")
	}
	w.expectLeft([]string{"f1", "l2", "l3"}, []string{"sf", "sg", "sl"})
	if !exist(t, w.podDir("gone")) {
		t.Error("log directory removed while the pod's sandbox is left")
	}
}

func TestCollectContainersListError(t *testing.T) {
	w := newWorld(t)
	scene(w)
	w.rs.InjectError("ListContainers", errors.New("down"))
	if err := w.gc.CollectContainers(context.Background(), activeSet("live")); err == nil {
		t.Fatal("no error")
	}
	if n := w.calls("RemoveContainer") + w.calls("RemovePodSandbox"); n != 0 {
		t.Errorf("%d removals after a failed listing", n)
	}
}

func TestCollectContainersLeavesLogsOutsidePodLogsDir(t *testing.T) {
	w := newWorld(t)
	outside := filepath.Join(t.TempDir(), "x.log")
	if err := os.WriteFile(outside, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	w.set([]*runtimeapi.PodSandbox{sbx("sl", "live", true, time.Hour)},
		[]*runtimeapi.Container{
			ctr("l1", "sl", "live", "app", exited, 2*time.Hour),
			ctr("l2", "sl", "live", "app", exited, time.Hour),
		})
	w.rs.Lock()
	w.rs.Containers["l1"].LogPath = outside
	w.rs.Unlock()
	if err := w.gc.CollectContainers(context.Background(), activeSet("live")); err != nil {
		t.Fatal(err)
	}
	w.expectLeft([]string{"l2"}, []string{"sl"})
	if !exist(t, outside) {
		t.Error("a log outside the pod logs directory was removed")
	}
}

// TestCollectContainersRemovesNothingThroughSymlinks: the log directory
// of a dead container replaced by a symlink to a directory outside
// holding files named like its log and rotations: the container goes,
// the files outside stay, and the error says why. A rotation that is a
// symlink is removed itself, not its target.
func TestCollectContainersRemovesNothingThroughSymlinks(t *testing.T) {
	w := newWorld(t)
	w.set([]*runtimeapi.PodSandbox{sbx("sl", "live", true, time.Hour)},
		[]*runtimeapi.Container{
			ctr("l1", "sl", "live", "app", exited, 3*time.Hour),
			ctr("l2", "sl", "live", "app", exited, 2*time.Hour),
			ctr("l3", "sl", "live", "app", exited, time.Hour),
		})
	outside := t.TempDir()
	for _, name := range []string{"l1.log", "l1.log.20250101-000000.gz", "target"} {
		if err := os.WriteFile(filepath.Join(outside, name), []byte("keep"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// l1 and l2 share the directory app: l1's log path goes through a
	// symlink put in its place, l2's rotation is a symlink.
	ctrDir := filepath.Join(w.podDir("live"), "app")
	if err := os.Rename(ctrDir, ctrDir+".real"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, ctrDir); err != nil {
		t.Fatal(err)
	}
	w.rs.Lock()
	w.rs.Containers["l2"].LogPath = filepath.Join(w.podDir("live"), "app.real", "l2.log")
	w.rs.Unlock()
	rotation := filepath.Join(ctrDir+".real", "l2.log.20250101-000000.gz")
	if err := os.Remove(rotation); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "target"), rotation); err != nil {
		t.Fatal(err)
	}

	err := w.gc.CollectContainers(context.Background(), activeSet("live"))
	w.expectLeft([]string{"l3"}, []string{"sl"})
	for _, name := range []string{"l1.log", "l1.log.20250101-000000.gz", "target"} {
		if b, err := os.ReadFile(filepath.Join(outside, name)); err != nil || string(b) != "keep" {
			t.Errorf("outside %s: %q, %v", name, b, err)
		}
	}
	if !errors.Is(err, beneath.ErrSymlink) {
		t.Fatalf("error = %v, want the symlinked log directory refused", err)
	}
	t.Logf("refused: %v", err)
	for _, p := range []string{rotation, filepath.Join(ctrDir+".real", "l2.log")} {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left: %v", p, err)
		}
	}
}
