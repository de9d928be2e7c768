// Package logs is beside the pipeline: it serves a container's log (what
// kubectl logs shows) from the CRI log file the runtime writes, honouring
// the kubelet's log options — tail, since, limitBytes, timestamps,
// previous — and following the file across rotation until the container
// exits or the request ends. It never derives a file path from a request:
// the path comes from a Resolver backed by known pods and the runtime.
//
// The pod logs directory (/var/log/pods) is writable by pods that mount
// it and by whoever owns a directory in it, so nothing in it is trusted: a
// log path must lie below it, and it is opened with internal/base/beneath, never
// through a symlink and only if it is a regular file (a FIFO or a device
// planted as 0.log is refused, not read). A follow holds the directory of
// the log open and watches it through that descriptor, so renaming it or a
// parent away and putting a symlink in its place leads nowhere.
package logs

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/base/beneath"
)

var (
	// ErrNotFound is returned (wrapped) when the pod, container or
	// container instance is unknown. Resolvers wrap it too.
	ErrNotFound = errors.New("not found")
	// ErrTooManyFollows is returned (wrapped) by a follow when the
	// Streamer already serves its maximum of concurrent follows; the
	// client may retry later (HTTP 429).
	ErrTooManyFollows = errors.New("too many concurrent log follows")
	// ErrUnsafeLogPath is returned (wrapped) when the runtime reports a
	// log path outside the pod logs directory.
	ErrUnsafeLogPath = errors.New("log path outside the pod logs directory")
)

// Options select which part of a container's log is returned, as the
// kubelet's PodLogOptions do. The server decodes a /containerLogs query
// into them (the one type for both).
type Options struct {
	// Follow keeps streaming as the log grows until the container exits
	// (and its log is drained) or the context ends.
	Follow bool
	// TailLines, if set and not negative, starts with the last TailLines
	// complete lines instead of the beginning of the file.
	TailLines *int64
	// LimitBytes, if set and not negative, ends the output after that many
	// bytes (cut exactly, even within a line).
	LimitBytes *int64
	// SinceSeconds, if set, skips lines older than that many seconds
	// before now. It wins over SinceTime, as in the kubelet.
	SinceSeconds *int64
	// SinceTime, if set, skips lines older than it.
	SinceTime *time.Time
	// Timestamps prefixes each line with its time and a space.
	Timestamps bool
	// Previous reads the log of the previous instance of the container.
	Previous bool
}

// Resolver finds a container's log file only through known pods and the
// runtime's LogPath, never by joining request parts into paths.
type Resolver interface {
	// LogPath returns the log path of the container's current (or, with
	// previous, the previous) instance and its container ID;
	// errors.Is(err, ErrNotFound) when the pod/container/instance is
	// unknown.
	LogPath(ctx context.Context, namespace, pod, container string, previous bool) (path, containerID string, err error)
	// Running reports whether the container instance still runs (follow
	// stops after it exited and the file is drained). An error wrapping
	// ErrNotFound counts as not running.
	Running(ctx context.Context, containerID string) (bool, error)
}

// DefaultMaxFollows is how many follows a Streamer serves at once. Each
// holds an inotify instance, and the kernel allows 128 per user by default
// (fs.inotify.max_user_instances), shared by every process of that user —
// nodelet runs as root, beside containerd, systemd and the rest — and
// nodelet needs its own for manifests: 64 leaves half of them to the rest
// of the machine. A client past the cap gets ErrTooManyFollows rather than
// a follow that silently degrades to polling.
const DefaultMaxFollows = 64

const (
	// defaultCheckPeriod is how often a follow asks whether the container
	// still runs, and how long it waits at most without a file event.
	defaultCheckPeriod = time.Second
	// maxCarry bounds an unterminated line held while waiting for the rest
	// of it; beyond it the bytes are handled as a line of their own.
	maxCarry = 4 << 20
	// ctxCheckLines is how many lines are read between context checks.
	ctxCheckLines = 1024
)

// Streamer serves container logs.
type Streamer struct {
	resolver    Resolver
	podLogsDir  string
	clk         clock.Clock
	log         *slog.Logger
	checkPeriod time.Duration
	maxFollows  int64
	follows     atomic.Int64 // follows being served
}

