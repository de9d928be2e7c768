// Package podsource is the first stage of the pipeline: it reads pod
// manifests from where the user keeps them (a static manifest directory or
// file, or an HTTP URL) and turns them into defaulted v1.Pods with the
// kubelet's static pod identity (name <name>-<node>, a UID derived from
// content and node name, the kubernetes.io/config.* annotations).
//
// ReadPath reads the manifest path once. FileSource and HTTPSource watch or
// poll their source and send an Update, a full snapshot of the source, each
// time it changes; stage 2 (internal/pipeline/podconfig) merges those snapshots.
package podsource

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	v1 "k8s.io/api/core/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// Decode splits data into YAML or JSON documents and decodes each as a
// core/v1 Pod. Decoding is strict: an unknown or duplicated field, or a kind
// other than Pod, is an error naming the document. More than MaxPodsPerFile
// pods is an error too.
func Decode(data []byte) ([]*v1.Pod, error) {
	return decode(data, false, nil, fileLimits)
}

// NotPodError is a document whose apiVersion and kind are not those of a
// core/v1 Pod (or PodList, where lists are accepted).
type NotPodError struct {
	APIVersion, Kind string
	// ListAllowed tells whether a PodList would have been accepted.
	ListAllowed bool
}

func (e *NotPodError) Error() string {
	want := "kind: Pod"
	if e.ListAllowed {
		want = "kind: Pod or PodList"
	}
	return fmt.Sprintf("kind %q apiVersion %q is not a Pod (want %s, apiVersion: v1)", e.Kind, e.APIVersion, want)
}

// decode is Decode; with allowList a document may also be a v1 PodList,
// whose items are returned in order. It stops at the first document that
// takes the pods, or the ConfigMaps and Secrets, over lim.
func decode(data []byte, allowList bool, objects *Objects, lim limits) ([]*v1.Pod, error) {
	// The raw documents are split here and converted strictly below; the
	// generic YAML-or-JSON decoder would silently drop duplicate keys.
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var pods []*v1.Pod
	for doc := 1; ; doc++ {
		raw, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return pods, nil
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", doc, err)
		}
		if isEmptyDocument(raw) {
			continue // nothing, or only comments, between two "---"
		}
		decoded, err := decodeDocument(raw, allowList, objects)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", doc, err)
		}
		pods = append(pods, decoded...)
		if len(pods) > lim.pods {
			return nil, tooManyPods(lim.pods)
		}
		if objects != nil && len(objects.ConfigMaps)+len(objects.Secrets) > lim.objects {
			return nil, tooManyObjects(lim.objects)
		}
	}
}

func isEmptyDocument(raw []byte) bool {
	for _, line := range bytes.Split(raw, []byte("\n")) {
		line = bytes.TrimSpace(line)
		if len(line) > 0 && line[0] != '#' && string(line) != "---" {
			return false
		}
	}
	return true
}

// decodeDocument decodes one document: a Pod, a PodList (allowList), or a
// ConfigMap or Secret, which go to objects when it is not nil.
func decodeDocument(raw []byte, allowList bool, objects *Objects) ([]*v1.Pod, error) {
	// YAMLToJSONStrict rejects duplicate keys; DisallowUnknownFields below
	// rejects misspelled ones.
	strict, err := yaml.YAMLToJSONStrict(raw)
	if err != nil {
		return nil, err
	}
	var meta struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := json.Unmarshal(strict, &meta); err != nil {
		return nil, fmt.Errorf("read apiVersion and kind: %w", err)
	}
	switch {
	case meta.APIVersion == "v1" && meta.Kind == "Pod":
		pod := &v1.Pod{}
		if err := strictUnmarshal(strict, pod); err != nil {
			return nil, fmt.Errorf("decode pod: %w", err)
		}
		return []*v1.Pod{pod}, nil
	case allowList && meta.APIVersion == "v1" && meta.Kind == "PodList":
		list := &v1.PodList{}
		if err := strictUnmarshal(strict, list); err != nil {
			return nil, fmt.Errorf("decode pod list: %w", err)
		}
		pods := make([]*v1.Pod, 0, len(list.Items))
		for i := range list.Items {
			item := &list.Items[i]
			if item.Kind != "" && item.Kind != "Pod" || item.APIVersion != "" && item.APIVersion != "v1" {
				return nil, fmt.Errorf("item %d: %w", i, &NotPodError{APIVersion: item.APIVersion, Kind: item.Kind})
			}
			item.APIVersion, item.Kind = "v1", "Pod"
			pods = append(pods, item)
		}
		return pods, nil
	case objects != nil && meta.APIVersion == "v1" && meta.Kind == "ConfigMap":
		cm := &v1.ConfigMap{}
		if err := strictUnmarshal(strict, cm); err != nil {
			return nil, fmt.Errorf("decode configmap: %w", err)
		}
		objects.ConfigMaps = append(objects.ConfigMaps, cm)
		return nil, nil
	case objects != nil && meta.APIVersion == "v1" && meta.Kind == "Secret":
		secret := &v1.Secret{}
		if err := strictUnmarshal(strict, secret); err != nil {
			return nil, fmt.Errorf("decode secret: %w", err)
		}
		objects.Secrets = append(objects.Secrets, secret)
		return nil, nil
	default:
		return nil, &NotPodError{APIVersion: meta.APIVersion, Kind: meta.Kind, ListAllowed: allowList}
	}
}

func strictUnmarshal(data []byte, into any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	return dec.Decode(into)
}
