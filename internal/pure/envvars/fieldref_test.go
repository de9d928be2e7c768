package envvars

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func TestFieldRef(t *testing.T) {
	pod := testPod()
	for _, tc := range []struct {
		path, want, err string
		facts           *PodFacts
		pod             *v1.Pod
	}{
		{path: "metadata.name", want: "web-0"},
		{path: "metadata.namespace", want: "ns"},
		{path: "metadata.uid", want: "uid-1"},
		{path: "metadata.labels", want: "app=\"web\"\ntier=\"front\""},
		{path: "metadata.annotations", want: "b=\"2\"\nexample.com/note=\"say \\\"hi\\\"\""},
		{path: "metadata.labels", pod: &v1.Pod{}, want: ""},
		{path: "metadata.labels['app']", want: "web"},
		{path: "metadata.labels['missing']", want: ""},
		{path: "metadata.annotations['example.com/note']", want: `say "hi"`},
		{path: "metadata.annotations['Example.com/Upper']", want: ""},
		{path: "metadata.labels['bad key!']", err: "invalid key subscript in metadata.labels['bad key!']: name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"},
		{path: "metadata.name['x']", err: "field label does not support subscript: metadata.name['x']"},
		{path: "spec.nodeName", want: "node-a"},
		{path: "spec.host", want: "node-a"},
		{path: "spec.nodeName", pod: &v1.Pod{}, want: "facts-node"},
		{path: "spec.serviceAccountName", want: "sa"},
		{path: "status.podIP", want: "10.0.0.5"},
		{path: "status.podIPs", want: "10.0.0.5,fd00::5"},
		{path: "status.podIP", facts: &PodFacts{}, want: ""},
		{path: "status.podIPs", facts: &PodFacts{}, want: ""},
		{path: "status.hostIP", want: "192.168.1.10"},
		{path: "status.hostIPs", want: "192.168.1.10,fd00:1::10"},
		{path: "status.hostIP", facts: &PodFacts{}, err: "host IP unknown: the node has no addresses"},
		{path: "status.hostIPs", facts: &PodFacts{}, err: "host IP unknown: the node has no addresses"},
		{path: "status.phase", err: "field label not supported: status.phase"},
		{path: "", err: "field label not supported: "},
	} {
		facts := testFacts
		if tc.facts != nil {
			facts = *tc.facts
		}
		p := pod
		if tc.pod != nil {
			p = tc.pod
		}
		got, err := FieldRef(p, tc.path, facts)
		if got != tc.want || errString(err) != tc.err {
			t.Errorf("FieldRef(%q) = %q, %v; want %q, %q", tc.path, got, err, tc.want, tc.err)
		}
	}
}

