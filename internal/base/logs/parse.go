package logs

import (
	"bytes"
	"errors"
	"fmt"
	"time"
)

// ErrMalformedLine is wrapped by ParseLine's errors: the line is not in the
// CRI log format.
var ErrMalformedLine = errors.New("malformed CRI log line")

// Stream names used by the CRI log format.
const (
	StreamStdout = "stdout"
	StreamStderr = "stderr"
)

// CRI log tags (the first element of the tag field; further elements,
// separated by ':', are reserved and ignored).
const (
	tagPartial = "P"
	tagFull    = "F"
)

// Entry is one parsed line of a CRI log file.
type Entry struct {
	// Time is when the runtime received the message.
	Time time.Time
	// Stream is StreamStdout or StreamStderr.
	Stream string
	// Partial is set for a "P" line: the message continues on the next
	// line(s) of the same stream up to and including an "F" line.
	Partial bool
	// Message is the content without the line's terminating newline. It
	// aliases the slice given to ParseLine.
	Message []byte
}

// ParseLine parses one line of a CRI log file:
//
//	<RFC3339Nano time> <stdout|stderr> <P|F>[:<more tags>] <message>
//
// A single trailing newline is not part of the message. A line that ends
// right after the tag has an empty message. Anything else — a bad time, an
// unknown stream, a first tag other than P or F — is an error wrapping
// ErrMalformedLine.
func ParseLine(line []byte) (Entry, error) {
	line = bytes.TrimSuffix(line, []byte{'\n'})

	tsField, rest, ok := bytes.Cut(line, []byte{' '})
	if !ok {
		return Entry{}, fmt.Errorf("%w: no stream field", ErrMalformedLine)
	}
	ts, err := time.Parse(time.RFC3339Nano, string(tsField))
	if err != nil {
		return Entry{}, fmt.Errorf("%w: time: %w", ErrMalformedLine, err)
	}

	streamField, rest, ok := bytes.Cut(rest, []byte{' '})
	if !ok {
		return Entry{}, fmt.Errorf("%w: no tag field", ErrMalformedLine)
	}
	var stream string
	switch string(streamField) {
	case StreamStdout:
		stream = StreamStdout
	case StreamStderr:
		stream = StreamStderr
	default:
		return Entry{}, fmt.Errorf("%w: unknown stream %q", ErrMalformedLine, streamField)
	}

	tagField, msg, _ := bytes.Cut(rest, []byte{' '})
	first, _, _ := bytes.Cut(tagField, []byte{':'})
	var partial bool
	switch string(first) {
	case tagPartial:
		partial = true
	case tagFull:
	default:
		return Entry{}, fmt.Errorf("%w: unknown tag %q", ErrMalformedLine, tagField)
	}

	return Entry{Time: ts, Stream: stream, Partial: partial, Message: msg}, nil
}
