package registry

import (
	"fmt"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

const someDigest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func TestMirrorRepository(t *testing.T) {
	tests := []struct {
		ref, repo, tag string
	}{
		{"docker.io/library/busybox:1.35", "library/busybox", "1.35"},
		{"busybox:1.35", "library/busybox", "1.35"},
		{"busybox", "library/busybox", "latest"},
		{"index.docker.io/library/busybox:1.35", "library/busybox", "1.35"},
		{"registry.k8s.io/pause:3.10", "pause", "3.10"},
		{"registry.k8s.io/sig-storage/csi-provisioner:v5.0.1", "sig-storage/csi-provisioner", "v5.0.1"},
		{"quay.io/team/app:v1", "team/app", "v1"},
		{"localhost:5000/app:dev", "app", "dev"},
		{"docker.io/library/busybox@" + someDigest, "library/busybox", someDigest},
	}
	for _, tt := range tests {
		repo, tag, err := MirrorRepository(tt.ref)
		if err != nil || repo != tt.repo || tag != tt.tag {
			t.Errorf("MirrorRepository(%q) = %q, %q, %v; want %q, %q", tt.ref, repo, tag, err, tt.repo, tt.tag)
		}
	}
	for _, bad := range []string{"", "Busybox:1.35", "busybox:", "a b"} {
		if repo, tag, err := MirrorRepository(bad); err == nil {
			t.Errorf("MirrorRepository(%q) = %q, %q; want an error", bad, repo, tag)
		}
	}
}

func TestNormalizeRef(t *testing.T) {
	tests := []struct{ ref, want string }{
		{"busybox:1.35", "docker.io/library/busybox:1.35"},
		{"busybox", "docker.io/library/busybox:latest"},
		{"index.docker.io/library/busybox:1.35", "docker.io/library/busybox:1.35"},
		{"docker.io/team/app:v1", "docker.io/team/app:v1"},
		{"registry.k8s.io/pause:3.10", "registry.k8s.io/pause:3.10"},
		{"localhost:5000/app", "localhost:5000/app:latest"},
		{"busybox@" + someDigest, "docker.io/library/busybox@" + someDigest},
	}
	for _, tt := range tests {
		if got, err := NormalizeRef(tt.ref); err != nil || got != tt.want {
			t.Errorf("NormalizeRef(%q) = %q, %v; want %q", tt.ref, got, err, tt.want)
		}
	}
}

// TestResolve is the mirror's routing: which stored image a manifest
// request names, by mirror path, registry-qualified path or ?ns=.
func TestResolve(t *testing.T) {
	digestOf := func(i int) v1.Hash {
		return v1.Hash{Algorithm: "sha256", Hex: fmt.Sprintf("%064x", i)}
	}
	refs := []string{
		"docker.io/library/busybox:1.35",
		"docker.io/team/app:v1",
		"localhost:5000/app:dev",
		"quay.io/team/app:v1",
		"registry.k8s.io/pause:3.10",
	}
	index := &v1.IndexManifest{}
	for i, ref := range refs {
		index.Manifests = append(index.Manifests, v1.Descriptor{Digest: digestOf(i), Annotations: map[string]string{RefNameAnnotation: ref}})
	}
	tests := []struct {
		repo, ns, ref string
		want          string // "" for none
	}{
		{"library/busybox", "", "1.35", "docker.io/library/busybox:1.35"},
		{"docker.io/library/busybox", "", "1.35", "docker.io/library/busybox:1.35"},
		{"library/busybox", "docker.io", "1.35", "docker.io/library/busybox:1.35"},
		{"library/busybox", "index.docker.io", "1.35", "docker.io/library/busybox:1.35"},
		{"library/busybox", "registry-1.docker.io", "1.35", "docker.io/library/busybox:1.35"},
		{"library/busybox", "quay.io", "1.35", ""},
		{"library/busybox", "", "latest", ""},
		{"library/busybox", "", digestOf(0).String(), "docker.io/library/busybox:1.35"},
		{"library/busybox", "", digestOf(1).String(), ""},
		{"busybox", "", "1.35", ""},
		{"pause", "", "3.10", "registry.k8s.io/pause:3.10"},
		{"registry.k8s.io/pause", "", "3.10", "registry.k8s.io/pause:3.10"},
		{"pause", "registry.k8s.io", "3.10", "registry.k8s.io/pause:3.10"},
		// A registry with a port has no qualified path, but ?ns= finds it.
		{"app", "", "dev", "localhost:5000/app:dev"},
		{"app", "localhost:5000", "dev", "localhost:5000/app:dev"},
		{"localhost:5000/app", "", "dev", ""},
		// Two registries share team/app: ?ns= picks; without it the later
		// reference wins.
		{"team/app", "docker.io", "v1", "docker.io/team/app:v1"},
		{"team/app", "quay.io", "v1", "quay.io/team/app:v1"},
		{"team/app", "", "v1", "quay.io/team/app:v1"},
		{"docker.io/team/app", "", "v1", "docker.io/team/app:v1"},
		{"team/app", "registry.k8s.io", "v1", ""},
		// A ?ns= that is no registry host is ignored.
		{"team/app", "not/a/host", "v1", "quay.io/team/app:v1"},
	}
	for _, tt := range tests {
		d, ok := resolve(index, request{repo: tt.repo, ns: namespace(tt.ns), kind: "manifests", ref: tt.ref})
		got := ""
		if ok {
			got = d.Annotations[RefNameAnnotation]
		}
		if got != tt.want {
			t.Errorf("resolve(%s:%s ns=%q) = %q, want %q", tt.repo, tt.ref, tt.ns, got, tt.want)
		}
	}
}

func TestParseRequest(t *testing.T) {
	tests := []struct {
		path string
		want request
		ok   bool
	}{
		{"library/busybox/manifests/latest", request{repo: "library/busybox", kind: "manifests", ref: "latest"}, true},
		{"team/manifests/manifests/v1", request{repo: "team/manifests", kind: "manifests", ref: "v1"}, true},
		{"app/blobs/sha256:ab", request{repo: "app", kind: "blobs", ref: "sha256:ab"}, true},
		{"app/blobs/uploads/", request{}, false},
		{"app/blobs/uploads/1", request{}, false},
		{"_catalog", request{}, false},
		{"app/tags/list", request{}, false},
		{"manifests/latest", request{}, false},
		{"app/manifests/", request{}, false},
	}
	for _, tt := range tests {
		got, ok := parseRequest(tt.path, "")
		if ok != tt.ok || got != tt.want {
			t.Errorf("parseRequest(%q) = %+v, %v; want %+v, %v", tt.path, got, ok, tt.want, tt.ok)
		}
	}
}
