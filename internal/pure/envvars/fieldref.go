package envvars

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// FieldRef returns the downward API value of fieldPath for pod, as the
// kubelet does for env fieldRef and downwardAPI volume items:
//
//   - metadata.name, metadata.namespace, metadata.uid;
//   - metadata.labels, metadata.annotations: every entry as a `key="value"`
//     line (value quoted as Go does), sorted by key, without a final newline;
//   - metadata.labels['k'], metadata.annotations['k']: one value, "" when
//     absent; k must be a qualified name (annotations: once lowercased);
//   - spec.nodeName (spec.host is an alias; facts.NodeName when the pod's is
//     empty), spec.serviceAccountName;
//   - status.podIP (facts.PodIPs[0] or ""), status.podIPs (comma separated);
//   - status.hostIP, status.hostIPs (comma separated): an error when
//     facts.HostIPs is empty, as the kubelet fails without node addresses.
//
// Other paths are errors. Which paths env may use (not the whole label map)
// is the API server's validation, not checked here.
func FieldRef(pod *v1.Pod, fieldPath string, facts PodFacts) (string, error) {
	if pod == nil {
		return "", errors.New("envvars: nil pod")
	}
	if path, key, ok := splitSubscript(fieldPath); ok {
		switch path {
		case "metadata.labels":
			if errs := validation.IsQualifiedName(key); len(errs) != 0 {
				return "", fmt.Errorf("invalid key subscript in %s: %s", fieldPath, strings.Join(errs, ";"))
			}
			return pod.Labels[key], nil
		case "metadata.annotations":
			if errs := validation.IsQualifiedName(strings.ToLower(key)); len(errs) != 0 {
				return "", fmt.Errorf("invalid key subscript in %s: %s", fieldPath, strings.Join(errs, ";"))
			}
			return pod.Annotations[key], nil
		default:
			return "", fmt.Errorf("field label does not support subscript: %s", fieldPath)
		}
	}
	switch fieldPath {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "metadata.labels":
		return formatMap(pod.Labels), nil
	case "metadata.annotations":
		return formatMap(pod.Annotations), nil
	case "spec.nodeName", "spec.host":
		if pod.Spec.NodeName != "" {
			return pod.Spec.NodeName, nil
		}
		return facts.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.podIP":
		if len(facts.PodIPs) == 0 {
			return "", nil
		}
		return facts.PodIPs[0], nil
	case "status.podIPs":
		return strings.Join(facts.PodIPs, ","), nil
	case "status.hostIP", "status.hostIPs":
		if len(facts.HostIPs) == 0 {
			return "", errors.New("host IP unknown: the node has no addresses")
		}
		if fieldPath == "status.hostIP" {
			return facts.HostIPs[0], nil
		}
		return strings.Join(facts.HostIPs, ","), nil
	}
	return "", fmt.Errorf("field label not supported: %s", fieldPath)
}

// splitSubscript splits "path['key']" into path and key.
func splitSubscript(fieldPath string) (path, key string, ok bool) {
	s, found := strings.CutSuffix(fieldPath, "']")
	if !found {
		return "", "", false
	}
	path, key, found = strings.Cut(s, "['")
	if !found || path == "" {
		return "", "", false
	}
	return path, key, true
}

// formatMap renders a label or annotation map as sorted key="value" lines.
func formatMap(m map[string]string) string {
	var b strings.Builder
	for i, k := range sortedKeys(m) {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(strconv.Quote(m[k]))
	}
	return b.String()
}

// Downward resolves downward API fields with the node's facts only (no pod
// IPs): what volumes need, which are set up before the pod has an IP.
type Downward struct {
	NodeName    string
	HostIP      string // "" when unknown
	Allocatable v1.ResourceList
}

// FieldRef resolves fieldPath of pod (see the function FieldRef).
func (d Downward) FieldRef(pod *v1.Pod, fieldPath string) (string, error) {
	facts := PodFacts{NodeName: d.NodeName, NodeAllocatable: d.Allocatable}
	if d.HostIP != "" {
		facts.HostIPs = []string{d.HostIP}
	}
	return FieldRef(pod, fieldPath, facts)
}

// ResourceRef resolves a resourceFieldRef of the named container (see the
// function ResourceRef).
func (d Downward) ResourceRef(pod *v1.Pod, container string, ref *v1.ResourceFieldSelector) (string, error) {
	return ResourceRef(pod, container, ref, d.Allocatable)
}
