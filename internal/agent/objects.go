package agent

import (
	"fmt"
	"sync"

	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"

	"github.com/nodelet/nodelet/internal/envvars"
)

// objectStore holds the ConfigMaps and Secrets of the manifest directory:
// in standalone mode they stand in for the API server's.
type objectStore struct {
	mu         sync.RWMutex
	configMaps map[string]*v1.ConfigMap
	secrets    map[string]*v1.Secret
}

func newObjectStore() *objectStore {
	return &objectStore{configMaps: map[string]*v1.ConfigMap{}, secrets: map[string]*v1.Secret{}}
}

// replace sets the objects; it reports whether anything changed.
func (s *objectStore) replace(configMaps []*v1.ConfigMap, secrets []*v1.Secret) bool {
	cms := map[string]*v1.ConfigMap{}
	for _, cm := range configMaps {
		cms[cm.Namespace+"/"+cm.Name] = cm
	}
	ss := map[string]*v1.Secret{}
	for _, sec := range secrets {
		ss[sec.Namespace+"/"+sec.Name] = sec
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	changed := !apiequality.Semantic.DeepEqual(cms, s.configMaps) || !apiequality.Semantic.DeepEqual(ss, s.secrets)
	s.configMaps, s.secrets = cms, ss
	return changed
}

// notFound matches the not-found sentinel of every consumer.
func notFound(kind, namespace, name string) error {
	return fmt.Errorf("%s %s/%s: %w", kind, namespace, name, envvars.ErrObjectNotFound)
}

func (s *objectStore) ConfigMap(namespace, name string) (*v1.ConfigMap, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if cm, ok := s.configMaps[namespace+"/"+name]; ok {
		return cm.DeepCopy(), nil
	}
	return nil, notFound("configmap", namespace, name)
}

func (s *objectStore) Secret(namespace, name string) (*v1.Secret, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if sec, ok := s.secrets[namespace+"/"+name]; ok {
		return sec.DeepCopy(), nil
	}
	return nil, notFound("secret", namespace, name)
}
