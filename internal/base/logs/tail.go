package logs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
)

const (
	// tailBlockSize is how much tailOffset reads at a time, backwards.
	tailBlockSize = 32 << 10
	// headerMax bounds the bytes needed to read a line's header (time,
	// stream and tag); a longer header is malformed anyway.
	headerMax = 128
)

// tailOffset returns the offset in r (of the given size) from which the
// last n complete log lines start. A complete line ends with an "F" line;
// the "P" lines before it belong to it. Malformed lines do not count, and
// neither do trailing "P" lines or an unterminated last line (they are read
// after the n lines). r is read backwards block by block, so the cost is
// proportional to the size of the tail, not of the file. n < 0 means the
// whole file (offset 0).
func tailOffset(r io.ReaderAt, size, n int64) (int64, error) {
	if n < 0 || size <= 0 {
		return 0, nil
	}
	// win holds the bytes [winStart, winStart+len(win)) of r: the block
	// just read followed by the first headerMax bytes of the block read
	// before it, so a header that starts at the end of a block is whole.
	buf := make([]byte, tailBlockSize+headerMax)
	var win []byte
	winStart := size
	// prevNL is the offset of the newline ending the line whose start is
	// looked for, -1 until the last newline of the file is found.
	prevNL := int64(-1)
	var complete int64

	// found classifies the line at head, ending at prevNL; it reports the
	// answer once the (n+1)th complete line from the end is found.
	found := func(head []byte) (int64, bool) {
		if i := bytes.IndexByte(head, '\n'); i >= 0 {
			head = head[:i]
		}
		if len(head) > headerMax {
			head = head[:headerMax]
		}
		e, err := ParseLine(head)
		if err != nil || e.Partial {
			return 0, false
		}
		complete++
		return prevNL + 1, complete == n+1
	}

	for winStart > 0 {
		readLen := int64(tailBlockSize)
		if readLen > winStart {
			readLen = winStart
		}
		start := winStart - readLen
		keep := min(len(win), headerMax)
		// Move the head of the old window behind the new block.
		copy(buf[readLen:], win[:keep])
		if _, err := r.ReadAt(buf[:readLen], start); err != nil && !errors.Is(err, io.EOF) {
			return 0, fmt.Errorf("read log backwards at %d: %w", start, err)
		}
		win = buf[:readLen+int64(keep)]
		winStart = start

		block := win[:readLen]
		for {
			i := bytes.LastIndexByte(block, '\n')
			if i < 0 {
				break
			}
			nl := winStart + int64(i)
			if prevNL >= 0 {
				if off, ok := found(win[i+1:]); ok {
					return off, nil
				}
			}
			prevNL = nl
			block = block[:i]
		}
	}
	// The first line of the file starts at 0 and has no newline before it.
	if prevNL >= 0 {
		if off, ok := found(win); ok {
			return off, nil
		}
	}
	return 0, nil
}
