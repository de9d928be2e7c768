package gc

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/base/beneath"
	"github.com/nodelet/nodelet/internal/base/testutil"
)

// logRuntime is a runtime double for log rotation: running containers
// whose logs are real files, and a ReopenContainerLog that creates a fresh
// file as containerd does.
type logRuntime struct {
	Runtime // unused methods panic

	mu        sync.Mutex
	logs      map[string]string // container ID → log path
	reopenErr error
	reopened  []string
	sbLists   int            // ListPodSandbox calls, one per collection
	statuses  map[string]int // ContainerStatus calls per container ID
}

func (r *logRuntime) ListPodSandbox(context.Context, *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sbLists++
	return nil, nil
}

func (r *logRuntime) ListContainers(_ context.Context, f *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*runtimeapi.Container
	for id := range r.logs {
		out = append(out, &runtimeapi.Container{Id: id, State: running, Labels: labels("p")})
	}
	return out, nil
}

func (r *logRuntime) ContainerStatus(_ context.Context, id string) (*runtimeapi.ContainerStatusResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.statuses == nil {
		r.statuses = map[string]int{}
	}
	r.statuses[id]++
	return &runtimeapi.ContainerStatusResponse{Status: &runtimeapi.ContainerStatus{
		Id: id, State: running, LogPath: r.logs[id],
	}}, nil
}

func (r *logRuntime) ReopenContainerLog(_ context.Context, id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.reopenErr != nil {
		return r.reopenErr
	}
	r.reopened = append(r.reopened, id)
	return os.WriteFile(r.logs[id], nil, 0o640)
}

const maxSize = 100

type rotation struct {
	dir  string
	path string
	rt   *logRuntime
	clk  *clocktesting.FakeClock
	gc   *Collector
}

func newRotation(t *testing.T, maxFiles int) *rotation {
	t.Helper()
	dir := t.TempDir()
	r := &rotation{dir: dir, path: filepath.Join(dir, "ns_p_p", "app", "0.log"), clk: clocktesting.NewFakeClock(now)}
	r.rt = &logRuntime{logs: map[string]string{"c1": r.path}}
	if err := os.MkdirAll(filepath.Dir(r.path), 0o755); err != nil {
		t.Fatal(err)
	}
	r.gc = New(r.rt, Policy{PodLogsDir: dir}, LogPolicy{MaxSize: maxSize, MaxFiles: maxFiles}, r.clk, discard())
	return r
}

func write(t *testing.T, path string, size int) []byte {
	t.Helper()
	data := bytes.Repeat([]byte("x"), size)
	if err := os.WriteFile(path, data, 0o640); err != nil {
		t.Fatal(err)
	}
	return data
}

