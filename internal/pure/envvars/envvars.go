package envvars

import (
	"errors"
	"fmt"
	"slices"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// EnvVar is one variable of a container's environment.
type EnvVar struct {
	Name  string
	Value string
}

// ErrObjectNotFound is what Objects returns (possibly wrapped) for a
// ConfigMap or Secret that does not exist. Errors of Build about a missing
// object wrap it too.
var ErrObjectNotFound = errors.New("not found")

// Objects gives the ConfigMaps and Secrets env refers to: those of pod's
// namespace that pod may read (a static pod the manifest directory's, a
// pod of the API server the API's). Both methods return an error
// satisfying errors.Is(err, ErrObjectNotFound) when the object does not
// exist; any other error is returned by Build as is.
type Objects interface {
	ConfigMap(pod *v1.Pod, name string) (*v1.ConfigMap, error)
	Secret(pod *v1.Pod, name string) (*v1.Secret, error)
}

// PodFacts are the facts about a pod that are not in its spec.
type PodFacts struct {
	// PodIPs are the pod's IPs, the primary first (for a hostNetwork pod,
	// the host's IPs). status.podIP is PodIPs[0], or "" when empty.
	PodIPs []string
	// HostIPs are the node's IPs, the primary first. status.hostIP and
	// status.hostIPs are errors when it is empty.
	HostIPs []string
	// NodeName is used for spec.nodeName when the pod's is empty.
	NodeName string
	// NodeAllocatable is the node's allocatable resources: the limits of
	// containers without one for resourceFieldRef (see ResourceRef).
	NodeAllocatable v1.ResourceList
	// Services are what the pod's service environment variables come from
	// (see ServiceEnv): Services of any namespace, read only; nil without
	// an API server, where there are none.
	Services []*v1.Service
	// Files reads the env files of fileKeyRef entries from the pod's
	// volumes; nil fails every fileKeyRef as a missing volume.
	Files Files
}

// notFoundError is the error for a missing ConfigMap or Secret: the message
// of the kubelet's configmap and secret managers, wrapping
// ErrObjectNotFound.
type notFoundError struct {
	kind, name string
}

func (e *notFoundError) Error() string { return fmt.Sprintf("%s %q not found", e.kind, e.name) }
func (e *notFoundError) Unwrap() error { return ErrObjectNotFound }

// objectCache fetches each object of a Build once.
type objectCache struct {
	pod        *v1.Pod
	objects    Objects
	configMaps map[string]*v1.ConfigMap
	secrets    map[string]*v1.Secret
}

// configMap returns the named ConfigMap, or (nil, nil) when it is absent and
// optional.
func (oc *objectCache) configMap(name string, optional bool) (*v1.ConfigMap, error) {
	return cachedObject(oc, oc.configMaps, "configMap", "configmap", name, optional,
		func(o Objects) (*v1.ConfigMap, error) { return o.ConfigMap(oc.pod, name) })
}

// secret returns the named Secret, or (nil, nil) when it is absent and
// optional.
func (oc *objectCache) secret(name string, optional bool) (*v1.Secret, error) {
	return cachedObject(oc, oc.secrets, "secret", "secret", name, optional,
		func(o Objects) (*v1.Secret, error) { return o.Secret(oc.pod, name) })
}

// cachedObject fetches a ConfigMap or Secret once per Build. clientKind and
// kind spell the object in the kubelet's two messages ("configMap" when
// there is no client, "configmap" when it is not found).
func cachedObject[T any](oc *objectCache, cache map[string]*T, clientKind, kind, name string, optional bool,
	fetch func(Objects) (*T, error)) (*T, error) {
	if obj, ok := cache[name]; ok {
		return obj, nil
	}
	if oc.objects == nil {
		return nil, fmt.Errorf("couldn't get %s %s/%s, no kubeClient defined", clientKind, oc.pod.Namespace, name)
	}
	obj, err := fetch(oc.objects)
	if err == nil && obj == nil {
		err = ErrObjectNotFound
	}
	if err != nil {
		if !errors.Is(err, ErrObjectNotFound) {
			return nil, err
		}
		if optional {
			return nil, nil
		}
		return nil, &notFoundError{kind: kind, name: name}
	}
	cache[name] = obj
	return obj, nil
}

// orderedEnv is the environment being built: each name once, at the
// position of its first definition, with the value of its last.
type orderedEnv struct {
	vars  []EnvVar
	index map[string]int
}

func (e *orderedEnv) set(name, value string) {
	if i, ok := e.index[name]; ok {
		e.vars[i].Value = value
		return
	}
	e.index[name] = len(e.vars)
	e.vars = append(e.vars, EnvVar{Name: name, Value: value})
}

func (e *orderedEnv) lookup(name string) (string, bool) {
	if i, ok := e.index[name]; ok {
		return e.vars[i].Value, true
	}
	return "", false
}

// Build returns the environment of container c of pod, with the kubelet's
// semantics:
//
//   - envFrom sources first, in order, each ConfigMap's data (binaryData is
//     ignored) or Secret's data in key order, with the source's prefix;
//     then env entries in order. A name defined again keeps its first
//     position and takes the later value, so env overrides envFrom.
//   - A non-empty env value is $(VAR)-expanded (see Expand) against the
//     names defined before it (envFrom and earlier env entries), then the
//     service variables; other values are not expanded. An entry with
//     neither value nor valueFrom is the empty string.
//   - valueFrom: fieldRef (FieldRef with facts), resourceFieldRef
//     (ResourceRef against facts.NodeAllocatable), configMapKeyRef and
//     secretKeyRef. A missing object or key of an optional reference skips
//     the entry (an earlier value of the name stays); of a required one it is
//     an error with the kubelet's message: `configmap "cm" not found`,
//     `secret "s" not found`, `couldn't find key k in ConfigMap ns/cm`,
//     `couldn't find key k in Secret ns/s`.
//   - valueFrom.fileKeyRef: the value of the key in the env file at path in
//     the volume (read with facts.Files, parsed as envFileValue describes),
//     with the kubelet's messages: `cannot find the volume "v" referenced by
//     FileKeyRef`, `couldn't parse env file "p" of volume "v": <why>` and
//     `environment variable key "k" not found in file "p" of volume "v"`.
//     As in the kubelet, a key with an empty value counts as missing, and
//     only a missing key of an optional reference is skipped: a file that
//     is missing or cannot be parsed is an error.
//   - The service variables of facts.Services (ServiceEnv, with the pod's
//     enableServiceLinks, true when unset) come last, those whose names
//     envFrom or env did not define.
//   - envFrom keys that cannot be environment names (empty, or with '=' or a
//     byte that is not printable ASCII; the API server rejects such keys and
//     prefixes, so this only happens to unvalidated objects) are skipped
//     silently. The kubelet no longer validates them at all.
//
// Errors are CreateContainerConfigError messages. Objects is called at most
// once per object and facts.Files at most once per file; a nil objects
// fails any reference the way the kubelet without an API client does.
func Build(pod *v1.Pod, c *v1.Container, facts PodFacts, objects Objects) ([]EnvVar, error) {
	if pod == nil || c == nil {
		return nil, errors.New("envvars: nil pod or container")
	}
	oc := &objectCache{
		pod:        pod,
		objects:    objects,
		configMaps: map[string]*v1.ConfigMap{},
		secrets:    map[string]*v1.Secret{},
	}
	fc := &fileCache{pod: pod, files: facts.Files, read: map[fileRef][]byte{}}
	env := &orderedEnv{index: map[string]int{}}
	services := ServiceEnv(facts.Services, pod.Namespace, enableServiceLinks(pod))
	serviceVars := envMap(services)
	lookup := func(name string) (string, bool) {
		if v, ok := env.lookup(name); ok {
			return v, true
		}
		v, ok := serviceVars[name]
		return v, ok
	}

	for _, from := range c.EnvFrom {
		switch {
		case from.ConfigMapRef != nil:
			ref := from.ConfigMapRef
			cm, err := oc.configMap(ref.Name, isTrue(ref.Optional))
			if err != nil {
				return nil, err
			}
			if cm == nil {
				continue
			}
			for _, k := range sortedKeys(cm.Data) {
				addFrom(env, from.Prefix+k, cm.Data[k])
			}
		case from.SecretRef != nil:
			ref := from.SecretRef
			s, err := oc.secret(ref.Name, isTrue(ref.Optional))
			if err != nil {
				return nil, err
			}
			if s == nil {
				continue
			}
			for _, k := range sortedKeys(s.Data) {
				addFrom(env, from.Prefix+k, string(s.Data[k]))
			}
		}
	}

	for i := range c.Env {
		e := &c.Env[i]
		value, skip, err := resolve(pod, c, e, facts, oc, fc, lookup)
		if err != nil {
			return nil, err
		}
		if skip {
			continue
		}
		env.set(e.Name, value)
	}
	for _, v := range services {
		if _, defined := env.lookup(v.Name); !defined {
			env.set(v.Name, v.Value)
		}
	}
	return env.vars, nil
}

// enableServiceLinks is the pod's enableServiceLinks, true when unset (the
// API's default).
func enableServiceLinks(pod *v1.Pod) bool {
	return pod.Spec.EnableServiceLinks == nil || *pod.Spec.EnableServiceLinks
}

// resolve returns the value of one env entry, or skip for an optional
// reference that does not resolve.
func resolve(pod *v1.Pod, c *v1.Container, e *v1.EnvVar, facts PodFacts, oc *objectCache, fc *fileCache,
	lookup func(string) (string, bool)) (value string, skip bool, err error) {
	if e.Value != "" {
		return expand(e.Value, lookup), false, nil
	}
	src := e.ValueFrom
	if src == nil {
		return "", false, nil
	}
	switch {
	case src.FieldRef != nil:
		if v := src.FieldRef.APIVersion; v != "" && v != "v1" {
			return "", false, fmt.Errorf("unsupported pod version: %s", v)
		}
		v, err := FieldRef(pod, src.FieldRef.FieldPath, facts)
		return v, false, err
	case src.ResourceFieldRef != nil:
		v, err := resourceRef(pod, c, src.ResourceFieldRef, facts.NodeAllocatable)
		return v, false, err
	case src.ConfigMapKeyRef != nil:
		ref := src.ConfigMapKeyRef
		optional := isTrue(ref.Optional)
		cm, err := oc.configMap(ref.Name, optional)
		if err != nil || cm == nil {
			return "", true, err
		}
		v, ok := cm.Data[ref.Key]
		if !ok {
			if optional {
				return "", true, nil
			}
			return "", false, fmt.Errorf("couldn't find key %s in ConfigMap %s/%s", ref.Key, pod.Namespace, ref.Name)
		}
		return v, false, nil
	case src.SecretKeyRef != nil:
		ref := src.SecretKeyRef
		optional := isTrue(ref.Optional)
		s, err := oc.secret(ref.Name, optional)
		if err != nil || s == nil {
			return "", true, err
		}
		v, ok := s.Data[ref.Key]
		if !ok {
			if optional {
				return "", true, nil
			}
			return "", false, fmt.Errorf("couldn't find key %s in Secret %s/%s", ref.Key, pod.Namespace, ref.Name)
		}
		return string(v), false, nil
	case src.FileKeyRef != nil:
		return fileKeyValue(fc, src.FileKeyRef)
	}
	return "", false, nil
}

// addFrom adds a variable of an envFrom source, skipping names that cannot
// be in an environment.
func addFrom(env *orderedEnv, name, value string) {
	if len(validation.IsRelaxedEnvVarName(name)) != 0 {
		return
	}
	env.set(name, value)
}

func isTrue(b *bool) bool { return b != nil && *b }

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
