package podruntime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critest "k8s.io/cri-api/pkg/apis/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/node/podhooks"
	"github.com/nodelet/nodelet/internal/pipeline/cri"
	"github.com/nodelet/nodelet/internal/pipeline/podworker"
	"github.com/nodelet/nodelet/internal/pipeline/statusmanager"
	"github.com/nodelet/nodelet/internal/pure/podspec"
)

// mountingRuntime is the fake runtime reporting, as containerd does, the
// mounts and the full log path of a container in its status.
type mountingRuntime struct {
	*critest.FakeRuntimeService
	logDir string
}

func (r *mountingRuntime) CreateContainer(ctx context.Context, sandboxID string, cfg *runtimeapi.ContainerConfig,
	sandboxCfg *runtimeapi.PodSandboxConfig) (string, error) {
	id, err := r.FakeRuntimeService.CreateContainer(ctx, sandboxID, cfg, sandboxCfg)
	if err != nil {
		return "", err
	}
	r.Lock()
	defer r.Unlock()
	c := r.Containers[id]
	c.Mounts = cfg.Mounts
	c.LogPath = filepath.Join(r.logDir, cfg.LogPath)
	return id, nil
}

type termFixture struct {
	m       *Manager
	rs      *mountingRuntime
	podsDir string
	logsDir string
}

func newTermFixture(t *testing.T) *termFixture {
	t.Helper()
	root := t.TempDir()
	f := &termFixture{podsDir: filepath.Join(root, "pods"), logsDir: filepath.Join(root, "logs")}
	f.rs = &mountingRuntime{FakeRuntimeService: critest.NewFakeRuntimeService(), logDir: filepath.Join(f.logsDir, "default_job_uid-t")}
	is := critest.NewFakeImageService()
	is.SetFakeImageSize(1)
	log := slog.New(slog.DiscardHandler)
	c := cri.New(f.rs, is, "fake", cri.DefaultTimeouts(), log)
	clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	f.m = New(c, Options{PodLogsDir: f.logsDir, PodsDir: f.podsDir}, Deps{Clock: clk, Log: log, Status: statusmanager.New(nil)})
	return f
}

// sync syncs pod with the setup of its pod directory hook, as the pod
// workers do.
func (f *termFixture) sync(pod *v1.Pod) (v1.PodStatus, error) {
	setup, err := podhooks.PodDir{PodsDir: f.podsDir}.Prepare(context.Background(), pod)
	if err != nil {
		return v1.PodStatus{}, err
	}
	return f.m.syncPod(context.Background(), podworker.SyncRequest{Pod: pod, Setup: setup})
}

func jobPod(path string, policy v1.TerminationMessagePolicy) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1ObjectMeta("job", "default", "uid-t"),
		Spec: v1.PodSpec{
			RestartPolicy: v1.RestartPolicyNever,
			Containers: []v1.Container{{Name: "main", Image: "busybox", ImagePullPolicy: v1.PullIfNotPresent,
				TerminationMessagePath: path, TerminationMessagePolicy: policy}},
		},
	}
}

// start syncs the pod once and returns its container as the fake holds it.
func (f *termFixture) start(t *testing.T, pod *v1.Pod) *critest.FakeContainer {
	t.Helper()
	if _, err := f.sync(pod); err != nil {
		t.Fatal(err)
	}
	f.rs.Lock()
	defer f.rs.Unlock()
	for _, c := range f.rs.Containers {
		return c
	}
	t.Fatal("no container created")
	return nil
}

// exit ends the container with code, its log holding logContent.
func (f *termFixture) exit(t *testing.T, c *critest.FakeContainer, code int32, reason, logContent string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(c.LogPath), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(c.LogPath, []byte(logContent), 0o644); err != nil {
		t.Fatal(err)
	}
	f.rs.Lock()
	defer f.rs.Unlock()
	c.State = runtimeapi.ContainerState_CONTAINER_EXITED
	c.ExitCode, c.Reason = code, reason
	c.StartedAt, c.FinishedAt = time.Now().Add(-time.Second).UnixNano(), time.Now().UnixNano()
}

