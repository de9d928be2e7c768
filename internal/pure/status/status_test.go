package status

import (
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/internal/pure/observed"
	"github.com/nodelet/nodelet/internal/pure/podspec"
)

func TestTerminatedReasons(t *testing.T) {
	for _, tc := range []struct {
		code   int32
		reason string
		want   string
	}{
		{0, "", "Completed"},
		{1, "", "Error"},
		{137, "OOMKilled", "OOMKilled"},
		{0, "Completed", "Completed"},
		{2, "Error", "Error"},
	} {
		pod := newPod(policy(v1.RestartPolicyNever), app("a"))
		s := Generate(facts(pod, obs(exited("a", "ca", 1, tc.code, tc.reason))))
		term := s.ContainerStatuses[0].State.Terminated
		if term == nil || term.Reason != tc.want || term.ExitCode != tc.code || term.ContainerID != "containerd://ca" {
			t.Errorf("exit %d reason %q: got %+v, want reason %q", tc.code, tc.reason, term, tc.want)
		}
	}
}

func TestRestartCountFromNewestInstance(t *testing.T) {
	pod := newPod(app("a"))
	s := Generate(facts(pod, obs(restarts(4, exited("a", "c4", 1, 1, "")), restarts(5, running("a", "c5", 30)))))
	cs := s.ContainerStatuses[0]
	if cs.RestartCount != 5 || cs.ContainerID != "containerd://c5" {
		t.Errorf("got restartCount %d id %s, want 5 containerd://c5", cs.RestartCount, cs.ContainerID)
	}
	if cs.Image != "a:1" || cs.ImageID != "sha256:a" {
		t.Errorf("got image %q imageID %q", cs.Image, cs.ImageID)
	}
}

func TestReadyToStartContainers(t *testing.T) {
	ready := sandbox()
	notReady := sandbox()
	notReady.State = observed.SandboxNotReady
	hostNet := sandbox()
	hostNet.NetworkNode = true
	for _, tc := range []struct {
		name        string
		hostNetwork bool
		o           *observed.PodStatus
		want        v1.ConditionStatus
	}{
		{"nothing", false, nil, v1.ConditionFalse},
		{"no sandbox", false, &observed.PodStatus{}, v1.ConditionFalse},
		{"ready with IP", false, &observed.PodStatus{Sandboxes: []observed.Sandbox{ready}, IPs: []string{"10.0.0.2"}}, v1.ConditionTrue},
		{"ready without IP", false, &observed.PodStatus{Sandboxes: []observed.Sandbox{ready}}, v1.ConditionFalse},
		{"newest not ready", false, &observed.PodStatus{Sandboxes: []observed.Sandbox{notReady, ready}, IPs: []string{"10.0.0.2"}}, v1.ConditionFalse},
		{"two ready", false, &observed.PodStatus{Sandboxes: []observed.Sandbox{ready, ready}, IPs: []string{"10.0.0.2"}}, v1.ConditionFalse},
		{"host network", true, &observed.PodStatus{Sandboxes: []observed.Sandbox{hostNet}}, v1.ConditionTrue},
		{"host network wanted, pod network sandbox", true, &observed.PodStatus{Sandboxes: []observed.Sandbox{ready}, IPs: []string{"10.0.0.2"}}, v1.ConditionFalse},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := newPod(app("a"))
			pod.Spec.HostNetwork = tc.hostNetwork
			s := Generate(facts(pod, tc.o))
			if got := s.Conditions[0]; got.Type != v1.PodReadyToStartContainers || got.Status != tc.want {
				t.Errorf("got %s=%s, want %s", got.Type, got.Status, tc.want)
			}
		})
	}
}

