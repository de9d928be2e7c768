package podruntime

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critest "k8s.io/cri-api/pkg/apis/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/pipeline/cri"
	"github.com/nodelet/nodelet/internal/pipeline/podworker"
	"github.com/nodelet/nodelet/internal/pipeline/statusmanager"
	"github.com/nodelet/nodelet/internal/pure/podsetup"
	"github.com/nodelet/nodelet/internal/pure/podspec"
)

// take returns the events recorded since the last take.
func (l *eventLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.events
	l.events = nil
	return out
}

// fakeImageVolumes answers as a runtime without image volumes (err) or
// without a subPath in one (subPathErr).
type fakeImageVolumes struct{ err, subPathErr error }

func (f fakeImageVolumes) ImageVolumes(_ context.Context, subPath bool) error {
	if f.err != nil || !subPath {
		return f.err
	}
	return f.subPathErr
}

type imageVolumeFixture struct {
	*fixture
	rec    *configRecorder
	events *eventLog
	// seen are the image volumes the contributor was given, by container.
	mu   sync.Mutex
	seen map[string]map[string]*runtimeapi.ImageSpec
}

func newImageVolumeFixture(t *testing.T, support ImageVolumeSupport) *imageVolumeFixture {
	t.Helper()
	f := &fixture{rs: critest.NewFakeRuntimeService(), is: critest.NewFakeImageService(),
		clock: clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))}
	f.is.SetFakeImageSize(1)
	rec := &configRecorder{FakeRuntimeService: f.rs, configs: map[string]*runtimeapi.ContainerConfig{}}
	log := slog.New(slog.DiscardHandler)
	c := cri.New(rec, f.is, "fake", cri.DefaultTimeouts(), log)
	ev := &eventLog{}
	f.m = New(c, Options{PodLogsDir: "/var/log/pods"}, Deps{Clock: f.clock, Log: log, Status: statusmanager.New(nil),
		Recorder: ev, ImageVolumes: support})
	return &imageVolumeFixture{fixture: f, rec: rec, events: ev, seen: map[string]map[string]*runtimeapi.ImageSpec{}}
}

// setup is what a volumes hook hands: a contributor mounting each image
// volume it is given at /<volume name>.
func (f *imageVolumeFixture) setup() podsetup.Setup {
	return podsetup.Setup{Containers: []podsetup.Contributor{podsetup.ContributorFunc(func(c podsetup.Container) (podsetup.Additions, error) {
		f.mu.Lock()
		f.seen[c.Container.Name] = c.ImageVolumes
		f.mu.Unlock()
		var mounts []*runtimeapi.Mount
		for name, spec := range c.ImageVolumes {
			mounts = append(mounts, &runtimeapi.Mount{ContainerPath: "/" + name, Image: spec, Readonly: true})
		}
		return podsetup.Additions{Mounts: mounts}, nil
	})}}
}

// imageVolumePod has an image volume "data" mounted by "app" and, with
// unused, one "spare" no container mounts; "plain" mounts none.
func imageVolumePod(ref string, policy v1.PullPolicy) *v1.Pod {
	pod := testPod()
	pod.Annotations = map[string]string{"team": "a"}
	pod.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{Image: &v1.ImageVolumeSource{Reference: ref, PullPolicy: policy}}}}
	pod.Spec.Containers = []v1.Container{
		{Name: "app", Image: "busybox:1.35", ImagePullPolicy: v1.PullIfNotPresent, VolumeMounts: []v1.VolumeMount{{Name: "data", MountPath: "/data"}}},
		{Name: "plain", Image: "busybox:1.35", ImagePullPolicy: v1.PullIfNotPresent},
	}
	return pod
}

func waitingOfContainer(st v1.PodStatus, name string) *v1.ContainerStateWaiting {
	for _, cs := range st.ContainerStatuses {
		if cs.Name == name {
			return cs.State.Waiting
		}
	}
	return nil
}

