package pullcreds

import (
	"context"
	"fmt"
	"maps"
	"net/url"
	"path"
	"slices"
	"sort"
	"strings"

	"github.com/distribution/reference"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Keyring holds docker config credentials by registry location and gives
// those for an image as the kubelet's BasicDockerKeyring does: every
// location that matches the image's repository, the most specific first
// (locations in reverse lexical order, so registry.example.com/team before
// registry.example.com), each location's credentials in the order they
// were added; failing that, those of Docker Hub's index.docker.io for an
// image of Docker Hub. The zero value is empty and ready to use.
type Keyring struct {
	index []string                // the keys, unique, in reverse lexical order
	creds map[string][]Credential // by key: host[:port][/path]
}

// Add adds the credentials of cfg, all from src. A location's scheme is
// dropped, and a /v1/ or /v2/ path stands for the registry's root, as the
// kubelet (and the docker CLI) read it; a location that is not a URL is
// passed over, as the kubelet passes it over.
func (k *Keyring) Add(src Source, cfg Config) {
	if k.creds == nil {
		k.creds = map[string][]Credential{}
	}
	// In lexical order, so that two locations with the same key (with
	// and without a scheme) give their credentials in a stable order.
	for _, loc := range slices.Sorted(maps.Keys(cfg)) {
		key, ok := locationKey(loc)
		if !ok {
			continue
		}
		e := cfg[loc]
		if _, known := k.creds[key]; !known {
			k.index = append(k.index, key)
		}
		// ServerAddress stays empty, as the kubelet leaves it for
		// docker config credentials: the runtime sends them to
		// whichever host (a mirror, too) it pulls the image from.
		k.creds[key] = append(k.creds[key], Credential{
			Auth:   &runtimeapi.AuthConfig{Username: e.Username, Password: e.Password},
			Source: src,
		})
	}
	sort.Sort(sort.Reverse(sort.StringSlice(k.index)))
}

// locationKey is a config location as the keyring indexes it:
// host[:port] plus its path unless that is the root (or /v1/, /v2/).
func locationKey(loc string) (string, bool) {
	v := loc
	if !strings.HasPrefix(v, "https://") && !strings.HasPrefix(v, "http://") {
		v = "https://" + v
	}
	u, err := url.Parse(v)
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

// dockerHubKey is the key the credentials of Docker Hub's
// https://index.docker.io/v1/ are kept under.
const dockerHubKey = "index.docker.io"

// Lookup returns copies of the credentials for repo, an image's
// repository without tag or digest (docker.io/library/busybox,
// registry.example.com:5000/team/app), in the order to try them; none
// when no location matches.
func (k *Keyring) Lookup(repo string) []Credential {
	var out []Credential
	for _, key := range k.index {
		if Matches(key, repo) {
			out = appendCopies(out, k.creds[key])
		}
	}
	if len(out) == 0 && isDockerHub(repo) {
		out = appendCopies(out, k.creds[dockerHubKey])
	}
	return out
}

func appendCopies(out, creds []Credential) []Credential {
	for _, c := range creds {
		a := c.Auth
		out = append(out, Credential{Auth: &runtimeapi.AuthConfig{
			Username: a.GetUsername(), Password: a.GetPassword(), Auth: a.GetAuth(), ServerAddress: a.GetServerAddress(),
			IdentityToken: a.GetIdentityToken(), RegistryToken: a.GetRegistryToken(),
		}, Source: c.Source})
	}
	return out
}

// isDockerHub tells whether repo is pulled from Docker Hub, by the shape
// of its name as the kubelet tells it: no registry host (a first part
// without "." or ":"), or docker.io or index.docker.io.
func isDockerHub(repo string) bool {
	first, _, found := strings.Cut(repo, "/")
	switch {
	case first == "":
		return false
	case !found:
		return true
	case first == "docker.io" || first == "index.docker.io":
		return true
	}
	return !strings.ContainsAny(first, ".:")
}

// Matches tells whether the keyring key (a config location without its
// scheme) covers repo, as the kubelet's URLsMatch: the same port (or
// none), the same number of host labels each matching the key's label as
// a glob (*.example.com covers a.example.com, not a.b.example.com), and
// the key's path a prefix of the repository's path.
func Matches(key, repo string) bool {
	k, err := url.Parse("https://" + key)
	if err != nil {
		return false
	}
	r, err := url.Parse("https://" + repo)
	if err != nil {
		return false
	}
	kLabels, kPort := splitHost(k)
	rLabels, rPort := splitHost(r)
	if kPort != rPort || len(kLabels) != len(rLabels) || !strings.HasPrefix(r.Path, k.Path) {
		return false
	}
	for i, glob := range kLabels {
		if ok, err := path.Match(glob, rLabels[i]); err != nil || !ok {
			return false
		}
	}
	return true
}

// splitHost is u's host name as its labels, and its port ("" for none).
func splitHost(u *url.URL) (labels []string, port string) {
	return strings.Split(u.Hostname(), "."), u.Port()
}

// Repository is image's repository, the name a keyring is looked up by:
// normalized as the kubelet's ParseImageName normalizes it (busybox is
// docker.io/library/busybox), without tag or digest.
func Repository(image string) (string, error) {
	named, err := reference.ParseNormalizedNamed(image)
	if err != nil {
		return "", fmt.Errorf("couldn't parse image name %q: %w", image, err)
	}
	return named.Name(), nil
}

// Credentials makes a Keyring a Lookup.
func (k *Keyring) Credentials(_ context.Context, image string) ([]Credential, error) {
	if k == nil {
		return nil, nil
	}
	repo, err := Repository(image)
	if err != nil {
		return nil, err
	}
	return k.Lookup(repo), nil
}

// Union is lookups, asked in order: the credentials of all of them, in
// their order (the kubelet's UnionDockerKeyring: the pod's Secrets, then
// the node's config files, then the credential provider plugins). The
// first error is the union's: the pull fails with it. nil entries are
// passed over.
type Union []Lookup

func (u Union) Credentials(ctx context.Context, image string) ([]Credential, error) {
	var out []Credential
	for _, l := range u {
		if l == nil {
			continue
		}
		creds, err := l.Credentials(ctx, image)
		if err != nil {
			return nil, err
		}
		out = append(out, creds...)
	}
	return out, nil
}

// Failed is a Lookup that fails every pull with err: a pod whose image
// pull secret cannot be read, say.
func Failed(err error) Lookup { return failed{err} }

type failed struct{ err error }

func (f failed) Credentials(context.Context, string) ([]Credential, error) { return nil, f.err }
