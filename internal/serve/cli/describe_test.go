package cli

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodelet/nodelet/internal/base/events"
	"github.com/nodelet/nodelet/internal/pipeline/podruntime"
)

// describedPod started 5 minutes before now: admitted at t0, its init
// container done 2s later, web started at 3s and restarted at 21s.
func describedPod() (v1.Pod, []events.Event) {
	t0 := now.Add(-5 * time.Minute)
	at := func(d time.Duration) metav1.Time { return metav1.NewTime(t0.Add(d)) }
	pod := v1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: "web-node1", Namespace: "default", UID: "uid-web",
			CreationTimestamp: at(0),
			Labels:            map[string]string{"app": "web", "tier": "front"},
			Annotations:       map[string]string{"kubernetes.io/config.source": "file"},
		},
		Spec: v1.PodSpec{
			NodeName: "node1",
			Priority: ptr(int32(0)),
			InitContainers: []v1.Container{{
				Name: "setup", Image: "busybox",
				Command:      []string{"sh", "-c", "echo hi > /data/index.html"},
				VolumeMounts: []v1.VolumeMount{{Name: "data", MountPath: "/data"}},
			}},
			Containers: []v1.Container{{
				Name: "web", Image: "nginx:1.27",
				Ports: []v1.ContainerPort{{ContainerPort: 80, Protocol: v1.ProtocolTCP}},
				Env: []v1.EnvVar{{Name: "MODE", Value: "prod"},
					{Name: "POD_NAME", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}}}},
				Resources: v1.ResourceRequirements{
					Limits:   v1.ResourceList{v1.ResourceMemory: resource.MustParse("64Mi")},
					Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("100m"), v1.ResourceMemory: resource.MustParse("64Mi")},
				},
				LivenessProbe: &v1.Probe{
					ProbeHandler:   v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"cat", "/tmp/healthy"}}},
					TimeoutSeconds: 1, PeriodSeconds: 1, SuccessThreshold: 1, FailureThreshold: 3,
				},
				ReadinessProbe: &v1.Probe{
					ProbeHandler:        v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(80)}},
					InitialDelaySeconds: 2, TimeoutSeconds: 1, PeriodSeconds: 10, SuccessThreshold: 1, FailureThreshold: 3,
				},
				VolumeMounts: []v1.VolumeMount{
					{Name: "data", MountPath: "/usr/share/nginx/html", ReadOnly: true},
					{Name: "config", MountPath: "/etc/nginx/conf.d/default.conf", SubPath: "default.conf"},
				},
			}},
			Volumes: []v1.Volume{
				{Name: "data", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
				{Name: "config", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
					LocalObjectReference: v1.LocalObjectReference{Name: "nginx"}}}},
			},
			Tolerations: []v1.Toleration{{Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoExecute}},
		},
		Status: v1.PodStatus{
			Phase: v1.PodRunning, HostIP: "192.168.1.10", PodIP: "10.88.0.5",
			PodIPs:    []v1.PodIP{{IP: "10.88.0.5"}},
			StartTime: ptr(at(0)),
			QOSClass:  v1.PodQOSBurstable,
			Conditions: []v1.PodCondition{
				{Type: v1.PodReadyToStartContainers, Status: v1.ConditionTrue, LastTransitionTime: at(time.Second)},
				{Type: v1.PodInitialized, Status: v1.ConditionTrue, LastTransitionTime: at(2 * time.Second)},
				{Type: v1.PodReady, Status: v1.ConditionTrue, LastTransitionTime: at(25 * time.Second)},
				{Type: v1.ContainersReady, Status: v1.ConditionTrue, LastTransitionTime: at(25 * time.Second)},
				{Type: v1.PodScheduled, Status: v1.ConditionTrue, LastTransitionTime: at(0)},
			},
			InitContainerStatuses: []v1.ContainerStatus{{
				Name: "setup", Image: "busybox", ImageID: "sha256:1111", ContainerID: "containerd://aaaa", Ready: true,
				State: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{
					Reason: "Completed", StartedAt: at(time.Second), FinishedAt: at(2 * time.Second)}},
			}},
			ContainerStatuses: []v1.ContainerStatus{{
				Name: "web", Image: "nginx:1.27", ImageID: "sha256:2222", ContainerID: "containerd://bbbb",
				Ready: true, Started: ptr(true), RestartCount: 1,
				State: v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: at(21 * time.Second)}},
				LastTerminationState: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{
					Reason: "Error", ExitCode: 137, StartedAt: at(3 * time.Second), FinishedAt: at(20 * time.Second)}},
			}},
		},
	}
	ev := func(typ, reason, msg string, count int, first, last time.Duration) events.Event {
		return events.Event{PodUID: "uid-web", Namespace: "default", Pod: "web-node1", Type: typ, Reason: reason,
			Message: msg, Count: count, FirstTime: t0.Add(first), LastTime: t0.Add(last)}
	}
	n, w := v1.EventTypeNormal, v1.EventTypeWarning
	evs := []events.Event{
		ev(n, "Admitted", "Pod admitted", 1, 0, 0),
		ev(n, "SandboxReady", "Pod sandbox is ready, IP 10.88.0.5", 1, 146*time.Millisecond, 146*time.Millisecond),
		ev(n, "Pulled", `Container image "busybox" already present on machine`, 1, 300*time.Millisecond, 300*time.Millisecond),
		ev(n, "Created", "Created container: setup", 1, 1200*time.Millisecond, 1200*time.Millisecond),
		ev(n, "Started", "Started container setup", 1, 1300*time.Millisecond, 1300*time.Millisecond),
		ev(n, "InitContainerCompleted", "Init container setup completed", 1, 2004*time.Millisecond, 2004*time.Millisecond),
		ev(n, "Pulled", `Successfully pulled image "nginx:1.27"`, 1, 2500*time.Millisecond, 2500*time.Millisecond),
		ev(n, "PodReady", "Pod is ready", 1, 5012*time.Millisecond, 5012*time.Millisecond),
		ev(w, "Unhealthy", "Liveness probe failed: cat: can't open '/tmp/healthy'", 3, 18*time.Second, 20*time.Second),
		ev(n, "Killing", "Container web failed liveness probe, will be restarted", 1, 20*time.Second, 20*time.Second),
		// Folded: the first time is early, the last after the restart.
		ev(n, "Created", "Created container: web", 2, 2700*time.Millisecond, 20500*time.Millisecond),
		ev(n, "Started", "Started container web", 2, 3*time.Second, 21*time.Second),
		// Another pod's event is left out.
		{PodUID: "uid-other", Namespace: "default", Pod: "other", Type: n, Reason: "Started", Message: "nope",
			Count: 1, FirstTime: t0, LastTime: t0},
		// So is an event about the node.
		{Node: "node1", Type: w, Reason: "FailedToLoadManifest", Message: "/m/web.yaml: nope", Count: 1, FirstTime: t0, LastTime: t0},
	}
	return pod, evs
}

