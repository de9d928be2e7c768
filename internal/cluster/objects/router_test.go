package objects

import (
	"errors"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/internal/node/volume"
	"github.com/nodelet/nodelet/internal/pure/envvars"
	"github.com/nodelet/nodelet/internal/pure/podspec"
)

// A Router is what volumes and env are given.
var (
	_ volume.Objects  = Router{}
	_ envvars.Objects = Router{}
)

// fromSource is a Source that names itself in what it returns.
type fromSource string

func (f fromSource) ConfigMap(pod *v1.Pod, name string) (*v1.ConfigMap, error) {
	return &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: name}, Data: map[string]string{"from": string(f)}}, nil
}

func (f fromSource) Secret(pod *v1.Pod, name string) (*v1.Secret, error) {
	return &v1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: name}, Data: map[string][]byte{"from": []byte(f)}}, nil
}

func podFrom(source string) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "p"}}
	if source != "" {
		p.Annotations = map[string]string{podspec.AnnotationConfigSource: source}
	}
	return p
}

// Static pods read the manifest directory's objects, every other pod the
// API server's; standalone, a pod of the API server reads nothing.
func TestRouter(t *testing.T) {
	r := Router{Static: fromSource("manifests"), API: fromSource("api")}
	for source, want := range map[string]string{"file": "manifests", "http": "manifests", "api": "api", "": "api"} {
		cm, err := r.ConfigMap(podFrom(source), "c")
		if err != nil || cm.Data["from"] != want {
			t.Errorf("config.source %q: ConfigMap from %v (%v), want %s", source, cm, err, want)
		}
		s, err := r.Secret(podFrom(source), "s")
		if err != nil || string(s.Data["from"]) != want {
			t.Errorf("config.source %q: Secret from %v (%v), want %s", source, s, err, want)
		}
	}

	standalone := Router{Static: NewStore()}
	_, err := standalone.Secret(podFrom("api"), "s")
	if err == nil || errors.Is(err, envvars.ErrObjectNotFound) || !strings.Contains(err.Error(), "without an API server") {
		t.Errorf("standalone, a pod of the API server: %v", err)
	}
	if _, err := standalone.Secret(podFrom("file"), "s"); !errors.Is(err, volume.ErrObjectNotFound) {
		t.Errorf("standalone, a static pod: %v, want not found from the store", err)
	}
}
