// Package podnet is beside the pipeline: the naming side of a pod's network
// the kubelet owns — the DNS configuration handed to the runtime in the
// sandbox config (pkg/kubelet/network/dns), the pod's hostname and domain
// (GeneratePodHostNameAndDomain and the sandbox's kernel hostname) and the
// /etc/hosts file the kubelet writes for each pod (ensureHostsFile);
// and the node's pod CIDRs: whether the Node's (or --pod-cidr) go to the
// runtime now (DecidePodCIDRs, the kubelet's updatePodCIDR).
//
// Everything here is pure: the caller reads the host's /etc/resolv.conf and
// /etc/hosts and writes the hosts file; nothing is logged. Conditions the
// kubelet reports as Warning events (MissingClusterDNS, DNSConfigForming)
// are returned as warning messages instead.
package podnet
