package admission

import (
	"fmt"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func pod(name, cpu, mem string, hostPort int32) *v1.Pod {
	c := v1.Container{Name: "c", Image: "i", Resources: v1.ResourceRequirements{Requests: v1.ResourceList{}}}
	if cpu != "" {
		c.Resources.Requests[v1.ResourceCPU] = resource.MustParse(cpu)
	}
	if mem != "" {
		c.Resources.Requests[v1.ResourceMemory] = resource.MustParse(mem)
	}
	if hostPort != 0 {
		c.Ports = []v1.ContainerPort{{ContainerPort: 80, HostPort: hostPort}}
	}
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: v1.PodSpec{Containers: []v1.Container{c}}}
}

func TestAdmit(t *testing.T) {
	node := Node{MaxPods: 3, Allocatable: v1.ResourceList{
		v1.ResourceCPU: resource.MustParse("2"), v1.ResourceMemory: resource.MustParse("1Gi")}}
	for _, tc := range []struct {
		name   string
		pod    *v1.Pod
		active []*v1.Pod
		reason string
		msg    string
	}{
		{"fits", pod("a", "1", "512Mi", 8080), []*v1.Pod{pod("b", "1", "512Mi", 0)}, "", ""},
		{"best effort always fits cpu", pod("a", "", "", 0), []*v1.Pod{pod("b", "2", "", 0)}, "", ""},
		{"too many pods", pod("a", "", "", 0), []*v1.Pod{pod("b", "", "", 0), pod("c", "", "", 0), pod("d", "", "", 0)},
			"OutOfpods", "Node didn't have enough resource: pods, requested: 1, used: 3, capacity: 3"},
		{"cpu", pod("a", "1500m", "", 0), []*v1.Pod{pod("b", "1", "", 0)},
			"OutOfcpu", "Node didn't have enough resource: cpu, requested: 1500, used: 1000, capacity: 2000"},
		{"memory", pod("a", "", "1Gi", 0), []*v1.Pod{pod("b", "", "1", 0)}, "OutOfmemory", "resource: memory"},
		{"host port", pod("a", "", "", 8080), []*v1.Pod{pod("b", "", "", 8080)}, "NodePorts", "TCP/8080 is used by pod default/b"},
		{"unsafe sysctl", withSysctl(pod("a", "", "", 0), "net.core.somaxconn"), nil, "SysctlForbidden", "net.core.somaxconn"},
		// The sysctls are checked before the resource allocation, the
		// pod count after it, as the kubelet's admit handlers go.
		{"unsafe sysctl, too many pods", withSysctl(pod("a", "", "", 0), "net.core.somaxconn"), []*v1.Pod{pod("b", "", "", 0), pod("c", "", "", 0), pod("d", "", "", 0)},
			"SysctlForbidden", "net.core.somaxconn"},
		{"safe sysctl", withSysctl(pod("a", "", "", 0), "net.ipv4.tcp_syncookies"), nil, "", ""},
		{"apparmor field", withAppArmor(pod("a", "", "", 0), true, v1.AppArmorProfileTypeRuntimeDefault), nil, "AppArmor", "AppArmor is not enabled on the host"},
		{"apparmor annotation", withAppArmor(pod("a", "", "", 0), false, "runtime/default"), nil, "AppArmor", "AppArmor is not enabled on the host"},
		{"apparmor unconfined", withAppArmor(pod("a", "", "", 0), true, v1.AppArmorProfileTypeUnconfined), nil, "", ""},
		{"os field", withOS(pod("a", "", "", 0), "windows", ""), nil, "PodOSNotSupported", "the OS field doesn't match node OS"},
		{"os field linux", withOS(pod("a", "", "", 0), "linux", ""), nil, "", ""},
		{"os label", withOS(pod("a", "", "", 0), "", "windows"), nil, "PodOSSelectorNodeLabelDoesNotMatch", "`kubernetes.io/os` label"},
		{"os before pod count", withOS(pod("a", "", "", 0), "windows", ""), []*v1.Pod{pod("b", "", "", 0), pod("c", "", "", 0), pod("d", "", "", 0)},
			"PodOSNotSupported", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Admit(tc.pod, tc.active, node)
			if tc.reason == "" {
				if !r.Admit {
					t.Fatalf("rejected: %+v", r)
				}
				return
			}
			if r.Admit || r.Reason != tc.reason || !strings.Contains(r.Message, tc.msg) {
				t.Fatalf("got %+v, want reason %s message containing %q", r, tc.reason, tc.msg)
			}
		})
	}
}