// The image of an image volume is pulled once in the sync, before the
// containers, and the container that mounts it gets it: the pulled image
// (its ID), the reference as the user wrote it, the pod's annotations.
func TestImageVolumePulledAndMounted(t *testing.T) {
	f := newImageVolumeFixture(t, fakeImageVolumes{})
	pod := imageVolumePod("example.com/data:v1", v1.PullIfNotPresent)
	st, err := f.m.syncPod(t.Context(), podworker.SyncRequest{Pod: pod, Setup: f.setup()})
	if err != nil {
		t.Fatal(err)
	}
	if calls := f.imageCalls(); !strings.HasPrefix(calls, "ImageStatus,PullImage,") || strings.Count(calls, "PullImage") != 2 {
		t.Errorf("image calls %s: want the volume's image looked up and pulled first, then busybox once", calls)
	}
	if w := waitingOfContainer(st, "app"); w != nil {
		t.Errorf("app waits: %+v", w)
	}
	mnt := f.rec.config("app").GetMounts()
	if len(mnt) != 1 || mnt[0].GetContainerPath() != "/data" || mnt[0].GetImage().GetImage() != "example.com/data:v1" ||
		mnt[0].GetImage().GetUserSpecifiedImage() != "example.com/data:v1" || mnt[0].GetImage().GetAnnotations()["team"] != "a" {
		t.Errorf("app's mounts %v", mnt)
	}
	// Image garbage collection reads what the container mounts from it.
	if got := f.rec.config("app").GetAnnotations()[podspec.AnnotationImageVolumes]; got != "example.com/data:v1" {
		t.Errorf("app's %s annotation %q", podspec.AnnotationImageVolumes, got)
	}
	if got, ok := f.rec.config("plain").GetAnnotations()[podspec.AnnotationImageVolumes]; ok {
		t.Errorf("plain has a %s annotation %q", podspec.AnnotationImageVolumes, got)
	}
	f.mu.Lock()
	plain := f.seen["plain"]
	f.mu.Unlock()
	if plain != nil {
		t.Errorf("plain mounts no image volume, and was given %v", plain)
	}
	if got := f.events.take(); !contains(got, `Normal Pulled: Successfully pulled image "example.com/data:v1" in 0s (0s including waiting). Image size: 1 bytes.`) {
		t.Errorf("events %q", got)
	}
}

