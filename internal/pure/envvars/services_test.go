package envvars

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var rewrite = flag.Bool("rewrite", false, "rewrite golden files in testdata/")

func service(ns, name, clusterIP string, ports ...v1.ServicePort) *v1.Service {
	return &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1.ServiceSpec{ClusterIP: clusterIP, Ports: ports}}
}

func port(name string, number int32, protocol v1.Protocol) v1.ServicePort {
	return v1.ServicePort{Name: name, Port: number, Protocol: protocol}
}

// clusterServices are the Services of a small cluster, with every case
// ServiceEnv tells apart.
func clusterServices() []*v1.Service {
	return []*v1.Service{
		service("default", "kubernetes", "10.96.0.1", port("https", 443, v1.ProtocolTCP)),
		service("default", "web", "10.96.0.10", port("", 80, "")),
		service("app", "my-db", "10.96.1.5", port("pg", 5432, v1.ProtocolTCP), port("metrics-port", 9187, v1.ProtocolTCP)),
		service("app", "dns", "10.96.1.53", port("dns", 53, v1.ProtocolUDP), port("dns-tcp", 53, v1.ProtocolTCP),
			port("sctp", 9999, v1.ProtocolSCTP)),
		service("app", "headless", v1.ClusterIPNone, port("http", 80, v1.ProtocolTCP)),
		service("app", "no-ip", "", port("http", 80, v1.ProtocolTCP)),
		service("app", "v6", "fd00::10", port("", 8080, v1.ProtocolTCP)),
		service("other", "secret-svc", "10.96.2.2", port("", 1, v1.ProtocolTCP)),
		// A Service of the pod's namespace named as the master service
		// wins over it.
		service("shadow", "kubernetes", "10.96.3.3", port("", 8443, v1.ProtocolTCP)),
	}
}

// TestServiceEnvGolden pins the service variables of pods of several
// namespaces, with and without enableServiceLinks, in
// testdata/services.golden (go test -rewrite to regenerate; read the diff
// first). The expected values follow pkg/kubelet/envvars FromServices and
// getServiceEnvVarMap of the kubelet v1.37.
func TestServiceEnvGolden(t *testing.T) {
	var b strings.Builder
	for _, tc := range []struct {
		namespace string
		links     bool
	}{
		{"app", true}, {"app", false}, {"default", true}, {"default", false}, {"shadow", true}, {"empty", true},
	} {
		fmt.Fprintf(&b, "# namespace=%s enableServiceLinks=%v\n", tc.namespace, tc.links)
		for _, e := range ServiceEnv(clusterServices(), tc.namespace, tc.links) {
			fmt.Fprintf(&b, "%s=%s\n", e.Name, e.Value)
		}
		b.WriteString("\n")
	}
	golden := filepath.Join("testdata", "services.golden")
	if *rewrite {
		if err := os.WriteFile(golden, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if b.String() != string(want) {
		t.Errorf("ServiceEnv differs from %s (go test -rewrite to accept):\n%s", golden, b.String())
	}
}

func TestServiceEnvWithoutServices(t *testing.T) {
	if got := ServiceEnv(nil, "app", true); len(got) != 0 {
		t.Errorf("ServiceEnv of no Services = %v", got)
	}
}

// Build adds the service variables last, those env and envFrom did not
// define, and expands $(VAR) against them; enableServiceLinks false keeps
// only the master service's.
func TestBuildServiceLinks(t *testing.T) {
	pod := testPod()
	pod.Namespace = "app"
	c := &v1.Container{Name: "c", Env: []v1.EnvVar{
		{Name: "MY_DB_SERVICE_HOST", Value: "overridden"},
		{Name: "URL", Value: "https://$(KUBERNETES_SERVICE_HOST):$(KUBERNETES_SERVICE_PORT)/$(MY_DB_SERVICE_HOST)"},
	}}
	facts := PodFacts{Services: clusterServices()}
	env, err := Build(pod, c, facts, newObjects())
	if err != nil {
		t.Fatal(err)
	}
	vars := envMap(env)
	if env[0].Name != "MY_DB_SERVICE_HOST" || env[1].Name != "URL" {
		t.Errorf("the pod's own variables do not come first: %v", env[:2])
	}
	for name, want := range map[string]string{
		"MY_DB_SERVICE_HOST":      "overridden",
		"URL":                     "https://10.96.0.1:443/overridden",
		"KUBERNETES_SERVICE_HOST": "10.96.0.1",
		"DNS_PORT_53_UDP":         "udp://10.96.1.53:53",
		"V6_PORT":                 "tcp://[fd00::10]:8080",
	} {
		if vars[name] != want {
			t.Errorf("%s = %q, want %q", name, vars[name], want)
		}
	}
	if _, ok := vars["WEB_SERVICE_HOST"]; ok {
		t.Error("a Service of another namespace (default/web) was linked")
	}

	pod.Spec.EnableServiceLinks = ptr(false)
	env, err = Build(pod, &v1.Container{Name: "c"}, facts, newObjects())
	if err != nil {
		t.Fatal(err)
	}
	vars = envMap(env)
	if _, ok := vars["MY_DB_SERVICE_HOST"]; ok {
		t.Error("enableServiceLinks=false still links the namespace's Services")
	}
	if vars["KUBERNETES_SERVICE_HOST"] != "10.96.0.1" {
		t.Error("enableServiceLinks=false drops the master service, which every pod gets")
	}
}
