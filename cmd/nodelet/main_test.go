package main

import (
	"bytes"
	"errors"
	"testing"
)

func TestExitCodePrintsOneLine(t *testing.T) {
	var out bytes.Buffer
	if code := exitCode(&out, errors.New("first\nsecond\n")); code != 1 {
		t.Errorf("exit code %d, want 1", code)
	}
	if got := out.String(); got != "nodelet: first; second\n" {
		t.Errorf("printed %q", got)
	}
	out.Reset()
	if code := exitCode(&out, nil); code != 0 || out.Len() != 0 {
		t.Errorf("nil error: code %d, printed %q", code, out.String())
	}
}
