package apivalidation

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// staticPod is a pod as podsource hands it on: named <name>-<node>, in
// namespace default, with a content UID, the config annotations and
// spec.nodeName, and nodelet's own defaults.
func staticPod() *v1.Pod {
	grace := int64(30)
	return &v1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      "web-node1",
			Namespace: "default",
			UID:       "0123456789abcdef0123456789abcdef",
			Annotations: map[string]string{
				"kubernetes.io/config.hash":   "0123456789abcdef0123456789abcdef",
				"kubernetes.io/config.source": "file",
				"nodelet.io/config.file":      "/etc/kubernetes/manifests/web.yaml",
			},
		},
		Spec: v1.PodSpec{
			NodeName:                      "node1",
			RestartPolicy:                 v1.RestartPolicyAlways,
			DNSPolicy:                     v1.DNSClusterFirst,
			TerminationGracePeriodSeconds: &grace,
			SchedulerName:                 v1.DefaultSchedulerName,
			Containers: []v1.Container{{
				Name:                     "app",
				Image:                    "busybox:1.35",
				ImagePullPolicy:          v1.PullIfNotPresent,
				TerminationMessagePath:   v1.TerminationMessagePathDefault,
				TerminationMessagePolicy: v1.TerminationMessageReadFile,
			}},
		},
	}
}

func fileKeyEnv(name, volume, path, key string) v1.EnvVar {
	return v1.EnvVar{Name: name, ValueFrom: &v1.EnvVarSource{FileKeyRef: &v1.FileKeySelector{VolumeName: volume, Path: path, Key: key}}}
}

func emptyDir(name string) v1.Volume {
	return v1.Volume{Name: name, VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}
}