func TestLastTransitionTime(t *testing.T) {
	pod := newPod(app("a"))
	first := Generate(facts(pod, nil))
	for _, c := range first.Conditions {
		if !c.LastTransitionTime.Time.Equal(now) {
			t.Fatalf("%s: LastTransitionTime %v, want %v", c.Type, c.LastTransitionTime, now)
		}
	}

	// An hour later the container runs: the conditions that changed move,
	// the others keep their time.
	f := facts(pod, obs(running("a", "ca", 1)))
	f.Now = now.Add(time.Hour)
	f.Previous = &first
	second := Generate(f)
	want := map[v1.PodConditionType]time.Time{
		v1.PodReadyToStartContainers: f.Now,
		v1.PodInitialized:            now,
		v1.PodReady:                  f.Now,
		v1.ContainersReady:           f.Now,
		v1.PodScheduled:              now,
	}
	for _, c := range second.Conditions {
		if !c.LastTransitionTime.Time.Equal(want[c.Type]) {
			t.Errorf("%s: LastTransitionTime %v, want %v", c.Type, c.LastTransitionTime, want[c.Type])
		}
	}
	if !second.StartTime.Time.Equal(now) {
		t.Errorf("StartTime %v, want kept %v", second.StartTime, now)
	}
}

func TestTimesAreNormalized(t *testing.T) {
	f := facts(newPod(app("a")), obs(running("a", "ca", 1)))
	f.Now = now.Add(1500 * time.Millisecond).In(time.FixedZone("X", 3600))
	f.Observed.Containers[0].StartedAt = at(2).Add(300 * time.Millisecond)
	s := Generate(f)
	if got, want := s.StartTime.Time, now.Add(time.Second); got != want {
		t.Errorf("StartTime %v, want %v", got, want)
	}
	if got, want := s.ContainerStatuses[0].State.Running.StartedAt.Time, at(2); got != want {
		t.Errorf("StartedAt %v, want %v", got, want)
	}
}

func TestIPsAndHost(t *testing.T) {
	pod := newPod(app("a"))
	o := obs(running("a", "ca", 1))
	o.IPs = []string{"fd00::5", "10.88.0.5", "10.88.0.6"}
	s := Generate(facts(pod, o))
	if s.PodIP != "10.88.0.5" || !reflect.DeepEqual(s.PodIPs, []v1.PodIP{{IP: "10.88.0.5"}, {IP: "fd00::5"}}) {
		t.Errorf("pod IPs %q %v", s.PodIP, s.PodIPs)
	}
	if s.HostIP != "192.168.1.10" || !reflect.DeepEqual(s.HostIPs, []v1.HostIP{{IP: "192.168.1.10"}}) {
		t.Errorf("host IPs %q %v", s.HostIP, s.HostIPs)
	}

	pod.Spec.HostNetwork = true
	o.IPs = nil
	s = Generate(facts(pod, o))
	if s.PodIP != "192.168.1.10" || !reflect.DeepEqual(s.PodIPs, []v1.PodIP{{IP: "192.168.1.10"}}) {
		t.Errorf("host network pod IPs %q %v", s.PodIP, s.PodIPs)
	}
}

func TestRuntimeName(t *testing.T) {
	f := facts(newPod(app("a")), obs(running("a", "ca", 1)))
	f.RuntimeName = "cri-o"
	if got := Generate(f).ContainerStatuses[0].ContainerID; got != "cri-o://ca" {
		t.Errorf("ContainerID %q", got)
	}
}

