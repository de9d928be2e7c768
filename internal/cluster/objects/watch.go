package objects

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/pure/podspec"
)

// DefaultSyncTimeout is how long a read waits for the first list of a
// newly watched object (the kubelet waits a second too).
const DefaultSyncTimeout = time.Second

// minWatchTimeout keeps each object's watch open at least this long, as
// the kubelet's (its default of 5 minutes would reopen thousands of
// watches every few minutes on a busy node).
const minWatchTimeout = 30 * time.Minute

// Watcher is the ConfigMaps and Secrets of the API server that the pods of
// this node refer to, each watched on its own, as the kubelet's
// watch-based ConfigMap and Secret managers do:
//
//   - RegisterPod (before every sync of a pod from the API server) records
//     the objects the pod refers to; an object referred to for the first
//     time gets a watch of its own: a list and watch of its namespace with
//     the field selector metadata.name=<name>, which is what the Node
//     authorizer allows a node (get, list and watch of the objects pods
//     bound to it refer to; never a whole namespace).
//   - Each watched object counts the pods referring to it. UnregisterPod
//     (once the pod's containers have stopped and its volumes are gone),
//     and a RegisterPod whose pod no longer refers to an object, drop the
//     pod's references; the watch of an object no pod refers to stops and
//     its copy is dropped.
//   - ConfigMap and Secret read the watch's copy. A read right after the
//     registration waits up to the sync timeout for the first list; one
//     that gives up is an error (not "not found": an optional reference is
//     not skipped for it), and the first list then signals a change so that
//     the pod is synced again at once.
//   - Every later change of a watched object (created, updated, deleted)
//     calls notify: the sync loop syncs every pod, and the volumes refresh.
//   - An immutable object is not watched after its first read: its watch
//     stops and the copy is kept while pods refer to it.
//   - Static pods are never registered and read nothing here: the kubelet
//     forbids static pods to refer to API objects (Router gives them the
//     manifest directory's).
//
// New starts nothing; Run starts the watches of the objects registered so
// far, and the later ones as they come, and stops them all when its
// context ends.
type Watcher struct {
	client      kubernetes.Interface
	notify      func()
	clock       clock.Clock
	log         *slog.Logger
	klog        logr.Logger
	syncTimeout time.Duration

	mu sync.Mutex
	// ctx is Run's context, nil before Run; watches are started under it.
	ctx     context.Context
	stopped bool
	pods    map[types.UID]registration
	items   map[objectKey]*item
	// running counts the watch goroutines, which Run waits for.
	running sync.WaitGroup
}

// registration is what one registered pod refers to.
type registration struct {
	namespace string
	refs      references
}

// objectKind is ConfigMap or Secret.
type objectKind int

const (
	kindConfigMap objectKind = iota
	kindSecret
)

func (k objectKind) String() string {
	if k == kindSecret {
		return "secret"
	}
	return "configmap"
}

// objectKey names one watched object.
type objectKey struct {
	kind            objectKind
	namespace, name string
}

func (k objectKey) String() string { return fmt.Sprintf("%s %s/%s", k.kind, k.namespace, k.name) }

// WatcherOption changes a Watcher built by NewWatcher.
type WatcherOption func(*Watcher)

// WithSyncTimeout sets how long a read waits for the first list of a
// newly watched object (DefaultSyncTimeout by default).
func WithSyncTimeout(d time.Duration) WatcherOption {
	return func(w *Watcher) { w.syncTimeout = d }
}

// NewWatcher returns a Watcher reading through client, which calls notify
// whenever a watched object changed (objects.Store.Notify, so that the
// sync loop hears of both kinds of objects on one channel). It starts
// nothing.
func NewWatcher(client kubernetes.Interface, notify func(), clk clock.Clock, log *slog.Logger, opts ...WatcherOption) *Watcher {
	w := &Watcher{
		client:      client,
		notify:      notify,
		clock:       clk,
		log:         log,
		klog:        logr.FromSlogHandler(log.Handler()),
		syncTimeout: DefaultSyncTimeout,
		pods:        map[types.UID]registration{},
		items:       map[objectKey]*item{},
	}
	for _, o := range opts {
		o(w)
	}
	return w
}

