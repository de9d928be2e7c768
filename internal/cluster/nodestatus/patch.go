package nodestatus

import (
	"encoding/json"
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
)

// statusPatch is the strategic merge patch from original to node for the
// status subresource, as the kubelet sends it (component-helpers'
// PatchNodeStatus): the spec is left out, metadata and status go in. The
// addresses list is replaced as a whole when it changed: its merge key
// (type) is not unique, so a merge would keep stale addresses.
func statusPatch(original, node *v1.Node) ([]byte, error) {
	oldData, err := json.Marshal(original)
	if err != nil {
		return nil, fmt.Errorf("marshal node %q: %w", original.Name, err)
	}
	replaceAddresses := len(original.Status.Addresses) > 0 &&
		!equality.Semantic.DeepEqual(original.Status.Addresses, node.Status.Addresses)
	diff := node.DeepCopy()
	diff.Spec = original.Spec
	if replaceAddresses {
		diff.Status.Addresses = original.Status.Addresses
	}
	newData, err := json.Marshal(diff)
	if err != nil {
		return nil, fmt.Errorf("marshal node %q: %w", node.Name, err)
	}
	patch, err := strategicpatch.CreateTwoWayMergePatch(oldData, newData, v1.Node{})
	if err != nil {
		return nil, fmt.Errorf("node %q status patch: %w", node.Name, err)
	}
	if !replaceAddresses {
		return patch, nil
	}
	return withAddresses(patch, node.Status.Addresses)
}

// withAddresses adds to patch the addresses as a list that replaces the
// stored one: [..., {"$patch": "replace"}].
func withAddresses(patch []byte, addrs []v1.NodeAddress) ([]byte, error) {
	var m map[string]any
	if err := json.Unmarshal(patch, &m); err != nil {
		return nil, fmt.Errorf("node status patch: %w", err)
	}
	list := make([]any, 0, len(addrs)+1)
	for _, a := range addrs {
		list = append(list, map[string]any{"type": string(a.Type), "address": a.Address})
	}
	list = append(list, map[string]any{"$patch": "replace"})
	status, _ := m["status"].(map[string]any)
	if status == nil {
		status = map[string]any{}
		m["status"] = status
	}
	status["addresses"] = list
	out, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("node status patch: %w", err)
	}
	return out, nil
}
