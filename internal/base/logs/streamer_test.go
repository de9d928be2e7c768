package logs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/base/testutil"
)

// fakeResolver knows one container, default/web/app, with a current and a
// previous instance.
type fakeResolver struct {
	path, prevPath string
	running        atomic.Bool
	previous       atomic.Bool // the last LogPath call asked for previous
	runningCalls   atomic.Int32
}

func (r *fakeResolver) LogPath(_ context.Context, namespace, pod, container string, previous bool) (string, string, error) {
	if namespace != "default" || pod != "web" || container != "app" {
		return "", "", fmt.Errorf("container %s/%s/%s: %w", namespace, pod, container, ErrNotFound)
	}
	r.previous.Store(previous)
	if previous {
		if r.prevPath == "" {
			return "", "", fmt.Errorf("previous instance: %w", ErrNotFound)
		}
		return r.prevPath, "prev-id", nil
	}
	return r.path, "cur-id", nil
}

func (r *fakeResolver) Running(_ context.Context, id string) (bool, error) {
	r.runningCalls.Add(1)
	if id != "cur-id" {
		return false, nil
	}
	return r.running.Load(), nil
}

// flushBuffer is an io.Writer safe to read while the streamer writes
// (testutil.SyncBuffer), with a Flush method, as http.ResponseWriter has,
// that counts its calls.
type flushBuffer struct {
	testutil.SyncBuffer
	flushes atomic.Int64
}

func (b *flushBuffer) Flush() { b.flushes.Add(1) }

type harness struct {
	t   *testing.T
	dir string
	res *fakeResolver
	clk *clocktesting.FakeClock
	s   *Streamer
}

func newHarness(t *testing.T) *harness {
	dir := t.TempDir()
	res := &fakeResolver{path: filepath.Join(dir, "0.log"), prevPath: filepath.Join(dir, "prev.log")}
	res.running.Store(true)
	clk := clocktesting.NewFakeClock(t0.Add(time.Hour))
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
	return &harness{t: t, dir: dir, res: res, clk: clk, s: NewStreamer(res, dir, clk, log)}
}

func (h *harness) write(path, s string) {
	h.t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		h.t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(s); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) logs(opts Options) (string, error) {
	var out flushBuffer
	err := h.s.ContainerLogs(context.Background(), "default", "web", "app", opts, &out)
	return out.String(), err
}

// follow runs ContainerLogs with Follow in the background.
func (h *harness) follow(ctx context.Context, opts Options) (*flushBuffer, <-chan error) {
	out := &flushBuffer{}
	done := make(chan error, 1)
	opts.Follow = true
	go func() { done <- h.s.ContainerLogs(ctx, "default", "web", "app", opts, out) }()
	return out, done
}

// stopAndWait marks the container exited and steps the clock until the
// follow ends.
func (h *harness) stopAndWait(done <-chan error) error {
	h.t.Helper()
	h.res.running.Store(false)
	return h.await("a follow of a stopped container", done)
}

func ptr[T any](v T) *T { return &v }

func at(i int) time.Time { return t0.Add(time.Duration(i) * time.Second) }

func TestContainerLogsOptions(t *testing.T) {
	h := newHarness(t)
	h.write(h.res.path, ""+
		criLine(at(0), "stdout", "F", "zero")+
		criLine(at(1), "stderr", "P", "one-")+
		criLine(at(1), "stdout", "F", "two")+ // interleaves with the stderr partial line
		criLine(at(2), "stderr", "P", "a-")+
		"not a CRI line\n"+
		criLine(at(3), "stderr", "F", "b")+
		criLine(at(4), "stdout", "F", "")+
		criLine(at(5), "stdout", "F", "five"))
	h.write(h.res.prevPath, criLine(at(0), "stdout", "F", "previous"))

	// With since at(2), the stderr line started at(1) is skipped as a whole.
	for _, tc := range []struct {
		name string
		opts Options
		want string
	}{
		{name: "all", want: "zero\ntwo\none-a-b\n\nfive\n"},
		{name: "timestamps", opts: Options{Timestamps: true}, want: "" +
			"2024-01-02T03:04:05.000000000Z zero\n" +
			"2024-01-02T03:04:06.000000000Z two\n" +
			"2024-01-02T03:04:06.000000000Z one-a-b\n" +
			"2024-01-02T03:04:09.000000000Z \n" +
			"2024-01-02T03:04:10.000000000Z five\n"},
		{name: "tail 2", opts: Options{TailLines: ptr[int64](2)}, want: "\nfive\n"},
		{name: "tail 3", opts: Options{TailLines: ptr[int64](3)}, want: "a-b\n\nfive\n"}, // "one-" is before the tail
		{name: "tail 0", opts: Options{TailLines: ptr[int64](0)}, want: ""},
		{name: "tail negative", opts: Options{TailLines: ptr[int64](-1)}, want: "zero\ntwo\none-a-b\n\nfive\n"},
		{name: "tail more", opts: Options{TailLines: ptr[int64](50)}, want: "zero\ntwo\none-a-b\n\nfive\n"},
		{name: "limit 0", opts: Options{LimitBytes: ptr[int64](0)}, want: ""},
		{name: "limit mid line", opts: Options{LimitBytes: ptr[int64](7)}, want: "zero\ntw"},
		{name: "limit at line end", opts: Options{LimitBytes: ptr[int64](9)}, want: "zero\ntwo\n"},
		{name: "limit counts timestamps", opts: Options{LimitBytes: ptr[int64](33), Timestamps: true},
			want: "2024-01-02T03:04:05.000000000Z ze"},
		{name: "since time", opts: Options{SinceTime: ptr(at(2))}, want: "\nfive\n"},
		{name: "since time exact", opts: Options{SinceTime: ptr(at(1))}, want: "two\none-a-b\n\nfive\n"},
		// The clock is at t0+1h: 3597s ago is at(3).
		{name: "since seconds", opts: Options{SinceSeconds: ptr[int64](3600 - 3)}, want: "\nfive\n"},
		{name: "since seconds wins", opts: Options{SinceSeconds: ptr[int64](3600 - 5), SinceTime: ptr(at(0))}, want: "five\n"},
		{name: "since and tail", opts: Options{TailLines: ptr[int64](4), SinceTime: ptr(at(2))}, want: "\nfive\n"},
		{name: "previous", opts: Options{Previous: true}, want: "previous\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := h.logs(tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("logs = %q, want %q", got, tc.want)
			}
			if h.res.previous.Load() != tc.opts.Previous {
				t.Errorf("resolver asked for previous = %v, want %v", h.res.previous.Load(), tc.opts.Previous)
			}
		})
	}
}

