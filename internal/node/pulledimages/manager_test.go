package pulledimages

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/base/testutil"
	"github.com/nodelet/nodelet/internal/pure/pullcreds"
	"github.com/nodelet/nodelet/internal/pure/pullverify"
)

const (
	image = "127.0.0.1:5000/private/app:1"
	ref   = "sha256:aaaa"
)

type fakeRuntime struct {
	images []*runtimeapi.Image
	err    error
	calls  int
}

func (f *fakeRuntime) ListImages(context.Context, *runtimeapi.ImageFilter) ([]*runtimeapi.Image, error) {
	f.calls++
	return f.images, f.err
}

func secret(ns, name, uid, password string) pullcreds.Credential {
	return pullcreds.Credential{
		Auth:   &runtimeapi.AuthConfig{Username: "user", Password: password, ServerAddress: "127.0.0.1:5000"},
		Source: pullcreds.Source{Kind: pullcreds.FromSecret, Namespace: ns, Name: name, UID: uid},
	}
}

func credsOf(c ...pullcreds.Credential) func(context.Context) ([]pullcreds.Credential, error) {
	return func(context.Context) ([]pullcreds.Credential, error) { return c, nil }
}

type env struct {
	root  string
	rt    *fakeRuntime
	clock *clocktesting.FakeClock
	logs  *testutil.SyncBuffer
}

func newEnv(t *testing.T) *env {
	return &env{root: filepath.Join(t.TempDir(), "not-yet"), rt: &fakeRuntime{}, clock: clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)),
		logs: &testutil.SyncBuffer{}}
}

