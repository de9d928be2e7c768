package podnet

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestHostname(t *testing.T) {
	long := strings.Repeat("a", 62) + "-b" // 64 characters, '-' at 63
	yes := true
	for _, tc := range []struct {
		name                     string
		podName, hostname, sub   string
		override                 *string
		fqdn                     bool
		wantHostname, wantDomain string
		err                      string
	}{
		{name: "pod name", podName: "web-0", wantHostname: "web-0"},
		{name: "spec.hostname", podName: "web-0", hostname: "db", wantHostname: "db"},
		{name: "subdomain", podName: "web-0", sub: "svc1", wantHostname: "web-0", wantDomain: "svc1.ns.svc.cluster.local"},
		{name: "hostname and subdomain", podName: "web-0", hostname: "db", sub: "svc1", wantHostname: "db", wantDomain: "svc1.ns.svc.cluster.local"},
		{name: "long pod name truncated and trimmed", podName: long, wantHostname: strings.Repeat("a", 62)},
		{name: "63 kept", podName: strings.Repeat("c", 63), wantHostname: strings.Repeat("c", 63)},
		{name: "dots and dashes trimmed", podName: strings.Repeat("d", 60) + ".-.-x", wantHostname: strings.Repeat("d", 60)},
		{name: "invalid hostname", podName: "p", hostname: "Not_Valid", err: `pod Hostname "Not_Valid" is not a valid DNS label`},
		{name: "invalid subdomain", podName: "p", sub: "a.b", err: `pod Subdomain "a.b" is not a valid DNS label`},
		{name: "FQDN", podName: "web-0", sub: "svc1", fqdn: true, wantHostname: "web-0.svc1.ns.svc.cluster.local", wantDomain: "svc1.ns.svc.cluster.local"},
		{name: "FQDN without subdomain", podName: "web-0", fqdn: true, wantHostname: "web-0"},
		{name: "FQDN too long", podName: strings.Repeat("e", 40), sub: "svc1", fqdn: true,
			err: "failed to construct FQDN from pod hostname and cluster domain, FQDN " + strings.Repeat("e", 40) + ".svc1.ns.svc.cluster.local is too long (64 characters is the max, 66 characters requested)"},
		{name: "override", podName: "web-0", hostname: "db", sub: "svc1", override: str("my.host.example"), wantHostname: "my.host.example"},
		{name: "override truncated", podName: "p", override: str(strings.Repeat("f", 62) + ".g"), wantHostname: strings.Repeat("f", 62)},
		{name: "invalid override", podName: "p", override: str("-x"), err: `pod HostnameOverride "-x" is not a valid DNS subdomain`},
	} {
		pod := &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: tc.podName, Namespace: "ns"},
			Spec:       v1.PodSpec{Hostname: tc.hostname, Subdomain: tc.sub, HostnameOverride: tc.override},
		}
		if tc.fqdn {
			pod.Spec.SetHostnameAsFQDN = &yes
		}
		h, d, err := Hostname(pod, "cluster.local")
		if tc.err != "" {
			if err == nil || !strings.HasPrefix(err.Error(), tc.err) {
				t.Errorf("%s: err = %v, want %q...", tc.name, err, tc.err)
			}
			continue
		}
		if err != nil || h != tc.wantHostname || d != tc.wantDomain {
			t.Errorf("%s: got %q, %q, %v; want %q, %q", tc.name, h, d, err, tc.wantHostname, tc.wantDomain)
		}
	}
	if _, _, err := Hostname(nil, ""); err == nil {
		t.Error("nil pod: no error")
	}
}

func TestHostsFile(t *testing.T) {
	aliases := []v1.HostAlias{
		{IP: "10.1.2.3", Hostnames: []string{"foo.local", "bar.local"}},
		{IP: "fd00::9", Hostnames: []string{"v6.local"}},
	}
	yes := true
	const localhost = "# Kubernetes-managed hosts file.\n" +
		"127.0.0.1\tlocalhost\n" +
		"::1\tlocalhost ip6-localhost ip6-loopback\n" +
		"fe00::0\tip6-localnet\n" +
		"fe00::0\tip6-mcastprefix\n" +
		"fe00::1\tip6-allnodes\n" +
		"fe00::2\tip6-allrouters\n"
	const aliasSection = "\n# Entries added by HostAliases.\n" +
		"10.1.2.3\tfoo.local\tbar.local\n" +
		"fd00::9\tv6.local\n"
	hostHosts := []byte("127.0.0.1 localhost\n192.168.1.10 node-a\n")

	for _, tc := range []struct {
		name             string
		spec             v1.PodSpec
		ips              []string
		hostname, domain string
		want             string
	}{
		{name: "pod network", ips: []string{"10.0.0.5"}, hostname: "web-0",
			want: localhost + "10.0.0.5\tweb-0\n"},
		{name: "dual stack with domain", ips: []string{"10.0.0.5", "fd00::5"}, hostname: "web-0", domain: "svc1.ns.svc.cluster.local",
			want: localhost + "10.0.0.5\tweb-0.svc1.ns.svc.cluster.local\tweb-0\n" + "fd00::5\tweb-0.svc1.ns.svc.cluster.local\tweb-0\n"},
		{name: "no IPs", hostname: "web-0", want: localhost},
		{name: "aliases", spec: v1.PodSpec{HostAliases: aliases}, ips: []string{"10.0.0.5"}, hostname: "web-0",
			want: localhost + "10.0.0.5\tweb-0\n" + aliasSection},
		{name: "FQDN hostname shortened", spec: v1.PodSpec{SetHostnameAsFQDN: &yes}, ips: []string{"10.0.0.5"},
			hostname: "web-0.svc1.ns.svc.cluster.local", domain: "svc1.ns.svc.cluster.local",
			want: localhost + "10.0.0.5\tweb-0.svc1.ns.svc.cluster.local\tweb-0\n"},
		{name: "short hostname with FQDN pod", spec: v1.PodSpec{SetHostnameAsFQDN: &yes}, ips: []string{"10.0.0.5"},
			hostname: "web-0", domain: "svc1.ns.svc.cluster.local",
			want: localhost + "10.0.0.5\tweb-0.svc1.ns.svc.cluster.local\tweb-0\n"},
		{name: "host network", spec: v1.PodSpec{HostNetwork: true}, ips: []string{"192.168.1.10"}, hostname: "web-0",
			want: "# Kubernetes-managed hosts file (host network).\n" + string(hostHosts)},
		{name: "host network with aliases", spec: v1.PodSpec{HostNetwork: true, HostAliases: aliases},
			want: "# Kubernetes-managed hosts file (host network).\n" + string(hostHosts) + aliasSection},
	} {
		pod := &v1.Pod{Spec: tc.spec}
		got := string(HostsFile(pod, tc.ips, tc.hostname, tc.domain, hostHosts))
		if got != tc.want {
			t.Errorf("%s:\n got:\n%s\nwant:\n%s", tc.name, got, tc.want)
		}
	}
}
