package main

import (
	"bytes"
	"errors"
	"io"
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

// The API authorizes by default: admins (system:masters) do anything,
// authenticated clients only read.
func TestAuthorizationDefaults(t *testing.T) {
	f := newRootCommand(io.Discard, io.Discard).Flags()
	for name, want := range map[string]string{
		"authorization-mode":       "NodeletGroups",
		"authorization-read-group": "system:authenticated",
		"anonymous-auth":           "false",
	} {
		if got := f.Lookup(name).DefValue; got != want {
			t.Errorf("--%s defaults to %q, want %q", name, got, want)
		}
	}
}