func TestContainerLogsDanglingPartial(t *testing.T) {
	h := newHarness(t)
	h.write(h.res.path, criLine(at(0), "stdout", "F", "a")+criLine(at(1), "stdout", "P", "no newline")+
		"2024-01-02T03:04:05Z stdout F unterminated")
	got, err := h.logs(Options{})
	if err != nil {
		t.Fatal(err)
	}
	// An unterminated last line of a file that no longer grows is a line.
	if want := "a\nno newlineunterminated\n"; got != want {
		t.Errorf("logs = %q, want %q", got, want)
	}

	h.write(h.res.prevPath, criLine(at(0), "stdout", "F", "a")+criLine(at(1), "stdout", "P", "no newline"))
	got, err = h.logs(Options{Previous: true})
	if err != nil {
		t.Fatal(err)
	}
	if want := "a\nno newline"; got != want {
		t.Errorf("logs = %q, want %q", got, want)
	}
}

func TestContainerLogsTailLargeFile(t *testing.T) {
	h := newHarness(t)
	var b strings.Builder
	n := 0
	for ; b.Len() < 2<<20; n++ {
		b.WriteString(criLine(at(n), "stdout", "F", fmt.Sprintf("line %d %s", n, strings.Repeat("x", 100))))
	}
	h.write(h.res.path, b.String())
	got, err := h.logs(Options{TailLines: ptr[int64](3)})
	if err != nil {
		t.Fatal(err)
	}
	var want string
	for i := n - 3; i < n; i++ {
		want += fmt.Sprintf("line %d %s\n", i, strings.Repeat("x", 100))
	}
	if got != want {
		t.Errorf("logs = %q, want %q", got, want)
	}
}

func TestContainerLogsNotFound(t *testing.T) {
	h := newHarness(t)
	h.res.prevPath = ""
	for _, tc := range []struct {
		ns, pod, ctr string
		prev         bool
	}{
		{"default", "nope", "app", false},
		{"default", "web", "nope", false},
		{"other", "web", "app", false},
		{"default", "web", "app", true},
	} {
		var out bytes.Buffer
		err := h.s.ContainerLogs(context.Background(), tc.ns, tc.pod, tc.ctr, Options{Previous: tc.prev}, &out)
		if !errors.Is(err, ErrNotFound) {
			t.Errorf("ContainerLogs(%s/%s/%s, previous=%v) error = %v, want ErrNotFound", tc.ns, tc.pod, tc.ctr, tc.prev, err)
		}
	}
}

func TestFollowAppendsAndCancel(t *testing.T) {
	h := newHarness(t)
	h.write(h.res.path, criLine(at(0), "stdout", "F", "first"))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	out, done := h.follow(ctx, Options{Timestamps: true})

	testutil.Eventually(t, "first line", func() bool { return strings.Contains(out.String(), "first\n") })
	h.write(h.res.path, criLine(at(1), "stdout", "P", "sec"))
	h.write(h.res.path, "2024-01-02T03:04:07Z stdout F o") // unterminated: the rest is on its way
	h.write(h.res.path, "nd\n")
	want := "2024-01-02T03:04:05.000000000Z first\n2024-01-02T03:04:06.000000000Z second\n"
	testutil.Eventually(t, "appended lines", func() bool { return out.String() == want })

	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("follow ended with %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("follow did not end after cancel")
	}
	if got := out.String(); got != want {
		t.Errorf("logs = %q, want %q", got, want)
	}
	if out.flushes.Load() == 0 {
		t.Error("output never flushed")
	}
}

