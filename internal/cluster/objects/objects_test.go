package objects

import (
	"errors"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/internal/node/volume"
	"github.com/nodelet/nodelet/internal/pipeline/podsource"
	"github.com/nodelet/nodelet/internal/pure/envvars"
)

func cm(name, value string) *v1.ConfigMap {
	return &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}, Data: map[string]string{"k": value}}
}

// inDefault is a pod of namespace default, the one the tests read for.
var inDefault = &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "reader"}}

func pending(s *Store) bool {
	select {
	case <-s.Changed():
		return true
	default:
		return false
	}
}

func TestReplaceSignalsOnlyChanges(t *testing.T) {
	s := NewStore()
	if !s.Replace([]*v1.ConfigMap{cm("a", "1")}, nil) || !pending(s) {
		t.Fatal("first objects: no change signalled")
	}
	if s.Replace([]*v1.ConfigMap{cm("a", "1")}, nil) || pending(s) {
		t.Error("the same objects signalled a change")
	}
	s.Replace([]*v1.ConfigMap{cm("a", "2")}, nil)
	s.Replace(nil, []*v1.Secret{{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "s"}}})
	if !pending(s) || pending(s) {
		t.Error("a burst of changes must leave exactly one signal")
	}
	got, err := s.ConfigMap(inDefault, "a")
	if err == nil {
		t.Errorf("ConfigMap a = %v after it was replaced away", got.Data)
	}
	if !errors.Is(err, envvars.ErrObjectNotFound) || !errors.Is(err, volume.ErrObjectNotFound) {
		t.Errorf("not found error %v is not every consumer's sentinel", err)
	}
	if _, err := s.Secret(inDefault, "s"); err != nil {
		t.Errorf("Secret: %v", err)
	}
}

func TestPassKeepsFileSourceObjects(t *testing.T) {
	s := NewStore()
	in, out := make(chan podsource.Update), make(chan podsource.Update)
	go s.Pass(t.Context(), in, out)
	in <- podsource.Update{Source: podsource.SourceHTTP, ConfigMaps: []*v1.ConfigMap{cm("http", "1")}}
	<-out
	in <- podsource.Update{Source: podsource.SourceFile, ConfigMaps: []*v1.ConfigMap{cm("file", "1")}}
	<-out
	if _, err := s.ConfigMap(inDefault, "file"); err != nil {
		t.Errorf("file source's ConfigMap: %v", err)
	}
	if _, err := s.ConfigMap(inDefault, "http"); err == nil {
		t.Error("the URL source's ConfigMap was kept (only manifest directories may hold objects)")
	}
	// A returned object is a copy: changing it changes nothing stored.
	c, _ := s.ConfigMap(inDefault, "file")
	c.Data["k"] = "changed"
	if again, _ := s.ConfigMap(inDefault, "file"); again.Data["k"] != "1" {
		t.Error("ConfigMap returned the stored object")
	}
}