func TestRejected(t *testing.T) {
	pod := newPod(app("a"))
	pod.Spec.Containers[0].Resources.Requests = v1.ResourceList{v1.ResourceCPU: resource.MustParse("100m")}
	f := facts(pod, nil)
	f.Rejected = &Rejection{Reason: "OutOfcpu", Message: "Node didn't have enough resource: cpu, requested: 100, used: 3950, capacity: 4000"}
	got := Generate(f)
	start := metav1.NewTime(now)
	want := v1.PodStatus{
		Phase:     v1.PodFailed,
		Reason:    "OutOfcpu",
		Message:   "Pod was rejected: Node didn't have enough resource: cpu, requested: 100, used: 3950, capacity: 4000",
		QOSClass:  v1.PodQOSBurstable,
		StartTime: &start,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
}

func TestQOSClassInStatus(t *testing.T) {
	if got := Generate(facts(newPod(app("a")), nil)).QOSClass; got != v1.PodQOSBestEffort {
		t.Errorf("QOSClass %s", got)
	}
}

func TestPreviousNotModified(t *testing.T) {
	prev := Generate(facts(newPod(app("a")), obs(exited("a", "ca", 1, 1, ""))))
	keep := prev.DeepCopy()
	f := facts(newPod(app("a")), obs(exited("a", "ca", 1, 1, "")))
	f.Previous = &prev
	f.Waiting = waiting("a", "CrashLoopBackOff", "x")
	Generate(f)
	if !reflect.DeepEqual(&prev, keep) {
		t.Errorf("Previous was modified")
	}
}

func TestUnknownRuntimeState(t *testing.T) {
	c := running("a", "ca", 1)
	c.State = observed.ContainerUnknown
	pod := newPod(app("a"))

	// Never seen running: waiting.
	s := Generate(facts(pod, obs(c)))
	if w := s.ContainerStatuses[0].State.Waiting; w == nil || w.Reason != "" {
		t.Errorf("unknown, not running before: got %+v, want empty waiting", s.ContainerStatuses[0].State)
	}

	// Running before: terminated with unknown status, one more restart.
	f := facts(pod, obs(c))
	f.Previous = &v1.PodStatus{ContainerStatuses: []v1.ContainerStatus{{
		Name: "a", RestartCount: 1, State: v1.ContainerState{Running: &v1.ContainerStateRunning{}},
	}}}
	cs := Generate(f).ContainerStatuses[0]
	if term := cs.State.Terminated; term == nil || term.Reason != ReasonContainerStatusUnknown || term.ExitCode != 137 || cs.RestartCount != 2 {
		t.Errorf("unknown, running before: got %+v restarts %d", cs.State, cs.RestartCount)
	}
}

func TestDeletedPodShowsNoWaitingReason(t *testing.T) {
	pod := newPod(app("a"))
	pod.DeletionTimestamp = &metav1.Time{Time: now}
	f := facts(pod, obs(exited("a", "ca", 1, 1, "")))
	f.Waiting = waiting("a", "CrashLoopBackOff", "x")
	if st := Generate(f).ContainerStatuses[0].State; st.Terminated == nil {
		t.Errorf("deleted pod: got %+v, want terminated", st)
	}
}

func TestAPITerminalPhaseSticks(t *testing.T) {
	pod := newPod(app("a"))
	pod.Status.Phase = v1.PodFailed
	if got := Generate(facts(pod, obs(running("a", "ca", 1)))).Phase; got != v1.PodFailed {
		t.Errorf("phase %s, want Failed", got)
	}
}

// A pod stopped for good (deleted, evicted) is not restarted: once no
// container runs, its phase is terminal even under restartPolicy Always,
// Succeeded only if every container exited 0.
func TestTerminalPodPhase(t *testing.T) {
	for _, tc := range []struct {
		codes    []int32
		terminal bool
		want     v1.PodPhase
	}{
		{[]int32{0, 0}, false, v1.PodRunning},
		{[]int32{0, 0}, true, v1.PodSucceeded},
		{[]int32{0, 137}, true, v1.PodFailed},
	} {
		pod := newPod(app("a", "b"))
		f := facts(pod, obs(exited("a", "ca", 1, tc.codes[0], ""), exited("b", "cb", 1, tc.codes[1], "")))
		f.Terminal = tc.terminal
		if got := Generate(f).Phase; got != tc.want {
			t.Errorf("exit codes %v, terminal %v: phase %s, want %s", tc.codes, tc.terminal, got, tc.want)
		}
	}
	// A static pod stopped for good keeps no terminal phase (as upstream,
	// #116484): the same manifest restored is the same UID, run again.
	for _, code := range []int32{0, 137} {
		pod := newPod(app("a"))
		pod.Annotations = map[string]string{podspec.AnnotationConfigSource: "file"}
		f := facts(pod, obs(exited("a", "ca", 1, code, "")))
		f.Terminal = true
		if got := Generate(f).Phase; got != v1.PodRunning {
			t.Errorf("static pod stopped with exit code %d: phase %s, want Running", code, got)
		}
	}
	// Still running: not terminal yet.
	f := facts(newPod(app("a")), obs(running("a", "ca", 1)))
	f.Terminal = true
	if got := Generate(f).Phase; got != v1.PodRunning {
		t.Errorf("a container running: phase %s, want Running", got)
	}
}

func TestReadinessGates(t *testing.T) {
	gate := func(st v1.ConditionStatus) v1.PodCondition {
		return v1.PodCondition{Type: "example.com/gate", Status: st}
	}
	for _, tc := range []struct {
		name    string
		conds   []v1.PodCondition
		want    v1.ConditionStatus
		message string
	}{
		{"condition missing", nil, v1.ConditionFalse, `corresponding condition of pod readiness gate "example.com/gate" does not exist.`},
		{"condition false", []v1.PodCondition{gate(v1.ConditionFalse)}, v1.ConditionFalse, `the status of pod readiness gate "example.com/gate" is not "True", but False`},
		{"condition true", []v1.PodCondition{gate(v1.ConditionTrue)}, v1.ConditionTrue, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := newPod(app("a"))
			pod.Spec.ReadinessGates = []v1.PodReadinessGate{{ConditionType: "example.com/gate"}}
			pod.Status.Conditions = tc.conds
			s := Generate(facts(pod, obs(running("a", "ca", 1))))
			var ready, containers *v1.PodCondition
			for i := range s.Conditions {
				switch s.Conditions[i].Type {
				case v1.PodReady:
					ready = &s.Conditions[i]
				case v1.ContainersReady:
					containers = &s.Conditions[i]
				}
			}
			if containers == nil || containers.Status != v1.ConditionTrue {
				t.Fatalf("ContainersReady %+v, want True", containers)
			}
			if ready == nil || ready.Status != tc.want || ready.Message != tc.message {
				t.Errorf("Ready %+v, want %s with message %q", ready, tc.want, tc.message)
			}
		})
	}
}