func (f *termFixture) message(t *testing.T) string {
	t.Helper()
	obs, err := f.m.Observe(context.Background(), "uid-t", "job", "default")
	if err != nil {
		t.Fatal(err)
	}
	if len(obs.Containers) != 1 {
		t.Fatalf("%d containers", len(obs.Containers))
	}
	return obs.Containers[0].Message
}

func hostFile(t *testing.T, c *critest.FakeContainer, containerPath string) string {
	t.Helper()
	for _, m := range c.Mounts {
		if m.ContainerPath == containerPath {
			return m.HostPath
		}
	}
	t.Fatalf("no mount at %s in %v", containerPath, c.Mounts)
	return ""
}

func logLines(lines ...string) string {
	var b strings.Builder
	for _, l := range lines {
		b.WriteString("2024-01-02T03:04:05.000000000Z " + l + "\n")
	}
	return b.String()
}

// The container gets a fresh empty file, writable by any user, mounted at
// its terminationMessagePath; both the path and the policy are recorded
// on it. Its status message is what it wrote there.
func TestTerminationMessageFromFile(t *testing.T) {
	f := newTermFixture(t)
	c := f.start(t, jobPod("/dev/termination-custom-log", v1.TerminationMessageReadFile))
	if c.Annotations[podspec.AnnotationTerminationMessagePath] != "/dev/termination-custom-log" ||
		c.Annotations[podspec.AnnotationTerminationMessagePolicy] != "File" {
		t.Errorf("annotations %v", c.Annotations)
	}
	host := hostFile(t, c, "/dev/termination-custom-log")
	if dir := filepath.Join(f.podsDir, "uid-t", "containers", "main"); filepath.Dir(host) != dir {
		t.Errorf("file %s is not in %s", host, dir)
	}
	fi, err := os.Stat(host)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode() != 0o666 || fi.Size() != 0 {
		t.Errorf("file mode %v size %d, want 0666 and empty", fi.Mode(), fi.Size())
	}
	if err := os.WriteFile(host, []byte("DONE"), 0o666); err != nil {
		t.Fatal(err)
	}
	f.exit(t, c, 0, "Completed", logLines("stdout F from the log"))
	if got := f.message(t); got != "DONE" {
		t.Errorf("message %q, want DONE", got)
	}
	// The pod's status carries it.
	st, err := f.sync(jobPod("/dev/termination-custom-log", v1.TerminationMessageReadFile))
	if err != nil {
		t.Fatal(err)
	}
	if term := st.ContainerStatuses[0].State.Terminated; term == nil || term.Message != "DONE" {
		t.Errorf("status state %+v", st.ContainerStatuses[0].State)
	}
}

// Each instance has its own file; none without a path.
func TestTerminationMessageFilePerInstance(t *testing.T) {
	f := newTermFixture(t)
	pod := jobPod("/dev/termination-log", v1.TerminationMessageReadFile)
	podDir := filepath.Join(f.podsDir, string(pod.UID))
	a, err := f.m.terminationMessageMount(podDir, &pod.Spec.Containers[0])
	if err != nil {
		t.Fatal(err)
	}
	b, err := f.m.terminationMessageMount(podDir, &pod.Spec.Containers[0])
	if err != nil {
		t.Fatal(err)
	}
	if a.HostPath == b.HostPath {
		t.Errorf("two instances share %s", a.HostPath)
	}
	pod.Spec.Containers[0].TerminationMessagePath = ""
	if m, err := f.m.terminationMessageMount(podDir, &pod.Spec.Containers[0]); m != nil || err != nil {
		t.Errorf("without a path: %v, %v", m, err)
	}
}

// A container the runtime does not create leaves no file behind.
func TestTerminationMessageFileRemovedWhenNotCreated(t *testing.T) {
	f := newTermFixture(t)
	f.rs.InjectError("CreateContainer", errors.New("no"))
	if _, err := f.sync(jobPod("/dev/termination-log", v1.TerminationMessageReadFile)); err == nil {
		t.Fatal("sync succeeded")
	}
	names, err := os.ReadDir(filepath.Join(f.podsDir, "uid-t", "containers", "main"))
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != 0 {
		t.Errorf("left behind: %v", names)
	}
}

