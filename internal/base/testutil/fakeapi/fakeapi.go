// Package fakeapi is beside the pipeline, for tests only: what the fake
// clientset of client-go lacks for tests of informers.
package fakeapi

import (
	"sync/atomic"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// CountWatches makes client count the watches it has opened and returns
// the count. The fake's watches replay nothing: a change made after an
// informer listed but before its watch is open is never delivered, where
// the API server would replay it from the list's resourceVersion. A test
// that changes objects under an informer waits for the count first; an
// informer's HasSynced is true as soon as its list is in.
func CountWatches(client *fake.Clientset) *atomic.Int64 {
	n := new(atomic.Int64)
	client.PrependWatchReactor("*", func(a k8stesting.Action) (bool, watch.Interface, error) {
		var opts metav1.ListOptions
		if w, ok := a.(k8stesting.WatchActionImpl); ok {
			opts = w.ListOptions
		}
		w, err := client.Tracker().Watch(a.GetResource(), a.GetNamespace(), opts)
		if err != nil {
			return false, nil, err
		}
		n.Add(1)
		return true, w, nil
	})
	return n
}
