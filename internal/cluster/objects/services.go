package objects

import (
	"context"
	"errors"
	"fmt"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// masterService is the Service of the API server, in namespace default,
// whose variables every pod gets (the kubelet's masterServices).
const masterService = "kubernetes"

// ErrServicesNotSynced is returned by ServicesFor until the first list of
// Services has completed.
var ErrServicesNotSynced = errors.New("services have not yet been read at least once, cannot construct envvars")

// Services is the cluster's Services as this node sees them, for the
// service environment variables (enableServiceLinks): one informer over
// the Services of every namespace that have a cluster IP, as the kubelet's
// since 1.31 (kubernetes#122394; the Node authorizer lets nodes list and
// watch Services). Headless Services (clusterIP None) make no variables,
// so they are neither listed nor watched: the field selector
// servicesSelector keeps them on the API server, and their changes cost
// the node nothing. New starts nothing; Run runs the informer.
type Services struct {
	informer cache.SharedIndexInformer
	lister   corelisters.ServiceLister
}

// servicesSelector is the field selector of the Services list and watch,
// the kubelet's: every Service but the headless ones.
var servicesSelector = fields.OneTermNotEqualSelector("spec.clusterIP", v1.ClusterIPNone).String()

// NewServices returns the Services read through client. It starts
// nothing.
func NewServices(client kubernetes.Interface) *Services {
	inf := coreinformers.NewFilteredServiceInformer(client, metav1.NamespaceAll, 0,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc},
		func(opts *metav1.ListOptions) { opts.FieldSelector = servicesSelector })
	return &Services{informer: inf, lister: corelisters.NewServiceLister(inf.GetIndexer())}
}

// Run runs the informer until ctx ends.
func (s *Services) Run(ctx context.Context) { s.informer.RunWithContext(ctx) }

// HasSynced reports whether the first list has completed.
func (s *Services) HasSynced() bool { return s.informer.HasSynced() }

// ServicesFor returns what the environment of a pod of namespace may link
// to: the Services of namespace and the master service (default/kubernetes);
// envvars.ServiceEnv picks from them. It returns ErrServicesNotSynced
// until the first list has completed.
func (s *Services) ServicesFor(namespace string) ([]*v1.Service, error) {
	if !s.informer.HasSynced() {
		return nil, ErrServicesNotSynced
	}
	services, err := s.lister.Services(namespace).List(labels.Everything())
	if err != nil {
		return nil, fmt.Errorf("listing services of namespace %s: %w", namespace, err)
	}
	if namespace != metav1.NamespaceDefault {
		master, err := s.lister.Services(metav1.NamespaceDefault).Get(masterService)
		switch {
		case err == nil:
			services = append(services, master)
		case !apierrors.IsNotFound(err):
			return nil, fmt.Errorf("getting service %s/%s: %w", metav1.NamespaceDefault, masterService, err)
		}
	}
	return services, nil
}
