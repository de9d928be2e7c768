// Package redact is beside the pipeline: how nodelet hides the secrets a
// user may give it (in the manifest URL, its headers and the command line)
// in everything it shows: logs, errors, metrics, pod annotations, /configz
// and /debug/pprof/cmdline. There is one policy, here.
package redact

import (
	"net/url"
	"slices"
	"strings"
)

// Marker stands in for a secret. It needs no escaping in a URL.
const Marker = "REDACTED"

// sensitiveQuery are parts of query parameter names (lower case) whose
// values are taken for credentials: token, access_token, sig, signature,
// X-Amz-Signature, X-Amz-Credential, X-Amz-Security-Token, api_key,
// client_secret, password, auth...
var sensitiveQuery = []string{"token", "secret", "passw", "pwd", "sig", "key", "credential", "auth", "session"}

// URL is u as nodelet shows it: the user name and password, and the values
// of query parameters that look like credentials, replaced by Marker, and
// the fragment dropped. Both parts of the user info are redacted, since
// tokens are often passed as the user name. Anything else (a secret in the
// path, say) cannot be told apart from an ordinary URL and is shown.
func URL(u *url.URL) string {
	r := *u
	if r.User != nil {
		if _, ok := r.User.Password(); ok {
			r.User = url.UserPassword(Marker, Marker)
		} else {
			r.User = url.User(Marker)
		}
	}
	r.RawQuery = query(r.RawQuery)
	r.ForceQuery = r.ForceQuery && r.RawQuery == ""
	r.Fragment, r.RawFragment = "", ""
	return r.String()
}

// String is URL of raw; "" stays "", and a raw URL that does not parse is
// replaced as a whole, since a parse error can echo a password.
func String(raw string) string {
	if raw == "" {
		return ""
	}
	u, err := url.Parse(raw)
	if err != nil {
		return Marker + " (a URL that does not parse)"
	}
	return URL(u)
}

// query replaces the values of sensitive parameters in a raw query,
// keeping the order and encoding of everything else. Both "&" and ";"
// separate parameters, since some servers split on either.
func query(raw string) string {
	var b strings.Builder
	for raw != "" {
		param := raw
		sep := strings.IndexAny(raw, "&;")
		if sep >= 0 {
			param, raw = raw[:sep], raw[sep:]
		} else {
			raw = ""
		}
		key, _, hasValue := strings.Cut(param, "=")
		if name, err := url.QueryUnescape(key); err == nil {
			key = name
		}
		if hasValue && sensitive(key) {
			param = param[:strings.IndexByte(param, '=')+1] + Marker
		}
		b.WriteString(param)
		if sep >= 0 {
			b.WriteByte(raw[0])
			raw = raw[1:]
		}
	}
	return b.String()
}

func sensitive(name string) bool {
	name = strings.ToLower(name)
	for _, s := range sensitiveQuery {
		if strings.Contains(name, s) {
			return true
		}
	}
	return false
}

// Headers returns a copy of h with every value replaced by Marker.
func Headers(h map[string][]string) map[string][]string {
	if h == nil {
		return nil
	}
	out := make(map[string][]string, len(h))
	for k, vs := range h {
		out[k] = slices.Repeat([]string{Marker}, len(vs))
	}
	return out
}

// headerFlag redacts the values of a --manifest-url-header value,
// "key:value,key2:value2", keeping the keys; a pair without ":" is
// redacted whole.
func headerFlag(v string) string {
	pairs := strings.Split(v, ",")
	for i, p := range pairs {
		k, _, ok := strings.Cut(p, ":")
		if ok {
			pairs[i] = k + ":" + Marker
		} else {
			pairs[i] = Marker
		}
	}
	return strings.Join(pairs, ",")
}

// secretFlags redact the values of the flags that hold secrets.
var secretFlags = map[string]func(string) string{
	"manifest-url":        String,
	"manifest-url-header": headerFlag,
}

// secretWords in a flag's name mark its value as a secret, unless the
// name says the value is where a secret is kept (-file, -dir, -path).
var secretWords = []string{"token", "password", "passwd", "secret", "credential", "apikey", "api-key"}

// flagRedactor returns how to redact the value of flag name, or nil when
// its value may be shown.
func flagRedactor(name string) func(string) string {
	name = strings.ToLower(name)
	if f, ok := secretFlags[name]; ok {
		return f
	}
	for _, suffix := range []string{"-file", "-dir", "-path"} {
		if strings.HasSuffix(name, suffix) {
			return nil
		}
	}
	for _, w := range secretWords {
		if strings.Contains(name, w) {
			return func(string) string { return Marker }
		}
	}
	return nil
}

// Args returns a copy of a command line with the values of flags that hold
// secrets redacted, in both the "--flag=value" and the "--flag value"
// forms.
func Args(args []string) []string {
	out := slices.Clone(args)
	for i := 1; i < len(out); i++ {
		a := out[i]
		if !strings.HasPrefix(a, "-") {
			continue
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		redact := flagRedactor(name)
		switch {
		case redact == nil:
		case hasValue:
			out[i] = a[:len(a)-len(value)] + redact(value)
		case i+1 < len(out):
			i++
			out[i] = redact(out[i])
		}
	}
	return out
}
