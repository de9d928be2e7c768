package credprovider

import (
	"testing"
)

// The kubelet's URLsMatchStr cases (keyring_test.go TestURLsMatch), and
// what nodelet's matchImages rely on.
func TestURLsMatch(t *testing.T) {
	for _, c := range []struct {
		glob, target string
		want         bool
	}{
		{"127.0.0.1:5000", "127.0.0.1:5000/private/app", true},
		{"127.0.0.1:5000", "127.0.0.1:5001/private/app", false},
		{"127.0.0.1", "127.0.0.1:5000/private/app", false}, // the port must be the same
		{"*.kubernetes.io", "prefix.kubernetes.io/app", true},
		{"*.kubernetes.io", "prefix.sub.kubernetes.io/app", false}, // one part per *
		{"*.kubernetes.io", "kubernetes.io/app", false},
		{"*.*.kubernetes.io", "prefix.sub.kubernetes.io/app", true},
		{"prefix.*.io", "prefix.kubernetes.io/app", true},
		{"*-good.kubernetes.io", "foo-good.kubernetes.io/app", true},
		{"*-good.kubernetes.io", "foo-bad.kubernetes.io/app", false},
		{"gcr.io/project", "gcr.io/project/app", true},
		{"gcr.io/project", "gcr.io/other/app", false},
		{"gcr.io/project/app", "gcr.io/project", false},
		{"kubernetes.io", "kubernetes.io", true},
		{"*.kubernetes.io:443", "a.kubernetes.io:443/app", true},
		{"docker.io", "docker.io/library/busybox", true},
		{"[", "docker.io/library/busybox", false}, // a bad pattern matches nothing
	} {
		if got := urlsMatch(c.glob, c.target); got != c.want {
			t.Errorf("urlsMatch(%q, %q) = %v, want %v", c.glob, c.target, got, c.want)
		}
	}
}

func TestRepository(t *testing.T) {
	for in, want := range map[string]string{
		"busybox":                            "docker.io/library/busybox",
		"busybox:1.36":                       "docker.io/library/busybox",
		"127.0.0.1:5000/private/app:v1":      "127.0.0.1:5000/private/app",
		"registry.example/app@sha256:" + sha: "registry.example/app",
	} {
		got, err := repository(in)
		if err != nil || got != want {
			t.Errorf("repository(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := repository("app:bad tag!"); err == nil {
		t.Error("repository(app:bad tag!): no error")
	}
}

const sha = "0000000000000000000000000000000000000000000000000000000000000000"

func TestKeyOf(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:5000":               "127.0.0.1:5000",
		"https://127.0.0.1:5000/":      "127.0.0.1:5000",
		"http://registry.example/v2/x": "registry.example/x",
		"registry.example/v1/":         "registry.example",
		"*.example.com/team":           "*.example.com/team",
	} {
		if got, ok := keyOf(in); !ok || got != want {
			t.Errorf("keyOf(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
	if _, ok := keyOf("https://bad host/%zz"); ok {
		t.Error("keyOf of an unparsable URL is ok")
	}
}

// The keyring order: more specific keys of a host first, each key's
// entries in provider order; Docker Hub's fallback key.
func TestLookupOrder(t *testing.T) {
	all := []entry{
		{key: "registry.example", username: "host", provider: 0},
		{key: "registry.example/team", username: "team", provider: 1},
		{key: "registry.example", username: "host2", provider: 1},
		{key: "other.example", username: "other", provider: 0},
		{key: "*.example", username: "glob", provider: 0},
		{key: defaultRegistryHost, username: "hub", provider: 0},
	}
	names := func(es []entry) (out []string) {
		for _, e := range es {
			out = append(out, e.username)
		}
		return out
	}
	for image, want := range map[string][]string{
		"registry.example/team/app":  {"team", "host", "host2", "glob"},
		"registry.example/app":       {"host", "host2", "glob"},
		"other.example/app":          {"other", "glob"},
		"docker.io/library/busybox":  {"hub"},
		"nowhere.example.com/app":    nil,
		"localhost:5000/library/app": nil,
	} {
		got := names(lookup(all, image))
		if len(got) != len(want) {
			t.Errorf("lookup(%q) = %v, want %v", image, got, want)
			continue
		}
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("lookup(%q) = %v, want %v", image, got, want)
				break
			}
		}
	}
}
