package containerd

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"net/url"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// Registries is the managed containerd's registry configuration, the file
// k3s users know as registries.yaml (--private-registry): mirrors with
// their endpoints, and per registry host the credentials and TLS settings
// containerd uses when it talks to that host. Render turns it into the
// hosts.toml of each named registry and, for credentials, containerd's
// CRI registry configs; ParseRegistries reads it strictly.
//
// Printing a Registries never shows a credential (RegistryAuth.String).
type Registries struct {
	// Mirrors maps a registry host (docker.io, registry.example.com:5000)
	// or "*" (every registry without an entry of its own) to the
	// endpoints containerd tries, in order, before the registry itself.
	Mirrors map[string]Mirror `yaml:"mirrors"`
	// Configs maps a registry or endpoint host to how containerd talks
	// to it: credentials and TLS. Only named hosts: a wildcard would
	// hand the credentials, or skip the certificate checks, of every
	// registry.
	Configs map[string]RegistryConfig `yaml:"configs"`
}

// Mirror is one registry's endpoints.
type Mirror struct {
	// Endpoints are URLs (http or https, host, optional path) tried in
	// order after the node's own image store and before the registry.
	Endpoints []string `yaml:"endpoint"`
	// Rewrite is k3s's rewrite of repository names per endpoint. It is a
	// feature of k3s's patched containerd that upstream containerd lacks,
	// so a file that uses it is refused rather than silently ignored.
	Rewrite map[string]string `yaml:"rewrite"`
}

// RegistryConfig is how containerd talks to one host.
type RegistryConfig struct {
	Auth *RegistryAuth `yaml:"auth"`
	TLS  *RegistryTLS  `yaml:"tls"`
}

// RegistryAuth are the credentials sent to one host: a username and
// password, the base64 of "username:password" (auth), or an identity
// token, one of the three.
type RegistryAuth struct {
	Username      string `yaml:"username"`
	Password      string `yaml:"password"`
	Auth          string `yaml:"auth"`
	IdentityToken string `yaml:"identity_token"`
}

// String hides the credentials: a RegistryAuth printed by mistake (%v of
// a Config, a log line) shows only which fields are set.
func (a RegistryAuth) String() string {
	var set []string
	for _, f := range []struct{ name, v string }{{"username", a.Username}, {"password", a.Password}, {"auth", a.Auth}, {"identity_token", a.IdentityToken}} {
		if f.v != "" {
			set = append(set, f.name)
		}
	}
	return "{" + strings.Join(set, ",") + ": redacted}"
}

// GoString is String, for %#v.
func (a RegistryAuth) GoString() string { return a.String() }

// RegistryTLS are the TLS settings of one host. Files are absolute paths
// containerd reads at each pull.
type RegistryTLS struct {
	CAFile             string `yaml:"ca_file"`
	CertFile           string `yaml:"cert_file"`
	KeyFile            string `yaml:"key_file"`
	InsecureSkipVerify bool   `yaml:"insecure_skip_verify"`
}

// MaxRegistriesFileSize bounds the registries file.
const MaxRegistriesFileSize = 1 << 20

// wildcard is the mirrors key of every registry without one of its own.
const wildcard = "*"

// ParseRegistries decodes a registries file strictly: a field it does not
// know, a key given twice, a value of the wrong type or a setting that
// cannot work is an error naming the file (name) and the line. An empty
// file configures nothing.
func ParseRegistries(name string, data []byte) (Registries, error) {
	var r Registries
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&r); err != nil && !errors.Is(err, io.EOF) {
		return Registries{}, fmt.Errorf("%s: %s", name, oneLine(err))
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return Registries{}, fmt.Errorf("%s: line %d: a second YAML document; the file holds one", name, extra.Line)
	}
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return Registries{}, fmt.Errorf("%s: %s", name, oneLine(err))
	}
	if err := r.validate(nodeLines{&root}); err != nil {
		return Registries{}, fmt.Errorf("%s: %w", name, err)
	}
	return r, nil
}

// oneLine joins the lines of a YAML error ("yaml: unmarshal errors:\n
// line 3: ...") into one.
func oneLine(err error) string {
	lines := strings.Split(err.Error(), "\n")
	for i := range lines {
		lines[i] = strings.TrimSpace(lines[i])
	}
	return strings.Join(lines, " ")
}

// lineError is a problem at a line of the file.
type lineError struct {
	line int
	msg  string
}

func (e lineError) Error() string {
	if e.line == 0 { // checked without the file (Config.Validate)
		return e.msg
	}
	return "line " + strconv.Itoa(e.line) + ": " + e.msg
}

// nodeLines finds the line of a setting in the parsed file.
type nodeLines struct{ root *yaml.Node }

