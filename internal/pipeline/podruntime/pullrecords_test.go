package podruntime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/pipeline/podworker"
	"github.com/nodelet/nodelet/internal/pure/plan"
	"github.com/nodelet/nodelet/internal/pure/pullcreds"
)

// presentRegistry is authRegistry with the image already on the node.
type presentRegistry struct{ authRegistry }

func (r *presentRegistry) ImageStatus(_ context.Context, img *runtimeapi.ImageSpec) (*runtimeapi.ImageStatusResponse, error) {
	return &runtimeapi.ImageStatusResponse{Image: &runtimeapi.Image{Id: "sha256:present", RepoTags: []string{img.Image}}}, nil
}

// fakeRecords answers MustPull with must (or err) and logs every call.
type fakeRecords struct {
	disabled bool
	must     bool
	err      error
	startErr error
	lookedUp []pullcreds.Credential
	mu       sync.Mutex
	calls    []string
}

func (f *fakeRecords) log(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, fmt.Sprintf(format, args...))
}

func (f *fakeRecords) Enabled() bool { return !f.disabled }

func (f *fakeRecords) MustPull(ctx context.Context, image, imageRef string, creds func(context.Context) ([]pullcreds.Credential, error)) (bool, string, error) {
	f.log("check %s %s", image, imageRef)
	c, err := creds(ctx)
	if err != nil {
		return true, "", err
	}
	f.lookedUp = c
	return f.must, "test", f.err
}

func (f *fakeRecords) PullStarting(_ context.Context, image string) error {
	f.log("intent %s", image)
	return f.startErr
}

func (f *fakeRecords) PullSucceeded(_ context.Context, image, imageRef string, used *pullcreds.Credential) {
	by := "anonymous"
	if used != nil {
		by = used.Source.Name
	}
	f.log("pulled %s %s by %s", image, imageRef, by)
}

func (f *fakeRecords) PullFailed(_ context.Context, image string) { f.log("failed %s", image) }

