package podsource

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const withObjects = `apiVersion: v1
kind: ConfigMap
metadata: {name: settings}
data: {greeting: hello}
---
apiVersion: v1
kind: Secret
metadata: {name: creds, namespace: team}
stringData: {password: s3cret}
---
apiVersion: v1
kind: Pod
metadata: {name: app}
spec:
  containers: [{name: c, image: "busybox:1.35"}]
`

func TestReadFileWithObjects(t *testing.T) {
	path := filepath.Join(t.TempDir(), "app.yaml")
	if err := os.WriteFile(path, []byte(withObjects), 0o644); err != nil {
		t.Fatal(err)
	}
	r := newManifestCache("n").read(path, false)
	if r.err != nil {
		t.Fatal(r.err)
	}
	pods, objects := r.pods, r.objects
	if len(pods) != 1 || len(objects.ConfigMaps) != 1 || len(objects.Secrets) != 1 {
		t.Fatalf("pods %d configmaps %d secrets %d", len(pods), len(objects.ConfigMaps), len(objects.Secrets))
	}
	cm, s := objects.ConfigMaps[0], objects.Secrets[0]
	if cm.Namespace != "default" || cm.Data["greeting"] != "hello" {
		t.Errorf("configmap %+v", cm)
	}
	if s.Namespace != "team" || string(s.Data["password"]) != "s3cret" || s.StringData != nil {
		t.Errorf("secret %+v", s)
	}
	// Decode, used where objects are not accepted, still refuses them.
	if _, err := Decode([]byte(withObjects)); err == nil || !strings.Contains(err.Error(), "ConfigMap") {
		t.Errorf("Decode = %v", err)
	}
}

func TestObjectDuplicatesFirstFileWins(t *testing.T) {
	owners := objectOwners{}
	var u Update
	a := Objects{ConfigMaps: []*corev1.ConfigMap{cmNamed("x")}}
	b := Objects{ConfigMaps: []*corev1.ConfigMap{cmNamed("x"), cmNamed("y")}}
	if errs := owners.add(&u, "a.yaml", a); len(errs) != 0 {
		t.Fatal(errs)
	}
	errs := owners.add(&u, "b.yaml", b)
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), "also defined in a.yaml") || errs[0].Class != ReasonDuplicate {
		t.Fatalf("errors %v", errs)
	}
	if len(u.ConfigMaps) != 2 || u.ConfigMaps[0].Name != "x" || u.ConfigMaps[1].Name != "y" {
		t.Errorf("configmaps %v", u.ConfigMaps)
	}
}

func cmNamed(name string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}}
}