// Run starts the watches and keeps starting them as pods register
// objects, until ctx ends; it returns once every watch has stopped.
func (w *Watcher) Run(ctx context.Context) {
	w.mu.Lock()
	w.ctx = ctx
	for _, it := range w.items {
		w.startLocked(it)
	}
	w.mu.Unlock()

	<-ctx.Done()
	w.mu.Lock()
	w.stopped = true
	for _, it := range w.items {
		it.stop()
	}
	w.mu.Unlock()
	w.running.Wait()
}

// RegisterPod records the ConfigMaps and Secrets pod refers to, watching
// those no other pod refers to yet, and drops what an earlier version of
// the pod referred to and this one does not. It is idempotent and cheap
// (no API call is made here). Static pods are ignored.
func (w *Watcher) RegisterPod(pod *v1.Pod) {
	if podspec.IsStatic(pod) {
		return
	}
	reg := registration{namespace: pod.Namespace, refs: referencesOf(pod)}
	w.mu.Lock()
	defer w.mu.Unlock()
	prev, had := w.pods[pod.UID]
	w.pods[pod.UID] = reg
	keep := map[objectKey]bool{}
	for _, k := range reg.keys() {
		keep[k] = true
		w.addRefLocked(k, pod.UID)
	}
	if had {
		for _, k := range prev.keys() {
			if !keep[k] {
				w.dropRefLocked(k, pod.UID)
			}
		}
	}
}

// UnregisterPod drops every reference of the pod; objects no pod refers to
// any more stop being watched. It is idempotent.
func (w *Watcher) UnregisterPod(pod *v1.Pod) {
	w.mu.Lock()
	defer w.mu.Unlock()
	prev, had := w.pods[pod.UID]
	if !had {
		return
	}
	delete(w.pods, pod.UID)
	for _, k := range prev.keys() {
		w.dropRefLocked(k, pod.UID)
	}
}

// ConfigMap returns a copy of the named ConfigMap of the pod's namespace,
// from its watch.
func (w *Watcher) ConfigMap(pod *v1.Pod, name string) (*v1.ConfigMap, error) {
	obj, err := w.get(pod, objectKey{kindConfigMap, pod.Namespace, name})
	if err != nil {
		return nil, err
	}
	cm, ok := obj.(*v1.ConfigMap)
	if !ok {
		return nil, fmt.Errorf("configmap %s/%s: the watch holds a %T", pod.Namespace, name, obj)
	}
	return cm.DeepCopy(), nil
}

// Secret returns a copy of the named Secret of the pod's namespace, from
// its watch.
func (w *Watcher) Secret(pod *v1.Pod, name string) (*v1.Secret, error) {
	obj, err := w.get(pod, objectKey{kindSecret, pod.Namespace, name})
	if err != nil {
		return nil, err
	}
	s, ok := obj.(*v1.Secret)
	if !ok {
		return nil, fmt.Errorf("secret %s/%s: the watch holds a %T", pod.Namespace, name, obj)
	}
	return s.DeepCopy(), nil
}

// Watching lists the objects watched (or, immutable, kept) now, for tests
// and debugging: "configmap ns/name", sorted by kind, namespace and name.
func (w *Watcher) Watching() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	keys := make([]objectKey, 0, len(w.items))
	for k := range w.items {
		keys = append(keys, k)
	}
	sortKeys(keys)
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = k.String()
	}
	return out
}

func (w *Watcher) get(pod *v1.Pod, k objectKey) (runtime.Object, error) {
	if podspec.IsStatic(pod) {
		return nil, fmt.Errorf("%s: static pods may not reference API objects", k)
	}
	w.mu.Lock()
	it := w.items[k]
	w.mu.Unlock()
	if it == nil {
		return nil, fmt.Errorf("%s is not registered: no pod of this node refers to it", k)
	}
	if err := it.waitListed(w.clock, w.syncTimeout); err != nil {
		return nil, err
	}
	it.mu.Lock()
	obj := it.obj
	it.mu.Unlock()
	if obj == nil {
		return nil, notFoundError{k.kind.String(), k.namespace, k.name}
	}
	return obj, nil
}

