package podspec

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestIsStatic(t *testing.T) {
	for source, want := range map[string]bool{"file": true, "http": true, "api": false, "": true} {
		pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{AnnotationConfigSource: source}}}
		if got := IsStatic(pod); got != want {
			t.Errorf("IsStatic(config.source=%q) = %v, want %v", source, got, want)
		}
	}
	if IsStatic(&v1.Pod{}) {
		t.Error("a pod without config.source is static; it must count as the API server's")
	}
}