// A pod failed for its deadline whose containers then exit 0 stays Failed
// with its reason: a terminal phase never changes, not to the other one.
func TestTerminalPhaseIsFinal(t *testing.T) {
	pod := newPod(app("a"))
	f := facts(pod, obs(exited("a", "ca", 1, 0, "")))
	f.Terminal = true
	f.Previous = &v1.PodStatus{Phase: v1.PodFailed, Reason: "DeadlineExceeded", Message: "Pod was active on the node longer than the specified deadline"}
	s := Generate(f)
	if s.Phase != v1.PodFailed || s.Reason != "DeadlineExceeded" {
		t.Errorf("phase %s reason %q, want Failed DeadlineExceeded", s.Phase, s.Reason)
	}
}

// A finished pod whose sandbox is stopped keeps the IPs it had.
func TestFinishedPodKeepsIPs(t *testing.T) {
	pod := newPod(app("a"))
	pod.Spec.RestartPolicy = v1.RestartPolicyNever
	f := facts(pod, obs(exited("a", "ca", 1, 42, "")))
	f.Observed.IPs = nil // the sandbox is stopped
	f.Previous = &v1.PodStatus{Phase: v1.PodRunning, PodIP: "10.0.0.7", PodIPs: []v1.PodIP{{IP: "10.0.0.7"}}}
	s := Generate(f)
	if s.Phase != v1.PodFailed || s.PodIP != "10.0.0.7" || len(s.PodIPs) != 1 {
		t.Errorf("phase %s podIP %q podIPs %v, want Failed with 10.0.0.7", s.Phase, s.PodIP, s.PodIPs)
	}
	// Running, a sandbox lost: no IP until the new one has one.
	pod.Spec.RestartPolicy = v1.RestartPolicyAlways
	f = facts(pod, obs(exited("a", "ca", 1, 42, "")))
	f.Observed.IPs = nil
	f.Previous = &v1.PodStatus{Phase: v1.PodRunning, PodIP: "10.0.0.7", PodIPs: []v1.PodIP{{IP: "10.0.0.7"}}}
	if s := Generate(f); s.PodIP != "" {
		t.Errorf("running pod without a ready sandbox: podIP %q, want none", s.PodIP)
	}
}

