package objects

import (
	"context"
	"errors"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nodelet/nodelet/internal/base/testutil"
)

func svc(ns, name string) *v1.Service {
	return &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: v1.ServiceSpec{ClusterIP: "10.0.0.1"}}
}

// ServicesFor gives a namespace's Services and the master service, once
// the first list has completed.
func TestServicesFor(t *testing.T) {
	client := fake.NewClientset(svc("default", "kubernetes"), svc("default", "web"), svc("app", "db"), svc("app", "cache"), svc("other", "x"))
	s := NewServices(client)
	if _, err := s.ServicesFor("app"); !errors.Is(err, ErrServicesNotSynced) {
		t.Errorf("before Run: %v, want ErrServicesNotSynced", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	defer func() { cancel(); <-done }()
	testutil.Eventually(t, "the Services to be listed", s.HasSynced)

	names := func(ns string) []string {
		t.Helper()
		got, err := s.ServicesFor(ns)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, s := range got {
			out = append(out, s.Namespace+"/"+s.Name)
		}
		slices.Sort(out)
		return out
	}
	if got, want := names("app"), []string{"app/cache", "app/db", "default/kubernetes"}; !slices.Equal(got, want) {
		t.Errorf("ServicesFor(app) = %q, want %q", got, want)
	}
	if got, want := names("default"), []string{"default/kubernetes", "default/web"}; !slices.Equal(got, want) {
		t.Errorf("ServicesFor(default) = %q, want %q", got, want)
	}
	if got, want := names("empty"), []string{"default/kubernetes"}; !slices.Equal(got, want) {
		t.Errorf("ServicesFor(empty) = %q, want %q", got, want)
	}
}
