package podspec

import (
	"testing"

	v1 "k8s.io/api/core/v1"
)

func TestIsExtendedResourceName(t *testing.T) {
	for name, want := range map[v1.ResourceName]bool{
		"example.com/gpu": true, "nvidia.com/gpu": true, "cpu": false, "kubernetes.io/x": false, "foo.kubernetes.io/x": false,
		"requests.example.com/x": false, "example.com/": false, "hugepages-2Mi": false, "example.com/a b": false,
	} {
		if got := IsExtendedResourceName(name); got != want {
			t.Errorf("%s: %v, want %v", name, got, want)
		}
	}
}
