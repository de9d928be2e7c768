package logs

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodelet/nodelet/internal/base/beneath"
	"github.com/nodelet/nodelet/internal/base/testutil"
)

// liveness bounds how long a call that must return may take before the
// test declares it hung (blocked on a FIFO, say). It is generous on
// purpose: it only tells "returns" from "never returns".
const liveness = 30 * time.Second

// await waits for a ContainerLogs call to end, stepping the fake clock
// whenever the call waits on it, and fails the test if it does not end
// within the liveness bound.
func (h *harness) await(what string, done <-chan error) error {
	h.t.Helper()
	deadline := time.Now().Add(liveness)
	for {
		select {
		case err := <-done:
			return err
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("%s did not return: it blocks", what)
		}
		if h.clk.HasWaiters() {
			h.clk.Step(defaultCheckPeriod)
		}
	}
}

// eventuallyStepping waits for cond within the liveness bound, stepping
// the fake clock whenever a follow waits on it.
func (h *harness) eventuallyStepping(what string, cond func() bool) {
	h.t.Helper()
	deadline := time.Now().Add(liveness)
	for !cond() {
		if time.Now().After(deadline) {
			h.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
		if h.clk.HasWaiters() {
			h.clk.Step(defaultCheckPeriod)
		}
	}
}

// run calls ContainerLogs in the background and awaits it.
func (h *harness) run(what string, opts Options) (string, error) {
	h.t.Helper()
	out := &flushBuffer{}
	done := make(chan error, 1)
	go func() { done <- h.s.ContainerLogs(context.Background(), "default", "web", "app", opts, out) }()
	err := h.await(what, done)
	return out.String(), err
}

// attackWorld puts the container's log at <pod logs dir>/default_web_uid/
// app/0.log, and a directory outside the pod logs directory holding what
// an attacker wants nodelet to read: secret and app/0.log, both valid CRI
// log lines, so that a leak would show in the output.
type attackWorld struct {
	*harness
	podDir  string // default_web_uid
	outside string
}

const secret = "SECRET"

func newAttackWorld(t *testing.T) *attackWorld {
	t.Helper()
	h := newHarness(t)
	w := &attackWorld{harness: h, podDir: filepath.Join(h.dir, "default_web_uid"), outside: t.TempDir()}
	h.res.path = filepath.Join(w.podDir, "app/0.log")
	for _, d := range []string{filepath.Dir(h.res.path), filepath.Join(w.outside, "app")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	h.write(filepath.Join(w.outside, "secret"), criLine(at(0), "stdout", "F", secret))
	h.write(filepath.Join(w.outside, "app/0.log"), criLine(at(0), "stdout", "F", secret))
	return w
}

func (w *attackWorld) removeAll(path string) {
	w.t.Helper()
	if err := os.RemoveAll(path); err != nil {
		w.t.Fatal(err)
	}
}

func (w *attackWorld) symlink(target, name string) {
	w.t.Helper()
	if err := os.Symlink(target, name); err != nil {
		w.t.Fatal(err)
	}
}

// TestContainerLogsRefusesUnsafeFiles: whatever a pod or local user
// plants in the pod logs directory, or whatever path the runtime reports,
// nothing outside the pod logs directory is read, nothing but a regular
// file is opened, and the caller gets an error saying why.
func TestContainerLogsRefusesUnsafeFiles(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(w *attackWorld)
		want  error
	}{
		{"log is a symlink to a file outside", func(w *attackWorld) {
			w.symlink(filepath.Join(w.outside, "secret"), w.res.path)
		}, beneath.ErrSymlink},
		{"log is a symlink to a file inside", func(w *attackWorld) {
			w.write(filepath.Join(filepath.Dir(w.res.path), "other.log"), criLine(at(0), "stdout", "F", secret))
			w.symlink("other.log", w.res.path)
		}, beneath.ErrSymlink},
		{"container directory is a symlink", func(w *attackWorld) {
			w.removeAll(filepath.Dir(w.res.path))
			w.symlink(filepath.Join(w.outside, "app"), filepath.Dir(w.res.path))
		}, beneath.ErrSymlink},
		{"pod directory is a symlink", func(w *attackWorld) {
			w.removeAll(w.podDir)
			w.symlink(w.outside, w.podDir)
		}, beneath.ErrSymlink},
		{"log is a FIFO", func(w *attackWorld) {
			if err := unix.Mkfifo(w.res.path, 0o600); err != nil {
				w.t.Fatal(err)
			}
		}, beneath.ErrNotRegular},
		{"log is a directory", func(w *attackWorld) {
			if err := os.Mkdir(w.res.path, 0o755); err != nil {
				w.t.Fatal(err)
			}
		}, beneath.ErrNotRegular},
		{"log path outside the pod logs directory", func(w *attackWorld) {
			w.res.path = filepath.Join(w.outside, "secret")
		}, ErrUnsafeLogPath},
		{"log path climbing out", func(w *attackWorld) {
			w.res.path = w.dir + "/default_web_uid/../../" + filepath.Base(w.outside) + "/secret"
			if !strings.HasPrefix(filepath.Dir(w.outside), filepath.Dir(w.dir)) {
				w.t.Skip("temp dirs in different parents")
			}
		}, ErrUnsafeLogPath},
		{"log path is the pod logs directory", func(w *attackWorld) {
			w.res.path = w.dir
		}, ErrUnsafeLogPath},
		{"relative log path", func(w *attackWorld) {
			w.res.path = "default_web_uid/app/0.log"
		}, ErrUnsafeLogPath},
	} {
		for _, follow := range []bool{false, true} {
			name := tc.name
			if follow {
				name += "/follow"
			}
			t.Run(name, func(t *testing.T) {
				w := newAttackWorld(t)
				// An exited container: a follow ends once drained.
				w.res.running.Store(false)
				tc.setup(w)
				got, err := w.run("ContainerLogs", Options{Follow: follow})
				if strings.Contains(got, secret) {
					t.Fatalf("read a file it must not: output %q", got)
				}
				if !errors.Is(err, tc.want) {
					t.Fatalf("error = %v, want %v", err, tc.want)
				}
				t.Logf("refused: %v", err)
			})
		}
	}
}

// TestFollowRefusesUnsafeRotation: while a follow runs, the file at the
// log's path is renamed away and replaced by a symlink to a file outside,
// or by a FIFO. The follow ends with an error; it neither reads the
// target nor blocks.
func TestFollowRefusesUnsafeRotation(t *testing.T) {
	for _, tc := range []struct {
		name    string
		replace func(w *attackWorld)
		want    error
	}{
		{"symlink", func(w *attackWorld) {
			w.symlink(filepath.Join(w.outside, "secret"), w.res.path)
		}, beneath.ErrSymlink},
		{"FIFO", func(w *attackWorld) {
			if err := unix.Mkfifo(w.res.path, 0o600); err != nil {
				w.t.Fatal(err)
			}
		}, beneath.ErrNotRegular},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newAttackWorld(t)
			w.write(w.res.path, criLine(at(0), "stdout", "F", "a"))
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			out, done := w.follow(ctx, Options{})
			testutil.Eventually(t, "first line", func() bool { return out.String() == "a\n" })

			if err := os.Rename(w.res.path, w.res.path+".1"); err != nil {
				t.Fatal(err)
			}
			tc.replace(w)
			w.res.running.Store(false)
			err := w.await("follow", done)
			if got := out.String(); got != "a\n" {
				t.Fatalf("output %q, want %q", got, "a\n")
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("follow ended with %v, want %v", err, tc.want)
			}
			t.Logf("refused: %v", err)
		})
	}
}

