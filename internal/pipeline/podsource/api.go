package podsource

import (
	"context"
	"log/slog"
	"sort"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/nodelet/nodelet/internal/pure/podspec"
)

// SourceAPI is the config.source of pods bound to this node in the API
// server, and the Source of the API source's Updates.
const SourceAPI = podspec.ConfigSourceAPI

// NewNodePodInformer returns the one informer of the pods bound to
// nodeName (a watch on spec.nodeName=<node>, which is all the Node
// authorizer lets a node list). The API source, the status manager and
// the mirror pods all read it, so the node holds one watch of its pods.
// It is the pod informer of client-go's shared factory (the same
// namespace index), built without the factory, whose package links the
// informers and listers of every API group into nodelet.
func NewNodePodInformer(client kubernetes.Interface, nodeName string) cache.SharedIndexInformer {
	return coreinformers.NewFilteredPodInformer(client, metav1.NamespaceAll, 0,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc},
		func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", nodeName).String()
		})
}

// APISource is the third pod source: the pods the scheduler (or a user)
// bound to this node, from a pod informer. Each change sends the full set
// (SET semantics, as the file source), once the informer has listed, so an
// API server that is down or slow to answer never looks like a node
// without pods: the last listed set stays until a new list or watch event
// says otherwise. Mirror pods (kubernetes.io/config.mirror) are the API's
// copy of this node's static pods and are left out.
type APISource struct {
	informer cache.SharedIndexInformer
	log      *slog.Logger
}

// NewAPISource returns a source over informer (NewNodePodInformer). The
// informer is run by the caller.
func NewAPISource(informer cache.SharedIndexInformer, log *slog.Logger) *APISource {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &APISource{informer: informer, log: log}
}

// Run sends an Update after the informer's first list and after every
// change, coalescing changes that arrive while an Update waits to be
// taken, until ctx ends.
func (s *APISource) Run(ctx context.Context, out chan<- Update) {
	changed := make(chan struct{}, 1)
	signal := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	reg, err := s.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { signal() },
		UpdateFunc: func(any, any) { signal() },
		DeleteFunc: func(any) { signal() },
	})
	if err != nil {
		s.log.Error("api source: cannot watch pods", "err", err)
		return
	}
	defer func() { _ = s.informer.RemoveEventHandler(reg) }()
	if !cache.WaitForCacheSync(ctx.Done(), reg.HasSynced) {
		return
	}
	s.log.Info("api source: pods of this node listed", "pods", len(s.informer.GetStore().ListKeys()))
	signal()
	for {
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
		u := Update{Source: SourceAPI, Pods: BoundPods(s.informer.GetStore().List())}
		select {
		case out <- u:
		case <-ctx.Done():
			return
		}
	}
}

// BoundPods are the pods of objs (an informer's store) that the node runs:
// copies, mirror pods left out, sorted by namespace and name.
func BoundPods(objs []any) []*v1.Pod {
	pods := make([]*v1.Pod, 0, len(objs))
	for _, o := range objs {
		p, ok := o.(*v1.Pod)
		if !ok || IsMirrorPod(p) {
			continue
		}
		pods = append(pods, p.DeepCopy())
	}
	sort.Slice(pods, func(i, j int) bool {
		if pods[i].Namespace != pods[j].Namespace {
			return pods[i].Namespace < pods[j].Namespace
		}
		return pods[i].Name < pods[j].Name
	})
	return pods
}

// IsMirrorPod tells whether p is the API server's copy of a static pod.
func IsMirrorPod(p *v1.Pod) bool {
	_, ok := p.Annotations[podspec.AnnotationConfigMirror]
	return ok
}