func TestHostPortConflicts(t *testing.T) {
	for _, tc := range []struct {
		a, b hostPort
		want bool
	}{
		{hostPort{"0.0.0.0", v1.ProtocolTCP, 80}, hostPort{"127.0.0.1", v1.ProtocolTCP, 80}, true},
		{hostPort{"10.0.0.1", v1.ProtocolTCP, 80}, hostPort{"127.0.0.1", v1.ProtocolTCP, 80}, false},
		{hostPort{"0.0.0.0", v1.ProtocolUDP, 80}, hostPort{"0.0.0.0", v1.ProtocolTCP, 80}, false},
		{hostPort{"0.0.0.0", v1.ProtocolTCP, 81}, hostPort{"0.0.0.0", v1.ProtocolTCP, 80}, false},
	} {
		if got := tc.a.conflicts(tc.b); got != tc.want {
			t.Errorf("%v vs %v: %v", tc.a, tc.b, got)
		}
	}
}

func TestPodRequestCountsInitAndSidecars(t *testing.T) {
	always := v1.ContainerRestartPolicyAlways
	req := func(cpu string) v1.ResourceRequirements {
		return v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpu)}}
	}
	p := &v1.Pod{Spec: v1.PodSpec{
		InitContainers: []v1.Container{
			{Name: "side", Resources: req("200m"), RestartPolicy: &always},
			{Name: "big-init", Resources: req("2")},
		},
		Containers: []v1.Container{{Name: "a", Resources: req("500m")}, {Name: "b", Resources: req("500m")}},
	}}
	got := PodRequest(p, v1.ResourceCPU)
	if got.MilliValue() != 2200 {
		t.Errorf("request = %dm, want 2200m (init 2 + sidecar 200m)", got.MilliValue())
	}
	p.Spec.InitContainers[1].Resources = req("100m")
	got = PodRequest(p, v1.ResourceCPU)
	if got.MilliValue() != 1200 {
		t.Errorf("request = %dm, want 1200m (containers + sidecar)", got.MilliValue())
	}
}

// The RuntimeClass's overhead counts on top of the containers' requests
// or the pod-level ones: a pod that fits only without it is refused with
// the kubelet's reason, and the overhead of active pods counts as used.
func TestAdmitCountsOverhead(t *testing.T) {
	node := Node{Allocatable: v1.ResourceList{v1.ResourceCPU: resource.MustParse("2"), v1.ResourceMemory: resource.MustParse("1Gi")}}
	withOverhead := func(p *v1.Pod, cpu, mem string) *v1.Pod {
		p.Spec.Overhead = v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpu), v1.ResourceMemory: resource.MustParse(mem)}
		return p
	}
	podLevel := func(p *v1.Pod, cpu, mem string) *v1.Pod {
		p.Spec.Resources = &v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpu), v1.ResourceMemory: resource.MustParse(mem)}}
		return p
	}
	for _, tc := range []struct {
		name   string
		pod    *v1.Pod
		active []*v1.Pod
		reason string
		msg    string
	}{
		{"fits without overhead", pod("a", "1", "512Mi", 0), nil, "", ""},
		{"memory overhead does not fit", withOverhead(pod("a", "100m", "1000Mi", 0), "10m", "100Mi"), nil,
			"OutOfmemory", "requested: 1153433600, used: 0, capacity: 1073741824"},
		{"cpu overhead does not fit", withOverhead(pod("a", "1900m", "", 0), "200m", "1Mi"), nil,
			"OutOfcpu", "requested: 2100, used: 0, capacity: 2000"},
		{"a best-effort pod's overhead is a request", withOverhead(pod("a", "", "", 0), "500m", "1Mi"), []*v1.Pod{pod("b", "1600m", "", 0)},
			"OutOfcpu", "requested: 500, used: 1600"},
		{"active pods' overhead is used", pod("a", "1", "", 0), []*v1.Pod{withOverhead(pod("b", "900m", "", 0), "250m", "1Mi")},
			"OutOfcpu", "requested: 1000, used: 1150"},
		{"overhead on top of pod-level requests", withOverhead(podLevel(pod("a", "100m", "", 0), "1", "1000Mi"), "10m", "100Mi"), nil,
			"OutOfmemory", "requested: 1153433600"},
		{"pod-level requests replace the containers'", podLevel(pod("a", "3", "", 0), "1", "512Mi"), nil, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Admit(tc.pod, tc.active, node)
			if tc.reason == "" {
				if !r.Admit {
					t.Fatalf("rejected: %+v", r)
				}
				return
			}
			if r.Admit || r.Reason != tc.reason || !strings.Contains(r.Message, tc.msg) {
				t.Fatalf("got %+v, want reason %s message containing %q", r, tc.reason, tc.msg)
			}
		})
	}
}