// TestPodRejects: each problem the hand-written checks of podsource let
// through is rejected with the API server's own field path and message.
func TestPodRejects(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*v1.Pod)
		want   string
	}{
		{
			"hostUsers false with hostNetwork",
			func(p *v1.Pod) { p.Spec.HostUsers, p.Spec.HostNetwork = ptr(false), true },
			"spec.hostNetwork: Forbidden: when `hostUsers` is false",
		},
		{
			"hostUsers false with hostPID",
			func(p *v1.Pod) { p.Spec.HostUsers, p.Spec.HostPID = ptr(false), true },
			"spec.HostPID: Forbidden: when `hostUsers` is false",
		},
		{
			"hostUsers false with hostIPC",
			func(p *v1.Pod) { p.Spec.HostUsers, p.Spec.HostIPC = ptr(false), true },
			"spec.HostIPC: Forbidden: when `hostUsers` is false",
		},
		{
			"duplicate volume names",
			func(p *v1.Pod) { p.Spec.Volumes = []v1.Volume{emptyDir("data"), emptyDir("data")} },
			`spec.volumes[1].name: Duplicate value: "data"`,
		},
		{
			"containerPort -5",
			func(p *v1.Pod) { p.Spec.Containers[0].Ports = []v1.ContainerPort{{ContainerPort: -5}} },
			"spec.containers[0].ports[0].containerPort: Invalid value: -5: must be between 1 and 65535, inclusive",
		},
		{
			"hostPort 99999",
			func(p *v1.Pod) {
				p.Spec.Containers[0].Ports = []v1.ContainerPort{{ContainerPort: 80, HostPort: 99999}}
			},
			"spec.containers[0].ports[0].hostPort: Invalid value: 99999: must be between 1 and 65535, inclusive",
		},
		{
			"protocol FOO",
			func(p *v1.Pod) {
				p.Spec.Containers[0].Ports = []v1.ContainerPort{{ContainerPort: 80, Protocol: "FOO"}}
			},
			`spec.containers[0].ports[0].protocol: Unsupported value: "FOO": supported values: "SCTP", "TCP", "UDP"`,
		},
		{
			"env name A=B",
			func(p *v1.Pod) { p.Spec.Containers[0].Env = []v1.EnvVar{{Name: "A=B", Value: "x"}} },
			`spec.containers[0].env[0].name: Invalid value: "A=B": a valid environment variable name must consist only of printable ASCII characters other than '='`,
		},
		{
			"negative request",
			func(p *v1.Pod) {
				p.Spec.Containers[0].Resources.Requests = v1.ResourceList{v1.ResourceCPU: resource.MustParse("-1")}
			},
			`spec.containers[0].resources.requests[cpu]: Invalid value: "-1": must be greater than or equal to 0`,
		},
		{
			// A limit without a request is also the request (v1 defaults),
			// so the API server reports both.
			"negative limit",
			func(p *v1.Pod) {
				p.Spec.Containers[0].Resources.Limits = v1.ResourceList{v1.ResourceMemory: resource.MustParse("-1Mi")}
			},
			`spec.containers[0].resources.limits[memory]: Invalid value: "-1Mi": must be greater than or equal to 0; ` +
				`spec.containers[0].resources.requests[memory]: Invalid value: "-1Mi": must be greater than or equal to 0`,
		},
		{
			"negative init container request",
			func(p *v1.Pod) {
				p.Spec.InitContainers = []v1.Container{{Name: "init", Image: "busybox:1.35", Resources: v1.ResourceRequirements{
					Requests: v1.ResourceList{v1.ResourceMemory: resource.MustParse("-5")}}}}
			},
			`spec.initContainers[0].resources.requests[memory]: Invalid value: "-5": must be greater than or equal to 0`,
		},
		{
			"restartPolicy bogus",
			func(p *v1.Pod) { p.Spec.RestartPolicy = "bogus" },
			`spec.restartPolicy: Unsupported value: "bogus": supported values: "Always", "OnFailure", "Never"`,
		},
		{
			"no containers",
			func(p *v1.Pod) { p.Spec.Containers = nil },
			"spec.containers: Required value",
		},
		{
			"volume mount of no volume",
			func(p *v1.Pod) {
				p.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "nope", MountPath: "/data"}}
			},
			`spec.containers[0].volumeMounts[0].name: Not found: "nope"`,
		},
		{
			"two sources in one volume",
			func(p *v1.Pod) {
				v := emptyDir("data")
				v.HostPath = &v1.HostPathVolumeSource{Path: "/srv"}
				p.Spec.Volumes = []v1.Volume{v}
			},
			"spec.volumes[0].hostPath: Forbidden: may not specify more than 1 volume type",
		},
		{
			"ephemeral containers on create",
			func(p *v1.Pod) {
				p.Spec.EphemeralContainers = []v1.EphemeralContainer{{EphemeralContainerCommon: v1.EphemeralContainerCommon{
					Name: "debug", Image: "busybox:1.35", TerminationMessagePolicy: v1.TerminationMessageReadFile, ImagePullPolicy: v1.PullIfNotPresent}}}
			},
			"spec.ephemeralContainers: Forbidden: cannot be set on create",
		},
		{
			"env file in a volume that is not an emptyDir",
			func(p *v1.Pod) {
				p.Spec.Volumes = []v1.Volume{{Name: "host", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: "/srv"}}}}
				p.Spec.Containers[0].Env = []v1.EnvVar{fileKeyEnv("X", "host", "x.env", "X")}
			},
			`spec.containers[0].env[0].valueFrom.fileKeyRef.volumeName: Invalid value: "host": referenced volume must be of type emptyDir`,
		},
		{
			"env file in a volume the pod does not have",
			func(p *v1.Pod) {
				p.Spec.Containers[0].Env = []v1.EnvVar{fileKeyEnv("X", "nope", "x.env", "X")}
			},
			`spec.containers[0].env[0].valueFrom.fileKeyRef.volumeName: Not found: "nope"`,
		},
		{
			"env file path climbing out of the volume",
			func(p *v1.Pod) {
				p.Spec.Volumes = []v1.Volume{emptyDir("config")}
				p.Spec.Containers[0].Env = []v1.EnvVar{fileKeyEnv("X", "config", "../x.env", "X")}
			},
			`spec.containers[0].env[0].valueFrom.fileKeyRef.path: Invalid value: "../x.env": must not contain '..'`,
		},
		{
			"two problems, each reported",
			func(p *v1.Pod) {
				p.Spec.RestartPolicy = "bogus"
				p.Spec.Containers[0].Ports = []v1.ContainerPort{{ContainerPort: -5}}
			},
			"spec.containers[0].ports[0].containerPort: Invalid value: -5: must be between 1 and 65535, inclusive; " +
				`spec.restartPolicy: Unsupported value: "bogus": supported values: "Always", "OnFailure", "Never"`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := staticPod()
			tc.mutate(p)
			err := Pod(p)
			if err == nil {
				t.Fatalf("Pod accepted it, want %q", tc.want)
			}
			if err.Error() != tc.want {
				t.Fatalf("Pod =\n  %v\nwant\n  %s", err, tc.want)
			}
			var verdict *Error
			if !errors.As(err, &verdict) || len(verdict.Errs) == 0 {
				t.Fatalf("error %T is not an *Error with field errors", err)
			}
		})
	}
}