func read(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if strings.HasSuffix(path, gzSuffix) {
		zr, err := gzip.NewReader(bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		if data, err = io.ReadAll(zr); err != nil {
			t.Fatal(err)
		}
	}
	return data
}

func (r *rotation) files(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Dir(r.path))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

func TestRotateLogsSmallFileLeftAlone(t *testing.T) {
	r := newRotation(t, 5)
	write(t, r.path, maxSize-1)
	if err := r.gc.RotateLogs(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := r.files(t); !slices.Equal(got, []string{"0.log"}) {
		t.Errorf("files: %v", got)
	}
	if len(r.rt.reopened) != 0 {
		t.Errorf("reopened %v", r.rt.reopened)
	}
}

func TestRotateLogs(t *testing.T) {
	r := newRotation(t, 5)
	data := write(t, r.path, maxSize+1)
	if err := r.gc.RotateLogs(context.Background()); err != nil {
		t.Fatal(err)
	}
	rotated := r.path + "." + now.Format("20060102-150405")
	if got := read(t, rotated); !bytes.Equal(got, data) {
		t.Errorf("rotated file has %d bytes, want %d", len(got), len(data))
	}
	if got := read(t, r.path); len(got) != 0 {
		t.Errorf("live log not fresh: %d bytes", len(got))
	}
	if !slices.Equal(r.rt.reopened, []string{"c1"}) {
		t.Errorf("reopened %v, want [c1]", r.rt.reopened)
	}
}

func TestRotateLogsPrunesAndCompresses(t *testing.T) {
	r := newRotation(t, 3) // live log + 2 rotations
	old := []string{"20250101-000000", "20250102-000000.gz", "20250103-000000"}
	for _, ts := range old {
		write(t, r.path+"."+ts, 10)
	}
	write(t, r.path+".20250103-000000.gz.tmp", 3) // interrupted compression
	prev := write(t, r.path+".20250104-000000", 20)
	write(t, r.path, maxSize)

	if err := r.gc.RotateLogs(context.Background()); err != nil {
		t.Fatal(err)
	}
	newest := "0.log." + now.Format("20060102-150405")
	want := []string{"0.log", "0.log.20250104-000000.gz", newest}
	if got := r.files(t); !slices.Equal(got, want) {
		t.Fatalf("files: got %v, want %v", got, want)
	}
	if got := read(t, r.path+".20250104-000000.gz"); !bytes.Equal(got, prev) {
		t.Errorf("compressed rotation has %q", got)
	}
	if got := read(t, filepath.Join(filepath.Dir(r.path), newest)); len(got) != maxSize {
		t.Errorf("newest rotation has %d bytes, want %d", len(got), maxSize)
	}

	// A second rotation later keeps MaxFiles files.
	r.clk.Step(time.Minute)
	write(t, r.path, maxSize)
	if err := r.gc.RotateLogs(context.Background()); err != nil {
		t.Fatal(err)
	}
	want = []string{"0.log", newest + ".gz", "0.log." + now.Add(time.Minute).Format("20060102-150405")}
	if got := r.files(t); !slices.Equal(got, want) {
		t.Fatalf("files: got %v, want %v", got, want)
	}
}

func TestRotateLogsFailedReopenRestoresFile(t *testing.T) {
	r := newRotation(t, 5)
	data := write(t, r.path, maxSize*2)
	r.rt.reopenErr = errors.New("no reopen")
	err := r.gc.RotateLogs(context.Background())
	if err == nil || !strings.Contains(err.Error(), "no reopen") {
		t.Fatalf("got error %v, want no reopen", err)
	}
	if got := r.files(t); !slices.Equal(got, []string{"0.log"}) {
		t.Errorf("files: %v", got)
	}
	if got := read(t, r.path); !bytes.Equal(got, data) {
		t.Errorf("restored log has %d bytes, want %d", len(got), len(data))
	}
}

// TestRotateLogsAsksLogPathOnce: a running container's log path is asked
// of the runtime at the first round only, a log that grows past the limit
// later is still rotated, and a container gone from the list is forgotten
// (asked again should its ID come back).
func TestRotateLogsAsksLogPathOnce(t *testing.T) {
	r := newRotation(t, 5)
	write(t, r.path, 10)
	for range 3 {
		if err := r.rotate(t); err != nil {
			t.Fatal(err)
		}
	}
	if got := r.rt.statuses["c1"]; got != 1 {
		t.Fatalf("ContainerStatus of c1: %d calls in 3 rounds, want 1", got)
	}
	write(t, r.path, maxSize)
	if err := r.rotate(t); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(r.rt.reopened, []string{"c1"}) || r.rt.statuses["c1"] != 1 {
		t.Fatalf("log past the limit: reopened %v, ContainerStatus %d calls", r.rt.reopened, r.rt.statuses["c1"])
	}
	r.rt.mu.Lock()
	delete(r.rt.logs, "c1")
	r.rt.mu.Unlock()
	if err := r.rotate(t); err != nil {
		t.Fatal(err)
	}
	if _, ok := r.gc.logPaths["c1"]; ok {
		t.Fatal("c1 still known after it left the running list")
	}
	r.rt.mu.Lock()
	r.rt.logs["c1"] = r.path
	r.rt.mu.Unlock()
	if err := r.rotate(t); err != nil {
		t.Fatal(err)
	}
	if got := r.rt.statuses["c1"]; got != 2 {
		t.Fatalf("ContainerStatus of c1 back in the list: %d calls in all, want 2", got)
	}
}

// TestRotateLogsOutsidePodLogsDirRefused: a log path the runtime reports
// outside the pod logs directory is left alone, with an error naming it.
func TestRotateLogsOutsidePodLogsDirRefused(t *testing.T) {
	r := newRotation(t, 5)
	outside := filepath.Join(t.TempDir(), "0.log")
	r.rt.logs["c1"] = outside
	data := write(t, outside, maxSize*2)
	err := r.gc.RotateLogs(context.Background())
	if !errors.Is(err, beneath.ErrOutside) || !strings.Contains(err.Error(), outside) {
		t.Fatalf("error = %v, want one naming %s as outside", err, outside)
	}
	if len(r.rt.reopened) != 0 {
		t.Errorf("reopened %v", r.rt.reopened)
	}
	if got := read(t, outside); !bytes.Equal(got, data) {
		t.Error("the log outside changed")
	}
}

// liveness bounds how long a rotation may take before the test declares
// it hung (blocked on a FIFO, say); generous on purpose.
const liveness = 30 * time.Second

// rotate runs RotateLogs and fails the test if it does not return.
func (r *rotation) rotate(t *testing.T) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- r.gc.RotateLogs(context.Background()) }()
	select {
	case err := <-done:
		return err
	case <-time.After(liveness):
		t.Fatal("RotateLogs did not return: it blocks")
		return nil
	}
}

// snapshot maps every entry below dir to its content (a file) or target
// (a symlink), to check that nothing outside the pod logs directory
// changed.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	m := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		switch {
		case d.Type()&os.ModeSymlink != 0:
			target, err := os.Readlink(p)
			m[p] = "-> " + target
			return err
		case d.Type().IsRegular():
			b, err := os.ReadFile(p)
			m[p] = string(b)
			return err
		default:
			m[p] = d.Type().String()
			return nil
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func symlink(t *testing.T, target, name string) {
	t.Helper()
	if err := os.Symlink(target, name); err != nil {
		t.Fatal(err)
	}
}