// A failed pull of an image volume fails the containers that mount it with
// the kubelet's reasons (ErrImagePull, then ImagePullBackOff inside the
// back-off, which the container image path shares), and only them; their
// own images are not pulled meanwhile.
func TestImageVolumePullFailure(t *testing.T) {
	f := newImageVolumeFixture(t, fakeImageVolumes{})
	pod := imageVolumePod("example.com/missing:v1", v1.PullIfNotPresent)
	f.is.InjectError("PullImage", errors.New("not found"))
	st, err := f.m.syncPod(t.Context(), podworker.SyncRequest{Pod: pod, Setup: f.setup()})
	if err == nil || !strings.Contains(err.Error(), `container "app"`) {
		t.Fatalf("err %v", err)
	}
	if w := waitingOfContainer(st, "app"); w == nil || w.Reason != "ErrImagePull" || !strings.Contains(w.Message, "example.com/missing:v1") {
		t.Errorf("app waiting %+v", w)
	}
	if w := waitingOfContainer(st, "plain"); w != nil {
		t.Errorf("plain, which does not mount it, waits: %+v", w)
	}
	if f.rec.config("app") != nil {
		t.Error("app was created")
	}
	got := f.events.take()
	for _, want := range []string{`Warning Failed: Failed to pull image "example.com/missing:v1": `, "Warning Failed: Error: ErrImagePull"} {
		if !containsPrefix(got, want) {
			t.Errorf("events %q: want %q", got, want)
		}
	}
	f.imageCalls()
	st, _ = f.m.syncPod(t.Context(), podworker.SyncRequest{Pod: pod, Setup: f.setup()})
	if w := waitingOfContainer(st, "app"); w == nil || w.Reason != "ImagePullBackOff" {
		t.Errorf("inside the back-off: app waiting %+v", w)
	}
	if strings.Contains(f.imageCalls(), "PullImage") {
		t.Error("pulled again inside the back-off")
	}
	if got := f.events.take(); !contains(got, `Normal BackOff: Back-off pulling image "example.com/missing:v1"`) || !contains(got, "Warning Failed: Error: ImagePullBackOff") {
		t.Errorf("events inside the back-off %q", got)
	}
	// The back-off is the pod's, as the kubelet keys it (pod UID and
	// image): another pod pulls the same reference meanwhile.
	other := testPod()
	other.UID, other.Name = "uid-2", "other"
	other.Spec.Containers = []v1.Container{{Name: "c", Image: "example.com/missing:v1", ImagePullPolicy: v1.PullIfNotPresent}}
	st, _ = f.m.syncPod(t.Context(), podworker.SyncRequest{Pod: other})
	if w := waitingOfContainer(st, "c"); w != nil {
		t.Errorf("another pod's container is held back by this pod's back-off: waiting %+v", w)
	}
	if !strings.Contains(f.imageCalls(), "PullImage") {
		t.Error("another pod did not pull the image")
	}
	f.clock.Step(11 * time.Second)
	if _, err := f.m.syncPod(t.Context(), podworker.SyncRequest{Pod: pod, Setup: f.setup()}); err != nil {
		t.Fatalf("after the back-off: %v", err)
	}
	if mnt := f.rec.config("app").GetMounts(); len(mnt) != 1 || mnt[0].GetImage().GetImage() != "example.com/missing:v1" {
		t.Errorf("app's mounts after the back-off %v", mnt)
	}
}

// pullPolicy Never with the image missing is the kubelet's
// ErrImageNeverPull, without a pull; an image present is used as it is.
func TestImageVolumePullNever(t *testing.T) {
	f := newImageVolumeFixture(t, fakeImageVolumes{})
	st, err := f.m.syncPod(t.Context(), podworker.SyncRequest{Pod: imageVolumePod("example.com/absent:v1", v1.PullNever), Setup: f.setup()})
	if w := waitingOfContainer(st, "app"); err == nil || w == nil || w.Reason != "ErrImageNeverPull" ||
		w.Message != `Container image "example.com/absent:v1" is not present with pull policy of Never` {
		t.Errorf("err %v, app waiting %+v", err, w)
	}
	if got := f.events.take(); !contains(got, `Warning ErrImageNeverPull: Container image "example.com/absent:v1" is not present with pull policy of Never`) ||
		!contains(got, "Warning Failed: Error: ErrImageNeverPull") {
		t.Errorf("events %q", got)
	}
	if calls := f.imageCalls(); strings.Count(calls, "PullImage") != 1 {
		t.Errorf("image calls %s: only busybox (for plain) may be pulled", calls)
	}

	f.is.SetFakeImages([]string{"example.com/present:v1"})
	pod := imageVolumePod("example.com/present:v1", v1.PullNever)
	pod.UID = "uid-present"
	if _, err := f.m.syncPod(t.Context(), podworker.SyncRequest{Pod: pod, Setup: f.setup()}); err != nil {
		t.Fatal(err)
	}
	if !contains(f.events.take(), `Normal Pulled: Container image "example.com/present:v1" already present on machine`) {
		t.Error("no Pulled event for the present image")
	}
}

