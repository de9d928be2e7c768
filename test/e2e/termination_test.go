//go:build e2e

package e2e

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

// terminationPod is a pod of one busybox container running script, with
// the given terminationMessagePath, policy and user.
func terminationPod(name, restart, script, path, policy string, user int) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s}
spec:
  restartPolicy: %s
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: busybox:1.35
    command: ["/bin/sh", "-c", %q]
    terminationMessagePath: %s
    terminationMessagePolicy: %s
    securityContext: {runAsUser: %d}
`, name, restart, script, path, policy, user)
}

// terminatedMessage checks the message of the container's current (or
// last) terminated state.
func terminatedMessage(last bool, want string) func(*v1.Pod) error {
	return func(p *v1.Pod) error {
		if len(p.Status.ContainerStatuses) != 1 {
			return fmt.Errorf("%d container statuses", len(p.Status.ContainerStatuses))
		}
		st := p.Status.ContainerStatuses[0].State
		if last {
			st = p.Status.ContainerStatuses[0].LastTerminationState
		}
		if st.Terminated == nil {
			return fmt.Errorf("not terminated: %+v", st)
		}
		if st.Terminated.Message != want {
			return fmt.Errorf("message %q, want %q", st.Terminated.Message, want)
		}
		return nil
	}
}

// Termination messages as the upstream NodeConformance specs "on
// terminated container" check them: from the file (as root and as a
// non-root user at another path), from the log when the container failed
// under FallbackToLogsOnError, none when it succeeded; and a restarted
// nodelet finds a crash-looping container's file again.
func TestTerminationMessages(t *testing.T) {
	n, dir, args := lifecycleNodelet(t, "termmsg")
	cases := []struct {
		name, script, path, policy string
		user                       int
		phase, want                string
	}{
		{"file", "/bin/echo -n DONE > /dev/termination-log", "/dev/termination-log", "File", 0, "Succeeded", "DONE"},
		{"nonroot", "/bin/echo -n DONE > /dev/termination-custom-log", "/dev/termination-custom-log", "File", 10000, "Succeeded", "DONE"},
		{"fallback", "/bin/echo -n DONE; /bin/false", "/dev/termination-log", "FallbackToLogsOnError", 0, "Failed", "DONE"},
		{"succeeded", "/bin/echo -n DONE; /bin/true", "/dev/termination-log", "FallbackToLogsOnError", 0, "Succeeded", ""},
		{"file-wins", "/bin/echo -n OK > /dev/termination-log; /bin/echo DONE; /bin/true", "/dev/termination-log",
			"FallbackToLogsOnError", 0, "Succeeded", "OK"},
	}
	for _, c := range cases {
		writeManifest(t, dir, c.name+".yaml", terminationPod(c.name, "Never", c.script, c.path, c.policy, c.user))
	}
	const crash = "crash"
	writeManifest(t, dir, crash+".yaml", terminationPod(crash, "Always",
		"/bin/echo -n CRASHED > /dev/termination-log; exit 3", "/dev/termination-log", "File", 10000))
	api := n.api(t)
	for _, c := range cases {
		p := waitPhase(t, n, c.name+"-e2e", c.phase, 90*time.Second)
		if err := terminatedMessage(false, c.want)(p); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
	}
	waitPod(t, api, crash+"-e2e", 90*time.Second, "last state with the message", terminatedMessage(true, "CRASHED"))

	// A restarted nodelet has no status in memory: it reads the file of
	// the last instance again, through the container's mounts.
	if err := n.signalAndWait(t, syscall.SIGTERM, 60*time.Second); err != nil {
		t.Fatalf("nodelet exit after SIGTERM: %v", err)
	}
	n = startNodelet(t, args...)
	waitPod(t, n.api(t), crash+"-e2e", 90*time.Second, "last state with the message after a restart", terminatedMessage(true, "CRASHED"))
}
