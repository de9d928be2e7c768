package podnet

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Limits of the pod's resolver configuration (those of the API's pod
// validation, derived from libc's).
const (
	// MaxNameservers is the number of nameservers kept.
	MaxNameservers = 3
	// MaxSearchPaths is the number of search domains kept.
	MaxSearchPaths = 32
	// MaxSearchListChars is the length of the search line kept (domains
	// joined by spaces).
	MaxSearchListChars = 2048
	// maxSearchPathLen is the length of one search domain: longer ones are
	// dropped, some resolvers (glibc 2.28) abort on them.
	maxSearchPathLen = 253
)

// dnsKind is the base of a pod's DNS configuration.
type dnsKind int

const (
	dnsCluster dnsKind = iota // the cluster DNS
	dnsHost                   // the host's resolv.conf
	dnsNone                   // nothing
)

// clusterFirstOptions are the options of a pod using the cluster DNS.
var clusterFirstOptions = []string{"ndots:5"}

// Warning is a condition the kubelet reports as a Warning event on the
// pod, with its reason; with NodeMessage, also as one on the node, with
// that message.
type Warning struct {
	Reason, Message string
	NodeMessage     string
}

// The reasons of the kubelet's DNS warnings (pkg/kubelet/network/dns).
const (
	// ReasonMissingClusterDNS: a ClusterFirst pod on a node with no
	// cluster DNS address, which falls back to the Default policy.
	ReasonMissingClusterDNS = "MissingClusterDNS"
	// ReasonDNSConfigForming: a limit cut the pod's nameservers or
	// searches.
	ReasonDNSConfigForming = "DNSConfigForming"
)

// MissingClusterDNSMessage is the kubelet's message of MissingClusterDNS;
// the pod's event prefixes it with the pod, the node's event is it alone.
const MissingClusterDNSMessage = `kubelet does not have ClusterDNS IP configured and cannot create Pod using "ClusterFirst" policy. Falling back to "Default" policy.`

