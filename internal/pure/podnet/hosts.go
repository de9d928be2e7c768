package podnet

import (
	"bytes"
	"strings"

	v1 "k8s.io/api/core/v1"
)

const (
	managedHostsHeader            = "# Kubernetes-managed hosts file.\n"
	managedHostsHeaderHostNetwork = "# Kubernetes-managed hosts file (host network).\n"
)

// HostsFile returns the content of the /etc/hosts file the kubelet writes
// for the pod (etc-hosts in the pod's directory, bind-mounted at /etc/hosts
// of each container that does not mount something there itself). The
// kubelet mounts it only when the pod has IPs or is hostNetwork, and
// rewrites it each time it starts a container.
//
// For a pod on the pod network: the header "# Kubernetes-managed hosts
// file.", the localhost and IPv6 lines, then one line per pod IP, either
// "<ip>\t<hostname>.<domain>\t<hostname>" when domain is set or
// "<ip>\t<hostname>". hostname and domain are those of Hostname; when the pod
// sets setHostnameAsFQDN, a hostname ending in ".<domain>" is shortened first,
// so the FQDN from Hostname can be passed as is.
//
// For a hostNetwork pod: the header "# Kubernetes-managed hosts file (host
// network)." followed by hostHosts, the content of the node's /etc/hosts;
// podIPs, hostname and domain are not used.
//
// Either way, when the pod has hostAliases, an empty line, "# Entries added
// by HostAliases." and one "<ip>\t<name1>\t<name2>..." line per alias end
// the file.
func HostsFile(pod *v1.Pod, podIPs []string, hostname, domain string, hostHosts []byte) []byte {
	if pod == nil {
		pod = &v1.Pod{}
	}
	var b bytes.Buffer
	if pod.Spec.HostNetwork {
		b.WriteString(managedHostsHeaderHostNetwork)
		b.Write(hostHosts)
	} else {
		if domain != "" && pod.Spec.SetHostnameAsFQDN != nil && *pod.Spec.SetHostnameAsFQDN {
			hostname = strings.TrimSuffix(hostname, "."+domain)
		}
		b.WriteString(managedHostsHeader)
		b.WriteString("127.0.0.1\tlocalhost\n")
		b.WriteString("::1\tlocalhost ip6-localhost ip6-loopback\n")
		b.WriteString("fe00::0\tip6-localnet\n")
		b.WriteString("fe00::0\tip6-mcastprefix\n")
		b.WriteString("fe00::1\tip6-allnodes\n")
		b.WriteString("fe00::2\tip6-allrouters\n")
		for _, ip := range podIPs {
			b.WriteString(ip)
			b.WriteByte('\t')
			if domain != "" {
				b.WriteString(hostname + "." + domain + "\t")
			}
			b.WriteString(hostname)
			b.WriteByte('\n')
		}
	}
	if len(pod.Spec.HostAliases) > 0 {
		b.WriteString("\n# Entries added by HostAliases.\n")
		for _, a := range pod.Spec.HostAliases {
			b.WriteString(a.IP)
			b.WriteByte('\t')
			b.WriteString(strings.Join(a.Hostnames, "\t"))
			b.WriteByte('\n')
		}
	}
	return b.Bytes()
}