// A runtime that cannot mount image volumes (containerd 1.x), or a subPath
// in one (containerd 2.1), fails the containers that mount one with
// CreateContainerError saying so, before anything is created.
func TestImageVolumeUnsupportedRuntime(t *testing.T) {
	for _, tc := range []struct {
		name    string
		support fakeImageVolumes
		subPath string
	}{
		{"no image volumes", fakeImageVolumes{err: errors.New("the container runtime containerd 1.6.20 cannot mount image volumes")}, ""},
		{"no subPath", fakeImageVolumes{subPathErr: errors.New("the container runtime containerd 2.1.0 cannot mount a subPath of an image volume")}, "etc"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newImageVolumeFixture(t, tc.support)
			pod := imageVolumePod("example.com/data:v1", v1.PullIfNotPresent)
			pod.Spec.Containers[0].VolumeMounts[0].SubPath = tc.subPath
			st, err := f.m.syncPod(t.Context(), podworker.SyncRequest{Pod: pod, Setup: f.setup()})
			w := waitingOfContainer(st, "app")
			if err == nil || w == nil || w.Reason != "CreateContainerError" || !strings.HasPrefix(w.Message, `image volume "data": the container runtime containerd`) {
				t.Fatalf("err %v, app waiting %+v", err, w)
			}
			if !contains(f.events.take(), "Warning Failed: Error: "+w.Message) {
				t.Error("no Failed event saying why")
			}
			if f.rec.config("app") != nil || f.rec.config("plain") == nil {
				t.Error("app was created, or plain was not")
			}
		})
	}
	// A subPath on a runtime that mounts image volumes without one is
	// refused only where it is asked for.
	f := newImageVolumeFixture(t, fakeImageVolumes{subPathErr: errors.New("no subPath")})
	if _, err := f.m.syncPod(t.Context(), podworker.SyncRequest{Pod: imageVolumePod("example.com/data:v1", v1.PullIfNotPresent), Setup: f.setup()}); err != nil {
		t.Errorf("without a subPath: %v", err)
	}
}

// An image volume no container mounts is pulled, and its failure holds
// nothing back, as the kubelet's.
func TestImageVolumeUnusedFailure(t *testing.T) {
	f := newImageVolumeFixture(t, fakeImageVolumes{})
	pod := imageVolumePod("example.com/missing:v1", v1.PullIfNotPresent)
	pod.Spec.Containers[0].VolumeMounts = nil
	f.is.InjectError("PullImage", errors.New("not found"))
	st, err := f.m.syncPod(t.Context(), podworker.SyncRequest{Pod: pod, Setup: f.setup()})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"app", "plain"} {
		if w := waitingOfContainer(st, name); w != nil || f.rec.config(name) == nil {
			t.Errorf("%s waits %+v or was not created", name, w)
		}
	}
	if !containsPrefix(f.events.take(), `Warning Failed: Failed to pull image "example.com/missing:v1"`) {
		t.Error("no event of the failed pull")
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func containsPrefix(list []string, p string) bool {
	for _, x := range list {
		if strings.HasPrefix(x, p) {
			return true
		}
	}
	return false
}

// An image volume's image is pulled with the pod's credentials, as its
// containers' images are (the kubelet's getImageVolumes passes the pod's
// pull secrets to EnsureImageExists).
func TestImageVolumePulledWithPodCredentials(t *testing.T) {
	f := newImageVolumeFixture(t, fakeImageVolumes{})
	rt := &authRegistry{}
	f.m.pulls = newImagePuller(rt, 1, f.clock)
	pod := imageVolumePod("example.com/private:v1", v1.PullIfNotPresent)
	pod.Spec.Containers = pod.Spec.Containers[1:] // plain: no mount of it
	setup := f.setup()
	setup.PullCredentials = credList{cred("u", "right", "pull")}
	if _, err := f.m.syncPod(t.Context(), podworker.SyncRequest{Pod: pod, Setup: setup}); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(rt.users, ","); got != "u,u" {
		t.Errorf("pulled as %q, want u for the volume's image and plain's", got)
	}
	if !containsPrefix(f.events.take(), `Normal Pulled: Successfully pulled image "example.com/private:v1" in `) {
		t.Error("the volume's image was not pulled")
	}
}
