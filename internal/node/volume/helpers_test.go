package volume

import (
	"context"
	"fmt"
	"github.com/nodelet/nodelet/internal/base/mountinfo"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// tWriter sends log lines to the test.
type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func testLogger(t *testing.T) *slog.Logger { return slog.New(slog.NewTextHandler(tWriter{t}, nil)) }

// requireRoot skips tests that mount.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (mount)")
	}
}

// fakeObjects is an in-memory Objects.
type fakeObjects struct {
	mu         sync.Mutex
	configMaps map[string]*v1.ConfigMap
	secrets    map[string]*v1.Secret
}

func newFakeObjects() *fakeObjects {
	return &fakeObjects{configMaps: map[string]*v1.ConfigMap{}, secrets: map[string]*v1.Secret{}}
}

func (f *fakeObjects) putConfigMap(name string, data map[string]string, binary map[string][]byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.configMaps["default/"+name] = &v1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Data:       data, BinaryData: binary,
	}
}

func (f *fakeObjects) putSecret(name string, data map[string][]byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.secrets["default/"+name] = &v1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}, Data: data}
}

func (f *fakeObjects) ConfigMap(pod *v1.Pod, name string) (*v1.ConfigMap, error) {
	ns := pod.Namespace
	f.mu.Lock()
	defer f.mu.Unlock()
	if cm, ok := f.configMaps[ns+"/"+name]; ok {
		return cm.DeepCopy(), nil
	}
	return nil, fmt.Errorf("configmap %s/%s: %w", ns, name, ErrObjectNotFound)
}

func (f *fakeObjects) Secret(pod *v1.Pod, name string) (*v1.Secret, error) {
	ns := pod.Namespace
	f.mu.Lock()
	defer f.mu.Unlock()
	if s, ok := f.secrets[ns+"/"+name]; ok {
		return s.DeepCopy(), nil
	}
	return nil, fmt.Errorf("secret %s/%s: %w", ns, name, ErrObjectNotFound)
}

// fakeDownward knows metadata.name, metadata.labels and limits.memory.
type fakeDownward struct{}

func (fakeDownward) FieldRef(pod *v1.Pod, path string) (string, error) {
	switch path {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.labels":
		var lines []string
		for k, v := range pod.Labels {
			lines = append(lines, fmt.Sprintf("%s=%q", k, v))
		}
		return strings.Join(lines, "\n"), nil
	}
	return "", fmt.Errorf("unsupported fieldPath %q", path)
}

func (fakeDownward) ResourceRef(_ *v1.Pod, container string, ref *v1.ResourceFieldSelector) (string, error) {
	if ref.Resource == "limits.memory" {
		return "67108864", nil
	}
	return "", fmt.Errorf("container %s: unsupported resource %q", container, ref.Resource)
}

// env is a test world: a Manager on a temporary root directory.
type env struct {
	t       *testing.T
	root    string
	objects *fakeObjects
	m       *Manager
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{t: t, root: t.TempDir(), objects: newFakeObjects()}
	e.m = New(e.root, e.objects, fakeDownward{}, testLogger(t))
	return e
}

// cleanupPod tears the pod down at the end of the test, before the
// temporary directory is removed (Cleanup runs last-in first-out).
func (e *env) cleanupPod(uid types.UID) {
	e.t.Cleanup(func() {
		if err := e.m.TearDown(context.Background(), uid); err != nil {
			e.t.Errorf("TearDown: %v", err)
		}
	})
}

func testPod(uid string, vols ...v1.Volume) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "pod-" + uid, UID: types.UID(uid), Labels: map[string]string{"app": "web"}},
		Spec:       v1.PodSpec{Volumes: vols, Containers: []v1.Container{{Name: "app"}}},
	}
}

func emptyDirVolume(name string) v1.Volume {
	return v1.Volume{Name: name, VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}
}

func mustWrite(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func ptr[T any](v T) *T { return &v }

// mountsUnder lists the mount points at or below dir.
func mountsUnder(t *testing.T, dir string) []mountinfo.Mount {
	t.Helper()
	all, err := mountinfo.Read()
	if err != nil {
		t.Fatal(err)
	}
	var out []mountinfo.Mount
	for _, mi := range all {
		if _, ok := relBelow(dir, mi.MountPoint); ok {
			out = append(out, mi)
		}
	}
	return out
}