// Option changes a Streamer's defaults.
type Option func(*Streamer)

// WithMaxFollows sets how many follows are served at once (default
// DefaultMaxFollows; at least 1).
func WithMaxFollows(n int) Option {
	return func(s *Streamer) { s.maxFollows = int64(max(n, 1)) }
}

// NewStreamer returns a Streamer that finds log files through r and reads
// them only below podLogsDir (the kubelet's /var/log/pods).
func NewStreamer(r Resolver, podLogsDir string, clk clock.Clock, log *slog.Logger, opts ...Option) *Streamer {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Streamer{resolver: r, podLogsDir: podLogsDir, clk: clk, log: log, checkPeriod: defaultCheckPeriod, maxFollows: DefaultMaxFollows}
	for _, o := range opts {
		o(s)
	}
	return s
}

// ContainerLogs writes the log lines of a container to w, honouring opts,
// as the kubelet's ReadLogs does:
//
//   - Only messages are written, partial ("P") lines joined with the rest
//     of their line up to the "F" line of the same stream; with Timestamps
//     each line starts with its time (that of its first part, RFC 3339
//     with nine-digit nanoseconds) and a space. A partial line left at the
//     end is written as is, without a newline.
//   - Lines that cannot be parsed are skipped (logged, and counted in one
//     warning per call), as the kubelet skips them.
//   - TailLines is applied first (reading the file backwards), then the
//     since filter, then LimitBytes on the bytes written.
//   - With Follow, it keeps reading as the file grows. When the file is
//     rotated (renamed and a new one created at the path, or truncated) it
//     reads the old file to its end and continues at the start of the new
//     one. It returns once the Resolver says the container is not running
//     and the file is drained, or with the context's error when ctx ends.
//     At most WithMaxFollows follows run at once; one more fails at once
//     with ErrTooManyFollows.
//
// The log path the Resolver gives must be below the pod logs directory
// (else ErrUnsafeLogPath), and is opened there without following any
// symlink; only a regular file is read.
//
// w is flushed after each batch of writes if it has a Flush method (as
// http.Flusher). Reaching LimitBytes is not an error.
func (s *Streamer) ContainerLogs(ctx context.Context, namespace, pod, container string, opts Options, w io.Writer) error {
	if opts.Follow {
		if n := s.follows.Add(1); n > s.maxFollows {
			s.follows.Add(-1)
			return fmt.Errorf("follow log of container %s/%s/%s: %w (%d)", namespace, pod, container, ErrTooManyFollows, s.maxFollows)
		}
		defer s.follows.Add(-1)
	}
	path, id, err := s.resolver.LogPath(ctx, namespace, pod, container, opts.Previous)
	if err != nil {
		return fmt.Errorf("find log of container %s/%s/%s: %w", namespace, pod, container, err)
	}
	rel, err := beneath.Rel(s.podLogsDir, path)
	if err != nil {
		return fmt.Errorf("log of container %s/%s/%s: runtime log path %q refused: %w: %w", namespace, pod, container, path, ErrUnsafeLogPath, err)
	}
	path = filepath.Clean(path)
	log := s.log.With("namespace", namespace, "pod", pod, "container", container, "containerID", id, "path", path)

	if opts.LimitBytes != nil && *opts.LimitBytes == 0 {
		return nil
	}
	if opts.TailLines != nil && *opts.TailLines == 0 && !opts.Follow {
		return nil
	}

	var since time.Time
	if opts.SinceTime != nil {
		since = *opts.SinceTime
	}
	if opts.SinceSeconds != nil {
		since = s.clk.Now().Add(-time.Duration(*opts.SinceSeconds) * time.Second)
	}

	f := &follower{
		s:    s,
		ctx:  ctx,
		id:   id,
		name: filepath.Base(rel),
		log:  log,
		out:  newOutput(w, opts, since, log),
	}
	defer f.close()

	if err := f.openDir(filepath.Dir(rel)); err != nil {
		return err
	}
	// Watch before opening, so that no change after the open is missed.
	if opts.Follow {
		f.watch()
	}
	if err := f.open(); err != nil {
		return err
	}
	if opts.TailLines != nil && *opts.TailLines >= 0 {
		if err := f.seekTail(*opts.TailLines); err != nil {
			return err
		}
	}

	err = f.run(opts.Follow)
	if f.out.malformed > 0 {
		log.Warn("Skipped malformed log lines", "count", f.out.malformed)
	}
	if errors.Is(err, errLimit) {
		return f.out.flush()
	}
	return err
}

