package nodeconfig

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	kubeletapis "k8s.io/kubelet/pkg/apis"
)

// ParseMap reads a flag value of the form "k1<sep>v1,k2<sep>v2" (the
// kubelet's --node-labels and --system-reserved use "=", --eviction-hard
// "<"). Empty pairs are skipped; a key given twice is an error.
func ParseMap(flag, value, sep string) (map[string]string, error) {
	out := map[string]string{}
	for pair := range strings.SplitSeq(value, ",") {
		pair = strings.TrimSpace(pair)
		if pair == "" {
			continue
		}
		k, v, ok := strings.Cut(pair, sep)
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || k == "" {
			return nil, fmt.Errorf("--%s %q: want key%svalue", flag, pair, sep)
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("--%s: %s given twice", flag, k)
		}
		out[k] = v
	}
	return out, nil
}

// ValidateNodeLabels checks labels the node registers itself with, as the
// kubelet checks --node-labels: valid keys and values, and in the
// kubernetes.io and k8s.io namespaces only the labels a node may set on
// itself (the NodeRestriction admission plugin refuses the others).
func ValidateNodeLabels(labels map[string]string) error {
	var forbidden []string
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		if msgs := validation.IsQualifiedName(k); len(msgs) > 0 {
			return fmt.Errorf("--node-labels: key %q: %s", k, strings.Join(msgs, "; "))
		}
		if msgs := validation.IsValidLabelValue(labels[k]); len(msgs) > 0 {
			return fmt.Errorf("--node-labels: %s=%q: %s", k, labels[k], strings.Join(msgs, "; "))
		}
		ns := ""
		if prefix, _, ok := strings.Cut(k, "/"); ok {
			ns = prefix
		}
		restricted := ns == "kubernetes.io" || strings.HasSuffix(ns, ".kubernetes.io") || ns == "k8s.io" || strings.HasSuffix(ns, ".k8s.io")
		if restricted && !kubeletapis.IsKubeletLabel(k) {
			forbidden = append(forbidden, k)
		}
	}
	if len(forbidden) > 0 {
		return fmt.Errorf("--node-labels: a node may not set %s on itself: in the kubernetes.io and k8s.io namespaces it may set only %s, and labels under %s",
			strings.Join(forbidden, ", "), strings.Join(kubeletapis.KubeletLabels(), ", "), strings.Join(kubeletapis.KubeletLabelNamespaces(), ", "))
	}
	return nil
}

// taintEffects are the effects a taint may have.
var taintEffects = []v1.TaintEffect{v1.TaintEffectNoSchedule, v1.TaintEffectPreferNoSchedule, v1.TaintEffectNoExecute}

// ParseTaints reads --register-with-taints: "key=value:Effect" or
// "key:Effect", comma-separated.
func ParseTaints(value string) ([]v1.Taint, error) {
	var out []v1.Taint
	for spec := range strings.SplitSeq(value, ",") {
		spec = strings.TrimSpace(spec)
		if spec == "" {
			continue
		}
		kv, effect, ok := strings.Cut(spec, ":")
		if !ok {
			return nil, fmt.Errorf("--register-with-taints %q: want key=value:Effect or key:Effect", spec)
		}
		k, v, _ := strings.Cut(kv, "=")
		out = append(out, v1.Taint{Key: k, Value: v, Effect: v1.TaintEffect(effect)})
	}
	if err := ValidateTaints(out); err != nil {
		return nil, err
	}
	return out, nil
}

// ValidateTaints checks the taints the node registers with: valid keys and
// values, a known effect, no key and effect twice.
func ValidateTaints(taints []v1.Taint) error {
	seen := map[string]bool{}
	for _, t := range taints {
		if msgs := validation.IsQualifiedName(t.Key); len(msgs) > 0 {
			return fmt.Errorf("registerWithTaints: key %q: %s", t.Key, strings.Join(msgs, "; "))
		}
		if msgs := validation.IsValidLabelValue(t.Value); len(msgs) > 0 {
			return fmt.Errorf("registerWithTaints: %s=%q: %s", t.Key, t.Value, strings.Join(msgs, "; "))
		}
		if !slices.Contains(taintEffects, t.Effect) {
			return fmt.Errorf("registerWithTaints: %s: effect %q: want NoSchedule, PreferNoSchedule or NoExecute", t.Key, t.Effect)
		}
		id := t.Key + ":" + string(t.Effect)
		if seen[id] {
			return fmt.Errorf("registerWithTaints: %s given twice", id)
		}
		seen[id] = true
		if t.TimeAdded != nil {
			return fmt.Errorf("registerWithTaints: %s: timeAdded is set by the API server", t.Key)
		}
	}
	return nil
}
