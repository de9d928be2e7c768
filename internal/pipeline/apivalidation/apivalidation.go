// Package apivalidation is beside stage 1 (podsource): the API server's own
// validation of static pods, and of the ConfigMaps and Secrets that
// standalone manifests carry, so a user gets exactly the verdict kubectl
// apply would give on the same YAML.
//
// It is the only package of nodelet that imports k8s.io/kubernetes, and it
// imports only these packages of it directly:
//
//   - pkg/apis/core: the internal types the validation runs on;
//   - pkg/apis/core/v1: the API server's v1 defaults and the v1 → internal
//     conversion;
//   - pkg/apis/core/validation: ValidatePodCreate, ValidateConfigMap,
//     ValidateSecret;
//   - pkg/api/pod: the validation options the kubelet and the API server
//     compute for a new pod.
//
// Each function deep-copies its argument, applies the v1 defaults as the API
// server's decoder does (SetObjectDefaults_*), converts to the internal type
// and validates it as a create. Pod, ConfigMap and Secret never change
// their argument; DefaultPod is the one function that does, for a caller
// that wants to run the pod as the API server would have stored it.
//
// Feature gates: the validation reads the process-wide
// k8s.io/apiserver/pkg/util/feature.DefaultFeatureGate. nodelet never sets
// it, so it holds the defaults of the release we build against (v1.37, as
// a default API server has); TestFeatureGateDefaults pins the gates that
// change what a pod may contain.
package apivalidation

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	podutil "k8s.io/kubernetes/pkg/api/pod"
	"k8s.io/kubernetes/pkg/apis/core"
	corev1 "k8s.io/kubernetes/pkg/apis/core/v1"
	corevalidation "k8s.io/kubernetes/pkg/apis/core/validation"
	"k8s.io/kubernetes/pkg/capabilities"
)

// Error is the API server's verdict on an object: one field error per
// problem, in the order the API server finds them.
type Error struct {
	Errs field.ErrorList
}

// Limits of Error's message. Input is hostile and a message ends up on one
// log line: a 10 MiB manifest must not make a 10 MiB line. Errs always
// holds every error.
const (
	maxErrorsShown  = 20
	maxErrorMessage = 1024 // bytes of one field error's message
)

// Error joins the field errors on one line with "; ", as
// "spec.containers[0].ports[0].containerPort: Invalid value: -5: must be
// between 1 and 65535, inclusive". Identical messages are shown once, as
// the API server does; past maxErrorsShown the rest are counted.
func (e *Error) Error() string {
	seen := make(map[string]bool, len(e.Errs))
	var msgs []string
	hidden := 0
	for _, fe := range e.Errs {
		msg := fe.Error()
		if seen[msg] {
			continue
		}
		seen[msg] = true
		if len(msgs) == maxErrorsShown {
			hidden++
			continue
		}
		msgs = append(msgs, truncate(msg, maxErrorMessage))
	}
	if hidden > 0 {
		msgs = append(msgs, fmt.Sprintf("and %d more", hidden))
	}
	return strings.Join(msgs, "; ")
}

// truncate cuts s to at most n bytes on a rune boundary, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// errPanicked marks a panic inside the upstream code, turned into an error so
// that one hostile manifest cannot stop the node agent.
var errPanicked = errors.New("validation panicked")

// verdict turns errs into an *Error, or nil when there are none.
func verdict(errs field.ErrorList) error {
	if len(errs) == 0 {
		return nil
	}
	return &Error{Errs: errs}
}

// guard runs validate and turns a panic in it into an error.
func guard(validate func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %v", errPanicked, r)
		}
	}()
	return validate()
}

// Pod validates pod as the API server validates a new Pod (and as the
// kubelet validates a static pod). Call it on the pod nodelet will run:
// named <name>-<node>, with its namespace, UID and annotations set.
func Pod(pod *v1.Pod) error {
	if pod == nil {
		return errors.New("no pod")
	}
	// Privileged containers are allowed, as the kubelet allows them (it
	// initializes the validation's capabilities so at start); the API
	// server decides for API pods by its --allow-privileged.
	capabilities.Initialize(capabilities.Capabilities{AllowPrivileged: true})
	return guard(func() error {
		external := pod.DeepCopy()
		corev1.SetObjectDefaults_Pod(external)
		var internal core.Pod
		if err := corev1.Convert_v1_Pod_To_core_Pod(external, &internal, nil); err != nil {
			return fmt.Errorf("convert pod: %w", err)
		}
		opts := podutil.GetValidationOptionsFromPodSpecAndMeta(&internal.Spec, nil, &internal.ObjectMeta, nil)
		// The API server's pod strategy sets this, the kubelet does not. It
		// matters only for a hostNetwork port whose hostPort is 0, which the
		// v1 defaults above have already set to the containerPort; set as
		// the API server does, which validates this pod's mirror pod.
		opts.ResourceIsPod = true
		return verdict(corevalidation.ValidatePodCreate(&internal, opts))
	})
}

// DefaultPod applies, in place, the v1 defaults the API server applies when
// it decodes a Pod, and the kubelet when it decodes a static pod: among them
// a negative terminationGracePeriodSeconds becomes 1, a hostNetwork port's
// hostPort becomes its containerPort, a limit without a request becomes the
// request, and probes get their periods and thresholds. Pod validates the
// pod after these defaults; a caller that wants to run exactly what the API
// server accepted runs the pod as DefaultPod leaves it.
func DefaultPod(pod *v1.Pod) {
	corev1.SetObjectDefaults_Pod(pod)
}

// ConfigMap validates cm as the API server validates a new ConfigMap: its
// name and namespace, and every key of data and binaryData.
func ConfigMap(cm *v1.ConfigMap) error {
	if cm == nil {
		return errors.New("no configmap")
	}
	return guard(func() error {
		external := cm.DeepCopy()
		corev1.SetObjectDefaults_ConfigMap(external)
		var internal core.ConfigMap
		if err := corev1.Convert_v1_ConfigMap_To_core_ConfigMap(external, &internal, nil); err != nil {
			return fmt.Errorf("convert configmap: %w", err)
		}
		return verdict(corevalidation.ValidateConfigMap(&internal))
	})
}

// Secret validates s as the API server validates a new Secret: its name and
// namespace, every key (stringData merged into data first), the total size,
// and the keys its type requires (type defaults to Opaque).
func Secret(s *v1.Secret) error {
	if s == nil {
		return errors.New("no secret")
	}
	return guard(func() error {
		external := s.DeepCopy()
		corev1.SetObjectDefaults_Secret(external)
		var internal core.Secret
		if err := corev1.Convert_v1_Secret_To_core_Secret(external, &internal, nil); err != nil {
			return fmt.Errorf("convert secret: %w", err)
		}
		return verdict(corevalidation.ValidateSecret(&internal))
	})
}
