package registry

import (
	"slices"
	"testing"
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

func TestMirrorTargets(t *testing.T) {
	tests := []struct {
		ref  string
		want []string
	}{
		{"busybox:1.35", []string{"127.0.0.1:1/library/busybox:1.35", "127.0.0.1:1/docker.io/library/busybox:1.35"}},
		{"registry.k8s.io/pause:3.10", []string{"127.0.0.1:1/pause:3.10", "127.0.0.1:1/registry.k8s.io/pause:3.10"}},
		{"localhost:5000/app:dev", []string{"127.0.0.1:1/app:dev"}},
	}
	for _, tt := range tests {
		targets, err := mirrorTargets("127.0.0.1:1", tt.ref)
		if err != nil {
			t.Errorf("mirrorTargets(%q): %v", tt.ref, err)
			continue
		}
		var got []string
		for _, r := range targets {
			got = append(got, r.String())
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("mirrorTargets(%q) = %q, want %q", tt.ref, got, tt.want)
		}
	}
}
