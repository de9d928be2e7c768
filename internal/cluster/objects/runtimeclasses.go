package objects

import (
	"context"
	"errors"
	"sync"
	"time"

	nodeinformers "k8s.io/client-go/informers/node/v1"
	"k8s.io/client-go/kubernetes"
	nodelisters "k8s.io/client-go/listers/node/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
)

// ErrRuntimeClassesNotSynced is returned by LookupRuntimeHandler while the
// first list of RuntimeClasses has not completed: a class not yet read is
// not known to be missing.
var ErrRuntimeClassesNotSynced = errors.New("RuntimeClasses have not yet been read at least once")

// FirstListWait is how long the first LookupRuntimeHandler waits for the
// informer's first list before it gives up (ErrRuntimeClassesNotSynced,
// and the pod's sync is retried).
const FirstListWait = 10 * time.Second

// RuntimeClasses are the cluster's node.k8s.io/v1 RuntimeClasses, read
// through one informer as the kubelet's runtimeclass.Manager (the node
// authorizer lets nodes get, list and watch them), for the runtime
// handler of each pod's sandbox. Unlike the kubelet's, the informer starts
// on the first lookup, not with the node: most nodes never run a pod that
// names a RuntimeClass, and a watch that is never needed costs the API
// server memory for every node. New starts nothing; Run runs the informer
// once a lookup wants it.
type RuntimeClasses struct {
	informer cache.SharedIndexInformer
	lister   nodelisters.RuntimeClassLister
	clock    clock.Clock
	wanted   chan struct{} // closed by the first lookup
	want     sync.Once
	synced   chan struct{} // closed once the first list is in
}

// NewRuntimeClasses returns the RuntimeClasses read through client. It
// starts nothing.
func NewRuntimeClasses(client kubernetes.Interface, clk clock.Clock) *RuntimeClasses {
	inf := nodeinformers.NewRuntimeClassInformer(client, 0, cache.Indexers{})
	return &RuntimeClasses{informer: inf, lister: nodelisters.NewRuntimeClassLister(inf.GetIndexer()),
		clock: clk, wanted: make(chan struct{}), synced: make(chan struct{})}
}

// Run runs the informer, from the first lookup until ctx ends.
func (r *RuntimeClasses) Run(ctx context.Context) {
	select {
	case <-r.wanted:
	case <-ctx.Done():
		return
	}
	go func() {
		if cache.WaitForCacheSync(ctx.Done(), r.informer.HasSynced) {
			close(r.synced)
		}
	}()
	r.informer.RunWithContext(ctx)
}

// LookupRuntimeHandler returns the handler of the RuntimeClass name (the
// kubelet's LookupRuntimeHandler): the API's NotFound when there is none.
// The first lookup starts the informer and waits up to FirstListWait for
// its first list; ErrRuntimeClassesNotSynced when it has not come.
func (r *RuntimeClasses) LookupRuntimeHandler(name string) (string, error) {
	r.want.Do(func() { close(r.wanted) })
	if !r.informer.HasSynced() {
		select {
		case <-r.synced:
		case <-r.clock.After(FirstListWait):
			return "", ErrRuntimeClassesNotSynced
		}
	}
	rc, err := r.lister.Get(name)
	if err != nil {
		// The API's NotFound names the class, in the kubelet's words.
		return "", err
	}
	return rc.Handler, nil
}
