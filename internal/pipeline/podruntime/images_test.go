package podruntime

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/pipeline/podworker"
	"github.com/nodelet/nodelet/internal/pure/plan"
	"github.com/nodelet/nodelet/internal/pure/podsetup"
	"github.com/nodelet/nodelet/internal/pure/pullcreds"
)

// authRegistry is a runtime whose registry takes only the password
// "right" when asked with credentials, and lets anonymous pulls through
// only when open. It records the user of every pull ("" anonymous).
type authRegistry struct {
	Runtime // the image calls only
	open    bool

	mu    sync.Mutex
	users []string
}

func (r *authRegistry) ImageStatus(context.Context, *runtimeapi.ImageSpec) (*runtimeapi.ImageStatusResponse, error) {
	return &runtimeapi.ImageStatusResponse{}, nil
}

func (r *authRegistry) PullImage(_ context.Context, img *runtimeapi.ImageSpec, auth *runtimeapi.AuthConfig, _ *runtimeapi.PodSandboxConfig) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.users = append(r.users, auth.GetUsername())
	switch {
	case auth == nil && r.open, auth.GetPassword() == "right":
		return "sha256:" + img.Image, nil
	}
	return "", fmt.Errorf("pull %s as %q: 401 Unauthorized", img.Image, auth.GetUsername())
}

type credList []pullcreds.Credential

func (l credList) Credentials(context.Context, string) ([]pullcreds.Credential, error) { return l, nil }

func cred(user, password, secret string) pullcreds.Credential {
	return pullcreds.Credential{
		Auth:   &runtimeapi.AuthConfig{Username: user, Password: password},
		Source: pullcreds.Source{Kind: pullcreds.FromSecret, Namespace: "ns", Name: secret},
	}
}

// The puller tries the pod's credentials as the kubelet does: in order
// until one works; anonymously only when none is for the image.
func TestPullWithCredentials(t *testing.T) {
	for _, tc := range []struct {
		name     string
		open     bool
		creds    pullcreds.Lookup
		tried    string // users, "" anonymous
		reason   string // "" pulled
		message  string
		byCredOf string // the Secret whose credential pulled, "" anonymous
	}{
		{name: "no lookup: anonymous", open: true, creds: nil, tried: ""},
		{name: "no credential for the image: anonymous", open: true, creds: credList(nil), tried: ""},
		{name: "anonymous refused", creds: credList(nil), tried: "", reason: plan.ReasonErrImagePull,
			message: `pull reg.io/app:v1 as "": 401 Unauthorized`},
		{name: "second credential works", creds: credList{cred("a", "wrong", "s1"), cred("b", "right", "s2")},
			tried: "a,b", byCredOf: "s2"},
		{name: "first works: the rest not tried", creds: credList{cred("a", "right", "s1"), cred("b", "wrong", "s2")},
			tried: "a", byCredOf: "s1"},
		{name: "all fail: never anonymous, every error", open: true, creds: credList{cred("a", "x", "s1"), cred("b", "y", "s2")},
			tried: "a,b", reason: plan.ReasonErrImagePull,
			message: `[pull reg.io/app:v1 as "a": 401 Unauthorized, pull reg.io/app:v1 as "b": 401 Unauthorized]`},
		{name: "lookup fails: no pull", open: true, creds: pullcreds.Failed(errors.New("image pull secret ns/bad: not valid JSON")),
			tried: "-", reason: plan.ReasonErrImagePull,
			message: `image pull secret ns/bad: not valid JSON`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt := &authRegistry{open: tc.open}
			p := newImagePuller(rt, 1, clocktesting.NewFakeClock(time.Unix(0, 0)))
			c := &v1.Container{Name: "app", Image: "reg.io/app:v1", ImagePullPolicy: v1.PullIfNotPresent}
			img, err := p.ensure(context.Background(), c, nil, tc.creds, nil, nil)
			tried := strings.Join(rt.users, ",")
			if rt.users == nil {
				tried = "-"
			}
			if tried != tc.tried {
				t.Errorf("tried %q, want %q", tried, tc.tried)
			}
			if tc.reason != "" {
				var pe *pullError
				if !errors.As(err, &pe) || pe.waiting.Reason != tc.reason || pe.waiting.Message != tc.message {
					t.Fatalf("err = %v, want %s: %s", err, tc.reason, tc.message)
				}
				return
			}
			if err != nil || !img.pulled || img.ref != "sha256:reg.io/app:v1" {
				t.Fatalf("image %+v, err %v", img, err)
			}
			got := ""
			if img.cred != nil {
				got = img.cred.Source.Name
			}
			if got != tc.byCredOf {
				t.Errorf("pulled with the credential of %q, want %q", got, tc.byCredOf)
			}
		})
	}
}