// TestPodAcceptsWhatTheAPIServerAccepts: two things the issue lists as
// "accepted today" the API server accepts too, so nodelet must as well.
func TestPodAcceptsWhatTheAPIServerAccepts(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*v1.Pod)
	}{
		// The v1 defaults turn a negative grace period of a Pod into 1
		// (SetDefaults_Pod); validation never sees -100.
		{"grace period -100", func(p *v1.Pod) { p.Spec.TerminationGracePeriodSeconds = ptr(int64(-100)) }},
		// Only an empty or repeated mountPath is invalid; the kubelet makes a
		// relative one absolute when it builds the container's mounts.
		{"relative mountPath", func(p *v1.Pod) {
			p.Spec.Volumes = []v1.Volume{emptyDir("data")}
			p.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "data", MountPath: "data"}}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := staticPod()
			tc.mutate(p)
			if err := Pod(p); err != nil {
				t.Fatalf("Pod = %v, want the API server's verdict: accepted", err)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// TestPodAccepts: everyday static pods, with every volume type nodelet
// supports, are valid.
func TestPodAccepts(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*v1.Pod)
	}{
		{"minimal", func(*v1.Pod) {}},
		{"as decoded, before nodelet's defaults", func(p *v1.Pod) {
			p.Spec = v1.PodSpec{NodeName: "node1", Containers: []v1.Container{{Name: "app", Image: "busybox"}}}
		}},
		{"init containers and a sidecar", func(p *v1.Pod) {
			p.Spec.InitContainers = []v1.Container{
				{Name: "setup", Image: "busybox:1.35", Command: []string{"sh", "-c", "true"}},
				{Name: "proxy", Image: "busybox:1.35", RestartPolicy: ptr(v1.ContainerRestartPolicyAlways),
					ReadinessProbe: &v1.Probe{ProbeHandler: v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: intstr.FromInt32(15000)}}}},
			}
		}},
		{"probes and hooks", func(p *v1.Pod) {
			c := &p.Spec.Containers[0]
			c.Ports = []v1.ContainerPort{{Name: "http", ContainerPort: 8080}, {ContainerPort: 9090, Protocol: v1.ProtocolUDP}}
			c.LivenessProbe = &v1.Probe{ProbeHandler: v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString("http")}},
				InitialDelaySeconds: 3, PeriodSeconds: 5, FailureThreshold: 3}
			c.ReadinessProbe = &v1.Probe{ProbeHandler: v1.ProbeHandler{GRPC: &v1.GRPCAction{Port: 9000}}}
			c.StartupProbe = &v1.Probe{ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"cat", "/tmp/ready"}}},
				FailureThreshold: 30, TerminationGracePeriodSeconds: ptr(int64(5))}
			c.Lifecycle = &v1.Lifecycle{
				PostStart: &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"true"}}},
				PreStop:   &v1.LifecycleHandler{Sleep: &v1.SleepAction{Seconds: 2}},
			}
		}},
		{"every volume type nodelet supports", func(p *v1.Pod) {
			mode := int32(0o440)
			p.Spec.Volumes = []v1.Volume{
				emptyDir("scratch"),
				{Name: "tmpfs", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{
					Medium: v1.StorageMediumMemory, SizeLimit: ptr(resource.MustParse("64Mi"))}}},
				{Name: "host", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{
					Path: "/var/log", Type: ptr(v1.HostPathDirectory)}}},
				{Name: "config", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
					LocalObjectReference: v1.LocalObjectReference{Name: "web-config"},
					Items:                []v1.KeyToPath{{Key: "nginx.conf", Path: "conf/nginx.conf", Mode: &mode}}}}},
				{Name: "tls", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{
					SecretName: "web-tls", Optional: ptr(true)}}},
				{Name: "podinfo", VolumeSource: v1.VolumeSource{DownwardAPI: &v1.DownwardAPIVolumeSource{Items: []v1.DownwardAPIVolumeFile{
					{Path: "labels", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.labels"}},
					{Path: "cpu", ResourceFieldRef: &v1.ResourceFieldSelector{ContainerName: "app", Resource: "limits.cpu"}},
				}}}},
				{Name: "all", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{Sources: []v1.VolumeProjection{
					{ConfigMap: &v1.ConfigMapProjection{LocalObjectReference: v1.LocalObjectReference{Name: "web-config"}}},
					{Secret: &v1.SecretProjection{LocalObjectReference: v1.LocalObjectReference{Name: "web-tls"},
						Items: []v1.KeyToPath{{Key: "tls.crt", Path: "tls/tls.crt"}}}},
					{DownwardAPI: &v1.DownwardAPIProjection{Items: []v1.DownwardAPIVolumeFile{
						{Path: "name", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}},
				}}}},
			}
			p.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{
				{Name: "scratch", MountPath: "/scratch"},
				{Name: "tmpfs", MountPath: "/cache"},
				{Name: "host", MountPath: "/host/log", ReadOnly: true},
				{Name: "config", MountPath: "/etc/nginx", SubPath: "conf"},
				{Name: "tls", MountPath: "/etc/tls"},
				{Name: "podinfo", MountPath: "/etc/podinfo"},
				{Name: "all", MountPath: "/etc/all"},
			}
		}},
		{"own user namespace", func(p *v1.Pod) { p.Spec.HostUsers = ptr(false) }},
		{"hostNetwork with ports", func(p *v1.Pod) {
			p.Spec.HostNetwork = true
			p.Spec.DNSPolicy = v1.DNSClusterFirstWithHostNet
			// hostPort is left out: the v1 defaults set it to the containerPort.
			p.Spec.Containers[0].Ports = []v1.ContainerPort{{ContainerPort: 10250}, {ContainerPort: 53, HostPort: 53, Protocol: v1.ProtocolUDP}}
		}},
		{"resources, env and security context", func(p *v1.Pod) {
			c := &p.Spec.Containers[0]
			c.Resources = v1.ResourceRequirements{
				Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("100m"), v1.ResourceMemory: resource.MustParse("64Mi")},
				Limits:   v1.ResourceList{v1.ResourceCPU: resource.MustParse("1"), v1.ResourceMemory: resource.MustParse("128Mi")},
			}
			c.Env = []v1.EnvVar{
				{Name: "MODE", Value: "prod"},
				{Name: "POD_IP", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
				{Name: "PASSWORD", ValueFrom: &v1.EnvVarSource{SecretKeyRef: &v1.SecretKeySelector{
					LocalObjectReference: v1.LocalObjectReference{Name: "db"}, Key: "password"}}},
				{Name: "URL", Value: "http://$(POD_IP):8080"},
			}
			c.EnvFrom = []v1.EnvFromSource{{ConfigMapRef: &v1.ConfigMapEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "web-config"}}}}
			c.SecurityContext = &v1.SecurityContext{RunAsNonRoot: ptr(true), RunAsUser: ptr(int64(1000)),
				ReadOnlyRootFilesystem: ptr(true), AllowPrivilegeEscalation: ptr(false),
				Capabilities: &v1.Capabilities{Drop: []v1.Capability{"ALL"}}}
			p.Spec.SecurityContext = &v1.PodSecurityContext{FSGroup: ptr(int64(2000)),
				Sysctls: []v1.Sysctl{{Name: "net.ipv4.ip_unprivileged_port_start", Value: "0"}}}
		}},
		// The EnvFiles feature (beta, on by default in v1.37): the upstream
		// MirrorPod with EnvFiles spec's pod.
		{"env from a file in an emptyDir", func(p *v1.Pod) {
			p.Spec.Volumes = []v1.Volume{emptyDir("config")}
			p.Spec.InitContainers = []v1.Container{{Name: "setup-envfile", Image: "busybox:1.35",
				Command:      []string{"sh", "-c", `echo CONFIG_1=\'value1\' > /data/config.env`},
				VolumeMounts: []v1.VolumeMount{{Name: "config", MountPath: "/data"}}}}
			p.Spec.Containers[0].Env = []v1.EnvVar{fileKeyEnv("CONFIG_1", "config", "config.env", "CONFIG_1"),
				{Name: "OPT", ValueFrom: &v1.EnvVarSource{FileKeyRef: &v1.FileKeySelector{
					VolumeName: "config", Path: "sub/opt.env", Key: "OPT", Optional: ptr(true)}}}}
		}},
		{"restartPolicy Never, labels, hostname", func(p *v1.Pod) {
			p.Labels = map[string]string{"app": "web", "tier": "frontend"}
			p.Spec.RestartPolicy = v1.RestartPolicyNever
			p.Spec.Hostname = "web"
			p.Spec.Subdomain = "static"
			p.Spec.DNSConfig = &v1.PodDNSConfig{Nameservers: []string{"1.1.1.1"}, Options: []v1.PodDNSConfigOption{{Name: "ndots", Value: ptr("2")}}}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := staticPod()
			tc.mutate(p)
			if err := Pod(p); err != nil {
				t.Fatalf("Pod = %v, want it accepted", err)
			}
		})
	}
}

