package objects

import (
	"context"
	"errors"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

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

// The Services are listed and watched as the kubelet's since 1.31
// (kubernetes#122394): with the field selector spec.clusterIP!=None, so
// that the API server sends no headless Service; every list and watch
// carries it.
func TestServicesSkipHeadless(t *testing.T) {
	if servicesSelector != "spec.clusterIP!=None" {
		t.Fatalf("selector %q, want the kubelet's spec.clusterIP!=None", servicesSelector)
	}
	client := fake.NewClientset(svc("default", "kubernetes"))
	s := NewServices(client)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	defer func() { cancel(); <-done }()
	testutil.Eventually(t, "the Services to be listed", s.HasSynced)
	testutil.Eventually(t, "the Services to be watched", func() bool {
		return slices.ContainsFunc(client.Actions(), func(a k8stesting.Action) bool { return a.GetVerb() == "watch" })
	})

	lists, watches := 0, 0
	for _, a := range client.Actions() {
		if a.GetResource().Resource != "services" {
			t.Errorf("%s of %s", a.GetVerb(), a.GetResource().Resource)
			continue
		}
		var selector string
		switch a := a.(type) {
		case k8stesting.ListActionImpl:
			lists++
			selector = a.ListOptions.FieldSelector
		case k8stesting.WatchActionImpl:
			watches++
			selector = a.ListOptions.FieldSelector
		default:
			t.Errorf("a %s of services", a.GetVerb())
			continue
		}
		if a.GetNamespace() != metav1.NamespaceAll || selector != "spec.clusterIP!=None" {
			t.Errorf("%s of services in %q with field selector %q, want all namespaces and spec.clusterIP!=None", a.GetVerb(), a.GetNamespace(), selector)
		}
	}
	if lists+watches < 2 || watches == 0 {
		t.Errorf("%d lists and %d watches of services, want the informer's list (or watch list) and watch", lists, watches)
	}
}