// at is the line of the value at path (mapping keys as strings, sequence
// indexes as ints), or of the deepest part of it that exists.
func (l nodeLines) at(path ...any) int {
	n := l.root
	if n == nil {
		return 0
	}
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	line := n.Line
	for _, p := range path {
		next := child(n, p)
		if next == nil {
			return line
		}
		n, line = next, next.Line
	}
	return line
}

func child(n *yaml.Node, p any) *yaml.Node {
	if n == nil {
		return nil
	}
	switch k := p.(type) {
	case string:
		if n.Kind != yaml.MappingNode {
			return nil
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == k {
				return n.Content[i+1]
			}
		}
	case int:
		if n.Kind == yaml.SequenceNode && k < len(n.Content) {
			return n.Content[k]
		}
	}
	return nil
}

// keyLine is the line of a mapping key (a host), which is where a bad
// host is written.
func (l nodeLines) keyLine(section, key string) int {
	n := child(l.docRoot(), section)
	if n == nil || n.Kind != yaml.MappingNode {
		return l.at(section)
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i].Line
		}
	}
	return n.Line
}

func (l nodeLines) docRoot() *yaml.Node {
	if l.root != nil && l.root.Kind == yaml.DocumentNode && len(l.root.Content) > 0 {
		return l.root.Content[0]
	}
	return l.root
}

// hostPattern is a registry host as an image reference names it: a DNS
// name (labels of letters, digits and inner hyphens) or an IPv4 address,
// or an IPv6 address in brackets, with an optional port.
var hostPattern = regexp.MustCompile(`^([A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*|\[[0-9A-Fa-f:.]+\])(:[0-9]{1,5})?$`)

// validHost reports what is wrong with a registry host, if anything.
func validHost(h string) error {
	if !hostPattern.MatchString(h) {
		return fmt.Errorf("%q is not a registry host (host or host:port, as an image reference names it)", h)
	}
	if strings.HasPrefix(h, "[") {
		end := strings.Index(h, "]")
		if _, err := netip.ParseAddr(h[1:end]); err != nil {
			return fmt.Errorf("%q is not a registry host: %s is not an IP address", h, h[1:end])
		}
	}
	if i := strings.LastIndex(h, ":"); i >= 0 && !strings.HasSuffix(h, "]") {
		if p, err := strconv.Atoi(h[i+1:]); err != nil || p < 1 || p > 65535 {
			return fmt.Errorf("%q is not a registry host: port %s is not 1 to 65535", h, h[i+1:])
		}
	}
	return nil
}

// validText refuses what cannot be a path, host or credential: invalid
// UTF-8 and control characters.
func validText(what, s string) error {
	if !utf8.ValidString(s) || strings.ContainsFunc(s, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		return fmt.Errorf("%s contains a control character or invalid UTF-8", what)
	}
	return nil
}

func (r Registries) validate(l nodeLines) error {
	for _, host := range sortedKeys(r.Mirrors) {
		if err := r.Mirrors[host].validate(host, l); err != nil {
			return err
		}
	}
	plain := r.plainHTTPHosts()
	for _, host := range sortedKeys(r.Configs) {
		if r.Configs[host].Auth != nil && plain[host] != "" && !loopback(host) {
			return lineError{l.at("configs", host, "auth"), fmt.Sprintf("configs.%q.auth: %s is reached over plain HTTP (%s), which would send the credentials in clear text; use https", host, host, plain[host])}
		}
		if host == wildcard {
			return lineError{l.keyLine("configs", host), `configs."*": a wildcard would send the credentials, or skip the certificate checks, of every registry; name each host`}
		}
		if err := validHost(host); err != nil {
			return lineError{l.keyLine("configs", host), "configs: " + err.Error()}
		}
		if err := r.Configs[host].validate(host, l); err != nil {
			return err
		}
	}
	return nil
}

// plainHTTPHosts are the hosts of http:// endpoints, each with one of
// them.
func (r Registries) plainHTTPHosts() map[string]string {
	plain := map[string]string{}
	for _, m := range r.Mirrors {
		for _, e := range m.Endpoints {
			if u, err := url.Parse(e); err == nil && u.Scheme == "http" {
				plain[u.Host] = e
			}
		}
	}
	return plain
}

// loopback reports whether host (host[:port]) is a loopback address,
// where plain HTTP leaves the machine never.
func loopback(host string) bool {
	h := host
	if i := strings.LastIndex(h, ":"); i >= 0 && !strings.HasSuffix(h, "]") {
		h = h[:i]
	}
	h = strings.Trim(h, "[]")
	if h == "localhost" {
		return true
	}
	a, err := netip.ParseAddr(h)
	return err == nil && a.IsLoopback()
}