// TestPodDoesNotModify: defaults are applied to a copy; nodelet runs the pod
// it decoded.
func TestPodDoesNotModify(t *testing.T) {
	p := staticPod()
	p.Spec.Containers[0].Ports = []v1.ContainerPort{{ContainerPort: 80}}
	p.Spec.Containers[0].LivenessProbe = &v1.Probe{ProbeHandler: v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: intstr.FromInt32(80)}}}
	before := p.DeepCopy()
	if err := Pod(p); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(p, before) {
		t.Fatalf("Pod changed its argument:\n%s", diffJSON(t, before, p))
	}
}

func diffJSON(t *testing.T, a, b any) string {
	t.Helper()
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return "before " + string(ja) + "\nafter  " + string(jb)
}

// equalJSON compares two objects as the API would serialize them.
func equalJSON(a, b any) bool {
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	return errA == nil && errB == nil && string(ja) == string(jb)
}

// TestDefaultPod: the pod the API server (and the kubelet) would run.
func TestDefaultPod(t *testing.T) {
	p := staticPod()
	p.Spec.TerminationGracePeriodSeconds = ptr(int64(-100))
	p.Spec.HostNetwork = true
	p.Spec.Containers[0].Ports = []v1.ContainerPort{{ContainerPort: 8080}}
	p.Spec.Containers[0].Resources.Limits = v1.ResourceList{v1.ResourceMemory: resource.MustParse("64Mi")}
	DefaultPod(p)
	if g := *p.Spec.TerminationGracePeriodSeconds; g != 1 {
		t.Errorf("grace period = %d, want 1", g)
	}
	if port := p.Spec.Containers[0].Ports[0]; port.HostPort != 8080 || port.Protocol != v1.ProtocolTCP {
		t.Errorf("port = %+v, want hostPort 8080, protocol TCP", port)
	}
	if req := p.Spec.Containers[0].Resources.Requests[v1.ResourceMemory]; req.String() != "64Mi" {
		t.Errorf("memory request = %s, want the limit, 64Mi", req.String())
	}
}