// A present image is used only as the records allow; otherwise the pod
// pulls it with its own credentials (the registry's 401 when it has
// none), or with pull policy Never is told the image is not present. Every
// pull is between an intent and its outcome.
func TestPresentImageVerified(t *testing.T) {
	const img = "reg.io/app:v1"
	for _, tc := range []struct {
		name     string
		policy   v1.PullPolicy
		records  *fakeRecords
		creds    pullcreds.Lookup
		calls    string // records' calls, ";"-joined
		tried    string // users the registry saw, "-" none
		reason   string // "" usable
		message  string
		verified bool
	}{
		{name: "records allow", policy: v1.PullIfNotPresent, records: &fakeRecords{}, creds: credList{cred("u", "right", "pull")},
			calls: "check reg.io/app:v1 sha256:present", tried: "-", verified: true},
		{name: "gate off: not asked", policy: v1.PullIfNotPresent, records: &fakeRecords{disabled: true, must: true},
			calls: "", tried: "-"},
		{name: "must pull, pod without credentials: the registry's 401", policy: v1.PullIfNotPresent, records: &fakeRecords{must: true},
			calls: "check reg.io/app:v1 sha256:present;intent reg.io/app:v1;failed reg.io/app:v1", tried: "",
			reason: plan.ReasonErrImagePull, message: `pull reg.io/app:v1 as "": 401 Unauthorized`},
		{name: "must pull, pod with the Secret: pulled and recorded", policy: v1.PullIfNotPresent, records: &fakeRecords{must: true},
			creds: credList{cred("u", "right", "pull")},
			calls: "check reg.io/app:v1 sha256:present;intent reg.io/app:v1;pulled reg.io/app:v1 sha256:reg.io/app:v1 by pull", tried: "u"},
		{name: "must pull with policy Never: not present", policy: v1.PullNever, records: &fakeRecords{must: true},
			calls: "check reg.io/app:v1 sha256:present", tried: "-",
			reason: plan.ReasonErrImageNeverPull, message: `Container image "reg.io/app:v1" is not present with pull policy of Never`},
		{name: "policy Never, records allow", policy: v1.PullNever, records: &fakeRecords{},
			calls: "check reg.io/app:v1 sha256:present", tried: "-", verified: true},
		{name: "check fails: pull", policy: v1.PullIfNotPresent, records: &fakeRecords{err: errors.New("boom")},
			creds: credList{cred("u", "right", "pull")},
			calls: "check reg.io/app:v1 sha256:present;intent reg.io/app:v1;pulled reg.io/app:v1 sha256:reg.io/app:v1 by pull", tried: "u"},
		{name: "intent cannot be written: no pull", policy: v1.PullIfNotPresent, records: &fakeRecords{must: true, startErr: errors.New("disk full")},
			calls: "check reg.io/app:v1 sha256:present;intent reg.io/app:v1", tried: "-", reason: plan.ReasonErrImagePull,
			message: `failed to record image pull intent for container image "reg.io/app:v1": disk full`},
		{name: "Always pulls without asking", policy: v1.PullAlways, records: &fakeRecords{},
			calls: "intent reg.io/app:v1;pulled reg.io/app:v1 sha256:reg.io/app:v1 by anonymous", tried: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt := &presentRegistry{authRegistry{open: tc.policy == v1.PullAlways}}
			p := newImagePuller(rt, 1, clocktesting.NewFakeClock(time.Unix(0, 0))).withRecords(tc.records, slog.New(slog.DiscardHandler))
			c := &v1.Container{Name: "app", Image: img, ImagePullPolicy: tc.policy}
			got, err := p.ensure(context.Background(), c, nil, tc.creds, nil, nil)
			if calls := strings.Join(tc.records.calls, ";"); calls != tc.calls {
				t.Errorf("records' calls\n got %s\nwant %s", calls, tc.calls)
			}
			tried := strings.Join(rt.users, ",")
			if rt.users == nil {
				tried = "-"
			}
			if tried != tc.tried {
				t.Errorf("registry saw %q, want %q", tried, tc.tried)
			}
			if tc.reason != "" {
				var pe *pullError
				if !errors.As(err, &pe) || pe.waiting.Reason != tc.reason || pe.waiting.Message != tc.message {
					t.Fatalf("err = %v, want %s: %s", err, tc.reason, tc.message)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.verified != tc.verified {
				t.Errorf("verified %v, want %v", got.verified, tc.verified)
			}
		})
	}
}

// The records are given the pod's credentials for the image when they
// ask for them.
func TestRecordsGetPodCredentials(t *testing.T) {
	rec := &fakeRecords{}
	rt := &presentRegistry{}
	p := newImagePuller(rt, 1, clocktesting.NewFakeClock(time.Unix(0, 0))).withRecords(rec, slog.New(slog.DiscardHandler))
	c := &v1.Container{Name: "app", Image: "reg.io/app:v1", ImagePullPolicy: v1.PullIfNotPresent}
	if _, err := p.ensure(context.Background(), c, nil, credList{cred("u", "right", "pull")}, nil, nil); err != nil {
		t.Fatal(err)
	}
	if len(rec.lookedUp) != 1 || rec.lookedUp[0].Source.Name != "pull" {
		t.Errorf("records got %+v", rec.lookedUp)
	}
}

// The events of a present image: the kubelet's words when the records let
// the pod use it, its ErrImageNeverPull event when they do not and the
// pull policy is Never (as for an image not there).
func TestPresentImageEvents(t *testing.T) {
	for _, tc := range []struct {
		must bool
		want string
	}{
		{false, `Normal Pulled: Container image "busybox:1.35" already present on machine and can be accessed by the pod`},
		{true, `Warning ErrImageNeverPull: Container image "busybox:1.35" is not present with pull policy of Never`},
	} {
		f := newFixture(t)
		events := &eventLog{}
		f.m.recorder = events
		f.m.pulls = newImagePuller(&presentRegistry{}, 1, f.clock).withRecords(&fakeRecords{must: tc.must}, slog.New(slog.DiscardHandler))
		pod := testPod()
		pod.Spec.Containers = pod.Spec.Containers[:1]
		pod.Spec.Containers[0].ImagePullPolicy = v1.PullNever
		_, _ = f.m.syncPod(context.Background(), podworker.SyncRequest{Pod: pod})
		if !events.has(tc.want) {
			t.Errorf("must pull %v: events %q, want %q", tc.must, events.events, tc.want)
		}
	}
}
