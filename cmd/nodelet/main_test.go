package main

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/nodelet/nodelet/internal/nodeconfig"
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

// A node name the API server would refuse is refused at start, saying where
// it came from and what would do instead.
func TestInvalidNodeNameIsRefusedAtStart(t *testing.T) {
	for _, tc := range []struct{ override, want string }{
		{"my_host", `node name "my_host" is not valid`},
		{"Edge_Node.01", `such as "edge-node.01"`},
		{"-x-", `from --hostname-override`},
	} {
		var out bytes.Buffer
		cmd := newRootCommand(&out, &out)
		cmd.SetArgs([]string{"--hostname-override", tc.override, "--root-dir", t.TempDir()})
		err := cmd.Execute()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("--hostname-override %q: %v, want an error with %q", tc.override, err, tc.want)
		}
	}
}

func TestSuggestNodeName(t *testing.T) {
	for in, want := range map[string]string{
		"my_host":      "my-host",
		"Edge_Node.01": "edge-node.01",
		"__":           "node-1",
		"a.b-c":        "a.b-c",
	} {
		got := suggestNodeName(in)
		if got != want {
			t.Errorf("suggestNodeName(%q) = %q, want %q", in, got, want)
		}
		if err := nodeconfig.ValidateNodeName(got); err != nil {
			t.Errorf("suggestion %q is not valid: %v", got, err)
		}
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
