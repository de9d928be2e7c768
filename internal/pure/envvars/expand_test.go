package envvars

import (
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
)

func TestExpand(t *testing.T) {
	vars := map[string]string{
		"VAR_A":     "A",
		"VAR_B":     "B",
		"VAR_C":     "C",
		"VAR_REF":   "$(VAR_A)",
		"VAR_EMPTY": "",
		"VAR_SPACE": "  ",
	}
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"no refs", "no refs"},
		{"$(VAR_A)", "A"},
		{"___$(VAR_B)___", "___B___"},
		{"$(VAR_A)-$(VAR_B)-$(VAR_C)", "A-B-C"},
		{"$(VAR_A)$(VAR_B)", "AB"},
		{"$(VAR_EMPTY)", ""},
		{"-$(VAR_EMPTY)-", "--"},
		{"$(VAR_SPACE)", "  "},
		// Values are not expanded again.
		{"$(VAR_REF)", "$(VAR_A)"},
		// Undefined: left as is.
		{"$(VAR_DNE)", "$(VAR_DNE)"},
		{"foo-$(VAR_DNE)-bar", "foo-$(VAR_DNE)-bar"},
		{"$()", "$()"},
		// Escaping.
		{"$$(VAR_A)", "$(VAR_A)"},
		{"$$$(VAR_A)", "$A"},
		{"$$$$(VAR_A)", "$$(VAR_A)"},
		{"$$", "$"},
		{"$$$$", "$$"},
		{"$$$", "$$"},
		{"f000-$$VAR_A", "f000-$VAR_A"},
		// Lone operators and unclosed references.
		{"$", "$"},
		{"foo$", "foo$"},
		{"$(VAR_A)$", "A$"},
		{"$VAR_A", "$VAR_A"},
		{"${VAR_A}", "${VAR_A}"},
		{"$)", "$)"},
		{"$(", "$("},
		{"$(VAR_A", "$(VAR_A"},
		{"$(VAR_A$(VAR_B)", "$(VAR_A$(VAR_B)"},
		{"$(VAR_A)$(VAR_B", "A$(VAR_B"},
		{"$(($(VAR_A)", "$(($(VAR_A)"},
		// Nested: the name runs to the first ')'.
		{"$(VAR_$(VAR_A))", "$(VAR_$(VAR_A))"},
		{"$(VAR_A))", "A)"},
		// Bytes after an operator are kept untouched.
		{"$é$(VAR_A)", "$éA"},
	} {
		if got := Expand(tc.in, vars); got != tc.want {
			t.Errorf("Expand(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if got := Expand("$(X)", nil); got != "$(X)" {
		t.Errorf("Expand with nil vars = %q", got)
	}
}

func TestExpandCommand(t *testing.T) {
	env := []EnvVar{{"A", "a"}, {"B", "b"}, {"A", "a2"}}
	c := &v1.Container{
		Command: []string{"/bin/$(A)", "$$(A)", "$(C)"},
		Args:    []string{"--b=$(B)", "$(A)$(B)"},
	}
	cmd, args := ExpandCommand(c, env)
	if want := []string{"/bin/a2", "$(A)", "$(C)"}; !slices.Equal(cmd, want) {
		t.Errorf("command = %q, want %q", cmd, want)
	}
	if want := []string{"--b=b", "a2b"}; !slices.Equal(args, want) {
		t.Errorf("args = %q, want %q", args, want)
	}
	cmd, args = ExpandCommand(&v1.Container{}, env)
	if cmd != nil || args != nil {
		t.Errorf("empty container: %q %q", cmd, args)
	}
	if cmd, args = ExpandCommand(nil, env); cmd != nil || args != nil {
		t.Errorf("nil container: %q %q", cmd, args)
	}
}

func TestExpandSubPathExpr(t *testing.T) {
	env := []EnvVar{{"POD", "p1"}, {"NS", "ns"}, {"EMPTY", ""}}
	for _, tc := range []struct {
		expr, want, err string
	}{
		{"$(NS)/$(POD)", "ns/p1", ""},
		{"logs", "logs", ""},
		{"$$(POD)", "$(POD)", ""},
		{"$(NOPE)/$(EMPTY)/$(NOPE)", "", "missing value for EMPTY, NOPE"},
	} {
		got, err := ExpandSubPathExpr(v1.VolumeMount{SubPathExpr: tc.expr}, env)
		if got != tc.want || errString(err) != tc.err {
			t.Errorf("ExpandSubPathExpr(%q) = %q, %v; want %q, %q", tc.expr, got, err, tc.want, tc.err)
		}
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
