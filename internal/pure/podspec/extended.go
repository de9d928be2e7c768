package podspec

import (
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// IsExtendedResourceName is the kubelet's test of an extended resource
// (v1helper.IsExtendedResourceName): a resource outside the kubernetes.io
// namespace, not a quota "requests." name, that can be a quota name once
// prefixed with "requests.". Device plugins register such names; the
// scheduler and admission count them like CPU.
func IsExtendedResourceName(name v1.ResourceName) bool {
	s := string(name)
	if !strings.Contains(s, "/") || strings.Contains(s, v1.ResourceDefaultNamespacePrefix) ||
		strings.HasPrefix(s, v1.DefaultResourceRequestsPrefix) {
		return false
	}
	return len(validation.IsQualifiedName(v1.DefaultResourceRequestsPrefix+s)) == 0
}
