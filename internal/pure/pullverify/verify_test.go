package pullverify

import (
	"fmt"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/pure/pullcreds"
)

func secretCred(ns, name, uid, password string) pullcreds.Credential {
	return pullcreds.Credential{
		Auth:   &runtimeapi.AuthConfig{Username: "u", Password: password, ServerAddress: "reg.example"},
		Source: pullcreds.Source{Kind: pullcreds.FromSecret, Namespace: ns, Name: name, UID: uid},
	}
}

func recordOf(image string, c Credentials) *PulledRecord {
	name, _ := TrimTagDigest(image)
	return &PulledRecord{APIVersion: APIVersion, Kind: KindPulledRecord, ImageRef: "sha256:img",
		CredentialMapping: map[string]Credentials{name: c}}
}

const img = "reg.example/team/app:1"

// The policy decides first, from whether nodelet pulled the image; then the
// record and the pod's credentials do.
func TestVerifyPolicies(t *testing.T) {
	allow, err := ParseAllowlist([]string{"reg.example/team/*"})
	if err != nil {
		t.Fatal(err)
	}
	pulledWithSecret := recordOf(img, Credentials{KubernetesSecrets: []Secret{{UID: "u1", Namespace: "ns", Name: "pull", CredentialHash: Hash(secretCred("ns", "pull", "u1", "pw"))}}})
	none := &[]pullcreds.Credential{}
	// facts: nothing recorded (preloaded), a pull intent only, a record
	// with a Secret and a pod without credentials.
	cases := []struct {
		name   string
		facts  Facts
		policy map[Policy]Step
	}{
		{"preloaded", Facts{Image: img, ImageRef: "sha256:img", Pod: none},
			map[Policy]Step{NeverVerify: Use, NeverVerifyPreloadedImages: Use, NeverVerifyAllowlistedImages: Use, AlwaysVerify: Pull}},
		{"preloaded, not allowlisted", Facts{Image: "other.example/app:1", ImageRef: "sha256:img", Pod: none},
			map[Policy]Step{NeverVerify: Use, NeverVerifyPreloadedImages: Use, NeverVerifyAllowlistedImages: Pull, AlwaysVerify: Pull}},
		{"intent only (crashed during a pull)", Facts{Image: img, ImageRef: "sha256:img", Intent: true, Pod: none},
			map[Policy]Step{NeverVerify: Use, NeverVerifyPreloadedImages: Pull, NeverVerifyAllowlistedImages: Use, AlwaysVerify: Pull}},
		{"pulled with a Secret, pod has none", Facts{Image: img, ImageRef: "sha256:img", Record: pulledWithSecret, Pod: none},
			map[Policy]Step{NeverVerify: Use, NeverVerifyPreloadedImages: Pull, NeverVerifyAllowlistedImages: Use, AlwaysVerify: Pull}},
		{"record unreadable", Facts{Image: img, ImageRef: "sha256:img", RecordUnreadable: true, Pod: none},
			map[Policy]Step{NeverVerify: Pull, NeverVerifyPreloadedImages: Pull, NeverVerifyAllowlistedImages: Pull, AlwaysVerify: Pull}},
		{"no image ID", Facts{Image: img, Pod: none},
			map[Policy]Step{NeverVerify: Pull, NeverVerifyPreloadedImages: Pull, NeverVerifyAllowlistedImages: Pull, AlwaysVerify: Pull}},
	}
	for _, tc := range cases {
		for _, p := range []Policy{NeverVerify, NeverVerifyPreloadedImages, NeverVerifyAllowlistedImages, AlwaysVerify} {
			f := tc.facts
			f.Policy, f.Allowlist = p, allow
			if got := Verify(f); got.Step != tc.policy[p] {
				t.Errorf("%s, %s: %v (%s), want %v", tc.name, p, got.Step, got.Reason, tc.policy[p])
			}
		}
	}
}