func TestDescribe(t *testing.T) {
	pod, evs := describedPod()
	var out bytes.Buffer
	if err := Describe(&out, pod, evs, now); err != nil {
		t.Fatal(err)
	}
	golden(t, "describe.golden", out.String())
	for i, line := range strings.Split(out.String(), "\n") {
		if strings.TrimRight(line, " ") != line {
			t.Errorf("line %d has trailing spaces: %q", i+1, line)
		}
	}
}

// The timeline is drawn from the events nodelet records at each step, to
// the millisecond; a pod without them (found running after a restart) has
// its status's whole seconds, never the two mixed.
func TestTimeline(t *testing.T) {
	pod, evs := describedPod()
	t0 := pod.Status.StartTime.Time
	noAdmitted := slices.DeleteFunc(slices.Clone(evs), func(e events.Event) bool { return e.Reason == "Admitted" })
	pending := v1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "uid-web"}}
	for _, tc := range []struct {
		name string
		pod  v1.Pod
		evs  []events.Event
		want []string
	}{{
		name: "recorded steps",
		pod:  pod, evs: evs,
		want: []string{
			"0s admitted",
			"146ms sandbox ready",
			"300ms image pulled busybox",
			"1.3s started init container setup",
			"2.004s init container setup done",
			"2.5s image pulled nginx:1.27",
			"3s started web", // its first start: the restart at 21s is no start-up step
			"5.012s ready",
		},
	}, {
		name: "no Admitted event: the status alone",
		pod:  pod, evs: noAdmitted,
		want: []string{
			"0s admitted",
			"1s sandbox ready",
			"2s init container setup done",
			"21s started web",
			"25s ready",
		},
	}, {
		name: "pending",
		pod:  pending, evs: evs[:3],
		want: []string{"0s admitted", "146ms sandbox ready", "300ms image pulled busybox"},
	}, {
		name: "nothing known",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, s := range timeline(&tc.pod, podEvents(&tc.pod, tc.evs)) {
				got = append(got, s.at.Sub(t0).String()+" "+s.what)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("timeline:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

// The reasons the timeline looks for are those podruntime records.
func TestTimelineReasons(t *testing.T) {
	for got, want := range map[string]string{
		reasonAdmitted:               podruntime.ReasonAdmitted,
		reasonSandboxReady:           podruntime.ReasonSandboxReady,
		reasonInitContainerCompleted: podruntime.ReasonInitContainerCompleted,
		reasonPodReady:               podruntime.ReasonPodReady,
	} {
		if got != want {
			t.Errorf("cli looks for %q, podruntime records %q", got, want)
		}
	}
}

func TestSeconds(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0:                       "0s",
		300 * time.Millisecond:  "0.3s",
		146 * time.Millisecond:  "0.146s",
		1249 * time.Millisecond: "1.249s",
		1050*time.Millisecond + 400*time.Microsecond: "1.05s",
		12 * time.Second:                      "12s",
		2*time.Minute + 5500*time.Millisecond: "2m5.5s",
		time.Hour + 2*time.Minute:             "1h2m0s",
		-time.Second:                          "-1s",
		-146 * time.Millisecond:               "-0.146s",
	} {
		if got := seconds(d); got != want {
			t.Errorf("seconds(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestProbeString(t *testing.T) {
	for _, tc := range []struct {
		h    v1.ProbeHandler
		want string
	}{
		{v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"cat", "/tmp/healthy"}}}, "exec [cat /tmp/healthy]"},
		{v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Scheme: v1.URISchemeHTTPS, Path: "/z", Port: intstr.FromString("http")}}, "http-get https://:http/z"},
		{v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: intstr.FromInt32(5432)}}, "tcp-socket :5432"},
		{v1.ProbeHandler{GRPC: &v1.GRPCAction{Port: 9000}}, "grpc <pod>:9000"},
	} {
		p := &v1.Probe{ProbeHandler: tc.h, TimeoutSeconds: 1, PeriodSeconds: 1, SuccessThreshold: 1, FailureThreshold: 3}
		want := tc.want + " delay=0s timeout=1s period=1s #success=1 #failure=3"
		if got := probeString(p); got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
}

