package podnet

import (
	"errors"
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

const (
	// hostnameMaxLen is the longest hostname: the kernel's 64 bytes less
	// the terminating NUL.
	hostnameMaxLen = 63
	// fqdnMaxLen is the longest FQDN used as the kernel hostname
	// (setHostnameAsFQDN).
	fqdnMaxLen = 64
)

// Hostname returns the pod's hostname and domain as the kubelet computes
// them (GeneratePodHostNameAndDomain, then the sandbox's kernel hostname):
//
//   - spec.hostnameOverride, when set, is the hostname (it must be a DNS
//     subdomain) and there is no domain;
//   - otherwise the hostname is spec.hostname (a DNS label) or the pod's
//     name, and the domain is "<subdomain>.<namespace>.svc.<clusterDomain>"
//     when spec.subdomain (a DNS label) is set, "" otherwise;
//   - a hostname longer than 63 characters is truncated to 63, then
//     trailing '-' and '.' are removed;
//   - with spec.setHostnameAsFQDN and a domain, the returned hostname is the
//     FQDN "<hostname>.<domain>", an error when longer than 64 characters.
//
// The hostname is the PodSandboxConfig's Hostname and the domain is for
// HostsFile. The kubelet sets no sandbox hostname for hostNetwork pods (the
// pod has the node's); it still uses these values for the hosts file.
func Hostname(pod *v1.Pod, clusterDomain string) (hostname, domain string, err error) {
	if pod == nil {
		return "", "", errors.New("podnet: nil pod")
	}
	if o := pod.Spec.HostnameOverride; o != nil {
		if msgs := validation.IsDNS1123Subdomain(*o); len(msgs) != 0 {
			return "", "", fmt.Errorf("pod HostnameOverride %q is not a valid DNS subdomain: %s", *o, strings.Join(msgs, ";"))
		}
		hostname, err := truncateHostname(pod.Name, *o)
		return hostname, "", err
	}

	hostname = pod.Name
	if h := pod.Spec.Hostname; h != "" {
		if msgs := validation.IsDNS1123Label(h); len(msgs) != 0 {
			return "", "", fmt.Errorf("pod Hostname %q is not a valid DNS label: %s", h, strings.Join(msgs, ";"))
		}
		hostname = h
	}
	if hostname, err = truncateHostname(pod.Name, hostname); err != nil {
		return "", "", err
	}
	if sub := pod.Spec.Subdomain; sub != "" {
		if msgs := validation.IsDNS1123Label(sub); len(msgs) != 0 {
			return "", "", fmt.Errorf("pod Subdomain %q is not a valid DNS label: %s", sub, strings.Join(msgs, ";"))
		}
		domain = fmt.Sprintf("%s.%s.svc.%s", sub, pod.Namespace, clusterDomain)
	}
	if domain != "" && pod.Spec.SetHostnameAsFQDN != nil && *pod.Spec.SetHostnameAsFQDN {
		fqdn := hostname + "." + domain
		if len(fqdn) > fqdnMaxLen {
			return "", "", fmt.Errorf("failed to construct FQDN from pod hostname and cluster domain, FQDN %s is too long (%d characters is the max, %d characters requested)", fqdn, fqdnMaxLen, len(fqdn))
		}
		hostname = fqdn
	}
	return hostname, domain, nil
}

// truncateHostname cuts hostname to hostnameMaxLen characters, dropping
// the '-' and '.' that would end it.
func truncateHostname(podName, hostname string) (string, error) {
	if len(hostname) <= hostnameMaxLen {
		return hostname, nil
	}
	truncated := strings.TrimRight(hostname[:hostnameMaxLen], "-.")
	if truncated == "" {
		return "", fmt.Errorf("hostname for pod %q was invalid: %q", podName, hostname)
	}
	return truncated, nil
}