func withSysctl(p *v1.Pod, name string) *v1.Pod {
	p.Spec.SecurityContext = &v1.PodSecurityContext{Sysctls: []v1.Sysctl{{Name: name, Value: "1"}}}
	return p
}

func withOS(p *v1.Pod, field, label string) *v1.Pod {
	if field != "" {
		p.Spec.OS = &v1.PodOS{Name: v1.OSName(field)}
	}
	if label != "" {
		p.Labels = map[string]string{v1.LabelOSStable: label}
	}
	return p
}

func withAppArmor(p *v1.Pod, field bool, profile v1.AppArmorProfileType) *v1.Pod {
	if field {
		p.Spec.Containers[0].SecurityContext = &v1.SecurityContext{AppArmorProfile: &v1.AppArmorProfile{Type: profile}}
	} else {
		p.Annotations = map[string]string{v1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix + "c": string(profile)}
	}
	return p
}

// Under pressure, the kubelet's eviction admit handler: memory pressure
// alone refuses only BestEffort pods without the memory-pressure
// toleration; disk or PID pressure refuses every pod; critical pods pass.
func TestAdmitUnderPressure(t *testing.T) {
	bestEffort := pod("be", "", "", 0)
	burstable := pod("bu", "", "64Mi", 0)
	tolerant := pod("tol", "", "", 0)
	tolerant.Spec.Tolerations = []v1.Toleration{{Key: v1.TaintNodeMemoryPressure, Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoSchedule}}
	critical := pod("crit", "", "", 0)
	critical.Spec.PriorityClassName = "system-node-critical"
	mem := []v1.NodeConditionType{v1.NodeMemoryPressure}
	disk := []v1.NodeConditionType{v1.NodeDiskPressure}
	both := []v1.NodeConditionType{v1.NodeDiskPressure, v1.NodeMemoryPressure}
	for _, tc := range []struct {
		pod      *v1.Pod
		pressure []v1.NodeConditionType
		admit    bool
	}{
		{bestEffort, nil, true},
		{bestEffort, mem, false},
		{burstable, mem, true},
		{tolerant, mem, true},
		{critical, mem, true},
		{burstable, disk, false},
		{tolerant, both, false},
		{critical, both, true},
		{burstable, []v1.NodeConditionType{v1.NodePIDPressure}, false},
	} {
		r := Admit(tc.pod, nil, Node{Pressure: tc.pressure})
		if r.Admit != tc.admit {
			t.Errorf("%s under %v: admit %v (%s), want %v", tc.pod.Name, tc.pressure, r.Admit, r.Message, tc.admit)
		}
		if !r.Admit && (r.Reason != "Evicted" || r.Message != fmt.Sprintf("The node had condition: %v. ", tc.pressure)) {
			t.Errorf("%s under %v: reason %q message %q", tc.pod.Name, tc.pressure, r.Reason, r.Message)
		}
	}
}

// While the node shuts down every new pod is refused, with the kubelet's
// reason and message, even one that fits.
func TestAdmitWhileShuttingDown(t *testing.T) {
	r := Admit(pod("a", "", "", 0), nil, Node{MaxPods: 110, ShuttingDown: true})
	if r.Admit || r.Reason != "NodeShutdown" || r.Message != "Pod was rejected as the node is shutting down." {
		t.Fatalf("got %+v, want NodeShutdown", r)
	}
}

// storagePod is a pod whose containers request (and, if limit is set,
// are limited to) the given ephemeral storage; init containers follow
// the "init:" and "side:" prefixes.
func storagePod(name string, requests ...string) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}}
	always := v1.ContainerRestartPolicyAlways
	for i, r := range requests {
		kind, q, _ := strings.Cut(r, ":")
		if q == "" {
			kind, q = "", kind
		}
		c := v1.Container{Name: fmt.Sprintf("c%d", i), Image: "i", Resources: v1.ResourceRequirements{
			Requests: v1.ResourceList{v1.ResourceEphemeralStorage: resource.MustParse(q)},
			Limits:   v1.ResourceList{v1.ResourceEphemeralStorage: resource.MustParse(q)},
		}}
		switch kind {
		case "init":
			p.Spec.InitContainers = append(p.Spec.InitContainers, c)
		case "side":
			c.RestartPolicy = &always
			p.Spec.InitContainers = append(p.Spec.InitContainers, c)
		default:
			p.Spec.Containers = append(p.Spec.Containers, c)
		}
	}
	return p
}

