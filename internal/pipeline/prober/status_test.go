package prober

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The prober binds its workers from the pod status it hears of: running
// containers by their "<runtime>://<id>", the pod IP as the probes' host;
// a container no longer running is unbound.
func TestPodStatusChangedBindsRunningContainers(t *testing.T) {
	h := newHarness(t)
	pod := newPod("u1", v1.Container{Name: "app", ReadinessProbe: execProbe("check", nil)},
		v1.Container{Name: "side", LivenessProbe: execProbe("check", nil)})
	h.m.AddPod(pod)
	started := metav1.NewTime(h.clock.Now())
	h.m.PodStatusChanged(pod, v1.PodStatus{PodIP: "10.42.0.9", ContainerStatuses: []v1.ContainerStatus{
		{Name: "app", ContainerID: "containerd://abc", State: v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: started}}},
		{Name: "side", ContainerID: "containerd://def", State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}},
	}})
	bound := func() (string, string, string) {
		h.m.mu.Lock()
		defer h.m.mu.Unlock()
		p := h.m.pods[pod.UID]
		return p.containers["app"].id, p.containers["side"].id, p.podIP
	}
	if app, side, ip := bound(); app != "abc" || side != "" || ip != "10.42.0.9" {
		t.Fatalf("bound app=%q side=%q ip=%q; want abc, none, 10.42.0.9", app, side, ip)
	}
	h.m.PodStatusChanged(pod, v1.PodStatus{PodIP: "10.42.0.9", ContainerStatuses: []v1.ContainerStatus{
		{Name: "app", ContainerID: "containerd://abc", State: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: 1}}},
	}})
	if app, _, _ := bound(); app != "" {
		t.Errorf("exited container still bound as %q", app)
	}
}
