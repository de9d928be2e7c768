package objects

import (
	"context"
	"errors"

	nodeinformers "k8s.io/client-go/informers/node/v1"
	"k8s.io/client-go/kubernetes"
	nodelisters "k8s.io/client-go/listers/node/v1"
	"k8s.io/client-go/tools/cache"
)

// ErrRuntimeClassesNotSynced is returned by LookupRuntimeHandler until the
// first list of RuntimeClasses has completed: a class not yet read is not
// known to be missing.
var ErrRuntimeClassesNotSynced = errors.New("RuntimeClasses have not yet been read at least once")

// RuntimeClasses are the cluster's node.k8s.io/v1 RuntimeClasses, read
// through one informer as the kubelet's runtimeclass.Manager (the node
// authorizer lets nodes get, list and watch them), for the runtime
// handler of each pod's sandbox. New starts nothing; Run runs the
// informer.
type RuntimeClasses struct {
	informer cache.SharedIndexInformer
	lister   nodelisters.RuntimeClassLister
}

// NewRuntimeClasses returns the RuntimeClasses read through client. It
// starts nothing.
func NewRuntimeClasses(client kubernetes.Interface) *RuntimeClasses {
	inf := nodeinformers.NewRuntimeClassInformer(client, 0, cache.Indexers{})
	return &RuntimeClasses{informer: inf, lister: nodelisters.NewRuntimeClassLister(inf.GetIndexer())}
}

// Run runs the informer until ctx ends.
func (r *RuntimeClasses) Run(ctx context.Context) { r.informer.RunWithContext(ctx) }

// HasSynced reports whether the first list has completed.
func (r *RuntimeClasses) HasSynced() bool { return r.informer.HasSynced() }

// LookupRuntimeHandler returns the handler of the RuntimeClass name (the
// kubelet's LookupRuntimeHandler): the API's NotFound when there is none,
// ErrRuntimeClassesNotSynced before the first list.
func (r *RuntimeClasses) LookupRuntimeHandler(name string) (string, error) {
	if !r.informer.HasSynced() {
		return "", ErrRuntimeClassesNotSynced
	}
	rc, err := r.lister.Get(name)
	if err != nil {
		// The API's NotFound names the class, in the kubelet's words.
		return "", err
	}
	return rc.Handler, nil
}
