package objects

import (
	"fmt"

	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/internal/pure/podspec"
)

// Source gives the ConfigMaps and Secrets of a pod's namespace (Store,
// Watcher).
type Source interface {
	ConfigMap(pod *v1.Pod, name string) (*v1.ConfigMap, error)
	Secret(pod *v1.Pod, name string) (*v1.Secret, error)
}

// Router gives each pod the objects it may read: a static pod (from a
// manifest file or URL) those of the manifest directory, a pod of the API
// server those of the API server. Neither ever sees the other's: a static
// pod cannot read a Secret of the cluster by naming it, and a pod of the
// cluster cannot read the node's manifest Secrets. It is what volumes and
// env are given (volume.Objects, envvars.Objects).
type Router struct {
	// Static is the manifest directory's objects (Store).
	Static Source
	// API is the API server's objects (Watcher); nil standalone, where no
	// pod comes from an API server.
	API Source
}

// ConfigMap returns the named ConfigMap of the pod's namespace from the
// pod's side.
func (r Router) ConfigMap(pod *v1.Pod, name string) (*v1.ConfigMap, error) {
	src, err := r.source(pod)
	if err != nil {
		return nil, fmt.Errorf("configmap %s/%s: %w", pod.Namespace, name, err)
	}
	return src.ConfigMap(pod, name)
}

// Secret returns the named Secret of the pod's namespace from the pod's
// side.
func (r Router) Secret(pod *v1.Pod, name string) (*v1.Secret, error) {
	src, err := r.source(pod)
	if err != nil {
		return nil, fmt.Errorf("secret %s/%s: %w", pod.Namespace, name, err)
	}
	return src.Secret(pod, name)
}

func (r Router) source(pod *v1.Pod) (Source, error) {
	if podspec.IsStatic(pod) {
		if r.Static == nil {
			return nil, fmt.Errorf("static pods have no manifest objects here")
		}
		return r.Static, nil
	}
	if r.API == nil {
		return nil, fmt.Errorf("pod %s/%s is not a static pod, and nodelet runs without an API server", pod.Namespace, pod.Name)
	}
	return r.API, nil
}
