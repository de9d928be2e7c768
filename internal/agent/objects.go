package agent

import (
	"fmt"
	"sync"

	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"

	"github.com/nodelet/nodelet/internal/envvars"
	"github.com/nodelet/nodelet/internal/volume"
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

// notFoundError is a missing object; it is the not-found sentinel of
// every consumer (env and volumes).
type notFoundError struct{ kind, namespace, name string }

func (e notFoundError) Error() string {
	return fmt.Sprintf("%s %q not found in namespace %q", e.kind, e.name, e.namespace)
}

func (e notFoundError) Is(target error) bool {
	return target == envvars.ErrObjectNotFound || target == volume.ErrObjectNotFound
}

func notFound(kind, namespace, name string) error { return notFoundError{kind, namespace, name} }

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

// downward resolves downward API fields for volumes (env resolves its own,
// with the pod IPs).
type downward struct {
	nodeName    string
	hostIP      string
	allocatable v1.ResourceList
}

func (d downward) FieldRef(pod *v1.Pod, fieldPath string) (string, error) {
	facts := envvars.PodFacts{NodeName: d.nodeName, NodeAllocatable: d.allocatable}
	if d.hostIP != "" {
		facts.HostIPs = []string{d.hostIP}
	}
	return envvars.FieldRef(pod, fieldPath, facts)
}

func (d downward) ResourceRef(pod *v1.Pod, container string, ref *v1.ResourceFieldSelector) (string, error) {
	return envvars.ResourceRef(pod, container, ref, d.allocatable)
}
