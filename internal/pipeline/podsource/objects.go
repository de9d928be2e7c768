package podsource

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/internal/pipeline/apivalidation"
)

// Objects are the ConfigMaps and Secrets of a manifest file. In standalone
// mode they stand in for the API server's: pods of the same namespace
// refer to them from volumes and env.
type Objects struct {
	ConfigMaps []*v1.ConfigMap
	Secrets    []*v1.Secret
}

// validate defaults the namespace of every object and checks it with the
// API server's own validation, then folds a Secret's stringData into data
// as the API server does (stringData is write-only in the API).
func (o Objects) validate() error {
	var msgs []string
	for _, cm := range o.ConfigMaps {
		if cm.Namespace == "" {
			cm.Namespace = v1.NamespaceDefault
		}
		if err := apivalidation.ConfigMap(cm); err != nil {
			msgs = append(msgs, fmt.Sprintf("configmap %q: %v", cm.Name, err))
		}
	}
	for _, s := range o.Secrets {
		if s.Namespace == "" {
			s.Namespace = v1.NamespaceDefault
		}
		if err := apivalidation.Secret(s); err != nil {
			msgs = append(msgs, fmt.Sprintf("secret %q: %v", s.Name, err))
		}
		for k, v := range s.StringData {
			if s.Data == nil {
				s.Data = map[string][]byte{}
			}
			s.Data[k] = []byte(v)
		}
		s.StringData = nil
	}
	if len(msgs) > 0 {
		return errors.New(strings.Join(msgs, "; "))
	}
	return nil
}

// objectOwners tracks which file defined each object first.
type objectOwners map[string]string // kind/namespace/name -> file

// add appends the objects of file f to u unless an earlier file defined
// them; duplicates are returned as errors (the lexically first file wins).
func (o objectOwners) add(u *Update, f string, objects Objects) []FileError {
	var errs []FileError
	claim := func(kind, ns, name string) bool {
		key := kind + "/" + ns + "/" + name
		if first, dup := o[key]; dup {
			errs = append(errs, FileError{Path: f, Class: ReasonDuplicate,
				Err: fmt.Errorf("%s %s/%s is also defined in %s, which is used (the lexically first file wins)", kind, ns, name, first)})
			return false
		}
		o[key] = f
		return true
	}
	for _, cm := range objects.ConfigMaps {
		if claim("configmap", cm.Namespace, cm.Name) {
			u.ConfigMaps = append(u.ConfigMaps, cm)
		}
	}
	for _, s := range objects.Secrets {
		if claim("secret", s.Namespace, s.Name) {
			u.Secrets = append(u.Secrets, s)
		}
	}
	sort.Slice(u.ConfigMaps, func(i, j int) bool {
		return u.ConfigMaps[i].Namespace+"/"+u.ConfigMaps[i].Name < u.ConfigMaps[j].Namespace+"/"+u.ConfigMaps[j].Name
	})
	sort.Slice(u.Secrets, func(i, j int) bool {
		return u.Secrets[i].Namespace+"/"+u.Secrets[i].Name < u.Secrets[j].Namespace+"/"+u.Secrets[j].Name
	})
	return errs
}