// keys are the objects of a registration.
func (r registration) keys() []objectKey {
	keys := make([]objectKey, 0, len(r.refs.configMaps)+len(r.refs.secrets))
	for _, n := range r.refs.configMaps {
		keys = append(keys, objectKey{kindConfigMap, r.namespace, n})
	}
	for _, n := range r.refs.secrets {
		keys = append(keys, objectKey{kindSecret, r.namespace, n})
	}
	return keys
}

func (w *Watcher) addRefLocked(k objectKey, uid types.UID) {
	it := w.items[k]
	if it == nil {
		it = &item{key: k, pods: map[types.UID]struct{}{}, synced: make(chan struct{}), notify: w.notify}
		w.items[k] = it
		w.startLocked(it)
	}
	it.pods[uid] = struct{}{}
}

func (w *Watcher) dropRefLocked(k objectKey, uid types.UID) {
	it := w.items[k]
	if it == nil {
		return
	}
	delete(it.pods, uid)
	if len(it.pods) == 0 {
		delete(w.items, k)
		it.stop()
		w.log.Debug("Stopped watching an object no pod refers to", "object", k.String())
	}
}

// startLocked starts the watch of it, once Run has begun and until it
// ends.
func (w *Watcher) startLocked(it *item) {
	if w.ctx == nil || w.stopped {
		return
	}
	ctx, cancel := context.WithCancel(w.ctx)
	if !it.setCancel(cancel) {
		cancel()
		return
	}
	r := cache.NewReflectorWithOptions(w.listWatch(it.key), newObject(it.key.kind), it, cache.ReflectorOptions{
		Name:            it.key.String(),
		MinWatchTimeout: minWatchTimeout,
		Clock:           w.clock,
		Logger:          &w.klog,
	})
	w.running.Add(1)
	go func() {
		defer w.running.Done()
		r.RunWithContext(ctx)
	}()
}

// listWatch lists and watches one object: its namespace, with the field
// selector metadata.name=<name>.
func (w *Watcher) listWatch(k objectKey) cache.ListerWatcher {
	selector := fields.OneTermEqualSelector("metadata.name", k.name).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.FieldSelector = selector
			if k.kind == kindSecret {
				return w.client.CoreV1().Secrets(k.namespace).List(ctx, opts)
			}
			return w.client.CoreV1().ConfigMaps(k.namespace).List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.FieldSelector = selector
			if k.kind == kindSecret {
				return w.client.CoreV1().Secrets(k.namespace).Watch(ctx, opts)
			}
			return w.client.CoreV1().ConfigMaps(k.namespace).Watch(ctx, opts)
		},
	}
	return cache.ToListWatcherWithWatchListSemantics(lw, w.client)
}

func newObject(k objectKind) runtime.Object {
	if k == kindSecret {
		return &v1.Secret{}
	}
	return &v1.ConfigMap{}
}

// isImmutable reports whether obj is a ConfigMap or Secret marked
// immutable.
func isImmutable(obj runtime.Object) bool {
	switch o := obj.(type) {
	case *v1.ConfigMap:
		return o.Immutable != nil && *o.Immutable
	case *v1.Secret:
		return o.Immutable != nil && *o.Immutable
	}
	return false
}

// item is one watched object: the reflector's store (a store of at most
// one object: the field selector names it) and the readers' copy.
type item struct {
	key objectKey
	// pods refer to the object; guarded by Watcher.mu.
	pods map[types.UID]struct{}
	// synced is closed by the first complete list.
	synced chan struct{}
	notify func()

	mu sync.Mutex
	// cancel stops the watch; nil before it starts.
	cancel context.CancelFunc
	// stopped: no watch is to run any more (no pod refers to the object,
	// or it is immutable).
	stopped bool
	obj     runtime.Object // nil: the object does not exist
	listed  bool
	// missed: a reader gave up waiting for the first list.
	missed bool
}