// TestRotateLogsRefusesSymlinkedLog: 0.log, or a directory on the way to
// it, replaced by a symlink to something outside the pod logs directory
// holding an over-size 0.log: nothing is renamed, the runtime is not asked
// to reopen, nothing outside changes and the error says why.
func TestRotateLogsRefusesSymlinkedLog(t *testing.T) {
	for _, tc := range []struct {
		name   string
		target string // below the outside directory
		link   string // below the pod logs directory
	}{
		{"log is a symlink", "app/0.log", "ns_p_p/app/0.log"},
		{"container directory is a symlink", "app", "ns_p_p/app"},
		{"pod directory is a symlink", "", "ns_p_p"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRotation(t, 2)
			outside := t.TempDir()
			write(t, mkdirs(t, filepath.Join(outside, "app/0.log")), maxSize*2)
			write(t, filepath.Join(outside, "app/0.log.20250101-000000"), maxSize)
			link := filepath.Join(r.dir, tc.link)
			if err := os.RemoveAll(link); err != nil {
				t.Fatal(err)
			}
			symlink(t, filepath.Join(outside, tc.target), link)
			before := snapshot(t, outside)

			err := r.rotate(t)
			if len(r.rt.reopened) != 0 {
				t.Errorf("runtime asked to reopen %v", r.rt.reopened)
			}
			if after := snapshot(t, outside); !maps.Equal(before, after) {
				t.Errorf("outside changed:\nbefore %v\nafter  %v", keys(before), keys(after))
			}
			if !errors.Is(err, beneath.ErrSymlink) {
				t.Fatalf("error = %v, want a refused symlink", err)
			}
			t.Logf("refused: %v", err)
		})
	}
}

func mkdirs(t *testing.T, file string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	return file
}

func keys(m map[string]string) []string {
	return slices.Sorted(maps.Keys(m))
}

// TestRotateLogsRefusesUnsafeRotations: rotated files replaced by a
// symlink to a file outside, or by a FIFO. Compression refuses them (it
// neither copies the target into the pod logs directory nor blocks), the
// excess one is removed as a link, never through it, and the regular
// rotations are still handled.
func TestRotateLogsRefusesUnsafeRotations(t *testing.T) {
	r := newRotation(t, 5) // live log + 4 rotations
	outside := t.TempDir()
	secret := filepath.Join(outside, "secret")
	write(t, secret, maxSize)
	before := snapshot(t, outside)
	base := r.path + "."
	symlink(t, secret, base+"20250101-000000")                         // the oldest: pruned
	symlink(t, secret, base+"20250102-000000")                         // to compress
	if err := unix.Mkfifo(base+"20250103-000000", 0o600); err != nil { // to compress
		t.Fatal(err)
	}
	plain := write(t, base+"20250104-000000", 10) // to compress
	write(t, r.path, maxSize)

	err := r.rotate(t)
	if !errors.Is(err, beneath.ErrSymlink) || !errors.Is(err, beneath.ErrNotRegular) {
		t.Fatalf("error = %v, want the symlink and the FIFO refused", err)
	}
	t.Logf("refused: %v", err)
	newest := "0.log." + now.Format("20060102-150405")
	want := []string{"0.log", "0.log.20250102-000000", "0.log.20250103-000000", "0.log.20250104-000000.gz", newest}
	if got := r.files(t); !slices.Equal(got, want) {
		t.Fatalf("files: got %v, want %v", got, want)
	}
	if got := read(t, base+"20250104-000000.gz"); !bytes.Equal(got, plain) {
		t.Error("the regular rotation was not compressed")
	}
	if fi, err := os.Lstat(base + "20250102-000000"); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("symlinked rotation: %v, %v", fi, err)
	}
	if after := snapshot(t, outside); !maps.Equal(before, after) {
		t.Errorf("outside changed: %v", keys(after))
	}
}

func TestRun(t *testing.T) {
	r := newRotation(t, 5)
	write(t, r.path, maxSize)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.gc.Run(ctx, time.Minute, func(types.UID) bool { return true })
	}()
	waitFor := func(what string, cond func(*logRuntime) bool) {
		t.Helper()
		testutil.Eventually(t, what, func() bool {
			r.rt.mu.Lock()
			defer r.rt.mu.Unlock()
			return cond(r.rt)
		})
	}
	// Both timers, the collection's and the rotation's: stepping the
	// clock before the second exists would never fire it.
	waitFor("timers", func(*logRuntime) bool { return r.clk.Waiters() == 2 })
	r.clk.Step(DefaultLogMonitorInterval)
	waitFor("rotation", func(rt *logRuntime) bool { return len(rt.reopened) == 1 })
	r.rt.mu.Lock()
	if r.rt.sbLists != 0 {
		t.Error("collected containers before the period")
	}
	r.rt.mu.Unlock()
	r.clk.Step(time.Minute - DefaultLogMonitorInterval)
	waitFor("collection", func(rt *logRuntime) bool { return rt.sbLists == 1 })
	cancel()
	<-done
}
