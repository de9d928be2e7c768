package podhooks

import (
	"context"
	"encoding/base64"
	"fmt"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/pure/pullcreds"
)

// fakeSecrets are the Secrets of the pod's namespace by name.
type fakeSecrets map[string]*v1.Secret

func (f fakeSecrets) Secret(pod *v1.Pod, name string) (*v1.Secret, error) {
	if s, ok := f[name]; ok {
		return s, nil
	}
	return nil, fmt.Errorf("secret %s/%s not found", pod.Namespace, name)
}

func pullSecret(name, registry, user, password string) *v1.Secret {
	auth := base64.StdEncoding.EncodeToString([]byte(user + ":" + password))
	s := &v1.Secret{Type: v1.SecretTypeDockerConfigJson, Data: map[string][]byte{
		v1.DockerConfigJsonKey: []byte(`{"auths":{"` + registry + `":{"auth":"` + auth + `"}}}`)}}
	s.Namespace, s.Name = "default", name
	return s
}

type nodeCreds []pullcreds.Credential

func (n nodeCreds) Credentials(context.Context, string) ([]pullcreds.Credential, error) {
	return n, nil
}

func podWithPullSecrets(names ...string) *v1.Pod {
	pod := &v1.Pod{}
	pod.Namespace, pod.Name, pod.UID = "default", "web", "uid-1"
	for _, n := range names {
		pod.Spec.ImagePullSecrets = append(pod.Spec.ImagePullSecrets, v1.LocalObjectReference{Name: n})
	}
	return pod
}

func TestPullSecrets(t *testing.T) {
	secrets := fakeSecrets{
		"team":  pullSecret("team", "reg.io/team", "team", "pw1"),
		"host":  pullSecret("host", "reg.io", "host", "pw2"),
		"other": pullSecret("other", "other.io", "other", "pw3"),
		"bad": {ObjectMeta: pullSecret("bad", "", "", "").ObjectMeta, Type: v1.SecretTypeDockerConfigJson,
			Data: map[string][]byte{v1.DockerConfigJsonKey: []byte(`{"auths": hunter2}`)}},
	}
	node := nodeCreds{{Auth: &runtimeapi.AuthConfig{Username: "node"}, Source: pullcreds.Source{Kind: pullcreds.FromNode}}}
	for _, tc := range []struct {
		name    string
		pod     *v1.Pod
		node    pullcreds.Lookup
		users   []string
		events  []string
		wantErr string
	}{
		{name: "none: the node's", pod: podWithPullSecrets(), node: node, users: []string{"node"}},
		{name: "none and no node: anonymous", pod: podWithPullSecrets(), users: nil},
		{name: "the Secrets', most specific first, then the node's", pod: podWithPullSecrets("host", "other", "team"), node: node,
			users: []string{"team", "host", "node"}},
		{name: "a missing Secret: an event, the rest go on", pod: podWithPullSecrets("gone", "host", "", "also-gone"), node: node,
			users:  []string{"host", "node"},
			events: []string{"Warning FailedToRetrieveImagePullSecret Unable to retrieve some image pull secrets (gone, also-gone); attempting to pull the image may not succeed."}},
		{name: "a malformed Secret fails the pulls, named", pod: podWithPullSecrets("host", "bad"), node: node,
			wantErr: "image pull secret default/bad (kubernetes.io/dockerconfigjson): docker config is not valid JSON"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ev events
			h := PullSecrets{Secrets: secrets, Node: tc.node, Recorder: &ev}
			setup, err := h.Prepare(context.Background(), tc.pod)
			if err != nil {
				t.Fatal(err)
			}
			if setup.PullCredentials == nil {
				t.Fatal("no pull credentials handed over")
			}
			creds, err := setup.PullCredentials.Credentials(context.Background(), "reg.io/team/app:v1")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || strings.Contains(err.Error(), "hunter2") {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var users []string
			for _, c := range creds {
				users = append(users, c.Auth.GetUsername())
			}
			if !slices.Equal(users, tc.users) {
				t.Errorf("users %v, want %v", users, tc.users)
			}
			if !slices.Equal([]string(ev), tc.events) {
				t.Errorf("events %q, want %q", ev, tc.events)
			}
		})
	}
}

// podProviders stands for the credential provider plugins: its lookup
// answers with the pod's name, so the test sees it was made for the pod.
type podProviders struct{}

func (podProviders) ForPod(pod *v1.Pod) pullcreds.Lookup {
	return nodeCreds{{Auth: &runtimeapi.AuthConfig{Username: "plugin-for-" + pod.Name}, Source: pullcreds.Source{Kind: pullcreds.FromProvider, Provider: "p"}}}
}

// nilProviders is what the agent holds without plugins: a provider whose
// lookup for every pod is nil.
type nilProviders struct{}

func (nilProviders) ForPod(*v1.Pod) pullcreds.Lookup { return nil }

// The credential provider plugins come last, as in the kubelet's union
// (the pod's Secrets, the node's files, the plugins), asked for the pod;
// without plugins nothing is added.
func TestPullSecretsProviders(t *testing.T) {
	secrets := fakeSecrets{"host": pullSecret("host", "reg.io", "host", "pw2")}
	node := nodeCreds{{Auth: &runtimeapi.AuthConfig{Username: "node"}, Source: pullcreds.Source{Kind: pullcreds.FromNode}}}
	for _, tc := range []struct {
		name      string
		providers PodLookups
		users     []string
	}{
		{"plugins last", podProviders{}, []string{"host", "node", "plugin-for-web"}},
		{"no plugins", nilProviders{}, []string{"host", "node"}},
		{"no provider at all", nil, []string{"host", "node"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ev events
			h := PullSecrets{Secrets: secrets, Node: node, Providers: tc.providers, Recorder: &ev}
			setup, err := h.Prepare(context.Background(), podWithPullSecrets("host"))
			if err != nil {
				t.Fatal(err)
			}
			creds, err := setup.PullCredentials.Credentials(context.Background(), "reg.io/team/app:v1")
			if err != nil {
				t.Fatal(err)
			}
			var users []string
			for _, c := range creds {
				users = append(users, c.Auth.Username)
			}
			if !slices.Equal(users, tc.users) {
				t.Errorf("users %v, want %v", users, tc.users)
			}
		})
	}
}
