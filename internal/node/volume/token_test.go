package volume

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/internal/pure/podspec"
)

// fakeTokens issues "<namespace>/<serviceAccount>/<audience>/<seconds>#<n>",
// n counting up on Refresh, and records what it forgets.
type fakeTokens struct {
	mu        sync.Mutex
	serial    int
	fail      error
	forgotten []types.UID
}

func (f *fakeTokens) Token(_ context.Context, pod *v1.Pod, audience string, seconds int64) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return "", f.fail
	}
	return fmt.Sprintf("%s/%s/%s/%d#%d", pod.Namespace, pod.Spec.ServiceAccountName, audience, seconds, f.serial), nil
}

func (f *fakeTokens) Forget(uid types.UID) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.forgotten = append(f.forgotten, uid)
}

// refresh makes the next tokens new ones.
func (f *fakeTokens) refresh() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.serial++
}

// tokenPod is a pod of the API server with the projected volume a
// ServiceAccount admission gives every pod: the token, kube-root-ca.crt
// and the namespace.
func tokenPod(uid string) *v1.Pod {
	pod := testPod(uid, v1.Volume{Name: "kube-api-access", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{
		DefaultMode: ptr[int32](0o644),
		Sources: []v1.VolumeProjection{
			{ServiceAccountToken: &v1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr[int64](3607)}},
			{ConfigMap: &v1.ConfigMapProjection{LocalObjectReference: v1.LocalObjectReference{Name: "kube-root-ca.crt"},
				Items: []v1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
			{ServiceAccountToken: &v1.ServiceAccountTokenProjection{Path: "vault-token", Audience: "vault"}},
		}}}})
	pod.Annotations = map[string]string{podspec.AnnotationConfigSource: podspec.ConfigSourceAPI}
	pod.Spec.ServiceAccountName = "builder"
	return pod
}

func owner(t *testing.T, path string) (uid, gid uint32) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return st.Uid, st.Gid
}