func (m Mirror) validate(host string, l nodeLines) error {
	if host != wildcard {
		if err := validHost(host); err != nil {
			return lineError{l.keyLine("mirrors", host), "mirrors: " + err.Error()}
		}
	}
	if len(m.Rewrite) > 0 {
		return lineError{l.at("mirrors", host, "rewrite"), fmt.Sprintf("mirrors.%q.rewrite: rewrites are a feature of k3s's own containerd; upstream containerd, which nodelet runs, has none", host)}
	}
	for i, e := range m.Endpoints {
		if _, err := parseEndpoint(e); err != nil {
			return lineError{l.at("mirrors", host, "endpoint", i), fmt.Sprintf("mirrors.%q.endpoint[%d]: %v", host, i, err)}
		}
	}
	return nil
}

// parseEndpoint checks a mirror endpoint: an http or https URL with a
// host and nothing but a path.
func parseEndpoint(e string) (*url.URL, error) {
	if err := validText("endpoint", e); err != nil {
		return nil, err
	}
	u, err := url.Parse(e)
	if err != nil {
		return nil, fmt.Errorf("%q is not a URL: %w", e, err)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("%q: the scheme must be http or https", e)
	case u.User != nil:
		return nil, fmt.Errorf("an endpoint carries no credentials (configs.<host>.auth does)")
	case u.RawQuery != "" || u.Fragment != "" || u.Opaque != "":
		return nil, fmt.Errorf("%q: an endpoint is scheme://host[:port][/path], without query or fragment", e)
	case strings.ContainsAny(u.Path, `"\`):
		return nil, fmt.Errorf("%q: the path contains a quote or backslash", e)
	}
	if err := validHost(u.Host); err != nil {
		return nil, err
	}
	return u, nil
}

func (c RegistryConfig) validate(host string, l nodeLines) error {
	if a := c.Auth; a != nil {
		if err := a.validate(); err != nil {
			return lineError{l.at("configs", host, "auth"), fmt.Sprintf("configs.%q.auth: %v", host, err)}
		}
	}
	if t := c.TLS; t != nil {
		for _, f := range []struct{ key, path string }{{"ca_file", t.CAFile}, {"cert_file", t.CertFile}, {"key_file", t.KeyFile}} {
			if f.path == "" {
				continue
			}
			if err := validText(f.key, f.path); err != nil || !filepath.IsAbs(f.path) || strings.ContainsAny(f.path, `"\`) {
				return lineError{l.at("configs", host, "tls", f.key), fmt.Sprintf("configs.%q.tls.%s: %q must be an absolute path without quotes, backslashes or control characters", host, f.key, f.path)}
			}
		}
		if (t.CertFile == "") != (t.KeyFile == "") {
			return lineError{l.at("configs", host, "tls"), fmt.Sprintf("configs.%q.tls: a client certificate needs both cert_file and key_file", host)}
		}
	}
	return nil
}

func (a RegistryAuth) validate() error {
	for _, f := range []struct{ key, v string }{{"username", a.Username}, {"password", a.Password}, {"auth", a.Auth}, {"identity_token", a.IdentityToken}} {
		if err := validText(f.key, f.v); err != nil {
			return err
		}
	}
	forms := 0
	if a.Username != "" || a.Password != "" {
		forms++
		if a.Username == "" || a.Password == "" {
			return errors.New("username and password go together")
		}
	}
	if a.Auth != "" {
		forms++
		dec, err := base64.StdEncoding.DecodeString(a.Auth)
		if err != nil || !bytes.Contains(dec, []byte(":")) {
			return errors.New(`auth must be the base64 of "username:password"`)
		}
	}
	if a.IdentityToken != "" {
		forms++
	}
	switch forms {
	case 0:
		return errors.New("no credentials: give username and password, auth, or identity_token")
	case 1:
		return nil
	default:
		return errors.New("give one of username and password, auth, or identity_token")
	}
}

// Files are the TLS files the configuration names, sorted, each once.
func (r Registries) Files() []string {
	seen := map[string]bool{}
	for _, c := range r.Configs {
		if c.TLS == nil {
			continue
		}
		for _, f := range []string{c.TLS.CAFile, c.TLS.CertFile, c.TLS.KeyFile} {
			if f != "" {
				seen[f] = true
			}
		}
	}
	out := make([]string, 0, len(seen))
	for f := range seen {
		out = append(out, f)
	}
	sort.Strings(out)
	return out
}

// KeyFiles are the private key files the configuration names.
func (r Registries) KeyFiles() map[string]bool {
	keys := map[string]bool{}
	for _, c := range r.Configs {
		if c.TLS != nil && c.TLS.KeyFile != "" {
			keys[c.TLS.KeyFile] = true
		}
	}
	return keys
}
