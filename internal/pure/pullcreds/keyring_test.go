package pullcreds

import (
	"context"
	"encoding/base64"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"testing/quick"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Matches follows the kubelet's URLsMatch: ports equal, as many host
// labels each matching as a glob, the key's path a prefix.
func TestMatches(t *testing.T) {
	for _, tc := range []struct {
		key, repo string
		want      bool
	}{
		{"registry.example.com", "registry.example.com/app", true},
		{"registry.example.com", "registry.example.com", true},
		{"registry.example.com", "other.example.com/app", false},
		{"registry.example.com:5000", "registry.example.com:5000/app", true},
		{"registry.example.com:5000", "registry.example.com/app", false},
		{"registry.example.com", "registry.example.com:5000/app", false},
		{"127.0.0.1:5000", "127.0.0.1:5000/team/app", true},
		{"127.0.0.1:5001", "127.0.0.1:5000/team/app", false},
		{"*.example.com", "registry.example.com/app", true},
		{"*.example.com", "a.registry.example.com/app", false},
		{"*.example.com", "example.com/app", false},
		{"*.*.example.com", "a.registry.example.com/app", true},
		{"reg*.example.com", "registry.example.com/app", true},
		{"reg*.example.com", "other.example.com/app", false},
		{"registry.example.com/team", "registry.example.com/team/app", true},
		{"registry.example.com/team", "registry.example.com/other/app", false},
		// A plain string prefix, as the kubelet's.
		{"registry.example.com/team", "registry.example.com/teamster/app", true},
		{"[bad", "registry.example.com/app", false},
		{"registry.example.com", "%zz", false},
	} {
		if got := Matches(tc.key, tc.repo); got != tc.want {
			t.Errorf("Matches(%q, %q) = %v, want %v", tc.key, tc.repo, got, tc.want)
		}
	}
}

// Without wildcards, ports or paths, Matches is host equality.
func TestMatchesQuick(t *testing.T) {
	label := func(b byte) string { return string(rune('a' + b%3)) }
	f := func(k, r []byte) bool {
		if len(k) == 0 || len(r) == 0 {
			return true
		}
		var kl, rl []string
		for _, b := range k[:min(len(k), 3)] {
			kl = append(kl, label(b))
		}
		for _, b := range r[:min(len(r), 3)] {
			rl = append(rl, label(b))
		}
		key, repo := strings.Join(kl, "."), strings.Join(rl, ".")
		return Matches(key, repo+"/app") == (key == repo)
	}
	if err := quick.Check(f, nil); err != nil {
		t.Error(err)
	}
}

func src(name string) Source { return Source{Kind: FromSecret, Namespace: "ns", Name: name} }

// who names each credential by its source and user: the order tried.
func who(creds []Credential) []string {
	var out []string
	for _, c := range creds {
		out = append(out, c.Source.Name+":"+c.Auth.GetUsername())
	}
	return out
}

func TestKeyringLookup(t *testing.T) {
	var k Keyring
	k.Add(src("a"), Config{
		"registry.example.com":              {Username: "host"},
		"https://registry.example.com/team": {Username: "team"},
		"*.example.com":                     {Username: "wild"},
		"http://127.0.0.1:5000/v2/":         {Username: "local"},
		"https://index.docker.io/v1/":       {Username: "hub"},
		"%zz://bad":                         {Username: "bad"},
	})
	k.Add(src("b"), Config{"registry.example.com": {Username: "host2"}})
	for _, tc := range []struct {
		repo string
		want []string
	}{
		// Most specific first; two Secrets' credentials for one
		// location in the order added; a wildcard after the hosts it
		// sorts after (reverse lexical order, as the kubelet).
		{"registry.example.com/team/app", []string{"a:team", "a:host", "b:host2", "a:wild"}},
		{"registry.example.com/other", []string{"a:host", "b:host2", "a:wild"}},
		{"mirror.example.com/app", []string{"a:wild"}},
		{"127.0.0.1:5000/app", []string{"a:local"}},
		{"127.0.0.1:5001/app", nil},
		{"docker.io/library/busybox", []string{"a:hub"}},
		{"index.docker.io/library/busybox", []string{"a:hub"}},
		{"user/app", []string{"a:hub"}},
		{"quay.io/app", nil},
	} {
		if got := who(k.Lookup(tc.repo)); !slices.Equal(got, tc.want) {
			t.Errorf("Lookup(%q) = %v, want %v", tc.repo, got, tc.want)
		}
	}
	// The caller gets copies.
	k.Lookup("127.0.0.1:5000/app")[0].Auth.Username = "changed"
	if got := who(k.Lookup("127.0.0.1:5000/app")); !slices.Equal(got, []string{"a:local"}) {
		t.Errorf("after changing a copy: %v", got)
	}
}

func TestRepository(t *testing.T) {
	for image, want := range map[string]string{
		"busybox":      "docker.io/library/busybox",
		"busybox:1.36": "docker.io/library/busybox",
		"user/app@sha256:" + strings.Repeat("a", 64): "docker.io/user/app",
		"127.0.0.1:5000/team/app:v1":                 "127.0.0.1:5000/team/app",
		"registry.example.com/app":                   "registry.example.com/app",
	} {
		if got, err := Repository(image); err != nil || got != want {
			t.Errorf("Repository(%q) = %q, %v; want %q", image, got, err, want)
		}
	}
	if _, err := Repository("no spaces allowed"); err == nil {
		t.Error("Repository of an invalid name: no error")
	}
	var k Keyring
	if _, err := k.Credentials(context.Background(), "no spaces allowed"); err == nil {
		t.Error("Credentials of an invalid name: no error")
	}
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name    string
		parse   func([]byte) (Config, error)
		data    string
		want    Config
		wantErr string
	}{
		{"config.json", ParseConfigJSON,
			`{"auths":{"reg.io":{"username":"u","password":"p","email":"e"}}}`,
			Config{"reg.io": {Username: "u", Password: "p", Email: "e"}}, ""},
		{"auth replaces username and password", ParseConfigJSON,
			`{"auths":{"reg.io":{"username":"x","password":"y","auth":"` + b64("u:p:with:colons") + `"}}}`,
			Config{"reg.io": {Username: "u", Password: "p:with:colons"}}, ""},
		{"no auths", ParseConfigJSON, `{"credsStore":"desktop"}`, Config{}, ""},
		{"dockercfg", ParseDockercfg,
			`{"reg.io":{"auth":"` + b64("u:p") + `","email":"e"}}`,
			Config{"reg.io": {Username: "u", Password: "p", Email: "e"}}, ""},
		{"auth not base64", ParseConfigJSON, `{"auths":{"reg.io":{"auth":"!!"}}}`, nil, `docker config entry "reg.io": "auth" is not base64`},
		{"auth without colon", ParseDockercfg, `{"reg.io":{"auth":"` + b64("secretword") + `"}}`, nil, `"auth" is not base64 of "<username>:<password>"`},
		{"not JSON", ParseConfigJSON, `{"auths": secretword}`, nil, "not valid JSON (at byte 11)"},
		{"wrong type", ParseConfigJSON, `{"auths":{"reg.io":{"password":12345}}}`, nil, "has a number where a string belongs"},
		{"empty", ParseDockercfg, " \n", nil, "docker config is empty"},
		{"too big", ParseDockercfg, `{"a":"` + strings.Repeat("x", MaxConfigSize) + `"}`, nil, "more than the limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.parse([]byte(tc.data))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				// An error never quotes the document.
				for _, secret := range []string{"secretword", "12345", "with:colons"} {
					if strings.Contains(err.Error(), secret) {
						t.Errorf("error %q quotes the config", err)
					}
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

func secret(name string, typ v1.SecretType, key, data string) *v1.Secret {
	s := &v1.Secret{Type: typ, Data: map[string][]byte{key: []byte(data)}}
	s.Namespace, s.Name, s.UID = "ns", name, types.UID("uid-"+name)
	return s
}

func TestFromSecrets(t *testing.T) {
	json := secret("json", v1.SecretTypeDockerConfigJson, v1.DockerConfigJsonKey, `{"auths":{"reg.io":{"username":"j"}}}`)
	cfg := secret("cfg", v1.SecretTypeDockercfg, v1.DockerConfigKey, `{"reg.io/team":{"username":"c"}}`)
	opaque := secret("opaque", v1.SecretTypeOpaque, v1.DockerConfigJsonKey, `{"auths":{"reg.io":{"username":"o"}}}`)
	wrongKey := secret("wrongkey", v1.SecretTypeDockerConfigJson, v1.DockerConfigKey, `{"reg.io":{"username":"w"}}`)

	k, err := FromSecrets([]*v1.Secret{json, opaque, wrongKey, cfg})
	if err != nil {
		t.Fatal(err)
	}
	creds, err := k.Credentials(context.Background(), "reg.io/team/app:v1")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := who(creds), []string{"cfg:c", "json:j"}; !slices.Equal(got, want) {
		t.Errorf("credentials = %v, want %v", got, want)
	}
	if want := (Source{Kind: FromSecret, Namespace: "ns", Name: "cfg", UID: "uid-cfg"}); creds[0].Source != want {
		t.Errorf("source = %+v, want %+v", creds[0].Source, want)
	}

	if k, err := FromSecrets([]*v1.Secret{opaque, wrongKey}); k != nil || err != nil {
		t.Errorf("no docker config Secrets: %v, %v; want nil, nil", k, err)
	}

	bad := secret("bad", v1.SecretTypeDockerConfigJson, v1.DockerConfigJsonKey, `{"auths":{"reg.io":{"auth":"`+b64("secretword")+`"}}}`)
	_, err = FromSecrets([]*v1.Secret{json, bad})
	if err == nil || !strings.Contains(err.Error(), "image pull secret ns/bad (kubernetes.io/dockerconfigjson)") || strings.Contains(err.Error(), "secretword") {
		t.Errorf("malformed Secret: err = %v", err)
	}
}

type lookupFunc func(image string) ([]Credential, error)

func (f lookupFunc) Credentials(_ context.Context, image string) ([]Credential, error) {
	return f(image)
}

func TestUnion(t *testing.T) {
	one := func(name string) Lookup {
		return lookupFunc(func(string) ([]Credential, error) { return []Credential{{Auth: nil, Source: src(name)}}, nil })
	}
	boom := errors.New("boom")
	got, err := Union{one("a"), nil, (*Keyring)(nil), one("b")}.Credentials(context.Background(), "x")
	if err != nil || len(got) != 2 || got[0].Source.Name != "a" || got[1].Source.Name != "b" {
		t.Errorf("union = %v, %v", got, err)
	}
	if _, err := (Union{one("a"), Failed(boom), one("b")}).Credentials(context.Background(), "x"); !errors.Is(err, boom) {
		t.Errorf("union with a failing lookup: err = %v", err)
	}
}
