// Package podsource is the first stage of the pipeline: it reads pod
// manifests from where the user keeps them (a static manifest directory or
// file) and turns them into defaulted v1.Pods with the kubelet's static pod
// identity (name <name>-<node>, a UID derived from content and node name,
// the kubernetes.io/config.* annotations).
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
// other than Pod, is an error naming the document.
func Decode(data []byte) ([]*v1.Pod, error) {
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
		pod, err := decodePod(raw)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", doc, err)
		}
		pods = append(pods, pod)
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

func decodePod(raw []byte) (*v1.Pod, error) {
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
	if meta.Kind != "Pod" || meta.APIVersion != "v1" {
		return nil, fmt.Errorf("kind %q apiVersion %q is not a Pod (want kind: Pod, apiVersion: v1)", meta.Kind, meta.APIVersion)
	}
	dec := json.NewDecoder(bytes.NewReader(strict))
	dec.DisallowUnknownFields()
	pod := &v1.Pod{}
	if err := dec.Decode(pod); err != nil {
		return nil, fmt.Errorf("decode pod: %w", err)
	}
	return pod, nil
}
