package logs

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)

// criLine formats one CRI log line.
func criLine(ts time.Time, stream, tag, msg string) string {
	return ts.Format(time.RFC3339Nano) + " " + stream + " " + tag + " " + msg + "\n"
}

func TestTailOffset(t *testing.T) {
	a := criLine(t0, "stdout", "F", "a")
	b1 := criLine(t0, "stdout", "P", "b1")
	b2 := criLine(t0, "stdout", "F", "b2")
	bad := "garbage\n"
	c := criLine(t0, "stderr", "F", "c")
	p := criLine(t0, "stdout", "P", "dangling")
	content := a + b1 + b2 + bad + c + p + "2024-01-02T03:04:05Z stdout F unterminat"
	off := func(s string) int64 { return int64(strings.Index(content, s)) }

	for _, tc := range []struct {
		n    int64
		want int64
	}{
		{n: -1, want: 0},
		{n: 0, want: off(p)},
		{n: 1, want: off(bad)}, // the malformed line does not count
		{n: 2, want: off(b1)},  // the partial line belongs to b2
		{n: 3, want: 0},
		{n: 100, want: 0},
	} {
		got, err := tailOffset(strings.NewReader(content), int64(len(content)), tc.n)
		if err != nil {
			t.Fatal(err)
		}
		if got != tc.want {
			t.Errorf("tailOffset(%d) = %d, want %d", tc.n, got, tc.want)
		}
	}

	if got, _ := tailOffset(strings.NewReader(""), 0, 3); got != 0 {
		t.Errorf("tailOffset of an empty file = %d", got)
	}
	noNL := "2024-01-02T03:04:05Z stdout F x"
	if got, _ := tailOffset(strings.NewReader(noNL), int64(len(noNL)), 0); got != 0 {
		t.Errorf("tailOffset without newline = %d", got)
	}
}

// countingReaderAt counts the bytes read from it.
type countingReaderAt struct {
	r     io.ReaderAt
	bytes int64
}

func (c *countingReaderAt) ReadAt(p []byte, off int64) (int, error) {
	n, err := c.r.ReadAt(p, off)
	c.bytes += int64(n)
	return n, err
}

// TestTailOffsetReadsOnlyTheEnd checks that tailing a large file reads
// about the tail, across block boundaries, and lands on line starts.
func TestTailOffsetReadsOnlyTheEnd(t *testing.T) {
	var buf bytes.Buffer
	var starts []int64
	for i := 0; buf.Len() < 3<<20; i++ {
		starts = append(starts, int64(buf.Len()))
		buf.WriteString(criLine(t0.Add(time.Duration(i)*time.Millisecond), "stdout", "F", strings.Repeat("x", i%300)))
	}
	size := int64(buf.Len())
	for _, n := range []int64{1, 10, 500, 5000} {
		r := &countingReaderAt{r: bytes.NewReader(buf.Bytes())}
		got, err := tailOffset(r, size, n)
		if err != nil {
			t.Fatal(err)
		}
		if want := starts[int64(len(starts))-n]; got != want {
			t.Errorf("tailOffset(%d) = %d, want %d", n, got, want)
		}
		if limit := size - got + 2*tailBlockSize; r.bytes > limit {
			t.Errorf("tailOffset(%d) read %d bytes of %d, want at most %d", n, r.bytes, size, limit)
		}
	}
}
