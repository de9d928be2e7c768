//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

// shutdownPod is a pod of one busybox container that, on SIGTERM, takes
// stopSecs seconds to exit (0: it exits at once), and has priorityClass.
func shutdownPod(name, priorityClass string, stopSecs int) string {
	class := ""
	if priorityClass != "" {
		class = "priorityClassName: " + priorityClass
	}
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s}
spec:
  %s
  terminationGracePeriodSeconds: 30
  containers:
  - name: main
    image: busybox:1.35
    command: ["/bin/sh", "-c", "trap 'sleep %d; exit 0' TERM; while true; do sleep 0.2; done"]
`, name, class, stopSecs)
}

// stoppedByShutdown accepts a pod the node shutdown stopped: Failed,
// reason Terminated, the kubelet's message, a DisruptionTarget condition,
// its container terminated.
func stoppedByShutdown(p *v1.Pod) error {
	const msg = "Pod was terminated in response to imminent node shutdown."
	if p.Status.Phase != v1.PodFailed || p.Status.Reason != "Terminated" || p.Status.Message != msg {
		return fmt.Errorf("phase %q reason %q message %q", p.Status.Phase, p.Status.Reason, p.Status.Message)
	}
	var dt *v1.PodCondition
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == v1.DisruptionTarget {
			dt = &p.Status.Conditions[i]
		}
	}
	if dt == nil || dt.Status != v1.ConditionTrue || dt.Reason != "TerminationByKubelet" || dt.Message != msg {
		return fmt.Errorf("DisruptionTarget %+v", dt)
	}
	if containerStatus(p, "main").State.Terminated == nil {
		return fmt.Errorf("main not terminated: %+v", containerStatus(p, "main").State)
	}
	return nil
}

// A graceful node shutdown triggered by SIGPWR (no systemd-logind here):
// the regular pod is stopped first and given its time to exit, then the
// critical one; both end Failed as the kubelet reports them; a pod added
// meanwhile is refused with NodeShutdown; nodelet keeps running.
func TestGracefulNodeShutdown(t *testing.T) {
	config := filepath.Join(shared.work, "shutdown-config.yaml")
	if err := os.WriteFile(config, []byte(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
shutdownGracePeriod: 20s
shutdownGracePeriodCriticalPods: 10s
`), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removePodsWithPrefix(shared.rt, "shutdown-") }) // after the nodelet stops
	n, dir, _ := lifecycleNodelet(t, "shutdown", "--config", config)
	writeManifest(t, dir, "shutdown-regular.yaml", shutdownPod("shutdown-regular", "", 3))
	writeManifest(t, dir, "shutdown-critical.yaml", shutdownPod("shutdown-critical", "system-node-critical", 0))
	waitContainerRunning(t, 90*time.Second, "shutdown-regular-e2e", "main")
	waitContainerRunning(t, 90*time.Second, "shutdown-critical-e2e", "main")
	api := n.api(t)

	if err := n.cmd.Process.Signal(syscall.SIGPWR); err != nil {
		t.Fatal(err)
	}
	regular := waitPod(t, api, "shutdown-regular-e2e", 60*time.Second, "stopped by the shutdown", stoppedByShutdown)
	critical := waitPod(t, api, "shutdown-critical-e2e", 60*time.Second, "stopped by the shutdown", stoppedByShutdown)
	// The regular pod took 3 s to exit after its SIGTERM; the critical
	// one exits at its SIGTERM, which comes only once the regular pod
	// finished.
	rEnd := containerStatus(regular, "main").State.Terminated.FinishedAt
	cEnd := containerStatus(critical, "main").State.Terminated.FinishedAt
	if cEnd.Before(&rEnd) {
		t.Errorf("the critical pod finished at %v, before the regular one at %v", cEnd, rEnd)
	}
	if code := containerStatus(regular, "main").State.Terminated.ExitCode; code != 0 {
		t.Errorf("the regular pod's container exited %d, want 0 (its TERM trap ran)", code)
	}

	writeManifest(t, dir, "shutdown-late.yaml", shutdownPod("shutdown-late", "", 0))
	waitPod(t, api, "shutdown-late-e2e", 30*time.Second, "rejected", func(p *v1.Pod) error {
		if err := hasPhase(v1.PodFailed, "NodeShutdown")(p); err != nil {
			return err
		}
		// The kubelet's rejectPod prefixes the admit handler's message.
		if p.Status.Message != "Pod was rejected: Pod was rejected as the node is shutting down." {
			return fmt.Errorf("message %q", p.Status.Message)
		}
		return nil
	})
	eventually(t, 30*time.Second, "the shutdown's end recorded", func() error {
		v, err := api.metric("/metrics", "kubelet_graceful_shutdown_end_time_seconds", nil)
		if err == nil && v == 0 {
			err = fmt.Errorf("end time 0")
		}
		return err
	})
	select {
	case <-n.done:
		t.Fatalf("nodelet exited on SIGPWR: %v", n.err)
	default:
	}
	st, err := os.Stat(filepath.Join(shared.work, "root-shutdown", "graceful_node_shutdown_state"))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("state file %v, %v: want mode 0600", st, err)
	}
}