// TestFollowKeepsItsDirectory: while a follow runs, the container's log
// directory is renamed away and a symlink to a directory outside put in
// its place. The follow keeps reading the directory it opened and never
// shows the file outside.
func TestFollowKeepsItsDirectory(t *testing.T) {
	w := newAttackWorld(t)
	w.write(w.res.path, criLine(at(0), "stdout", "F", "a"))
	out, done := w.follow(t.Context(), Options{})
	testutil.Eventually(t, "first line", func() bool { return out.String() == "a\n" })

	ctrDir := filepath.Dir(w.res.path)
	if err := os.Rename(ctrDir, ctrDir+".old"); err != nil {
		t.Fatal(err)
	}
	w.symlink(filepath.Join(w.outside, "app"), ctrDir)
	w.write(filepath.Join(ctrDir+".old", "0.log"), criLine(at(1), "stdout", "F", "b"))
	// Moving the watched directory ends its inotify watch (fsnotify drops
	// it on IN_MOVE_SELF): the follow goes on by polling, every check
	// period.
	w.eventuallyStepping("line written after the swap", func() bool { return out.String() == "a\nb\n" })
	w.res.running.Store(false)
	if err := w.await("follow", done); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); got != "a\nb\n" {
		t.Fatalf("output %q, want %q", got, "a\nb\n")
	}
}

