package objects

import (
	"context"
	"errors"
	"testing"

	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nodelet/nodelet/internal/base/testutil"
)

// LookupRuntimeHandler gives a class's handler once the first list has
// completed, and the API's NotFound for a class that does not exist.
func TestLookupRuntimeHandler(t *testing.T) {
	client := fake.NewClientset(
		&nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "gvisor"}, Handler: "runsc"},
		&nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "plain"}, Handler: "runc"})
	r := NewRuntimeClasses(client)
	if _, err := r.LookupRuntimeHandler("gvisor"); !errors.Is(err, ErrRuntimeClassesNotSynced) {
		t.Errorf("before Run: %v, want ErrRuntimeClassesNotSynced", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	defer func() { cancel(); <-done }()
	testutil.Eventually(t, "the RuntimeClasses to be listed", r.HasSynced)

	for name, want := range map[string]string{"gvisor": "runsc", "plain": "runc"} {
		if got, err := r.LookupRuntimeHandler(name); err != nil || got != want {
			t.Errorf("%s: %q, %v; want %q", name, got, err, want)
		}
	}
	_, err := r.LookupRuntimeHandler("kata")
	if !apierrors.IsNotFound(err) || err.Error() != `runtimeclass.node.k8s.io "kata" not found` {
		t.Errorf("kata: %v, want NotFound", err)
	}
}
