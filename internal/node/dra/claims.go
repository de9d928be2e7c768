package dra

import (
	"errors"
	"fmt"
	"slices"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ErrClaimNotCreated is a pod claim made from a template whose
// ResourceClaim the control plane has not created yet (no entry in
// status.resourceClaimStatuses).
var ErrClaimNotCreated = errors.New("ResourceClaim not created yet")

// podClaim is one entry of the pod's spec.resourceClaims resolved to the
// ResourceClaim it names.
type podClaim struct {
	// Name is the entry's name, what containers' resources.claims use.
	Name string
	// ClaimName is the ResourceClaim's name; "" when the control plane
	// decided that none is needed (a template entry whose status names no
	// claim).
	ClaimName string
	// FromTemplate: the claim was made for the pod, so the pod must own it.
	FromTemplate bool
}

// podClaims resolves the pod's resource claims as the kubelet's
// resourceclaim.Name does: a name given is used as it is; a template's
// claim is the one status.resourceClaimStatuses names.
func podClaims(pod *v1.Pod) ([]podClaim, error) {
	out := make([]podClaim, 0, len(pod.Spec.ResourceClaims))
	for _, pc := range pod.Spec.ResourceClaims {
		switch {
		case pc.ResourceClaimName != nil:
			out = append(out, podClaim{Name: pc.Name, ClaimName: *pc.ResourceClaimName})
		case pc.ResourceClaimTemplateName != nil:
			i := slices.IndexFunc(pod.Status.ResourceClaimStatuses, func(s v1.PodResourceClaimStatus) bool { return s.Name == pc.Name })
			if i < 0 {
				return nil, fmt.Errorf(`pod "%s/%s": %w`, pod.Namespace, pod.Name, ErrClaimNotCreated)
			}
			name := ""
			if n := pod.Status.ResourceClaimStatuses[i].ResourceClaimName; n != nil {
				name = *n
			}
			out = append(out, podClaim{Name: pc.Name, ClaimName: name, FromTemplate: true})
		default:
			return nil, fmt.Errorf(`pod "%s/%s", spec.resourceClaim %q: neither resourceClaimName nor resourceClaimTemplateName is set`, pod.Namespace, pod.Name, pc.Name)
		}
	}
	return out, nil
}

// checkClaim is what the kubelet checks of a claim before it prepares it
// for the pod: made for the pod when it came from a template, reserved
// for the pod, allocated.
func checkClaim(pod *v1.Pod, pc podClaim, claim *resourceapi.ResourceClaim) error {
	if claim.Namespace != pod.Namespace {
		return fmt.Errorf("ResourceClaim %s/%s is not in the same namespace as Pod %s/%s", claim.Namespace, claim.Name, pod.Namespace, pod.Name)
	}
	if pc.FromTemplate && !metav1.IsControlledBy(claim, pod) {
		return fmt.Errorf("ResourceClaim %s/%s was not created for Pod %s/%s (Pod is not owner)", claim.Namespace, claim.Name, pod.Namespace, pod.Name)
	}
	if !slices.ContainsFunc(claim.Status.ReservedFor, func(r resourceapi.ResourceClaimConsumerReference) bool {
		return r.UID == pod.UID
	}) {
		return fmt.Errorf("pod %s (%s) is not allowed to use ResourceClaim %s (%s)", pod.Name, pod.UID, claim.Name, claim.UID)
	}
	if claim.Status.Allocation == nil {
		return fmt.Errorf("ResourceClaim %s: not allocated", claim.Name)
	}
	return nil
}

// drivers are the drivers of a claim's allocated devices, sorted, each
// once.
func drivers(claim *resourceapi.ResourceClaim) []string {
	var out []string
	for _, r := range claim.Status.Allocation.Devices.Results {
		if !slices.Contains(out, r.Driver) {
			out = append(out, r.Driver)
		}
	}
	slices.Sort(out)
	return out
}

// containerRequests maps the claims a container uses to the requests it
// names in them ("" for all of the claim's), by ResourceClaim name.
func containerRequests(claims []podClaim, c *v1.Container) map[string][]string {
	out := map[string][]string{}
	for _, rc := range c.Resources.Claims {
		i := slices.IndexFunc(claims, func(pc podClaim) bool { return pc.Name == rc.Name })
		if i < 0 || claims[i].ClaimName == "" {
			continue
		}
		out[claims[i].ClaimName] = append(out[claims[i].ClaimName], rc.Request)
	}
	return out
}

// cdiDeviceIDs are the CDI devices of the claim's devices that serve
// request ("": all of them), as the kubelet's cdiDevicesAsList: a device
// that names no request serves every request. Drivers are taken in name
// order, so the list is the same at every sync.
func cdiDeviceIDs(info ClaimInfo, request string) []string {
	var out []string
	names := make([]string, 0, len(info.DriverState))
	for d := range info.DriverState {
		names = append(names, d)
	}
	slices.Sort(names)
	for _, d := range names {
		for _, dev := range info.DriverState[d].Devices {
			if request == "" || len(dev.RequestNames) == 0 || slices.Contains(dev.RequestNames, request) {
				out = append(out, dev.CDIDeviceIDs...)
			}
		}
	}
	return out
}