func (e *env) open(t *testing.T, policy pullverify.Policy) *Manager {
	t.Helper()
	m, err := New(Options{Enabled: true, RootDir: e.root, Policy: policy},
		Deps{Runtime: e.rt, Clock: e.clock, Log: slog.New(slog.NewTextHandler(e.logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func mustPull(t *testing.T, m *Manager, creds func(context.Context) ([]pullcreds.Credential, error)) bool {
	t.Helper()
	must, reason, err := m.MustPull(context.Background(), image, ref, creds)
	if err != nil {
		t.Fatal(err)
	}
	if reason == "" {
		t.Error("no reason")
	}
	return must
}

func pulled(t *testing.T, m *Manager, used *pullcreds.Credential) {
	t.Helper()
	ctx := context.Background()
	if err := m.PullStarting(ctx, image); err != nil {
		t.Fatal(err)
	}
	m.PullSucceeded(ctx, image, ref, used)
}

// A pod with the Secret that pulled the image uses it; one without must
// pull; after a restart (a new Manager over the same directory) the same.
func TestSecretPulledImageSurvivesRestart(t *testing.T) {
	e := newEnv(t)
	m := e.open(t, pullverify.NeverVerifyPreloadedImages)
	if mustPull(t, m, credsOf()) {
		t.Fatal("a preloaded image (no record) must be pulled")
	}
	podA := secret("ns", "pull", "uid-1", "s3cret")
	pulled(t, m, &podA)
	for i, mgr := range []*Manager{m, e.open(t, pullverify.NeverVerifyPreloadedImages)} {
		if mustPull(t, mgr, credsOf(podA)) {
			t.Errorf("run %d: the pod with the Secret must pull again", i)
		}
		if !mustPull(t, mgr, credsOf()) {
			t.Errorf("run %d: a pod without credentials may use the image", i)
		}
		other := secret("ns2", "pull", "uid-2", "wrong")
		if !mustPull(t, mgr, credsOf(other)) {
			t.Errorf("run %d: a pod with another Secret may use the image", i)
		}
	}
	// The record is the kubelet's format, 0600 in 0700, with the hash and
	// never the password.
	path := filepath.Join(e.root, "image_manager", "pulled", fileName(ref))
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(data, []byte("s3cret")) {
		t.Errorf("the record holds the password: %s", data)
	}
	var kubelet kubeletv1beta1.ImagePulledRecord
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&kubelet); err != nil {
		t.Fatalf("the kubelet's type does not decode the record: %v\n%s", err, data)
	}
	got := kubelet.CredentialMapping["127.0.0.1:5000/private/app"].KubernetesSecrets
	if kubelet.Kind != "ImagePulledRecord" || kubelet.ImageRef != ref || len(got) != 1 || got[0].Name != "pull" || got[0].CredentialHash != pullverify.Hash(podA) {
		t.Errorf("record %s", data)
	}
	for p, want := range map[string]os.FileMode{path: 0o600, filepath.Dir(path): 0o700, filepath.Join(e.root, "image_manager"): 0o700,
		filepath.Join(e.root, "image_manager", "pulling"): 0o700} {
		fi, err := os.Stat(p)
		if err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: %v %v, want %v", p, fi.Mode(), err, want)
		}
	}
	if strings.Contains(e.logs.String(), "s3cret") {
		t.Error("the password was logged")
	}
}

// An anonymous pull makes the image every pod's; the credentials are then
// never looked up.
func TestAnonymousPull(t *testing.T) {
	e := newEnv(t)
	m := e.open(t, pullverify.AlwaysVerify)
	if !mustPull(t, m, credsOf()) {
		t.Fatal("AlwaysVerify must pull an image without a record")
	}
	pulled(t, m, nil)
	lookups := 0
	must, _, err := m.MustPull(context.Background(), image, ref, func(context.Context) ([]pullcreds.Credential, error) {
		lookups++
		return nil, nil
	})
	if err != nil || must || lookups != 0 {
		t.Errorf("must %v, err %v, lookups %d; want false, nil, 0", must, err, lookups)
	}
}

func TestLookupErrorMeansPull(t *testing.T) {
	e := newEnv(t)
	m := e.open(t, pullverify.NeverVerifyPreloadedImages)
	podA := secret("ns", "pull", "uid-1", "pw")
	pulled(t, m, &podA)
	must, _, err := m.MustPull(context.Background(), image, ref, func(context.Context) ([]pullcreds.Credential, error) {
		return nil, errors.New("plugin timed out")
	})
	if !must || err == nil || !strings.Contains(err.Error(), "plugin timed out") {
		t.Errorf("must %v, err %v", must, err)
	}
}

// A corrupt, oversized or symlinked record is logged with its path and
// treated as unknown content: its image is verified (never trusted as
// preloaded), and the next pull replaces it.
func TestUnreadableRecords(t *testing.T) {
	for name, plant := range map[string]func(t *testing.T, path string){
		"garbage": func(t *testing.T, path string) { write(t, path, []byte("{not json")) },
		"unknown field": func(t *testing.T, path string) {
			write(t, path, []byte(`{"apiVersion":"kubelet.config.k8s.io/v1beta1","kind":"ImagePulledRecord","imageRef":"`+ref+`","extra":1}`))
		},
		"wrong kind": func(t *testing.T, path string) {
			write(t, path, []byte(`{"apiVersion":"kubelet.config.k8s.io/v1beta1","kind":"ImagePullIntent","imageRef":"`+ref+`"}`))
		},
		"record of another image": func(t *testing.T, path string) {
			write(t, path, []byte(`{"apiVersion":"kubelet.config.k8s.io/v1beta1","kind":"ImagePulledRecord","lastUpdatedTime":"2026-01-01T00:00:00Z","imageRef":"sha256:other","credentialMapping":{"127.0.0.1:5000/private/app":{"nodePodsAccessible":true}}}`))
		},
		"too large": func(t *testing.T, path string) { write(t, path, bytes.Repeat([]byte(" "), maxRecordBytes+1)) },
		"symlink": func(t *testing.T, path string) {
			target := filepath.Join(t.TempDir(), "r")
			write(t, target, []byte(`{"apiVersion":"kubelet.config.k8s.io/v1beta1","kind":"ImagePulledRecord","lastUpdatedTime":"2026-01-01T00:00:00Z","imageRef":"`+ref+`","credentialMapping":{"127.0.0.1:5000/private/app":{"nodePodsAccessible":true}}}`))
			if err := os.Symlink(target, path); err != nil {
				t.Fatal(err)
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			e.open(t, pullverify.NeverVerifyPreloadedImages) // makes the directories
			path := filepath.Join(e.root, "image_manager", "pulled", fileName(ref))
			plant(t, path)
			m := e.open(t, pullverify.NeverVerifyPreloadedImages)
			if !strings.Contains(e.logs.String(), path) {
				t.Errorf("the log does not name %s:\n%s", path, e.logs)
			}
			if !mustPull(t, m, credsOf()) {
				t.Error("an image with an unreadable record is used without verification")
			}
			pulled(t, m, nil)
			if mustPull(t, m, credsOf()) {
				t.Error("the pull did not replace the unreadable record")
			}
			if mustPull(t, e.open(t, pullverify.NeverVerifyPreloadedImages), credsOf()) {
				t.Error("the replaced record was not read after a restart")
			}
		})
	}
}

func write(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// A pull cut short by a crash leaves an intent: at the next start the
// image, if present, gets a record without credentials (verified at the
// next use, under the default policy too); if absent, the intent stays.
func TestIntentAfterCrash(t *testing.T) {
	e := newEnv(t)
	m := e.open(t, pullverify.NeverVerifyPreloadedImages)
	if err := m.PullStarting(context.Background(), image); err != nil {
		t.Fatal(err)
	}
	other := "127.0.0.1:5000/private/other:1"
	if err := m.PullStarting(context.Background(), other); err != nil {
		t.Fatal(err)
	}
	// crash: no PullSucceeded. The image is present under its full name.
	e.rt.images = []*runtimeapi.Image{{Id: ref, RepoTags: []string{image}}}
	m2 := e.open(t, pullverify.NeverVerifyPreloadedImages)
	if !mustPull(t, m2, credsOf()) {
		t.Error("an image whose pull was cut short counts as preloaded")
	}
	if e.rt.calls != 1 {
		t.Errorf("listed images %d times, want once", e.rt.calls)
	}
	if _, err := os.Stat(filepath.Join(e.root, "image_manager", "pulling", fileName(image))); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the settled intent is still there: %v", err)
	}
	if _, err := os.Stat(filepath.Join(e.root, "image_manager", "pulling", fileName(other))); err != nil {
		t.Errorf("the intent of an image not present was dropped: %v", err)
	}
	// The other image appears later (pulled by someone else): still
	// pulled by nodelet as far as the records know.
	must, _, err := m2.MustPull(context.Background(), other, "sha256:bbbb", credsOf())
	if err != nil || !must {
		t.Errorf("must %v, err %v: an image with a left-over intent counts as preloaded", must, err)
	}
	// And a restart with the runtime unable to list keeps every intent.
	e.rt.err = errors.New("runtime down")
	if !mustPull(t, e.open(t, pullverify.NeverVerifyPreloadedImages), credsOf()) {
		t.Error("image trusted with the runtime down")
	}
}

// Image names are matched in full when settling intents ("busybox" is
// docker.io/library/busybox:latest).
func TestPresentAs(t *testing.T) {
	imgs := []*runtimeapi.Image{{Id: "sha256:1", RepoTags: []string{"docker.io/library/busybox:latest"}},
		{Id: "sha256:2", RepoDigests: []string{"reg.example/app@sha256:" + strings.Repeat("c", 64)}}}
	for in, want := range map[string]string{"busybox": "sha256:1", "docker.io/library/busybox:latest": "sha256:1",
		"busybox:1": "", "reg.example/app@sha256:" + strings.Repeat("c", 64): "sha256:2", "reg.example/app": ""} {
		if got := presentAs(in, imgs); got != want {
			t.Errorf("presentAs(%q) = %q, want %q", in, got, want)
		}
	}
}

// Records of images gone are dropped, unless updated after the list.
func TestPruneUnknown(t *testing.T) {
	e := newEnv(t)
	m := e.open(t, pullverify.NeverVerifyPreloadedImages)
	podA := secret("ns", "pull", "uid-1", "pw")
	pulled(t, m, &podA)
	listed := e.clock.Now()
	m.PruneUnknown(nil, listed) // updated at the list's time: kept
	if mustPull(t, m, credsOf(podA)) {
		t.Fatal("a record updated when the images were listed was dropped")
	}
	e.clock.Step(time.Minute)
	m.PruneUnknown([]string{ref}, e.clock.Now()) // present: kept
	if mustPull(t, m, credsOf(podA)) {
		t.Fatal("the record of a present image was dropped")
	}
	m.PruneUnknown([]string{"sha256:other"}, e.clock.Now())
	if _, err := os.Stat(filepath.Join(e.root, "image_manager", "pulled", fileName(ref))); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("record file still there: %v", err)
	}
	if mustPull(t, e.open(t, pullverify.NeverVerifyPreloadedImages), credsOf()) {
		t.Error("an image with no record (gone and back) is not preloaded after the prune")
	}
}

// Concurrent pulls of one image keep one intent until the last ends.
func TestConcurrentIntents(t *testing.T) {
	e := newEnv(t)
	m := e.open(t, pullverify.NeverVerifyPreloadedImages)
	ctx := context.Background()
	intent := filepath.Join(e.root, "image_manager", "pulling", fileName(image))
	for range 2 {
		if err := m.PullStarting(ctx, image); err != nil {
			t.Fatal(err)
		}
	}
	m.PullFailed(ctx, image)
	if _, err := os.Stat(intent); err != nil {
		t.Fatalf("intent gone with a pull still under way: %v", err)
	}
	m.PullSucceeded(ctx, image, ref, nil)
	if _, err := os.Stat(intent); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("intent left after the last pull: %v", err)
	}
}

func TestDisabledAndInvalid(t *testing.T) {
	root := t.TempDir()
	m, err := New(Options{RootDir: root, Policy: pullverify.AlwaysVerify}, Deps{})
	if err != nil {
		t.Fatal(err)
	}
	if must, _, _ := m.MustPull(context.Background(), image, ref, credsOf()); must {
		t.Error("the gate off still verifies")
	}
	if err := m.PullStarting(context.Background(), image); err != nil {
		t.Fatal(err)
	}
	m.PullSucceeded(context.Background(), image, ref, nil)
	if _, err := os.Stat(filepath.Join(root, "image_manager")); !errors.Is(err, os.ErrNotExist) {
		t.Error("the gate off wrote records")
	}
	if _, err := New(Options{Enabled: true, RootDir: root, Policy: "Sometimes"}, Deps{}); err == nil {
		t.Error("an unknown policy was accepted")
	}
	// A world-writable directory left by someone else is tightened; a
	// file in the directory's place is refused.
	if err := os.MkdirAll(filepath.Join(root, "image_manager"), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(root, "image_manager"), 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Options{Enabled: true, RootDir: root, Policy: pullverify.DefaultPolicy}, Deps{}); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(filepath.Join(root, "image_manager")); fi.Mode().Perm() != 0o700 {
		t.Errorf("mode %v", fi.Mode())
	}
	bad := t.TempDir()
	write(t, filepath.Join(bad, "image_manager"), nil)
	if _, err := New(Options{Enabled: true, RootDir: bad, Policy: pullverify.DefaultPolicy}, Deps{}); err == nil {
		t.Error("a file in place of the directory was accepted")
	}
}
