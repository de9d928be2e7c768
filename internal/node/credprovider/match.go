package credprovider

import (
	"net"
	"net/url"
	"path"
	"slices"
	"strings"

	"github.com/distribution/reference"
)

// This file is the kubelet's image matching (pkg/credentialprovider
// keyring.go), pure: matchImages globs against an image, and the
// registries a plugin answered for against the image pulled.

// parseSchemeless parses an image or glob as a URL without its scheme.
func parseSchemeless(s string) (*url.URL, error) {
	u, err := url.Parse("https://" + s)
	if err != nil {
		return nil, err
	}
	u.Scheme = ""
	return u, nil
}

// splitHost splits a URL's host into its dot-separated parts and its port.
func splitHost(u *url.URL) (parts []string, port string) {
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil {
		host, port = u.Host, ""
	}
	return strings.Split(host, "."), port
}

// urlsMatch reports whether target matches glob as the kubelet's
// URLsMatchStr: the same port, the same number of host parts, each matched
// by its glob part (path.Match: *.example.com matches a.example.com, not
// a.b.example.com or example.com), and glob's path a prefix of target's.
func urlsMatch(glob, target string) bool {
	g, err := parseSchemeless(glob)
	if err != nil {
		return false
	}
	t, err := parseSchemeless(target)
	if err != nil {
		return false
	}
	gParts, gPort := splitHost(g)
	tParts, tPort := splitHost(t)
	if gPort != tPort || len(gParts) != len(tParts) || !strings.HasPrefix(t.Path, g.Path) {
		return false
	}
	for i := range gParts {
		if ok, err := path.Match(gParts[i], tParts[i]); err != nil || !ok {
			return false
		}
	}
	return true
}

// matchesAny reports whether one of globs matches image.
func matchesAny(globs []string, image string) bool {
	return slices.ContainsFunc(globs, func(g string) bool { return urlsMatch(g, image) })
}

// repository is what the kubelet asks plugins and its keyring about: the
// image's normalized name without tag or digest (busybox:1.36 →
// docker.io/library/busybox), as parsers.ParseImageName gives it.
func repository(image string) (string, error) {
	named, err := reference.ParseNormalizedNamed(image)
	if err != nil {
		return "", err
	}
	return named.Name(), nil
}

// registryOf is the first part of an image's name (its registry host and
// port), the Registry cache key.
func registryOf(image string) string {
	reg, _, _ := strings.Cut(image, "/")
	return reg
}

// keyOf turns a registry a plugin answered for into the keyring's key as
// BasicDockerKeyring.Add does: scheme dropped, a /v1/ or /v2/ path prefix
// dropped, host plus the rest of the path. ok is false for an entry that
// does not parse (the kubelet logs and ignores it).
func keyOf(registry string) (key string, ok bool) {
	if !strings.HasPrefix(registry, "https://") && !strings.HasPrefix(registry, "http://") {
		registry = "https://" + registry
	}
	u, err := url.Parse(registry)
	if err != nil {
		return "", false
	}
	p := u.Path
	if strings.HasPrefix(p, "/v2/") || strings.HasPrefix(p, "/v1/") {
		p = p[3:]
	}
	if p == "" || p == "/" {
		return u.Host, true
	}
	return u.Host + p, true
}

// defaultRegistryHost is the key Docker Hub's credentials are under.
const defaultRegistryHost = "index.docker.io"

// isDefaultRegistry reports whether image is on Docker Hub as the kubelet
// tells it (isDefaultRegistryMatch).
func isDefaultRegistry(image string) bool {
	first, _, nested := strings.Cut(image, "/")
	if first == "" {
		return false
	}
	if !nested || first == "docker.io" || first == "index.docker.io" {
		return true
	}
	return !strings.ContainsAny(first, ".:")
}

// entry is one credential a plugin answered with, under its keyring key.
type entry struct {
	key                string
	username, password string
	provider           int // index of the provider that gave it
}

// lookup returns the entries that apply to image, in the kubelet's order:
// keys sorted in reverse (longer, more specific ones of a host first),
// each key's entries in the order the providers were asked; with no match,
// an image of Docker Hub takes those under index.docker.io.
func lookup(entries []entry, image string) []entry {
	byKey := map[string][]entry{}
	var keys []string
	for _, e := range entries {
		if _, seen := byKey[e.key]; !seen {
			keys = append(keys, e.key)
		}
		byKey[e.key] = append(byKey[e.key], e)
	}
	slices.Sort(keys)
	slices.Reverse(keys)
	var out []entry
	for _, k := range keys {
		if urlsMatch(k, image) {
			out = append(out, byKey[k]...)
		}
	}
	if len(out) == 0 && isDefaultRegistry(image) {
		out = byKey[defaultRegistryHost]
	}
	return out
}
