package registry

import (
	"fmt"

	"github.com/google/go-containerregistry/pkg/name"
)

// dockerHub is how references name Docker Hub, as containerd spells it
// (ggcr says index.docker.io).
const dockerHub = "docker.io"

// NormalizeRef returns the full form of ref the store keys images by:
// "busybox:1.35" becomes "docker.io/library/busybox:1.35", "pause" becomes
// "docker.io/library/pause:latest", and digest references keep their digest.
func NormalizeRef(ref string) (string, error) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return "", fmt.Errorf("parsing image reference %q: %w", ref, err)
	}
	sep := ":"
	if _, ok := r.(name.Digest); ok {
		sep = "@"
	}
	return registryOf(r) + "/" + r.Context().RepositoryStr() + sep + r.Identifier(), nil
}

// MirrorRepository maps a full reference to the repository path, and the
// tag (or digest), the mirror serves it under: containerd strips the
// registry host when it asks a mirror, so "docker.io/library/busybox:1.35"
// is served as "library/busybox" and "registry.k8s.io/pause:3.10" as "pause".
func MirrorRepository(ref string) (repo string, tag string, err error) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return "", "", fmt.Errorf("parsing image reference %q: %w", ref, err)
	}
	return r.Context().RepositoryStr(), r.Identifier(), nil
}

// registryOf is the registry host of r, with Docker Hub as "docker.io".
func registryOf(r name.Reference) string {
	reg := r.Context().RegistryStr()
	if reg == name.DefaultRegistry {
		return dockerHub
	}
	return reg
}