// setCancel records the cancel of a starting watch; false if the item is
// stopped already.
func (it *item) setCancel(cancel context.CancelFunc) bool {
	it.mu.Lock()
	defer it.mu.Unlock()
	if it.stopped {
		return false
	}
	it.cancel = cancel
	return true
}

// stop stops the watch for good.
func (it *item) stop() {
	it.mu.Lock()
	defer it.mu.Unlock()
	it.stopLocked()
}

func (it *item) stopLocked() {
	it.stopped = true
	if it.cancel != nil {
		it.cancel()
	}
}

// waitListed waits up to timeout for the first list.
func (it *item) waitListed(clk clock.Clock, timeout time.Duration) error {
	select {
	case <-it.synced:
		return nil
	default:
	}
	select {
	case <-it.synced:
		return nil
	case <-clk.After(timeout):
	}
	it.mu.Lock()
	defer it.mu.Unlock()
	if it.listed {
		return nil
	}
	it.missed = true
	return fmt.Errorf("%s: not read from the API server yet (its watch has not synced within %s)", it.key, timeout)
}

// set stores what the watch says the object is now (nil: absent) and
// signals a change: any change after the first list, and the first list
// itself when a reader gave up waiting for it.
func (it *item) set(obj runtime.Object, list bool) {
	it.mu.Lock()
	if it.stopped && it.listed {
		it.mu.Unlock()
		return // immutable (kept as first read), or no longer referred to
	}
	first := list && !it.listed
	changed := !sameObject(it.obj, obj)
	it.obj = obj
	if first {
		it.listed = true
		close(it.synced)
	}
	notify := (first && it.missed) || (!first && it.listed && changed)
	if obj != nil && isImmutable(obj) {
		it.stopLocked()
	}
	it.mu.Unlock()
	if notify {
		it.notify()
	}
}

// sameObject reports whether a and b are the same version of an object
// (both absent, the same resourceVersion, or equal when one has none).
func sameObject(a, b runtime.Object) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	ma, errA := meta.Accessor(a)
	mb, errB := meta.Accessor(b)
	if errA == nil && errB == nil && ma.GetResourceVersion() != "" && mb.GetResourceVersion() != "" {
		return ma.GetResourceVersion() == mb.GetResourceVersion()
	}
	return apiequality.Semantic.DeepEqual(a, b)
}

// mine returns obj as a runtime.Object when it is the item's object (the
// API server filters by name; this guards against a server, or a fake,
// that does not).
func (it *item) mine(obj any) (runtime.Object, bool) {
	ro, ok := obj.(runtime.Object)
	if !ok {
		return nil, false
	}
	m, err := meta.Accessor(ro)
	if err != nil || m.GetName() != it.key.name || m.GetNamespace() != it.key.namespace {
		return nil, false
	}
	return ro, true
}

// The reflector's store (cache.ReflectorStore).

func (it *item) Add(obj any) error {
	if ro, ok := it.mine(obj); ok {
		it.set(ro, false)
	}
	return nil
}

func (it *item) Update(obj any) error { return it.Add(obj) }

func (it *item) Delete(obj any) error {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if _, ok := it.mine(obj); ok {
		it.set(nil, false)
	}
	return nil
}

func (it *item) Replace(list []any, _ string) error {
	var found runtime.Object
	for _, obj := range list {
		if ro, ok := it.mine(obj); ok {
			found = ro
		}
	}
	it.set(found, true)
	return nil
}

func (it *item) Resync() error { return nil }

// sortKeys sorts by kind, namespace and name.
func sortKeys(keys []objectKey) {
	slices.SortFunc(keys, func(a, b objectKey) int {
		return cmp.Or(cmp.Compare(a.kind, b.kind), cmp.Compare(a.namespace, b.namespace), cmp.Compare(a.name, b.name))
	})
}
