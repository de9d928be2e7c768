package logs

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"
)

// timeFormatOut is how --timestamps prints a line's time: RFC 3339 with
// nanoseconds, always nine digits so that the prefixes line up (as the
// kubelet does); it parses with time.RFC3339Nano.
const timeFormatOut = "2006-01-02T15:04:05.000000000Z07:00"

// maxPending bounds how much of a partial line is held back per stream
// before it is written out unjoined-ahead (the rest of the line follows it
// directly, so the output is the same unless the other stream interleaves).
const maxPending = 1 << 20

// errLimit ends reading once LimitBytes have been written.
var errLimit = errors.New("byte limit reached")

// pendingLine is a partial line of one stream, waiting for its "F" line.
type pendingLine struct {
	active  bool      // a "P" line has been seen and no "F" yet
	time    time.Time // of the first fragment: the line's time
	skip    bool      // the line is before since
	written bool      // the start is written already (it grew too long)
	buf     []byte
}

// output turns log file lines into what the client sees: messages joined
// across partial lines, filtered by since, prefixed with their time with
// timestamps, and cut at the byte limit.
type output struct {
	dst        io.Writer
	bw         *bufio.Writer
	remaining  int64 // bytes left before the limit, -1 for no limit
	timestamps bool
	since      time.Time
	pending    [2]pendingLine // by stream: stdout, stderr
	tsBuf      []byte

	log       *slog.Logger
	malformed int
}

func newOutput(w io.Writer, opts Options, since time.Time, log *slog.Logger) *output {
	o := &output{
		dst:        w,
		bw:         bufio.NewWriterSize(w, 32<<10),
		remaining:  -1,
		timestamps: opts.Timestamps,
		since:      since,
		log:        log,
	}
	if opts.LimitBytes != nil && *opts.LimitBytes >= 0 {
		o.remaining = *opts.LimitBytes
	}
	return o
}

// line handles one line of the log file. Malformed lines are skipped (and
// counted), as the kubelet skips lines it cannot parse. It returns errLimit
// once the byte limit is reached.
func (o *output) line(raw []byte) error {
	e, err := ParseLine(raw)
	if err != nil {
		o.malformed++
		o.log.Debug("Skipping malformed log line", "err", err)
		return nil
	}
	p := &o.pending[0]
	if e.Stream == StreamStderr {
		p = &o.pending[1]
	}
	if !p.active {
		*p = pendingLine{
			active: true,
			time:   e.Time,
			skip:   !o.since.IsZero() && e.Time.Before(o.since),
			buf:    p.buf[:0],
		}
	}
	if p.skip {
		if !e.Partial {
			p.active = false
		}
		return nil
	}
	if e.Partial {
		if p.written {
			return o.write(e.Message)
		}
		p.buf = append(p.buf, e.Message...)
		if len(p.buf) <= maxPending {
			return nil
		}
		p.written = true
		if err := o.start(p.time); err != nil {
			return err
		}
		return o.write(p.buf)
	}
	// The line is complete.
	p.active = false
	if !p.written {
		if err := o.start(p.time); err != nil {
			return err
		}
		if err := o.write(p.buf); err != nil {
			return err
		}
	}
	if err := o.write(e.Message); err != nil {
		return err
	}
	return o.write([]byte{'\n'})
}

// finish writes partial lines that never got their "F" line, without a
// newline, as the process wrote them.
func (o *output) finish() error {
	for i := range o.pending {
		p := &o.pending[i]
		if !p.active || p.skip {
			continue
		}
		p.active = false
		if !p.written {
			if err := o.start(p.time); err != nil {
				return err
			}
		}
		if err := o.write(p.buf); err != nil {
			return err
		}
	}
	return nil
}

// start writes the beginning of an output line: its time with timestamps.
func (o *output) start(t time.Time) error {
	if !o.timestamps {
		return nil
	}
	o.tsBuf = append(t.AppendFormat(o.tsBuf[:0], timeFormatOut), ' ')
	return o.write(o.tsBuf)
}

func (o *output) write(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	limited := false
	if o.remaining >= 0 {
		if int64(len(b)) >= o.remaining {
			b = b[:o.remaining]
			limited = true
		}
		o.remaining -= int64(len(b))
	}
	if _, err := o.bw.Write(b); err != nil {
		return fmt.Errorf("write log output: %w", err)
	}
	if limited {
		return errLimit
	}
	return nil
}

// flush hands what is buffered to the client.
func (o *output) flush() error {
	if err := o.bw.Flush(); err != nil {
		return fmt.Errorf("write log output: %w", err)
	}
	switch f := o.dst.(type) {
	case interface{ Flush() }: // http.Flusher
		f.Flush()
	case interface{ Flush() error }:
		if err := f.Flush(); err != nil {
			return fmt.Errorf("flush log output: %w", err)
		}
	}
	return nil
}