// A pod stopped for good with nothing running is terminal: a container
// that never ran is terminated with an unknown status and the phase is
// Failed (the kubelet's TerminatePod), but a static pod keeps its phase.
func TestTerminatedPodNeverRan(t *testing.T) {
	pod := newPod(app("a"))
	f := facts(pod, &observed.PodStatus{})
	f.Terminal = true
	s := Generate(f)
	if s.Phase != v1.PodFailed {
		t.Errorf("phase %s, want Failed", s.Phase)
	}
	if term := s.ContainerStatuses[0].State.Terminated; term == nil || term.Reason != ReasonContainerStatusUnknown || term.ExitCode != 137 {
		t.Errorf("container state %+v, want terminated ContainerStatusUnknown 137", s.ContainerStatuses[0].State)
	}
	for _, c := range s.Conditions {
		if c.Type == v1.PodInitialized && c.Status != v1.ConditionTrue {
			t.Errorf("Initialized %+v (no init containers: true)", c)
		}
	}
	// An init container that failed leaves the pod not initialized, though
	// its app container is reported terminated now.
	withInit := newPod(app("a"))
	withInit.Spec.RestartPolicy = v1.RestartPolicyNever
	withInit.Spec.InitContainers = []v1.Container{{Name: "init", Image: "i"}}
	f = facts(withInit, obs(exited("init", "ci", 1, 1, "")))
	f.Terminal = true
	s = Generate(f)
	for _, c := range s.Conditions {
		if c.Type == v1.PodInitialized && (c.Status != v1.ConditionFalse || c.Reason != ReasonContainersNotInitialized) {
			t.Errorf("Initialized %+v, want False ContainersNotInitialized", c)
		}
	}
	// The pod never initialized: its app container stays waiting.
	if s.ContainerStatuses[0].State.Waiting == nil {
		t.Errorf("app container %+v, want waiting", s.ContainerStatuses[0].State)
	}
	static := newPod(app("a"))
	static.Annotations = map[string]string{"kubernetes.io/config.source": "file"}
	f = facts(static, &observed.PodStatus{})
	f.Terminal = true
	if s := Generate(f); s.Phase != v1.PodPending {
		t.Errorf("static pod phase %s, want Pending", s.Phase)
	}
}

// The pod's terminated messages share 12 KiB, as the kubelet's status
// manager cuts them: 4 KiB each for three containers, in the current and
// the last state; a cut never splits a UTF-8 sequence.
func TestTerminatedMessagesBounded(t *testing.T) {
	long := strings.Repeat("m", 5000)
	withMessage := func(c observed.Container, msg string) observed.Container {
		c.Message = msg
		return c
	}
	pod := newPod(policy(v1.RestartPolicyAlways), initc("i"), app("a", "b"))
	s := Generate(facts(pod, obs(
		withMessage(exited("i", "c0", 1, 0, ""), long),
		withMessage(exited("a", "c1", 2, 1, ""), long),
		withMessage(exited("a", "c2", 10, 1, ""), "short"),
		withMessage(exited("b", "c3", 3, 1, ""), strings.Repeat("é", 3000)),
	)))
	if got := len(s.InitContainerStatuses[0].State.Terminated.Message); got != 4096 {
		t.Errorf("init message of %d bytes, want 4096", got)
	}
	a := s.ContainerStatuses[0]
	if a.State.Terminated.Message != "short" || len(a.LastTerminationState.Terminated.Message) != 4096 {
		t.Errorf("a: message %q, last of %d bytes", a.State.Terminated.Message, len(a.LastTerminationState.Terminated.Message))
	}
	b := s.ContainerStatuses[1].State.Terminated.Message
	if len(b) != 4096 || !utf8.ValidString(b) {
		t.Errorf("b: %d bytes, valid UTF-8 %v", len(b), utf8.ValidString(b))
	}
	// With one container, the whole 12 KiB; a 2-byte rune cut in its middle
	// is dropped.
	s = Generate(facts(newPod(app("a")), obs(withMessage(exited("a", "c1", 2, 1, ""), "x"+strings.Repeat("é", 7000)))))
	if got := s.ContainerStatuses[0].State.Terminated.Message; len(got) != 12<<10-1 || !utf8.ValidString(got) {
		t.Errorf("message of %d bytes, valid UTF-8 %v", len(got), utf8.ValidString(got))
	}
}

func TestCutMessage(t *testing.T) {
	for _, tc := range []struct {
		in    string
		limit int
		want  string
	}{
		{"hello", 10, "hello"},
		{"hello", 5, "hello"},
		{"hello", 3, "hel"},
		{"aé", 2, "a"},
		{"a€b", 3, "a"},
		{"a€b", 4, "a€"},
		{"€", 0, ""},
	} {
		if got := cutMessage(tc.in, tc.limit); got != tc.want {
			t.Errorf("cutMessage(%q, %d) = %q, want %q", tc.in, tc.limit, got, tc.want)
		}
	}
}

