package envvars

import (
	"fmt"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// Expand expands $(VAR) references in s with the kubelet's rules:
//
//   - $(VAR) is replaced by vars[VAR] when VAR is defined (even as ""), and
//     left as is otherwise;
//   - $$ is an escaped $: "$$(VAR)" gives "$(VAR)";
//   - the name runs to the first ')': "$(A$(B))" looks up "A$(B";
//   - an unclosed "$(" and a "$" followed by anything else are kept;
//   - replacement values are not expanded again.
func Expand(s string, vars map[string]string) string {
	return expand(s, func(name string) (string, bool) {
		v, ok := vars[name]
		return v, ok
	})
}

// expand is Expand with a lookup function.
func expand(s string, lookup func(string) (string, bool)) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '$' || i+1 == len(s) {
			b.WriteByte(c)
			continue
		}
		next := s[i+1]
		switch next {
		case '$':
			// Escaped operator.
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				// Unclosed reference: keep "$(" and go on after it.
				b.WriteString("$(")
				i++
				continue
			}
			name := s[i+2 : i+2+end]
			if v, ok := lookup(name); ok {
				b.WriteString(v)
			} else {
				b.WriteString("$(")
				b.WriteString(name)
				b.WriteByte(')')
			}
			i += 2 + end
		default:
			// A lone operator: keep it and the byte after it.
			b.WriteByte('$')
			b.WriteByte(next)
			i++
		}
	}
	return b.String()
}

// envMap returns the environment as a map, a later entry of a name winning.
func envMap(env []EnvVar) map[string]string {
	m := make(map[string]string, len(env))
	for _, e := range env {
		m[e.Name] = e.Value
	}
	return m
}

// ExpandCommand returns the container's command and args with $(VAR)
// references expanded against env (the result of Build), as the kubelet does
// before creating the container. Empty command or args give nil.
func ExpandCommand(c *v1.Container, env []EnvVar) (command, args []string) {
	if c == nil {
		return nil, nil
	}
	vars := envMap(env)
	for _, s := range c.Command {
		command = append(command, Expand(s, vars))
	}
	for _, s := range c.Args {
		args = append(args, Expand(s, vars))
	}
	return command, args
}

// ExpandSubPathExpr expands a volume mount's subPathExpr against env (the
// result of Build) as the kubelet does: a reference to a name that is
// undefined or empty is an error ("missing value for A, B"). The caller still
// has to reject absolute paths and ".." components, as for subPath.
func ExpandSubPathExpr(mount v1.VolumeMount, env []EnvVar) (string, error) {
	return ExpandRequired(mount.SubPathExpr, envMap(env))
}

// ExpandRequired is Expand where every referenced variable must be set
// and not empty (the kubelet's rule for subPathExpr); the error names the
// missing ones.
func ExpandRequired(s string, vars map[string]string) (string, error) {
	var missing []string
	out := expand(s, func(name string) (string, bool) {
		v := vars[name]
		if v == "" && !slices.Contains(missing, name) {
			missing = append(missing, name)
		}
		return v, true
	})
	if len(missing) > 0 {
		slices.Sort(missing)
		return "", fmt.Errorf("missing value for %s", strings.Join(missing, ", "))
	}
	return out, nil
}