func TestPodNil(t *testing.T) {
	if err := Pod(nil); err == nil {
		t.Fatal("Pod(nil) = nil")
	}
}

// TestErrorBounded: a hostile manifest cannot make an unbounded log line;
// every error stays in Errs.
func TestErrorBounded(t *testing.T) {
	p := staticPod()
	for i := 0; i < 200; i++ {
		p.Spec.Containers[0].Env = append(p.Spec.Containers[0].Env, v1.EnvVar{Name: strings.Repeat("=", 1+i) + strings.Repeat("é", 1000)})
	}
	err := Pod(p)
	var verdict *Error
	if !errors.As(err, &verdict) {
		t.Fatalf("Pod = %v, want an *Error", err)
	}
	if len(verdict.Errs) != 200 {
		t.Errorf("Errs has %d errors, want 200", len(verdict.Errs))
	}
	msg := err.Error()
	if !strings.HasSuffix(msg, "; and 180 more") {
		t.Errorf("message ends %q, want it to count the hidden errors", msg[max(0, len(msg)-40):])
	}
	if limit := maxErrorsShown*(maxErrorMessage+len("…; ")) + 100; len(msg) > limit {
		t.Errorf("message is %d bytes, want at most %d", len(msg), limit)
	}
	if !strings.Contains(msg, "…") || strings.ContainsRune(msg, '\uFFFD') {
		t.Errorf("long messages are not cut on a rune boundary with a mark")
	}
}

// TestErrorDeduplicates: the same message twice is shown once, as the API
// server's aggregate does.
func TestErrorDeduplicates(t *testing.T) {
	e := &Error{Errs: field.ErrorList{
		field.Required(field.NewPath("a"), ""),
		field.Required(field.NewPath("a"), ""),
		field.Required(field.NewPath("b"), ""),
	}}
	if got, want := e.Error(), "a: Required value; b: Required value"; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
}

// TestGuard: a panic in the upstream code is an error, not a crash.
func TestGuard(t *testing.T) {
	err := guard(func() error { panic("boom") })
	if !errors.Is(err, errPanicked) || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("guard = %v, want errPanicked with the panic value", err)
	}
}

// A privileged container is valid in a static pod, as the kubelet allows it.
func TestPrivilegedAllowed(t *testing.T) {
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p-node", Namespace: "default", UID: "u"},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c", Image: "busybox", ImagePullPolicy: v1.PullIfNotPresent,
			TerminationMessagePolicy: v1.TerminationMessageReadFile,
			SecurityContext:          &v1.SecurityContext{Privileged: ptr(true)}}},
			RestartPolicy: v1.RestartPolicyAlways, DNSPolicy: v1.DNSClusterFirst},
	}
	if err := Pod(pod); err != nil {
		t.Errorf("privileged pod refused: %v", err)
	}
}