// Ephemeral storage is admitted as the scheduler's fit check counts it
// (the kubelet's predicate): requests against allocatable, init
// containers as their largest, sidecars beside the containers, the
// RuntimeClass's overhead on top; a shortfall is OutOfephemeral-storage
// with the kubelet's message in bytes, CPU and memory reported first.
func TestAdmitEphemeralStorage(t *testing.T) {
	node := Node{MaxPods: 110, Allocatable: v1.ResourceList{
		v1.ResourceCPU: resource.MustParse("2"), v1.ResourceMemory: resource.MustParse("1Gi"),
		v1.ResourceEphemeralStorage: resource.MustParse("100Mi")}}
	withOverhead := func(p *v1.Pod, q string) *v1.Pod {
		p.Spec.Overhead = v1.ResourceList{v1.ResourceEphemeralStorage: resource.MustParse(q)}
		return p
	}
	for _, tc := range []struct {
		name   string
		pod    *v1.Pod
		active []*v1.Pod
		node   *Node
		reason string
		msg    string
	}{
		{name: "fits", pod: storagePod("a", "60Mi"), active: []*v1.Pod{storagePod("b", "40Mi")}},
		{name: "one byte over", pod: storagePod("a", "60Mi"), active: []*v1.Pod{storagePod("b", "41943041")},
			reason: "OutOfephemeral-storage",
			msg:    "Node didn't have enough resource: ephemeral-storage, requested: 62914560, used: 41943041, capacity: 104857600"},
		{name: "alone too big", pod: storagePod("a", "101Mi"), reason: "OutOfephemeral-storage",
			msg: "Node didn't have enough resource: ephemeral-storage, requested: 105906176, used: 0, capacity: 104857600"},
		{name: "init is the larger", pod: storagePod("a", "init:101Mi", "10Mi"), reason: "OutOfephemeral-storage", msg: "requested: 105906176,"},
		{name: "init runs alone", pod: storagePod("a", "init:90Mi", "90Mi")},
		{name: "sidecar beside containers", pod: storagePod("a", "side:20Mi", "90Mi"), reason: "OutOfephemeral-storage", msg: "requested: 115343360,"},
		{name: "sidecar beside a later init", pod: storagePod("a", "side:20Mi", "init:90Mi", "1Mi"), reason: "OutOfephemeral-storage", msg: "requested: 115343360,"},
		{name: "overhead", pod: withOverhead(storagePod("a", "90Mi"), "20Mi"), reason: "OutOfephemeral-storage", msg: "requested: 115343360,"},
		{name: "active overhead is used", pod: storagePod("a", "50Mi"), active: []*v1.Pod{withOverhead(storagePod("b", "40Mi"), "20Mi")},
			reason: "OutOfephemeral-storage", msg: "used: 62914560,"},
		{name: "no request", pod: pod("a", "", "", 0), active: []*v1.Pod{storagePod("b", "100Mi")}},
		{name: "allocatable unknown", pod: storagePod("a", "1Ti"), node: &Node{MaxPods: 110}},
		{name: "memory first", pod: func() *v1.Pod {
			p := storagePod("a", "1Ti")
			p.Spec.Containers[0].Resources.Requests[v1.ResourceMemory] = resource.MustParse("2Gi")
			return p
		}(), reason: "OutOfmemory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := node
			if tc.node != nil {
				n = *tc.node
			}
			r := Admit(tc.pod, tc.active, n)
			if tc.reason == "" {
				if !r.Admit {
					t.Fatalf("rejected: %+v", r)
				}
				return
			}
			if r.Admit || r.Reason != tc.reason || !strings.Contains(r.Message, tc.msg) {
				t.Fatalf("got %+v, want reason %s message containing %q", r, tc.reason, tc.msg)
			}
		})
	}
}