// The runtime manager pulls with the credentials the hooks handed over.
func TestSyncPodPullsWithSetupCredentials(t *testing.T) {
	f := newFixture(t)
	rt := &authRegistry{}
	f.m.pulls = newImagePuller(rt, 1, f.clock)
	pod := testPod()
	pod.Spec.Containers = pod.Spec.Containers[:1]
	setup := podsetup.Setup{PullCredentials: credList{cred("u", "right", "pull")}}
	if _, err := f.m.syncPod(context.Background(), podworker.SyncRequest{Pod: pod, Setup: setup}); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(rt.users, ","); got != "u" {
		t.Errorf("pulled as %q, want u", got)
	}
}

// A failed pull's waiting state is the kubelet's (evalCRIPullErr): the
// runtime's error as it is, except the CRI's RegistryUnavailable and
// SignatureValidationFailed, which become the reason and a sentence.
func TestPullFailure(t *testing.T) {
	for _, tc := range []struct {
		err                 string
		wantReason, wantMsg string
	}{
		{"rpc error: code = NotFound desc = failed to pull: not found", "ErrImagePull", "rpc error: code = NotFound desc = failed to pull: not found"},
		{"RegistryUnavailable: dial tcp: connection refused", "RegistryUnavailable",
			"image pull failed for reg.io/app:v1 because the registry is unavailable: dial tcp: connection refused"},
		{"SignatureValidationFailed", "SignatureValidationFailed",
			"image pull failed for reg.io/app:v1 because the signature validation failed"},
		{"rpc error: RegistryUnavailable later in the text", "ErrImagePull", "rpc error: RegistryUnavailable later in the text"},
	} {
		w := pullFailure("reg.io/app:v1", errors.New(tc.err))
		if w.Reason != tc.wantReason || w.Message != tc.wantMsg {
			t.Errorf("%q: got %s %q, want %s %q", tc.err, w.Reason, w.Message, tc.wantReason, tc.wantMsg)
		}
	}
}

// A pod's pull history goes once its back-off ended long ago (twice the
// longest back-off), so pods that are gone leave nothing behind.
func TestPullBackOffsForgotten(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(0, 0))
	p := newImagePuller(&authRegistry{}, 1, clk)
	c := &v1.Container{Name: "c", Image: "example.com/private:v1"}
	sandbox := func(uid string) *runtimeapi.PodSandboxConfig {
		return &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Uid: uid}}
	}
	if _, err := p.pull(t.Context(), c, &runtimeapi.ImageSpec{Image: c.Image}, sandbox("gone"), nil); err == nil {
		t.Fatal("pull worked")
	}
	clk.Step(2*plan.PullBackOffMax + plan.PullBackOffInitial + time.Second)
	if _, err := p.pull(t.Context(), c, &runtimeapi.ImageSpec{Image: c.Image}, sandbox("new"), nil); err == nil {
		t.Fatal("pull worked")
	}
	if _, ok := p.backoff["gone_"+c.Image]; ok || len(p.backoff) != 1 {
		t.Errorf("histories %v: want the new pod's alone", p.backoff)
	}
}
