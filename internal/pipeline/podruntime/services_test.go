package podruntime

import (
	"errors"
	"log/slog"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/internal/pipeline/cri"
	"github.com/nodelet/nodelet/internal/pipeline/statusmanager"
	"github.com/nodelet/nodelet/internal/pure/podsetup"
	"github.com/nodelet/nodelet/internal/pure/podspec"
)

// fakeServices is a Services that has (synced) or has not read the
// Services yet.
type fakeServices struct {
	synced   bool
	services []*v1.Service
}

func (f *fakeServices) ServicesFor(string) ([]*v1.Service, error) {
	if !f.synced {
		return nil, errors.New("services have not yet been read at least once, cannot construct envvars")
	}
	return f.services, nil
}

func withServices(t *testing.T, services *fakeServices) *fixture {
	f := newFixture(t)
	log := slog.New(slog.DiscardHandler)
	c := cri.New(f.rs, f.is, "fake", cri.DefaultTimeouts(), log)
	f.m = New(c, Options{PodLogsDir: "/var/log/pods"}, Deps{Clock: f.clock, Log: log, Status: statusmanager.New(nil), Services: services})
	return f
}

func envOf(extras containerExtras) map[string]string {
	m := map[string]string{}
	for _, kv := range extras.env {
		m[kv.Key] = string(kv.Value)
	}
	return m
}

// A pod of the API server gets the service variables, and waits (a
// CreateContainerConfigError) until the Services have been read once; a
// static pod does not wait.
func TestServiceEnvironment(t *testing.T) {
	services := &fakeServices{services: []*v1.Service{{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "kubernetes"},
		Spec:       v1.ServiceSpec{ClusterIP: "10.96.0.1", Ports: []v1.ServicePort{{Name: "https", Port: 443}}},
	}}}
	f := withServices(t, services)
	apiPod := testPod()
	apiPod.Annotations = map[string]string{podspec.AnnotationConfigSource: podspec.ConfigSourceAPI}
	_, err := f.m.containerExtras(t.Context(), apiPod, &apiPod.Spec.Containers[0], nil, podsetup.Setup{}, nil)
	var cfgErr *configError
	if !errors.As(err, &cfgErr) || !strings.Contains(err.Error(), "services have not yet been read") {
		t.Errorf("API pod before the Services were read: %v, want a config error", err)
	}

	static := testPod()
	static.Annotations = map[string]string{podspec.AnnotationConfigSource: "file"}
	extras, err := f.m.containerExtras(t.Context(), static, &static.Spec.Containers[0], nil, podsetup.Setup{}, nil)
	if err != nil {
		t.Fatalf("static pod before the Services were read: %v", err)
	}
	if _, ok := envOf(extras)["KUBERNETES_SERVICE_HOST"]; ok {
		t.Error("service variables from Services not read yet")
	}

	services.synced = true
	extras, err = f.m.containerExtras(t.Context(), apiPod, &apiPod.Spec.Containers[0], nil, podsetup.Setup{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := envOf(extras)["KUBERNETES_SERVICE_HOST"]; got != "10.96.0.1" {
		t.Errorf("KUBERNETES_SERVICE_HOST = %q", got)
	}
}
