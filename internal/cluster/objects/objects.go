// Package objects is beside the pipeline: the API objects that pods' env
// and volumes refer to, behind one interface (ConfigMap, Secret, both
// asked for a pod):
//
//   - Store is the manifest directory's ConfigMaps and Secrets (Pass takes
//     them from the file source's updates on their way to the merge);
//     static pods read these.
//   - Watcher is the API server's (cluster mode), each object watched on
//     its own while pods of this node refer to it (the kubelet's
//     watch-based manager; the podhooks.Objects hook registers pods);
//     pods of the API server read these.
//   - Router gives each pod its side.
//   - Services is an informer over the cluster's Services that have a
//     cluster IP (headless ones are not watched, as the kubelet's), for
//     the service environment variables.
//   - RuntimeClasses is an informer over the cluster's RuntimeClasses,
//     for the runtime handler of each pod's sandbox.
//
// A change of either kind of object signals Store.Changed (the Watcher
// calls Store.Notify), and the sync loop then syncs every pod: volumes
// refresh their content.
package objects

import (
	"context"
	"fmt"
	"sync"

	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"

	"github.com/nodelet/nodelet/internal/node/volume"
	"github.com/nodelet/nodelet/internal/pipeline/podsource"
	"github.com/nodelet/nodelet/internal/pure/envvars"
)

// Store holds the ConfigMaps and Secrets of the manifest directory.
type Store struct {
	// changed holds one pending "the objects changed" signal.
	changed chan struct{}

	mu         sync.RWMutex
	configMaps map[string]*v1.ConfigMap
	secrets    map[string]*v1.Secret
}

// NewStore returns an empty store.
func NewStore() *Store {
	return &Store{changed: make(chan struct{}, 1), configMaps: map[string]*v1.ConfigMap{}, secrets: map[string]*v1.Secret{}}
}

// Changed signals, once per burst of changes, that the objects changed
// (pods referring to them need a sync).
func (s *Store) Changed() <-chan struct{} { return s.changed }

// Replace sets the objects; it reports whether anything changed and, if
// so, signals Changed.
func (s *Store) Replace(configMaps []*v1.ConfigMap, secrets []*v1.Secret) bool {
	cms := map[string]*v1.ConfigMap{}
	for _, cm := range configMaps {
		cms[cm.Namespace+"/"+cm.Name] = cm
	}
	ss := map[string]*v1.Secret{}
	for _, sec := range secrets {
		ss[sec.Namespace+"/"+sec.Name] = sec
	}
	s.mu.Lock()
	changed := !apiequality.Semantic.DeepEqual(cms, s.configMaps) || !apiequality.Semantic.DeepEqual(ss, s.secrets)
	s.configMaps, s.secrets = cms, ss
	s.mu.Unlock()
	if changed {
		s.Notify()
	}
	return changed
}

// Notify signals Changed (at most one signal is pending). The API's
// objects (Watcher) signal their changes here too, so the sync loop has
// one channel to listen to.
func (s *Store) Notify() {
	select {
	case s.changed <- struct{}{}:
	default: // one is pending already
	}
}

// Pass forwards source updates from in to out until ctx ends, keeping the
// file source's ConfigMaps and Secrets.
func (s *Store) Pass(ctx context.Context, in <-chan podsource.Update, out chan<- podsource.Update) {
	for {
		select {
		case <-ctx.Done():
			return
		case u := <-in:
			if u.Source == podsource.SourceFile {
				s.Replace(u.ConfigMaps, u.Secrets)
			}
			select {
			case out <- u:
			case <-ctx.Done():
				return
			}
		}
	}
}

// notFoundError is a missing object; it is the not-found sentinel of
// every consumer (env and volumes).
type notFoundError struct{ kind, namespace, name string }

func (e notFoundError) Error() string {
	return fmt.Sprintf("%s %q not found in namespace %q", e.kind, e.name, e.namespace)
}

func (e notFoundError) Is(target error) bool {
	return target == envvars.ErrObjectNotFound || target == volume.ErrObjectNotFound
}

// ConfigMap returns a copy of the named ConfigMap of the pod's namespace.
func (s *Store) ConfigMap(pod *v1.Pod, name string) (*v1.ConfigMap, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if cm, ok := s.configMaps[pod.Namespace+"/"+name]; ok {
		return cm.DeepCopy(), nil
	}
	return nil, notFoundError{"configmap", pod.Namespace, name}
}

// Secret returns a copy of the named Secret of the pod's namespace.
func (s *Store) Secret(pod *v1.Pod, name string) (*v1.Secret, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if sec, ok := s.secrets[pod.Namespace+"/"+name]; ok {
		return sec.DeepCopy(), nil
	}
	return nil, notFoundError{"secret", pod.Namespace, name}
}