// A serviceAccountToken projection writes the token from Tokens with the
// projection's mode, and a refreshed token replaces it atomically on the
// next SetUp; TearDown forgets the pod's tokens.
func TestServiceAccountTokenProjection(t *testing.T) {
	requireRoot(t) // projected volumes live on a tmpfs
	e := newEnv(t)
	tokens := &fakeTokens{}
	e.m = New(e.root, e.objects, fakeDownward{}, testLogger(t), WithTokens(tokens))
	e.objects.putConfigMap("kube-root-ca.crt", map[string]string{"ca.crt": "PEM"}, nil)
	pod := tokenPod("uid-sat")
	e.cleanupPod(pod.UID)
	if err := e.m.SetUp(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	dir := e.m.volumeDir(pod.UID, pluginProjected, "kube-api-access")
	want := map[string]string{"token": "default/builder//3607#0", "ca.crt": "PEM", "vault-token": "default/builder/vault/3600#0"}
	if got := volumeFiles(t, dir); !equalMaps(got, want) {
		t.Errorf("files %q, want %q", got, want)
	}
	if got := fileMode(t, filepath.Join(dir, "token")); got != 0o644 {
		t.Errorf("token mode %v, want the projection's 0644", got)
	}
	if uid, _ := owner(t, filepath.Join(dir, "token")); uid != 0 {
		t.Errorf("token owned by %d, want nodelet's user", uid)
	}

	// The same token: nothing is rewritten. A refreshed one: rewritten.
	before, _ := os.Readlink(filepath.Join(dir, "..data"))
	if err := e.m.SetUp(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.Readlink(filepath.Join(dir, "..data")); after != before {
		t.Error("an unchanged token was rewritten")
	}
	tokens.refresh()
	if err := e.m.SetUp(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	if got := mustRead(t, filepath.Join(dir, "token")); got != "default/builder//3607#1" {
		t.Errorf("after a refresh: token %q", got)
	}

	// A failing token fails the volume (FailedMount), naming the cause.
	tokens.fail = errors.New("apiserver down")
	err := e.m.SetUp(t.Context(), pod)
	if err == nil || !strings.Contains(err.Error(), `volume "kube-api-access": projected source 0: serviceAccountToken: apiserver down`) {
		t.Errorf("SetUp with a failing token: %v", err)
	}
	tokens.fail = nil

	if err := e.m.TearDown(t.Context(), pod.UID); err != nil {
		t.Fatal(err)
	}
	if len(tokens.forgotten) != 1 || tokens.forgotten[0] != pod.UID {
		t.Errorf("TearDown forgot %v, want the pod's tokens", tokens.forgotten)
	}
}

// When every container runs as one user, the token is that user's, mode
// 0600; with an fsGroup it is 0600 plus the group's read (the kubelet's
// rules, which keep a non-root container able to read its token).
func TestServiceAccountTokenOwner(t *testing.T) {
	requireRoot(t) // chown, tmpfs
	e := newEnv(t)
	e.m = New(e.root, e.objects, fakeDownward{}, testLogger(t), WithTokens(&fakeTokens{}))
	e.objects.putConfigMap("kube-root-ca.crt", map[string]string{"ca.crt": "PEM"}, nil)

	pod := tokenPod("uid-sat-user")
	pod.Spec.SecurityContext = &v1.PodSecurityContext{RunAsUser: ptr[int64](1000)}
	pod.Spec.InitContainers = []v1.Container{{Name: "init", SecurityContext: &v1.SecurityContext{RunAsUser: ptr[int64](1000)}}}
	e.cleanupPod(pod.UID)
	if err := e.m.SetUp(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	dir := e.m.volumeDir(pod.UID, pluginProjected, "kube-api-access")
	if got := fileMode(t, filepath.Join(dir, "token")); got != 0o600 {
		t.Errorf("token mode %v, want 0600", got)
	}
	if uid, _ := owner(t, filepath.Join(dir, "token")); uid != 1000 {
		t.Errorf("token owned by %d, want 1000", uid)
	}
	if got := fileMode(t, filepath.Join(dir, "ca.crt")); got != 0o644 {
		t.Errorf("ca.crt mode %v: only the token gets an owner and 0600", got)
	}

	// A container of its own user: no common owner, so the default mode;
	// an owner that no longer matches is rewritten.
	pod.Spec.Containers[0].SecurityContext = &v1.SecurityContext{RunAsUser: ptr[int64](2000)}
	if err := e.m.SetUp(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	if uid, _ := owner(t, filepath.Join(dir, "token")); uid != 0 || fileMode(t, filepath.Join(dir, "token")) != 0o644 {
		t.Errorf("users differ: token owned by %d with mode %v, want nodelet's with 0644", uid, fileMode(t, filepath.Join(dir, "token")))
	}

	group := tokenPod("uid-sat-group")
	group.Spec.SecurityContext = &v1.PodSecurityContext{FSGroup: ptr[int64](3000)}
	e.cleanupPod(group.UID)
	if err := e.m.SetUp(t.Context(), group); err != nil {
		t.Fatal(err)
	}
	gdir := e.m.volumeDir(group.UID, pluginProjected, "kube-api-access")
	if got := fileMode(t, filepath.Join(gdir, "token")); got != 0o640 {
		t.Errorf("fsGroup: token mode %v, want 0640", got)
	}
	if _, gid := owner(t, filepath.Join(gdir, "token")); gid != 3000 {
		t.Errorf("fsGroup: token group %d", gid)
	}
}

// Static pods get no tokens: the API server knows no such pod to bind one
// to (and the kubelet forbids static pods to refer to service accounts).
func TestServiceAccountTokenStaticPod(t *testing.T) {
	e := newEnv(t)
	e.m = New(e.root, e.objects, fakeDownward{}, testLogger(t), WithTokens(&fakeTokens{}))
	pod := tokenPod("uid-sat-static")
	pod.Annotations[podspec.AnnotationConfigSource] = "file"
	e.cleanupPod(pod.UID)
	err := e.m.SetUp(t.Context(), pod)
	if err == nil || !strings.Contains(err.Error(), "static pods may not reference serviceaccounts") {
		t.Errorf("SetUp of a static pod with a token: %v", err)
	}
}
