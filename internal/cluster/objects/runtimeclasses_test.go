package objects

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"

	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/clock"
)

// The informer starts on the first lookup, not with Run: a node whose pods
// name no RuntimeClass never lists or watches them. That lookup waits for
// the first list, then gives a class's handler, and the API's NotFound for
// a class that does not exist. (synctest: Wait returns once every goroutine
// of the test is blocked, so "nothing was asked" is checked, not hoped.)
func TestLookupRuntimeHandlerStartsTheInformer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		client := fake.NewClientset(
			&nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "gvisor"}, Handler: "runsc"},
			&nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "plain"}, Handler: "runc"})
		r := NewRuntimeClasses(client, clock.RealClock{})
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { defer close(done); r.Run(ctx) }()
		defer func() { cancel(); <-done }()

		synctest.Wait()
		if a := client.Actions(); len(a) != 0 {
			t.Fatalf("before any lookup, the API was asked %v; want nothing", a)
		}
		for name, want := range map[string]string{"gvisor": "runsc", "plain": "runc"} {
			if got, err := r.LookupRuntimeHandler(name); err != nil || got != want {
				t.Errorf("%s: %q, %v; want %q", name, got, err, want)
			}
		}
		_, err := r.LookupRuntimeHandler("kata")
		if !apierrors.IsNotFound(err) || err.Error() != `runtimeclass.node.k8s.io "kata" not found` {
			t.Errorf("kata: %v, want NotFound", err)
		}
		verbs := map[string]int{}
		for _, a := range client.Actions() {
			verbs[a.GetVerb()]++
		}
		if verbs["list"] != 1 || verbs["watch"] != 1 {
			t.Errorf("the API was asked %v; want one list and one watch", verbs)
		}
	})
}

// A lookup whose first list does not come within FirstListWait gives up
// with ErrRuntimeClassesNotSynced (a class not read is not known to be
// missing), and the pod's sync is retried.
func TestLookupRuntimeHandlerWithoutList(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := NewRuntimeClasses(fake.NewClientset(), clock.RealClock{})
		// Run never runs: the list never comes.
		if _, err := r.LookupRuntimeHandler("gvisor"); !errors.Is(err, ErrRuntimeClassesNotSynced) {
			t.Errorf("no list: %v, want ErrRuntimeClassesNotSynced", err)
		}
	})
}