// PodLimit aggregates limits as the kubelet's PodLimits: unset unless
// some container sets it, init containers as their largest, sidecars
// beside the containers, pod-level limits only for CPU and memory, the
// overhead only on a limit that is set.
func TestPodLimit(t *testing.T) {
	es := v1.ResourceEphemeralStorage
	for _, tc := range []struct {
		name string
		pod  *v1.Pod
		want string // "": not limited
	}{
		{"none", pod("a", "1", "1Gi", 0), ""},
		{"sum", storagePod("a", "10Mi", "20Mi"), "30Mi"},
		{"init larger", storagePod("a", "init:50Mi", "20Mi"), "50Mi"},
		{"sidecar", storagePod("a", "side:5Mi", "init:50Mi", "20Mi"), "55Mi"},
		{"one container limited", func() *v1.Pod {
			p := storagePod("a", "10Mi")
			p.Spec.Containers = append(p.Spec.Containers, v1.Container{Name: "free", Image: "i"})
			return p
		}(), "10Mi"},
		{"overhead on a limit", func() *v1.Pod {
			p := storagePod("a", "10Mi")
			p.Spec.Overhead = v1.ResourceList{es: resource.MustParse("1Mi")}
			return p
		}(), "11Mi"},
		{"overhead alone is no limit", func() *v1.Pod {
			p := pod("a", "", "", 0)
			p.Spec.Overhead = v1.ResourceList{es: resource.MustParse("1Mi")}
			return p
		}(), ""},
		{"pod-level ignored for storage", func() *v1.Pod {
			p := storagePod("a", "10Mi")
			p.Spec.Resources = &v1.ResourceRequirements{Limits: v1.ResourceList{es: resource.MustParse("1Gi")}}
			return p
		}(), "10Mi"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q, ok := PodLimit(tc.pod, es)
			if tc.want == "" {
				if ok {
					t.Fatalf("limited to %s, want no limit", q.String())
				}
				return
			}
			if want := resource.MustParse(tc.want); !ok || q.Cmp(want) != 0 {
				t.Fatalf("limit %s (set %v), want %s", q.String(), ok, tc.want)
			}
		})
	}
	// Pod-level CPU and memory limits replace the containers'.
	p := pod("a", "", "", 0)
	p.Spec.Containers[0].Resources.Limits = v1.ResourceList{v1.ResourceMemory: resource.MustParse("1Gi")}
	p.Spec.Resources = &v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceMemory: resource.MustParse("2Gi")}}
	if q, ok := PodLimit(p, v1.ResourceMemory); !ok || q.Cmp(resource.MustParse("2Gi")) != 0 {
		t.Errorf("pod-level memory limit: %s %v, want 2Gi", q.String(), ok)
	}
}

// Extended resources (the device plugins') are counted like CPU against
// allocatable, with the kubelet's OutOf<resource> reason; one the node
// does not have at all is not checked, as the kubelet drops it from the
// pod's requests before the check.
func TestAdmitExtendedResources(t *testing.T) {
	withGPU := func(p *v1.Pod, n string) *v1.Pod {
		p.Spec.Containers[0].Resources.Requests["example.com/gpu"] = resource.MustParse(n)
		p.Spec.Containers[0].Resources.Limits = v1.ResourceList{"example.com/gpu": resource.MustParse(n)}
		return p
	}
	node := Node{Allocatable: v1.ResourceList{v1.ResourceCPU: resource.MustParse("2"), "example.com/gpu": resource.MustParse("2")}}
	for _, tc := range []struct {
		name   string
		pod    *v1.Pod
		active []*v1.Pod
		node   Node
		reason string
		msg    string
	}{
		{"fits", withGPU(pod("a", "", "", 0), "1"), []*v1.Pod{withGPU(pod("b", "", "", 0), "1")}, node, "", ""},
		{"too many", withGPU(pod("a", "", "", 0), "2"), []*v1.Pod{withGPU(pod("b", "", "", 0), "1")}, node,
			"OutOfexample.com/gpu", "Node didn't have enough resource: example.com/gpu, requested: 2, used: 1, capacity: 2"},
		{"none healthy", withGPU(pod("a", "", "", 0), "1"), nil, Node{Allocatable: v1.ResourceList{"example.com/gpu": resource.MustParse("0")}},
			"OutOfexample.com/gpu", "requested: 1, used: 0, capacity: 0"},
		{"cpu first", withGPU(pod("a", "3", "", 0), "3"), nil, node, "OutOfcpu", ""},
		{"unknown to the node", withGPU(pod("a", "", "", 0), "5"), nil, Node{}, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Admit(tc.pod, tc.active, tc.node)
			if tc.reason == "" {
				if !r.Admit {
					t.Fatalf("rejected: %+v", r)
				}
				return
			}
			if r.Admit || r.Reason != tc.reason || !strings.Contains(r.Message, tc.msg) {
				t.Fatalf("got %+v, want reason %s message containing %q", r, tc.reason, tc.msg)
			}
		})
	}
}
