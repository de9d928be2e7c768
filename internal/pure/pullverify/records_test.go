package pullverify

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/pure/pullcreds"
)

var (
	t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	t1 = t0.Add(time.Minute)
)

func TestCredentialsOf(t *testing.T) {
	sec := secretCred("ns", "pull", "u1", "pw")
	for _, tc := range []struct {
		name string
		used *pullcreds.Credential
		want Credentials
	}{
		{"anonymous", nil, Credentials{NodePodsAccessible: true}},
		{"node config file", &pullcreds.Credential{Auth: &runtimeapi.AuthConfig{Username: "n"}, Source: pullcreds.Source{Kind: pullcreds.FromNode}},
			Credentials{NodePodsAccessible: true}},
		{"plugin without a service account", &pullcreds.Credential{Auth: &runtimeapi.AuthConfig{Username: "p"}, Source: pullcreds.Source{Kind: pullcreds.FromProvider, Provider: "ecr"}},
			Credentials{NodePodsAccessible: true}},
		{"plugin with a service account", &pullcreds.Credential{Auth: &runtimeapi.AuthConfig{Username: "p"},
			Source: pullcreds.Source{Kind: pullcreds.FromProvider, Provider: "ecr", Namespace: "ns", Name: "sa", UID: "sa1"}},
			Credentials{KubernetesServiceAccounts: []ServiceAccount{{UID: "sa1", Namespace: "ns", Name: "sa"}}}},
		{"Secret", &sec, Credentials{KubernetesSecrets: []Secret{{UID: "u1", Namespace: "ns", Name: "pull", CredentialHash: Hash(sec)}}}},
	} {
		if got := CredentialsOf(tc.used); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// The hash depends on every field of the credential and on nothing of its
// source; no two field splits share it; the secret is not in it.
func TestHash(t *testing.T) {
	a := secretCred("ns", "pull", "u1", "pw")
	b := secretCred("other", "x", "u2", "pw")
	if Hash(a) != Hash(b) {
		t.Error("the hash depends on where the credential came from")
	}
	c := secretCred("ns", "pull", "u1", "pw2")
	if Hash(a) == Hash(c) {
		t.Error("the hash does not depend on the password")
	}
	split1 := pullcreds.Credential{Auth: &runtimeapi.AuthConfig{Username: "ab", Password: "c"}}
	split2 := pullcreds.Credential{Auth: &runtimeapi.AuthConfig{Username: "a", Password: "bc"}}
	if Hash(split1) == Hash(split2) {
		t.Error("two splits of the same bytes hash alike")
	}
	if Hash(pullcreds.Credential{}) != "" {
		t.Error("no credential has a hash")
	}
	if h := Hash(a); len(h) != 64 || strings.Contains(h, "pw") {
		t.Errorf("hash %q", h)
	}
}

func TestMerge(t *testing.T) {
	s1 := Secret{UID: "u1", Namespace: "ns", Name: "a", CredentialHash: "h1"}
	s1new := Secret{UID: "u1", Namespace: "ns", Name: "a", CredentialHash: "h1b"}
	s2 := Secret{UID: "u2", Namespace: "ns", Name: "b", CredentialHash: "h2"}
	sa := ServiceAccount{UID: "sa", Namespace: "ns", Name: "default"}
	const image = "reg.example/app:1"
	withCreds := func(c Credentials) *PulledRecord {
		return &PulledRecord{APIVersion: APIVersion, Kind: KindPulledRecord, LastUpdatedTime: t0, ImageRef: "sha256:x",
			CredentialMapping: map[string]Credentials{"reg.example/app": c}}
	}
	for _, tc := range []struct {
		name    string
		rec     *PulledRecord
		creds   *Credentials
		want    *PulledRecord
		changed bool
	}{
		{name: "new record", creds: &Credentials{KubernetesSecrets: []Secret{s2, s1}},
			want: withCreds(Credentials{KubernetesSecrets: []Secret{s1, s2}}), changed: true},
		{name: "new record, unknown credentials", want: &PulledRecord{APIVersion: APIVersion, Kind: KindPulledRecord, ImageRef: "sha256:x",
			CredentialMapping: map[string]Credentials{}}, changed: true},
		{name: "nothing new", rec: withCreds(Credentials{KubernetesSecrets: []Secret{s1}}), creds: &Credentials{KubernetesSecrets: []Secret{s1}},
			want: withCreds(Credentials{KubernetesSecrets: []Secret{s1}})},
		{name: "unknown credentials change nothing", rec: withCreds(Credentials{KubernetesSecrets: []Secret{s1}}),
			want: withCreds(Credentials{KubernetesSecrets: []Secret{s1}})},
		{name: "a second Secret", rec: withCreds(Credentials{KubernetesSecrets: []Secret{s2}}), creds: &Credentials{KubernetesSecrets: []Secret{s1}},
			want: withCreds(Credentials{KubernetesSecrets: []Secret{s1, s2}}), changed: true},
		{name: "a Secret's new hash replaces its old", rec: withCreds(Credentials{KubernetesSecrets: []Secret{s1, s2}}), creds: &Credentials{KubernetesSecrets: []Secret{s1new}},
			want: withCreds(Credentials{KubernetesSecrets: []Secret{s1new, s2}}), changed: true},
		{name: "a service account beside Secrets", rec: withCreds(Credentials{KubernetesSecrets: []Secret{s1}}), creds: &Credentials{KubernetesServiceAccounts: []ServiceAccount{sa}},
			want: withCreds(Credentials{KubernetesSecrets: []Secret{s1}, KubernetesServiceAccounts: []ServiceAccount{sa}}), changed: true},
		{name: "node-wide replaces Secrets", rec: withCreds(Credentials{KubernetesSecrets: []Secret{s1}}), creds: &Credentials{NodePodsAccessible: true},
			want: withCreds(Credentials{NodePodsAccessible: true}), changed: true},
		{name: "node-wide stays", rec: withCreds(Credentials{NodePodsAccessible: true}), creds: &Credentials{KubernetesSecrets: []Secret{s1}},
			want: withCreds(Credentials{NodePodsAccessible: true})},
		{name: "a record without credentials learns them", rec: withCreds(Credentials{}), creds: &Credentials{KubernetesSecrets: []Secret{s1}},
			want: withCreds(Credentials{KubernetesSecrets: []Secret{s1}}), changed: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var before []byte
			if tc.rec != nil {
				before, _ = json.Marshal(tc.rec)
			}
			got, changed, err := Merge(tc.rec, image, "sha256:x", tc.creds, t1)
			if err != nil {
				t.Fatal(err)
			}
			if changed != tc.changed {
				t.Errorf("changed %v, want %v", changed, tc.changed)
			}
			want := *tc.want
			if changed {
				want.LastUpdatedTime = t1
			}
			if !reflect.DeepEqual(normalizeEmpty(got), normalizeEmpty(want)) {
				t.Errorf("got  %+v\nwant %+v", got, want)
			}
			if tc.rec != nil {
				after, _ := json.Marshal(tc.rec)
				if string(after) != string(before) {
					t.Error("Merge modified its input")
				}
			}
		})
	}
	if _, _, err := Merge(nil, "Not/Valid", "sha256:x", nil, t1); err == nil {
		t.Error("an image name that does not parse merged")
	}
}

// normalizeEmpty makes nil and empty lists alike.
func normalizeEmpty(r PulledRecord) PulledRecord {
	b, _ := json.Marshal(r)
	var out PulledRecord
	_ = json.Unmarshal(b, &out)
	return out
}
