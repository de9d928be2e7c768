//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Ephemeral containers as kubectl debug adds them (the pod's
// ephemeralcontainers subresource): the one added to a running pod runs in
// its target's PID namespace, its log and exec work through the API
// server, its status is in ephemeralContainerStatuses; a second one added
// later runs too, and the app container is never restarted. Upstream's
// NodeConformance "Ephemeral Containers" specs check the same.
func TestClusterEphemeralContainers(t *testing.T) {
	cp := startCluster(t)
	cp.logsOnFailure(t)
	const node = "ephemeral-a"
	joinNode(t, cp, node)
	c := cp.Admin
	ctx := clusterContext(t, 10*time.Minute)
	const ns = "ephemeral-test"
	clusterNamespace(t, c, ns)
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "debuggee", Namespace: ns, Labels: map[string]string{"app": "debuggee"}},
		Spec: v1.PodSpec{NodeSelector: map[string]string{"kubernetes.io/hostname": node},
			Containers: []v1.Container{shellContainer("app", "echo app-marker-started")}}}
	if _, err := c.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	running := waitPodsReady(t, c, ns, "app=debuggee", 1, 2*time.Minute)
	appID := running[0].Status.ContainerStatuses[0].ContainerID

	add := func(name, script, target string) {
		t.Helper()
		p, err := c.CoreV1().Pods(ns).Get(ctx, "debuggee", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.Spec.EphemeralContainers = append(p.Spec.EphemeralContainers, v1.EphemeralContainer{
			EphemeralContainerCommon: v1.EphemeralContainerCommon{Name: name, Image: "busybox:1.35",
				Command: []string{"sh", "-c", script}},
			TargetContainerName: target,
		})
		if _, err := c.CoreV1().Pods(ns).UpdateEphemeralContainers(ctx, "debuggee", p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitRunning := func(name string) {
		t.Helper()
		eventually(t, 2*time.Minute, "ephemeral container "+name+" running", func() error {
			p, err := c.CoreV1().Pods(ns).Get(context.Background(), "debuggee", metav1.GetOptions{})
			if err != nil {
				return err
			}
			for _, s := range p.Status.EphemeralContainerStatuses {
				if s.Name == name {
					if s.State.Running == nil || !strings.HasPrefix(s.ContainerID, "containerd://") || s.ImageID == "" || s.Ready {
						return fmt.Errorf("status %+v", s)
					}
					return nil
				}
			}
			return fmt.Errorf("no status among %+v", p.Status.EphemeralContainerStatuses)
		})
	}
	logsContain := func(name string, want ...string) {
		t.Helper()
		eventually(t, time.Minute, "log of "+name, func() error {
			out, err := kubectl(t, cp, 30*time.Second, "-n", ns, "logs", "debuggee", "-c", name)
			if err != nil {
				return err
			}
			for _, w := range want {
				if !strings.Contains(out, w) {
					return fmt.Errorf("log %q lacks %q", out, w)
				}
			}
			return nil
		})
	}

	// In the target's PID namespace, ps shows the app's shell.
	add("debugger", "echo ephemeral-hello; ps; while true; do sleep 3600; done", "app")
	waitRunning("debugger")
	logsContain("debugger", "ephemeral-hello", "app-marker-started")
	out, err := kubectl(t, cp, 30*time.Second, "-n", ns, "exec", "debuggee", "-c", "debugger", "--", "echo", "exec-in-ephemeral")
	if err != nil || strings.TrimSpace(out) != "exec-in-ephemeral" {
		t.Errorf("kubectl exec -c debugger: %v %q", err, out)
	}

	add("debugger2", "echo second-hello; while true; do sleep 3600; done", "")
	waitRunning("debugger2")
	logsContain("debugger2", "second-hello")

	p, err := c.CoreV1().Pods(ns).Get(ctx, "debuggee", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cs := p.Status.ContainerStatuses; len(cs) != 1 || cs[0].ContainerID != appID || cs[0].RestartCount != 0 || !podReady(p) {
		t.Errorf("the app container was disturbed: %+v", cs)
	}
	_ = c.CoreV1().Pods(ns).Delete(ctx, "debuggee", metav1.DeleteOptions{})
}