// Under a policy that verifies, the record and the pod's credentials
// decide, in the kubelet's order.
func TestVerifyCredentials(t *testing.T) {
	pod := secretCred("ns", "pull", "u1", "pw")
	podHash := Hash(pod)
	sa := pullcreds.Credential{Auth: &runtimeapi.AuthConfig{RegistryToken: "t"},
		Source: pullcreds.Source{Kind: pullcreds.FromProvider, Provider: "p", Namespace: "ns", Name: "default", UID: "sa1"}}
	nodeCred := pullcreds.Credential{Auth: &runtimeapi.AuthConfig{Username: "n"}, Source: pullcreds.Source{Kind: pullcreds.FromNode}}
	many := make([]Secret, rememberLimit)
	for i := range many {
		many[i] = Secret{UID: fmt.Sprint("x", i), Namespace: "ns", Name: fmt.Sprint("s", i), CredentialHash: fmt.Sprint("h", i)}
	}
	manyWithCoords := append([]Secret{{UID: "u1", Namespace: "ns", Name: "pull", CredentialHash: "old"}}, many...)
	manyWithHash := append([]Secret{{UID: "u9", Namespace: "other", Name: "copy", CredentialHash: podHash}}, many...)
	cases := []struct {
		name     string
		record   *PulledRecord
		pod      *[]pullcreds.Credential
		want     Step
		remember *Secret
	}{
		{name: "no record", want: Pull},
		{name: "record for another image name", record: recordOf("reg.example/team/other:1", Credentials{NodePodsAccessible: true}), want: Pull},
		{name: "record without credentials (found after a crash)", record: recordOf(img, Credentials{}), want: Pull},
		{name: "pulled without credentials", record: recordOf(img, Credentials{NodePodsAccessible: true}), want: Use},
		{name: "pulled with a Secret: look up the pod's first",
			record: recordOf(img, Credentials{KubernetesSecrets: []Secret{{UID: "u1", Namespace: "ns", Name: "pull", CredentialHash: podHash}}}), want: LookUpCredentials},
		{name: "same Secret, same content",
			record: recordOf(img, Credentials{KubernetesSecrets: []Secret{{UID: "u1", Namespace: "ns", Name: "pull", CredentialHash: podHash}}}),
			pod:    &[]pullcreds.Credential{pod}, want: Use},
		{name: "another Secret with the same content: use, remember it",
			record: recordOf(img, Credentials{KubernetesSecrets: []Secret{{UID: "u9", Namespace: "other", Name: "copy", CredentialHash: podHash}}}),
			pod:    &[]pullcreds.Credential{pod}, want: Use, remember: &Secret{UID: "u1", Namespace: "ns", Name: "pull", CredentialHash: podHash}},
		{name: "same Secret, rotated content: use, remember the new hash",
			record: recordOf(img, Credentials{KubernetesSecrets: []Secret{{UID: "u1", Namespace: "ns", Name: "pull", CredentialHash: "old"}}}),
			pod:    &[]pullcreds.Credential{pod}, want: Use, remember: &Secret{UID: "u1", Namespace: "ns", Name: "pull", CredentialHash: podHash}},
		{name: "same name, recreated Secret (other UID), other content",
			record: recordOf(img, Credentials{KubernetesSecrets: []Secret{{UID: "u0", Namespace: "ns", Name: "pull", CredentialHash: "old"}}}),
			pod:    &[]pullcreds.Credential{pod}, want: Pull},
		{name: "a Secret of another namespace with the same name",
			record: recordOf(img, Credentials{KubernetesSecrets: []Secret{{UID: "u1", Namespace: "other", Name: "pull", CredentialHash: "x"}}}),
			pod:    &[]pullcreds.Credential{pod}, want: Pull},
		{name: "an empty recorded hash never matches",
			record: recordOf(img, Credentials{KubernetesSecrets: []Secret{{UID: "u9", Namespace: "o", Name: "n"}}}),
			pod:    &[]pullcreds.Credential{{Source: pullcreds.Source{Kind: pullcreds.FromSecret, Namespace: "ns", Name: "pull", UID: "u1"}}}, want: Pull},
		{name: "pod without credentials",
			record: recordOf(img, Credentials{KubernetesSecrets: []Secret{{UID: "u1", Namespace: "ns", Name: "pull", CredentialHash: podHash}}}),
			pod:    &[]pullcreds.Credential{}, want: Pull},
		{name: "node credentials count for nothing against a Secret",
			record: recordOf(img, Credentials{KubernetesSecrets: []Secret{{UID: "u1", Namespace: "ns", Name: "pull", CredentialHash: Hash(nodeCred)}}}),
			pod:    &[]pullcreds.Credential{nodeCred}, want: Pull},
		{name: "the pod's service account pulled it",
			record: recordOf(img, Credentials{KubernetesServiceAccounts: []ServiceAccount{{UID: "sa1", Namespace: "ns", Name: "default"}}}),
			pod:    &[]pullcreds.Credential{sa}, want: Use},
		{name: "another service account pulled it",
			record: recordOf(img, Credentials{KubernetesServiceAccounts: []ServiceAccount{{UID: "sa2", Namespace: "ns", Name: "builder"}}}),
			pod:    &[]pullcreds.Credential{sa}, want: Pull},
		{name: "at the limit, coordinates alone no longer match",
			record: recordOf(img, Credentials{KubernetesSecrets: manyWithCoords}),
			pod:    &[]pullcreds.Credential{pod}, want: Pull},
		{name: "at the limit, a hash still matches, nothing remembered",
			record: recordOf(img, Credentials{KubernetesSecrets: manyWithHash}),
			pod:    &[]pullcreds.Credential{pod}, want: Use},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Verify(Facts{Policy: AlwaysVerify, Image: img, ImageRef: "sha256:img", Record: tc.record, Pod: tc.pod})
			if got.Step != tc.want {
				t.Fatalf("step %v (%s), want %v", got.Step, got.Reason, tc.want)
			}
			if got.Reason == "" {
				t.Error("no reason")
			}
			switch {
			case tc.remember == nil && got.Remember != nil:
				t.Errorf("remembers %+v, want nothing", got.Remember)
			case tc.remember != nil && (got.Remember == nil || len(got.Remember.KubernetesSecrets) != 1 || got.Remember.KubernetesSecrets[0] != *tc.remember):
				t.Errorf("remembers %+v, want %+v", got.Remember, *tc.remember)
			}
		})
	}
}