// follower reads one log file, and its successors under the same name in
// the same directory.
type follower struct {
	s    *Streamer
	ctx  context.Context
	id   string
	name string // of the log file in dir
	log  *slog.Logger
	out  *output

	dir     *beneath.Dir // the directory of the log, held open
	file    *os.File
	br      *bufio.Reader
	carry   []byte // an unterminated line read so far
	watcher *fsnotify.Watcher

	checked   bool // Running has been asked
	lastCheck time.Time

	// emptySeen is set while a new, still empty file is at the path;
	// emptySince is when it was first seen.
	emptySeen  bool
	emptySince time.Time
}

// openDir opens the directory of the log, rel below the pod logs
// directory, following no symlink.
func (f *follower) openDir(rel string) error {
	root, err := beneath.OpenRoot(f.s.podLogsDir)
	if err != nil {
		return fmt.Errorf("open pod logs directory: %w", err)
	}
	defer root.Close()
	dir, err := root.OpenDir(rel)
	if err != nil {
		return fmt.Errorf("open container log directory: %w", err)
	}
	f.dir = dir
	return nil
}

func (f *follower) open() error {
	file, err := f.dir.OpenFile(f.name)
	if err != nil {
		return fmt.Errorf("open container log: %w", err)
	}
	f.file = file
	f.br = bufio.NewReaderSize(file, 64<<10)
	return nil
}

func (f *follower) close() {
	if f.file != nil {
		_ = f.file.Close()
	}
	if f.watcher != nil {
		_ = f.watcher.Close()
	}
	if f.dir != nil {
		_ = f.dir.Close()
	}
}

// watch sets up file events for the log's directory (which sees writes,
// renames and the creation of the new file at the path), the one held
// open. Without them, following falls back to polling every check
// period.
func (f *follower) watch() {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		f.log.Warn("Cannot watch log file, polling it", "err", err)
		return
	}
	if err := w.Add(f.dir.ProcPath()); err != nil {
		_ = w.Close()
		f.log.Warn("Cannot watch log file, polling it", "err", err)
		return
	}
	f.watcher = w
}

func (f *follower) seekTail(n int64) error {
	fi, err := f.file.Stat()
	if err != nil {
		return fmt.Errorf("stat container log: %w", err)
	}
	off, err := tailOffset(f.file, fi.Size(), n)
	if err != nil {
		return fmt.Errorf("tail container log: %w", err)
	}
	if _, err := f.file.Seek(off, io.SeekStart); err != nil {
		return fmt.Errorf("seek container log: %w", err)
	}
	f.br.Reset(f.file)
	return nil
}

// run reads to the end of the file and, with follow, keeps reading until
// the container stopped and the file is drained or the context ends.
func (f *follower) run(follow bool) error {
	stopping := false
	for {
		if err := f.drain(); err != nil {
			return err
		}
		if err := f.out.flush(); err != nil {
			return err
		}
		if !follow {
			break
		}
		rotated, err := f.checkRotation(stopping)
		if err != nil {
			return err
		}
		if rotated {
			continue
		}
		if stopping {
			break
		}
		if !f.checked || f.s.clk.Since(f.lastCheck) >= f.s.checkPeriod {
			if !f.running() {
				// Whatever it wrote is in the file now: drain once more.
				stopping = true
				continue
			}
		}
		if err := f.wait(); err != nil {
			return err
		}
	}
	if err := f.endLine(); err != nil {
		return err
	}
	if err := f.out.finish(); err != nil {
		return err
	}
	return f.out.flush()
}

