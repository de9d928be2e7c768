package podsource

import (
	"net/url"
	"strings"
)

// redacted stands in for a credential in what nodelet shows of a URL.
const redacted = "xxxxx"

// sensitiveQuery are parts of query parameter names (lower case) whose
// values are taken for credentials: token, access_token, sig, signature,
// X-Amz-Signature, X-Amz-Credential, X-Amz-Security-Token, api_key,
// client_secret, password, auth...
var sensitiveQuery = []string{"token", "secret", "passw", "pwd", "sig", "key", "credential", "auth", "session"}

// redactURL is u as nodelet shows it in logs, errors, metrics and
// annotations: the user name and password, and the values of query
// parameters that look like credentials, replaced by "xxxxx". Both parts of
// the user info are redacted, since tokens are often passed as the user
// name. Anything else (a secret in the path, say) cannot be told apart
// from an ordinary URL and is shown.
func redactURL(u *url.URL) string {
	r := *u
	if r.User != nil {
		if _, ok := r.User.Password(); ok {
			r.User = url.UserPassword(redacted, redacted)
		} else {
			r.User = url.User(redacted)
		}
	}
	r.RawQuery = redactQuery(r.RawQuery)
	r.ForceQuery = r.ForceQuery && r.RawQuery == ""
	return r.String()
}

// redactString is redactURL of raw, or a placeholder that shows nothing of
// raw if it does not parse.
func redactString(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(a URL that does not parse)"
	}
	return redactURL(u)
}

// redactQuery replaces the values of sensitive parameters in a raw query,
// keeping the order and encoding of everything else. Both "&" and ";"
// separate parameters, since some servers split on either.
func redactQuery(raw string) string {
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
		if hasValue && isSensitive(key) {
			param = param[:strings.IndexByte(param, '=')+1] + redacted
		}
		b.WriteString(param)
		if sep >= 0 {
			b.WriteByte(raw[0])
			raw = raw[1:]
		}
	}
	return b.String()
}

func isSensitive(name string) bool {
	name = strings.ToLower(name)
	for _, s := range sensitiveQuery {
		if strings.Contains(name, s) {
			return true
		}
	}
	return false
}
