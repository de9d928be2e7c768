package logs

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadTail(t *testing.T) {
	dir := t.TempDir()
	podDir := filepath.Join(dir, "ns_pod_uid", "c")
	if err := os.MkdirAll(podDir, 0o755); err != nil {
		t.Fatal(err)
	}
	var content strings.Builder
	for _, msg := range []string{"one", "two", "three"} {
		content.WriteString(criLine(t0, "stdout", "F", msg))
	}
	content.WriteString(criLine(t0, "stderr", "P", "par"))
	content.WriteString(criLine(t0, "stderr", "F", "tial"))
	content.WriteString("not a log line\n")
	content.WriteString(criLine(t0, "stdout", "P", "DONE")) // echo -n DONE
	path := filepath.Join(podDir, "0.log")
	if err := os.WriteFile(path, []byte(content.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		lines int64
		want  string
	}{
		{lines: 80, want: "one\ntwo\nthree\npartial\nDONE"},
		{lines: 2, want: "three\npartial\nDONE"},
		{lines: 0, want: "DONE"},
	} {
		var buf bytes.Buffer
		if err := ReadTail(context.Background(), dir, path, tc.lines, &buf); err != nil {
			t.Fatal(err)
		}
		if buf.String() != tc.want {
			t.Errorf("ReadTail(%d) = %q, want %q", tc.lines, buf.String(), tc.want)
		}
	}
}

func TestReadTailRefuses(t *testing.T) {
	dir := t.TempDir()
	outside := filepath.Join(t.TempDir(), "0.log")
	if err := os.WriteFile(outside, []byte(criLine(t0, "stdout", "F", "secret")), 0o644); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := ReadTail(context.Background(), dir, outside, 10, &buf); !errors.Is(err, ErrUnsafeLogPath) {
		t.Errorf("a path outside: %v, want ErrUnsafeLogPath", err)
	}
	link := filepath.Join(dir, "0.log")
	if err := os.Symlink(outside, link); err != nil {
		t.Fatal(err)
	}
	if err := ReadTail(context.Background(), dir, link, 10, &buf); err == nil {
		t.Error("a symlink was followed")
	}
	if buf.Len() != 0 {
		t.Errorf("read %q", buf.String())
	}
}