// drain handles the complete lines up to the end of the file; an
// unterminated last line stays in carry.
func (f *follower) drain() error {
	for n := 1; ; n++ {
		if n%ctxCheckLines == 0 && f.ctx.Err() != nil {
			return f.ctx.Err()
		}
		frag, err := f.br.ReadSlice('\n')
		switch {
		case err == nil:
			line := frag
			if len(f.carry) > 0 {
				f.carry = append(f.carry, frag...)
				line = f.carry
			}
			if err := f.out.line(line); err != nil {
				return err
			}
			f.carry = f.carry[:0]
		case errors.Is(err, bufio.ErrBufferFull) || errors.Is(err, io.EOF):
			f.carry = append(f.carry, frag...)
			if len(f.carry) > maxCarry {
				if err := f.endLine(); err != nil {
					return err
				}
			}
			if errors.Is(err, io.EOF) {
				return nil
			}
		default:
			return fmt.Errorf("read container log: %w", err)
		}
	}
}

// endLine handles an unterminated line as if it were complete: at the end
// of a file that will not grow any more.
func (f *follower) endLine() error {
	if len(f.carry) == 0 {
		return nil
	}
	err := f.out.line(f.carry)
	f.carry = f.carry[:0]
	return err
}

// checkRotation switches to the start of a new file if the one at the path
// is not the one being read (renamed and recreated) or is shorter than
// what was read (truncated). The old file has been read to its end.
// stopping tells that the container exited: nothing is written any more.
func (f *follower) checkRotation(stopping bool) (bool, error) {
	cur, err := f.file.Stat()
	if err != nil {
		return false, fmt.Errorf("stat container log: %w", err)
	}
	fi, err := f.dir.Lstat(f.name)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil // renamed; the new file is not there yet
	}
	if err != nil {
		return false, fmt.Errorf("stat container log: %w", err)
	}
	if !os.SameFile(cur, fi) {
		// The runtime may still write to the old file until it has
		// switched to the new one; once the new one has content (or the
		// container stopped, or it stayed empty for a check period) the
		// old one is complete.
		if fi.Size() == 0 && !stopping {
			now := f.s.clk.Now()
			if !f.emptySeen {
				f.emptySeen, f.emptySince = true, now
			}
			if now.Sub(f.emptySince) < f.s.checkPeriod {
				return false, nil
			}
		}
		next, err := f.dir.OpenFile(f.name)
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("open rotated container log: %w", err)
		}
		// Read what reached the old file before the new one was written.
		if err := f.drain(); err != nil {
			_ = next.Close()
			return false, err
		}
		if err := f.endLine(); err != nil {
			_ = next.Close()
			return false, err
		}
		f.emptySeen = false
		_ = f.file.Close()
		f.file = next
		f.br.Reset(next)
		f.log.Debug("Following new log file after rotation")
		return true, nil
	}
	pos, err := f.file.Seek(0, io.SeekCurrent)
	if err != nil {
		return false, fmt.Errorf("seek container log: %w", err)
	}
	if fi.Size() < pos {
		if _, err := f.file.Seek(0, io.SeekStart); err != nil {
			return false, fmt.Errorf("seek container log: %w", err)
		}
		f.br.Reset(f.file)
		f.carry = f.carry[:0]
		f.log.Debug("Log file truncated, reading it from the start")
		return true, nil
	}
	return false, nil
}

// running asks whether the container still runs. An error other than
// ErrNotFound is logged and taken as running: the next check decides.
func (f *follower) running() bool {
	f.checked = true
	f.lastCheck = f.s.clk.Now()
	ok, err := f.s.resolver.Running(f.ctx, f.id)
	switch {
	case errors.Is(err, ErrNotFound):
		return false
	case err != nil:
		if f.ctx.Err() == nil {
			f.log.Warn("Cannot tell whether container runs", "err", err)
		}
		return true
	}
	return ok
}

// wait blocks until the log directory changes, the check period passed or
// the context ended.
func (f *follower) wait() error {
	t := f.s.clk.NewTimer(f.s.checkPeriod)
	defer t.Stop()
	var events <-chan fsnotify.Event
	var errs <-chan error
	if f.watcher != nil {
		events, errs = f.watcher.Events, f.watcher.Errors
	}
	select {
	case <-f.ctx.Done():
		return f.ctx.Err()
	case <-events:
	case err := <-errs:
		f.log.Debug("Log file watch error", "err", err)
	case <-t.C():
	}
	return nil
}