// A static pod stopped for good is not given a terminal phase by it, as
// the kubelet's getPhase leaves static pods (upstream #116484).
func TestStoppedStaticPodPhase(t *testing.T) {
	pod := newPod(app("a"))
	pod.Annotations = map[string]string{"kubernetes.io/config.source": "file"}
	f := facts(pod, obs(exited("a", "ca", 1, 0, "")))
	f.Terminal = true
	if got := Generate(f).Phase; got != v1.PodRunning {
		t.Errorf("phase %s, want Running (restartPolicy Always, static)", got)
	}
}

// Every container status lists the spec's volumeMounts as resolved with
// the runtime's RRO support, whether an instance exists or not (init,
// app and ephemeral containers alike).
func TestVolumeMountStatuses(t *testing.T) {
	rro := v1.RecursiveReadOnlyIfPossible
	mounts := []v1.VolumeMount{{Name: "mnt", MountPath: "/rro", ReadOnly: true, RecursiveReadOnly: &rro}, {Name: "mnt", MountPath: "/rw"}}
	pod := newPod(app("a"), app("b"))
	pod.Spec.Containers[0].VolumeMounts = mounts
	pod.Spec.Containers[1].VolumeMounts = mounts
	for _, supported := range []bool{true, false} {
		f := facts(pod, obs(running("a", "ca", 30)))
		f.RecursiveReadOnlyMounts = supported
		s := Generate(f)
		want := v1.RecursiveReadOnlyDisabled
		if supported {
			want = v1.RecursiveReadOnlyEnabled
		}
		for _, cs := range s.ContainerStatuses {
			vms := cs.VolumeMounts
			if len(vms) != 2 || vms[0].MountPath != "/rro" || !vms[0].ReadOnly || vms[0].RecursiveReadOnly == nil ||
				*vms[0].RecursiveReadOnly != want || vms[1].ReadOnly || vms[1].RecursiveReadOnly != nil {
				t.Errorf("supported %v: container %s volumeMounts %+v, want /rro %s and /rw", supported, cs.Name, vms, want)
			}
		}
	}
}

// A pod the node stops for good (evicted) is Failed with the node's reason
// and a DisruptionTarget condition, which later statuses keep; a pod that
// had already finished keeps its phase.
func TestStoppedByNode(t *testing.T) {
	pod := newPod(app("a"))
	f := facts(pod, obs(running("a", "ca", 0)))
	f.ByNode = &Rejection{Reason: "Evicted", Message: "The node was low on resource: memory. "}
	s := Generate(f)
	cond := func(s v1.PodStatus) *v1.PodCondition {
		for i := range s.Conditions {
			if s.Conditions[i].Type == v1.DisruptionTarget {
				return &s.Conditions[i]
			}
		}
		return nil
	}
	c := cond(s)
	if s.Phase != v1.PodFailed || s.Reason != "Evicted" || s.Message != f.ByNode.Message {
		t.Errorf("phase %s reason %q message %q, want Failed Evicted", s.Phase, s.Reason, s.Message)
	}
	if c == nil || c.Status != v1.ConditionTrue || c.Reason != v1.PodReasonTerminationByKubelet || c.Message != f.ByNode.Message {
		t.Fatalf("DisruptionTarget %+v, want True TerminationByKubelet", c)
	}
	// Once the containers stopped, the same.
	f2 := facts(pod, obs(exited("a", "ca", 0, 137, "")))
	f2.ByNode, f2.Terminal, f2.Previous = f.ByNode, true, &s
	s2 := Generate(f2)
	if c2 := cond(s2); s2.Phase != v1.PodFailed || s2.Reason != "Evicted" || c2 == nil || !c2.LastTransitionTime.Equal(&c.LastTransitionTime) {
		t.Errorf("after the kill: phase %s reason %q condition %+v", s2.Phase, s2.Reason, c2)
	}
	// A pod that had succeeded stays Succeeded, without the condition.
	f3 := facts(pod, obs(exited("a", "ca", 0, 0, "")))
	f3.ByNode, f3.Previous = f.ByNode, &v1.PodStatus{Phase: v1.PodSucceeded}
	if s3 := Generate(f3); s3.Phase != v1.PodSucceeded || cond(s3) != nil {
		t.Errorf("finished pod: phase %s condition %+v, want Succeeded without one", s3.Phase, cond(s3))
	}
}