func TestResourceRef(t *testing.T) {
	pod := testPod()
	withPodLimits := testPod()
	withPodLimits.Spec.Resources = &v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceCPU: resource.MustParse("3"), v1.ResourceMemory: resource.MustParse("2Gi")}}
	q := resource.MustParse
	for _, tc := range []struct {
		name      string
		pod       *v1.Pod
		container string
		ref       v1.ResourceFieldSelector
		alloc     v1.ResourceList
		want, err string
	}{
		{name: "cpu limit rounded up", container: "app", ref: v1.ResourceFieldSelector{Resource: "limits.cpu"}, want: "2"},
		{name: "cpu limit in millicores", container: "app", ref: v1.ResourceFieldSelector{Resource: "limits.cpu", Divisor: q("1m")}, want: "1500"},
		{name: "cpu request", container: "app", ref: v1.ResourceFieldSelector{Resource: "requests.cpu"}, want: "1"},
		{name: "cpu request millicores", container: "app", ref: v1.ResourceFieldSelector{Resource: "requests.cpu", Divisor: q("1m")}, want: "250"},
		{name: "memory limit bytes", container: "app", ref: v1.ResourceFieldSelector{Resource: "limits.memory"}, want: "134217728"},
		{name: "memory limit Mi", container: "app", ref: v1.ResourceFieldSelector{Resource: "limits.memory", Divisor: q("1Mi")}, want: "128"},
		{name: "memory limit M rounded up", container: "app", ref: v1.ResourceFieldSelector{Resource: "limits.memory", Divisor: q("1M")}, want: "135"},
		{name: "memory request Ki", container: "app", ref: v1.ResourceFieldSelector{Resource: "requests.memory", Divisor: q("1Ki")}, want: "65536"},
		{name: "selector names the container", container: "other", ref: v1.ResourceFieldSelector{ContainerName: "app", Resource: "limits.cpu"}, want: "2"},
		{name: "no limit: node allocatable cpu", container: "nolimits", ref: v1.ResourceFieldSelector{Resource: "limits.cpu"}, want: "4"},
		{name: "no limit: node allocatable memory", container: "nolimits", ref: v1.ResourceFieldSelector{Resource: "limits.memory", Divisor: q("1Gi")}, want: "8"},
		{name: "no limit: node allocatable ephemeral", container: "nolimits", ref: v1.ResourceFieldSelector{Resource: "limits.ephemeral-storage", Divisor: q("1Gi")}, want: "100"},
		{name: "no limit and no allocatable", container: "nolimits", alloc: v1.ResourceList{}, ref: v1.ResourceFieldSelector{Resource: "limits.cpu"}, want: "0"},
		{name: "no request", container: "nolimits", ref: v1.ResourceFieldSelector{Resource: "requests.memory"}, want: "0"},
		{name: "no ephemeral request", container: "nolimits", ref: v1.ResourceFieldSelector{Resource: "requests.ephemeral-storage"}, want: "0"},
		{name: "pod-level limit before allocatable", pod: withPodLimits, container: "nolimits", ref: v1.ResourceFieldSelector{Resource: "limits.cpu"}, want: "3"},
		{name: "pod-level memory", pod: withPodLimits, container: "nolimits", ref: v1.ResourceFieldSelector{Resource: "limits.memory", Divisor: q("1Gi")}, want: "2"},
		{name: "pod-level limit needs allocatable", pod: withPodLimits, container: "nolimits", alloc: v1.ResourceList{}, ref: v1.ResourceFieldSelector{Resource: "limits.cpu"}, want: "0"},
		{name: "container limit before pod-level", pod: withPodLimits, container: "app", ref: v1.ResourceFieldSelector{Resource: "limits.cpu"}, want: "2"},
		{name: "init container", container: "init", ref: v1.ResourceFieldSelector{Resource: "limits.memory", Divisor: q("1Mi")}, want: "1024"},
		{name: "init container defaulted cpu", container: "init", ref: v1.ResourceFieldSelector{Resource: "limits.cpu"}, want: "4"},
		{name: "hugepages limit", container: "init", ref: v1.ResourceFieldSelector{Resource: "limits.hugepages-2Mi", Divisor: q("1Mi")}, want: "4"},
		{name: "hugepages not defaulted", container: "app", ref: v1.ResourceFieldSelector{Resource: "limits.hugepages-2Mi"}, want: "0"},
		{name: "ephemeral container", container: "debug", ref: v1.ResourceFieldSelector{Resource: "limits.cpu"}, want: "2"},
		{name: "unknown container", container: "ghost", ref: v1.ResourceFieldSelector{Resource: "limits.cpu"}, err: "container ghost not found"},
		{name: "unsupported", container: "app", ref: v1.ResourceFieldSelector{Resource: "limits.nvidia.com/gpu"}, err: "unsupported container resource : limits.nvidia.com/gpu"},
		{name: "unsupported kind", container: "app", ref: v1.ResourceFieldSelector{Resource: "cpu"}, err: "unsupported container resource : cpu"},
		{name: "sub-unit memory divisor counts as 1", container: "app", ref: v1.ResourceFieldSelector{Resource: "limits.memory", Divisor: q("1m")}, want: "134217728"},
		{name: "bad divisor", container: "app", ref: v1.ResourceFieldSelector{Resource: "limits.memory", Divisor: q("-1")}, err: "invalid divisor -1 for limits.memory"},
	} {
		p := pod
		if tc.pod != nil {
			p = tc.pod
		}
		alloc := testFacts.NodeAllocatable
		if tc.alloc != nil {
			alloc = tc.alloc
		}
		got, err := ResourceRef(p, tc.container, &tc.ref, alloc)
		if got != tc.want || errString(err) != tc.err {
			t.Errorf("%s: got %q, %v; want %q, %q", tc.name, got, err, tc.want, tc.err)
		}
	}
	if _, err := ResourceRef(pod, "app", nil, nil); err == nil {
		t.Error("nil selector: no error")
	}
}

func TestDownwardUsesNodeFacts(t *testing.T) {
	d := Downward{NodeName: "node1", HostIP: "10.0.0.5"}
	pod := &v1.Pod{}
	if got, err := d.FieldRef(pod, "spec.nodeName"); err != nil || got != "node1" {
		t.Errorf("spec.nodeName = %q, %v", got, err)
	}
	if got, err := d.FieldRef(pod, "status.hostIP"); err != nil || got != "10.0.0.5" {
		t.Errorf("status.hostIP = %q, %v", got, err)
	}
	if _, err := (Downward{}).FieldRef(pod, "status.hostIP"); err == nil {
		t.Error("status.hostIP without a host IP resolved")
	}
}