func TestParseAllowlist(t *testing.T) {
	cases := []struct {
		patterns []string
		err      string
		match    map[string]bool
	}{
		{patterns: []string{"reg.example/team/*", "docker.io/library/busybox"}, match: map[string]bool{
			"reg.example/team/app:1": true, "reg.example/team/sub/app@sha256:" + strings.Repeat("a", 64): true,
			"reg.example/teamx/app:1": false, "docker.io/library/busybox:1.35": true, "busybox": false,
			"docker.io/library/busybox2": false,
		}},
		{patterns: []string{" reg.example/*"}, err: "leading/trailing spaces"},
		{patterns: []string{""}, err: "too short"},
		{patterns: []string{"*"}, err: "only patterns ending with '/*'"},
		{patterns: []string{"reg.example/*/app"}, err: "only patterns ending with '/*'"},
		{patterns: []string{"reg.example/app*"}, err: "only patterns ending with '/*'"},
		{patterns: []string{"/*"}, err: "registry hostname"},
		{patterns: []string{"reg.example/app:1"}, err: "neither tag nor digest"},
		{patterns: []string{"Reg.Example/App"}, err: "failed to parse"},
	}
	for _, tc := range cases {
		a, err := ParseAllowlist(tc.patterns)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: error %v, want one with %q", tc.patterns, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%q: %v", tc.patterns, err)
		}
		for image, want := range tc.match {
			if got := a.Matches(image); got != want {
				t.Errorf("%q matches %q: %v, want %v", tc.patterns, image, got, want)
			}
		}
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		policy Policy
		allow  []string
		err    string
	}{
		{policy: NeverVerifyPreloadedImages},
		{policy: NeverVerify},
		{policy: AlwaysVerify},
		{policy: NeverVerifyAllowlistedImages, allow: []string{"reg.example/*"}},
		{policy: "", err: "Valid options are"},
		{policy: "Sometimes", err: `option "Sometimes" specified for imagePullCredentialsVerificationPolicy`},
		{policy: AlwaysVerify, allow: []string{"reg.example/*"}, err: "can't set `preloadedImagesVerificationAllowlist`"},
		{policy: NeverVerifyAllowlistedImages, allow: []string{"reg.example/a:1"}, err: "invalid image pattern"},
	} {
		err := Validate(tc.policy, tc.allow)
		if (err == nil) != (tc.err == "") || err != nil && !strings.Contains(err.Error(), tc.err) {
			t.Errorf("Validate(%q, %q) = %v, want %q", tc.policy, tc.allow, err, tc.err)
		}
	}
}

func TestTrimTagDigest(t *testing.T) {
	d := "sha256:" + strings.Repeat("b", 64)
	for in, want := range map[string]string{
		"nginx":                     "nginx",
		"nginx:1.2":                 "nginx",
		"127.0.0.1:5000/app:v1":     "127.0.0.1:5000/app",
		"127.0.0.1:5000/app":        "127.0.0.1:5000/app",
		"reg.example/a/b:t@" + d:    "reg.example/a/b",
		"reg.example/a/b@" + d:      "reg.example/a/b",
		"docker.io/library/busybox": "docker.io/library/busybox",
	} {
		got, err := TrimTagDigest(in)
		if err != nil || got != want {
			t.Errorf("TrimTagDigest(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := TrimTagDigest("reg.example/Upper"); err == nil {
		t.Error("an invalid reference parsed")
	}
}
