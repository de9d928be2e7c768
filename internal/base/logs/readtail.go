package logs

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/nodelet/nodelet/internal/base/beneath"
)

// ReadTail writes to w the messages of the last lines complete lines of
// the CRI log file at path, as ContainerLogs writes them with TailLines
// and without follow: partial lines joined, a partial line left at the end
// written without a newline, malformed lines skipped. It is for a log that
// no longer grows (an exited container's): the kubelet's termination
// message falls back to it.
//
// path must be below podLogsDir (else ErrUnsafeLogPath) and is opened
// there without following any symlink; only a regular file is read.
func ReadTail(ctx context.Context, podLogsDir, path string, lines int64, w io.Writer) error {
	rel, err := beneath.Rel(podLogsDir, path)
	if err != nil {
		return fmt.Errorf("log path %q refused: %w: %w", path, ErrUnsafeLogPath, err)
	}
	log := slog.New(slog.DiscardHandler)
	f := &follower{
		s:    &Streamer{podLogsDir: podLogsDir, log: log},
		ctx:  ctx,
		name: filepath.Base(rel),
		log:  log,
		out:  newOutput(w, Options{TailLines: &lines}, time.Time{}, log),
	}
	defer f.close()
	if err := f.openDir(filepath.Dir(rel)); err != nil {
		return err
	}
	if err := f.open(); err != nil {
		return err
	}
	if lines >= 0 {
		if err := f.seekTail(lines); err != nil {
			return err
		}
	}
	return f.run(false)
}
