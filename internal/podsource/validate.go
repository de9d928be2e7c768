package podsource

import (
	"errors"
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Validate checks what nodelet needs of a manifest pod before anything of it
// is started: names, containers, images. All problems are reported, on one
// line separated by "; ".
func Validate(p *v1.Pod) error {
	var errs []error
	for _, msg := range validation.IsDNS1123Subdomain(p.Name) {
		errs = append(errs, fmt.Errorf("metadata.name %q: %s", p.Name, msg))
	}
	if p.Namespace != "" {
		for _, msg := range validation.IsDNS1123Label(p.Namespace) {
			errs = append(errs, fmt.Errorf("metadata.namespace %q: %s", p.Namespace, msg))
		}
	}
	if len(p.Spec.Containers) == 0 {
		errs = append(errs, errors.New("spec.containers: at least one container is required"))
	}
	seen := map[string]bool{}
	check := func(field string, c v1.Container) {
		for _, msg := range validation.IsDNS1123Label(c.Name) {
			errs = append(errs, fmt.Errorf("%s name %q: %s", field, c.Name, msg))
		}
		if seen[c.Name] {
			errs = append(errs, fmt.Errorf("%s name %q: duplicate container name", field, c.Name))
		}
		seen[c.Name] = true
		if c.Image == "" {
			errs = append(errs, fmt.Errorf("%s %q: image is required", field, c.Name))
		}
	}
	for _, c := range p.Spec.InitContainers {
		check("spec.initContainers", c)
	}
	for _, c := range p.Spec.Containers {
		check("spec.containers", c)
	}
	switch p.Spec.RestartPolicy {
	case "", v1.RestartPolicyAlways, v1.RestartPolicyOnFailure, v1.RestartPolicyNever:
	default:
		errs = append(errs, fmt.Errorf("spec.restartPolicy %q: must be Always, OnFailure or Never", p.Spec.RestartPolicy))
	}
	if len(errs) == 0 {
		return nil
	}
	msgs := make([]string, len(errs))
	for i, e := range errs {
		msgs[i] = e.Error()
	}
	return errors.New(strings.Join(msgs, "; "))
}