// TestFollowCap: with a cap of 3, three follows run and a fourth is
// refused at once with ErrTooManyFollows, while reads without follow
// still work; once a follow ends, a new one is accepted.
func TestFollowCap(t *testing.T) {
	if s := NewStreamer(nil, "/", nil, nil); s.maxFollows != DefaultMaxFollows || DefaultMaxFollows != 64 {
		t.Fatalf("default cap %d", s.maxFollows)
	}
	const maxFollows = 3
	h := newHarness(t)
	h.s = NewStreamer(h.res, h.dir, h.clk, nil, WithMaxFollows(maxFollows))
	h.write(h.res.path, criLine(at(0), "stdout", "F", "a"))

	type follow struct {
		out    *flushBuffer
		done   <-chan error
		cancel context.CancelFunc
	}
	var follows []follow
	for range maxFollows {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		out, done := h.follow(ctx, Options{})
		follows = append(follows, follow{out, done, cancel})
	}
	for i, f := range follows {
		testutil.Eventually(t, "follows to start", func() bool { return f.out.String() == "a\n" })
		select {
		case err := <-f.done:
			t.Fatalf("follow %d ended: %v", i, err)
		default:
		}
	}

	// One more: refused, at once (it would otherwise follow forever).
	got, err := h.run("follow past the cap", Options{Follow: true})
	if !errors.Is(err, ErrTooManyFollows) || got != "" {
		t.Fatalf("follow past the cap: %q, %v; want ErrTooManyFollows", got, err)
	}
	t.Logf("refused: %v", err)
	if got, err := h.logs(Options{}); err != nil || got != "a\n" {
		t.Fatalf("read without follow at the cap: %q, %v", got, err)
	}

	follows[0].cancel()
	if err := h.await("cancelled follow", follows[0].done); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled follow ended with %v", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	out, done := h.follow(ctx, Options{})
	testutil.Eventually(t, "a follow after one ended", func() bool { return out.String() == "a\n" })
	cancel()
	for _, f := range append(follows[1:], follow{out, done, cancel}) {
		f.cancel()
		if err := h.await("follow", f.done); !errors.Is(err, context.Canceled) {
			t.Fatalf("follow ended with %v", err)
		}
	}
	if n := h.s.follows.Load(); n != 0 {
		t.Fatalf("%d follows counted after all ended", n)
	}
}

// countingWriter counts what it is given and keeps nothing.
type countingWriter struct{ n int64 }

func (c *countingWriter) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	return len(p), nil
}

// TestContainerLogsTailHugeLine: the tail of a log that is one 128 MiB
// line is served with a bounded amount of memory (the line is cut at
// maxCarry, as lines longer than that always are), not by reading the
// line into memory: well under the file's size is allocated in all.
func TestContainerLogsTailHugeLine(t *testing.T) {
	const size = 128 << 20
	h := newHarness(t)
	f, err := os.Create(h.res.path)
	if err != nil {
		t.Fatal(err)
	}
	// A sparse file: a header, zeros, a newline.
	head := criLine(at(0), "stdout", "F", "")
	head = head[:len(head)-1]
	if _, err := f.WriteString(head); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{'\n'}, size-1); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}

	var out countingWriter
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	err = h.s.ContainerLogs(context.Background(), "default", "web", "app", Options{TailLines: ptr[int64](1)}, &out)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("tail of a %d MiB line: %d bytes out, %.1f MiB allocated", size>>20, out.n, float64(alloc)/(1<<20))
	// The line is cut once more than maxCarry bytes are held: at most one
	// read buffer (64 KiB) beyond it.
	if out.n < int64(maxCarry-len(head)) || out.n > maxCarry+64<<10+1 {
		t.Errorf("wrote %d bytes, want about the first %d of the line", out.n, maxCarry)
	}
	if alloc > 48<<20 {
		t.Errorf("allocated %d MiB to tail a %d MiB line: it is read into memory", alloc>>20, size>>20)
	}
}