// DNSConfig returns the DNS configuration of the pod's sandbox, as the
// kubelet's GetPodDNS does. It never returns a nil config without an error.
//
// The base depends on spec.dnsPolicy:
//
//   - ClusterFirst (and "", the API default) on the pod network, and
//     ClusterFirstWithHostNet: the cluster DNS servers, the search list
//     "<ns>.svc.<domain> svc.<domain> <domain>" (when clusterDomain is set)
//     followed by the host's searches, and only the option ndots:5. Without
//     cluster DNS servers the pod falls back to Default, with a warning.
//   - ClusterFirst with hostNetwork, and Default: the host's configuration
//     (hostResolvConf, see ParseResolvConf). A nil hostResolvConf stands for
//     the kubelet's --resolv-conf="" (no host file): then the nameserver is
//     127.0.0.1 and the search list ".". An empty, non-nil one is an empty
//     file.
//   - None: nothing.
//   - anything else: the cluster DNS (even with hostNetwork), with a
//     warning.
//
// spec.dnsConfig is then merged: its nameservers and searches appended
// (duplicates dropped, first occurrence kept), its options replacing base
// options of the same name (an option with a value is "name:value").
// Finally the limits are applied, each cut giving a warning: at most
// MaxNameservers nameservers, at most MaxSearchPaths searches, search
// domains longer than 253 characters dropped, and the last searches
// dropped until the search line fits MaxSearchListChars.
//
// The host's resolv.conf is parsed whatever the policy; a parse error (a
// nameserver line without address) and an invalid clusterDNS address are
// errors. Warnings are the kubelet's Warning events, reason and message.
func DNSConfig(pod *v1.Pod, hostResolvConf []byte, clusterDNS []string, clusterDomain string) (*runtimeapi.DNSConfig, []Warning, error) {
	if pod == nil {
		return nil, nil, errors.New("podnet: nil pod")
	}
	var host ResolvConf
	if hostResolvConf != nil {
		var err error
		if host, err = ParseResolvConf(hostResolvConf); err != nil {
			return nil, nil, fmt.Errorf("parsing the host's resolv.conf: %w", err)
		}
	} else {
		host = ResolvConf{Nameservers: []string{"127.0.0.1"}, Searches: []string{"."}}
	}
	servers := make([]string, 0, len(clusterDNS))
	for _, s := range clusterDNS {
		ip, err := netip.ParseAddr(s)
		if err != nil {
			return nil, nil, fmt.Errorf("invalid cluster DNS address %q", s)
		}
		servers = append(servers, ip.String())
	}

	var warnings []Warning
	var kind dnsKind
	switch pod.Spec.DNSPolicy {
	case v1.DNSNone:
		kind = dnsNone
	case v1.DNSDefault:
		kind = dnsHost
	case v1.DNSClusterFirstWithHostNet:
		kind = dnsCluster
	case v1.DNSClusterFirst, "":
		kind = dnsCluster
		if pod.Spec.HostNetwork {
			kind = dnsHost
		}
	default:
		warnings = append(warnings, Warning{Reason: ReasonDNSConfigForming,
			Message: fmt.Sprintf("invalid DNSPolicy=%s. Falling back to %q policy.", pod.Spec.DNSPolicy, v1.DNSClusterFirst)})
		kind = dnsCluster
	}
	if kind == dnsCluster && len(servers) == 0 {
		warnings = append(warnings, Warning{Reason: ReasonMissingClusterDNS,
			Message:     fmt.Sprintf("pod: %q. %s", pod.Name+"_"+pod.Namespace+"("+string(pod.UID)+")", MissingClusterDNSMessage),
			NodeMessage: MissingClusterDNSMessage})
		kind = dnsHost
	}

	cfg := &runtimeapi.DNSConfig{}
	switch kind {
	case dnsHost:
		cfg = hostConfig(host)
	case dnsCluster:
		cfg.Servers = servers
		cfg.Searches = append([]string(nil), host.Searches...)
		if clusterDomain != "" {
			cfg.Searches = omitDuplicates(append([]string{
				pod.Namespace + ".svc." + clusterDomain,
				"svc." + clusterDomain,
				clusterDomain,
			}, host.Searches...))
		}
		cfg.Options = append([]string(nil), clusterFirstOptions...)
	}

	if dc := pod.Spec.DNSConfig; dc != nil {
		cfg.Servers = omitDuplicates(append(cfg.Servers, dc.Nameservers...))
		cfg.Searches = omitDuplicates(append(cfg.Searches, dc.Searches...))
		opts := make([]string, 0, len(dc.Options))
		for _, o := range dc.Options {
			if o.Value != nil && *o.Value != "" {
				opts = append(opts, o.Name+":"+*o.Value)
			} else {
				opts = append(opts, o.Name)
			}
		}
		cfg.Options = mergeOptions(cfg.Options, opts)
	}

	if len(cfg.Servers) > MaxNameservers {
		cfg.Servers = cfg.Servers[:MaxNameservers]
		warnings = append(warnings, Warning{Reason: ReasonDNSConfigForming,
			Message: "Nameserver limits were exceeded, some nameservers have been omitted, the applied nameserver line is: " + strings.Join(cfg.Servers, " ")})
	}
	var cut bool
	if cfg.Searches, cut = fitSearches(cfg.Searches); cut {
		warnings = append(warnings, Warning{Reason: ReasonDNSConfigForming,
			Message: "Search Line limits were exceeded, some search paths have been omitted, the applied search line is: " + strings.Join(cfg.Searches, " ")})
	}
	return cfg, warnings, nil
}

// hostConfig returns a copy of the host's configuration.
func hostConfig(host ResolvConf) *runtimeapi.DNSConfig {
	return &runtimeapi.DNSConfig{
		Servers:  append([]string(nil), host.Nameservers...),
		Searches: append([]string(nil), host.Searches...),
		Options:  append([]string(nil), host.Options...),
	}
}

// fitSearches applies the search list limits; cut tells whether anything
// was dropped.
func fitSearches(searches []string) (out []string, cut bool) {
	if len(searches) > MaxSearchPaths {
		searches, cut = searches[:MaxSearchPaths], true
	}
	out = make([]string, 0, len(searches))
	for _, s := range searches {
		if len(s) > maxSearchPathLen {
			cut = true
			continue
		}
		out = append(out, s)
	}
	for len(out) > 0 && len(strings.Join(out, " ")) > MaxSearchListChars {
		out, cut = out[:len(out)-1], true
	}
	if len(out) == 0 {
		out = nil
	}
	return out, cut
}