// FallbackToLogsOnError: an empty file and a failure give the end of the
// log (partial lines joined, the last unterminated one as it is); success
// or a file with content do not.
func TestTerminationMessageFallbackToLogs(t *testing.T) {
	log := logLines("stdout F first", "stderr P par", "stderr F tial", "stdout P DONE")
	for _, tc := range []struct {
		name    string
		policy  v1.TerminationMessagePolicy
		code    int32
		reason  string
		file    string
		runtime string
		want    string
	}{
		{name: "failed", policy: v1.TerminationMessageFallbackToLogsOnError, code: 1, want: "first\npartial\nDONE"},
		{name: "succeeded", policy: v1.TerminationMessageFallbackToLogsOnError, code: 0, want: ""},
		{name: "file wins", policy: v1.TerminationMessageFallbackToLogsOnError, code: 1, file: "OK", want: "OK"},
		{name: "policy File", policy: v1.TerminationMessageReadFile, code: 1, want: ""},
		{name: "could not run", policy: v1.TerminationMessageFallbackToLogsOnError, code: 128, reason: "ContainerCannotRun", want: ""},
		{name: "runtime message first", policy: v1.TerminationMessageFallbackToLogsOnError, code: 137, reason: "OOMKilled",
			runtime: "out of memory", want: "out of memory: first\npartial\nDONE"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newTermFixture(t)
			c := f.start(t, jobPod("/dev/termination-log", tc.policy))
			if tc.file != "" {
				if err := os.WriteFile(hostFile(t, c, "/dev/termination-log"), []byte(tc.file), 0o666); err != nil {
					t.Fatal(err)
				}
			}
			f.exit(t, c, tc.code, tc.reason, log)
			f.rs.Lock()
			c.Message = tc.runtime
			f.rs.Unlock()
			if got := f.message(t); got != tc.want {
				t.Errorf("message %q, want %q", got, tc.want)
			}
		})
	}
}

// The file is read to at most its last 4 KiB; the log fallback to the last
// 2 KiB of the last 80 lines.
func TestTerminationMessageLimits(t *testing.T) {
	f := newTermFixture(t)
	c := f.start(t, jobPod("/dev/termination-log", v1.TerminationMessageFallbackToLogsOnError))
	big := strings.Repeat("x", 10000) + "END"
	if err := os.WriteFile(hostFile(t, c, "/dev/termination-log"), []byte(big), 0o666); err != nil {
		t.Fatal(err)
	}
	f.exit(t, c, 1, "", "")
	if got := f.message(t); got != big[len(big)-4096:] {
		t.Errorf("message of %d bytes ending %q, want the last 4096", len(got), got[max(len(got)-5, 0):])
	}

	f = newTermFixture(t)
	c = f.start(t, jobPod("/dev/termination-log", v1.TerminationMessageFallbackToLogsOnError))
	var lines []string
	for i := range 100 {
		lines = append(lines, fmt.Sprintf("stdout F line %03d", i))
	}
	f.exit(t, c, 1, "", logLines(lines...))
	got := f.message(t)
	if !strings.HasSuffix(got, "line 099\n") || strings.Contains(got, "line 019\n") {
		t.Errorf("log message %q", got)
	}
	// 80 lines of "line NNN\n" are 720 bytes: all of the last 80.
	if want := 80 * len("line 000\n"); len(got) != want {
		t.Errorf("log message of %d bytes, want %d", len(got), want)
	}
	long := strings.Repeat("y", 3000)
	f = newTermFixture(t)
	c = f.start(t, jobPod("/dev/termination-log", v1.TerminationMessageFallbackToLogsOnError))
	f.exit(t, c, 1, "", logLines("stdout F "+long, "stdout F last"))
	if got := f.message(t); len(got) != 2048 || !strings.HasSuffix(got, "y\nlast\n") {
		t.Errorf("log message of %d bytes ending %q", len(got), got[max(len(got)-10, 0):])
	}
}