// A fresh pod, as `nodelet describe pod` gets it over the API: its status's
// times cut to whole seconds by JSON, its events to the nanosecond. The
// timeline shows every step in the order it happened, to the millisecond.
func TestTimelineFreshPod(t *testing.T) {
	admitted := time.Date(2026, 3, 1, 12, 0, 0, 700_000_000, time.UTC)
	at := func(ms int) time.Time { return admitted.Add(time.Duration(ms) * time.Millisecond) }
	pod := v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-node1", Namespace: "default", UID: "uid-web"},
		Spec:       v1.PodSpec{Containers: []v1.Container{{Name: "web", Image: "busybox"}}},
		Status: v1.PodStatus{
			Phase:     v1.PodRunning,
			StartTime: ptr(metav1.NewTime(at(0))),
			Conditions: []v1.PodCondition{
				{Type: v1.PodReadyToStartContainers, Status: v1.ConditionTrue, LastTransitionTime: metav1.NewTime(at(146))},
				{Type: v1.PodReady, Status: v1.ConditionTrue, LastTransitionTime: metav1.NewTime(at(1010))},
			},
			ContainerStatuses: []v1.ContainerStatus{{Name: "web", Ready: true,
				State: v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: metav1.NewTime(at(1000))}}}},
		},
	}
	ev := func(reason, msg string, ms int) events.Event {
		return events.Event{PodUID: pod.UID, Namespace: "default", Pod: pod.Name, Type: v1.EventTypeNormal,
			Reason: reason, Message: msg, Count: 1, FirstTime: at(ms), LastTime: at(ms)}
	}
	evs := []events.Event{
		ev("Admitted", "Pod admitted", 0),
		ev("SandboxReady", "Pod sandbox is ready, IP 10.88.0.5", 146),
		ev("Pulled", `Successfully pulled image "busybox"`, 946),
		ev("Created", "Created container web", 980),
		ev("Started", "Started container web", 1000),
		ev("PodReady", "Pod is ready", 1010),
	}
	// Over the API, as the CLI gets them.
	b, err := json.Marshal(struct {
		Pod    v1.Pod
		Events []events.Event
	}{pod, evs})
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Pod    v1.Pod
		Events []events.Event
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := Describe(&out, got.Pod, got.Events, at(60_000)); err != nil {
		t.Fatal(err)
	}
	_, block, _ := strings.Cut(out.String(), "Timeline:\n")
	block, _, _ = strings.Cut(block, "Events:")
	want := `  0s       admitted
  +0.146s  sandbox ready         (0.146s)
  +0.946s  image pulled busybox  (0.8s)
  +1s      started web           (0.054s)
  +1.01s   ready                 (0.01s)
`
	if block != want {
		t.Errorf("timeline:\n%s\nwant:\n%s", block, want)
	}
}