func TestFollowEndsWhenContainerStops(t *testing.T) {
	h := newHarness(t)
	h.write(h.res.path, criLine(at(0), "stdout", "F", "a"))
	out, done := h.follow(t.Context(), Options{})
	testutil.Eventually(t, "first line", func() bool { return out.String() == "a\n" })

	// Written just before the container exits: still in the output.
	h.write(h.res.path, criLine(at(1), "stdout", "F", "b"))
	if err := h.stopAndWait(done); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); got != "a\nb\n" {
		t.Errorf("logs = %q", got)
	}
}

func TestFollowExitedContainer(t *testing.T) {
	h := newHarness(t)
	h.res.running.Store(false)
	h.write(h.res.path, criLine(at(0), "stdout", "F", "a"))
	h.write(h.res.prevPath, criLine(at(0), "stdout", "F", "old"))

	// No clock step needed: the first check already tells.
	for _, tc := range []struct {
		opts Options
		want string
	}{
		{Options{}, "a\n"},
		{Options{Previous: true}, "old\n"},
	} {
		out, done := h.follow(t.Context(), tc.opts)
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("follow of an exited container did not end")
		}
		if got := out.String(); got != tc.want {
			t.Errorf("logs = %q, want %q", got, tc.want)
		}
	}
}

func TestFollowLimitBytes(t *testing.T) {
	h := newHarness(t)
	h.write(h.res.path, criLine(at(0), "stdout", "F", "abc"))
	out, done := h.follow(t.Context(), Options{LimitBytes: ptr[int64](6)})
	testutil.Eventually(t, "first line", func() bool { return out.String() == "abc\n" })
	h.write(h.res.path, criLine(at(1), "stdout", "F", "defgh"))
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("follow did not end at the byte limit")
	}
	if got := out.String(); got != "abc\nde" {
		t.Errorf("logs = %q", got)
	}
}

func TestFollowTruncation(t *testing.T) {
	h := newHarness(t)
	h.write(h.res.path, criLine(at(0), "stdout", "F", "a long line before truncation"))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	out, _ := h.follow(ctx, Options{})
	testutil.Eventually(t, "first line", func() bool { return out.String() == "a long line before truncation\n" })

	if err := os.Truncate(h.res.path, 0); err != nil {
		t.Fatal(err)
	}
	h.write(h.res.path, criLine(at(1), "stdout", "F", "new"))
	testutil.Eventually(t, "line after truncation", func() bool {
		return out.String() == "a long line before truncation\nnew\n"
	})
}

// TestFollowRotation writes 500 lines across 3 rotations done as the gc
// and the runtime do them: rename the file, the runtime keeps writing to
// the renamed file until it has reopened, then writes to the new file at
// the path.
func TestFollowRotation(t *testing.T) {
	h := newHarness(t)
	const total = 500
	rotateAt := map[int]bool{120: true, 260: true, 400: true}

	msg := func(i int) string { return fmt.Sprintf("line %03d", i) }
	open := func() *os.File {
		f, err := os.OpenFile(h.res.path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	put := func(f *os.File, i int) {
		// Every seventh line is split in two partial lines, every
		// eleventh is written in two writes.
		var s string
		if i%7 == 0 {
			s = criLine(at(i), "stdout", "P", msg(i)[:4]) + criLine(at(i), "stdout", "F", msg(i)[4:])
		} else {
			s = criLine(at(i), "stderr", "F", msg(i))
		}
		if i%11 == 0 {
			if _, err := f.WriteString(s[:10]); err != nil {
				t.Error(err)
			}
			s = s[10:]
		}
		if _, err := f.WriteString(s); err != nil {
			t.Error(err)
		}
	}

	f := open()
	for i := range 10 {
		put(f, i)
	}
	out, done := h.follow(t.Context(), Options{})
	testutil.Eventually(t, "initial lines", func() bool { return strings.Contains(out.String(), msg(9)+"\n") })

	rotations := 0
	for i := 10; i < total; i++ {
		if rotateAt[i] {
			rotations++
			if err := os.Rename(h.res.path, fmt.Sprintf("%s.2024010203040%d", h.res.path, rotations)); err != nil {
				t.Fatal(err)
			}
			// Writes before the runtime reopens land in the renamed file,
			// some even after the new file was created.
			for range 2 {
				put(f, i)
				i++
			}
			next := open()
			for range 3 {
				put(f, i)
				i++
			}
			f.Close()
			f = next
			put(f, i)
			// A rotation takes place only after the follower caught up
			// with the previous one.
			testutil.Eventually(t, "first line after rotation", func() bool {
				return strings.Contains(out.String(), msg(i)+"\n")
			})
			continue
		}
		put(f, i)
	}
	f.Close()

	if err := h.stopAndWait(done); err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	for i := range max(len(got), total) {
		switch {
		case i >= len(got):
			t.Fatalf("followed %d lines, want %d", len(got), total)
		case i >= total:
			t.Fatalf("followed %d lines, want %d; line %d is %q", len(got), total, i, got[i])
		case got[i] != msg(i):
			t.Fatalf("followed line %d is %q, want %q", i, got[i], msg(i))
		}
	}
	if rotations != 3 {
		t.Fatalf("rotations = %d", rotations)
	}
}