// The file is the container's: a symlink or a FIFO in its place, or a
// mount that names a file elsewhere, is not read.
func TestTerminationMessageHostile(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("SECRET"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		plant func(t *testing.T, f *termFixture, host string) *runtimeapi.Mount
	}{
		{name: "symlink", plant: func(t *testing.T, f *termFixture, host string) *runtimeapi.Mount {
			if err := os.Remove(host); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(secret, host); err != nil {
				t.Fatal(err)
			}
			return nil
		}},
		{name: "symlinked directory", plant: func(t *testing.T, f *termFixture, host string) *runtimeapi.Mount {
			dir := filepath.Dir(host)
			if err := os.RemoveAll(dir); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(filepath.Dir(secret), dir); err != nil {
				t.Fatal(err)
			}
			return &runtimeapi.Mount{HostPath: filepath.Join(dir, "secret"), ContainerPath: "/dev/termination-log"}
		}},
		{name: "fifo", plant: func(t *testing.T, f *termFixture, host string) *runtimeapi.Mount {
			if err := os.Remove(host); err != nil {
				t.Fatal(err)
			}
			if err := syscall.Mkfifo(host, 0o666); err != nil {
				t.Fatal(err)
			}
			return nil
		}},
		{name: "outside", plant: func(t *testing.T, f *termFixture, host string) *runtimeapi.Mount {
			return &runtimeapi.Mount{HostPath: secret, ContainerPath: "/dev/termination-log"}
		}},
		{name: "another container's", plant: func(t *testing.T, f *termFixture, host string) *runtimeapi.Mount {
			other := filepath.Join(f.podsDir, "uid-t", "containers", "other", "f")
			if err := os.MkdirAll(filepath.Dir(other), 0o750); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(other, []byte("SECRET"), 0o600); err != nil {
				t.Fatal(err)
			}
			return &runtimeapi.Mount{HostPath: other, ContainerPath: "/dev/termination-log"}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newTermFixture(t)
			c := f.start(t, jobPod("/dev/termination-log", v1.TerminationMessageReadFile))
			if m := tc.plant(t, f, hostFile(t, c, "/dev/termination-log")); m != nil {
				f.rs.Lock()
				c.Mounts = []*runtimeapi.Mount{m}
				f.rs.Unlock()
			}
			f.exit(t, c, 1, "", "")
			got := f.message(t)
			if strings.Contains(got, "SECRET") {
				t.Fatalf("read what the container pointed at: %q", got)
			}
			if !strings.HasPrefix(got, "Error on reading termination log") {
				t.Errorf("message %q, want an error", got)
			}
		})
	}
}

// A file that is gone (the pod's directory removed) is an empty message,
// or the log with FallbackToLogsOnError.
func TestTerminationMessageFileGone(t *testing.T) {
	for _, tc := range []struct {
		exit int32
		want string // the log is only read after a failure
	}{{2, "bye\n"}, {0, ""}} {
		f := newTermFixture(t)
		c := f.start(t, jobPod("/dev/termination-log", v1.TerminationMessageFallbackToLogsOnError))
		if err := os.RemoveAll(filepath.Join(f.podsDir, "uid-t")); err != nil {
			t.Fatal(err)
		}
		f.exit(t, c, tc.exit, "", logLines("stdout F bye"))
		if got := f.message(t); got != tc.want {
			t.Errorf("exit %d: message %q, want %q", tc.exit, got, tc.want)
		}
	}
}

func TestLastBytes(t *testing.T) {
	l := &lastBytes{max: 4}
	for _, w := range []string{"ab", "cd", "e", "fghij", "k"} {
		if n, err := l.Write([]byte(w)); n != len(w) || err != nil {
			t.Fatal(n, err)
		}
	}
	if string(l.buf) != "hijk" {
		t.Errorf("kept %q", l.buf)
	}
}
