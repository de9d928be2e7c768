//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/internal/pure/cpuset"
)

// guaranteedPod is a Guaranteed sleeper asking for %s CPUs.
const guaranteedPod = `apiVersion: v1
kind: Pod
metadata:
  name: %s
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: main
    image: busybox:1.35
    command: ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"]
    resources:
      limits: {cpu: "%s", memory: 32Mi}
`

// The static CPU manager on this 2-CPU machine, CPU 0 reserved: a
// Guaranteed container with one whole CPU runs on CPU 1 alone, the
// shared-pool container moves off it (reconciled with
// UpdateContainerResources), a second such pod is refused with the
// kubelet's UnexpectedAdmissionError; a restarted nodelet keeps the
// assignment from cpu_manager_state, and once the exclusive pod is gone
// the shared container gets CPU 1 back. The cpusets are the kernel's
// (Cpus_allowed_list of the containers' processes).
func TestCPUManagerStatic(t *testing.T) {
	if len(allCPUs()) < 2 {
		t.Skip("needs 2 CPUs")
	}
	cgroupRoot := shared.cgroupRoot + "-cpu"
	makeCgroupRoot(t, cgroupRoot)
	// Runs after nodelet stopped and before the cgroup root goes: the
	// pods are in the shared runtime, which outlives the test.
	t.Cleanup(func() { removePodsWithPrefix(shared.rt, "cpu-") })
	manifests := filepath.Join(shared.work, "manifests-cpu")
	root := filepath.Join(shared.work, "root-cpu")
	writeManifest(t, manifests, "shared.yaml", fmt.Sprintf(sleeperPod, "cpu-shared"))
	writeManifest(t, manifests, "excl.yaml", fmt.Sprintf(guaranteedPod, "cpu-excl", "1"))
	args := []string{"--container-runtime-endpoint", shared.endpoint, "--root-dir", root,
		"--pod-manifest-path", manifests, "--hostname-override", "e2e-cpu", "--cgroup-root", cgroupRoot,
		"--pod-logs-dir", filepath.Join(shared.work, "logs-cpu"), "--file-check-frequency", "1s",
		"--healthz-port", "0", "--port", freePort(t), "--address", "127.0.0.1",
		"--cpu-manager-policy", "static", "--reserved-cpus", "0", "--cpu-manager-reconcile-period", "1s"}
	n := startNodelet(t, args...)
	all := cpuset.New(allCPUs()...)
	sharedPool := all.Difference(cpuset.New(1)).String()

	waitCpus(t, "cpu-excl-e2e-cpu", "1")
	waitCpus(t, "cpu-shared-e2e-cpu", sharedPool)
	state := readCPUState(t, root)
	if state.PolicyName != "static" || state.DefaultCPUSet != sharedPool || state.Entries[uidOf(t, n, "cpu-excl-e2e-cpu")]["main"] != "1" {
		t.Errorf("cpu_manager_state %+v", state)
	}

	// Not enough CPUs left: the next pod is refused, nothing of it
	// started.
	writeManifest(t, manifests, "late.yaml", fmt.Sprintf(guaranteedPod, "cpu-late", fmt.Sprint(all.Size()-1)))
	late := waitPod(t, n.api(t), "cpu-late-e2e-cpu", time.Minute, "refused", func(p *v1.Pod) error {
		if p.Status.Phase != v1.PodFailed {
			return fmt.Errorf("phase %q", p.Status.Phase)
		}
		return nil
	})
	if late.Status.Reason != "UnexpectedAdmissionError" || !strings.Contains(late.Status.Message, "not enough cpus available to satisfy request") {
		t.Errorf("late pod: %q %q", late.Status.Reason, late.Status.Message)
	}

	// Restarted: the assignment is the checkpoint's.
	if err := n.stop(t); err != nil {
		t.Fatalf("nodelet exit after SIGINT: %v", err)
	}
	os.Remove(filepath.Join(manifests, "late.yaml"))
	startNodelet(t, args...)
	waitCpus(t, "cpu-excl-e2e-cpu", "1")
	waitCpus(t, "cpu-shared-e2e-cpu", sharedPool)

	// The exclusive pod goes: its CPU goes back to the shared pool.
	os.Remove(filepath.Join(manifests, "excl.yaml"))
	waitCpus(t, "cpu-shared-e2e-cpu", all.String())
	eventually(t, 30*time.Second, "checkpoint without the pod", func() error {
		if s := readCPUState(t, root); len(s.Entries) != 0 || s.DefaultCPUSet != all.String() {
			return fmt.Errorf("cpu_manager_state %+v", s)
		}
		return nil
	})
	os.Remove(filepath.Join(manifests, "shared.yaml"))
}

// allCPUs are the machine's online CPUs.
func allCPUs() []int {
	b, _ := os.ReadFile("/sys/devices/system/cpu/online")
	s, _ := cpuset.Parse(string(b))
	return s.List()
}

// uidOf is the UID of pod as the nodelet's /pods shows it.
func uidOf(t *testing.T, n *nodeletProc, pod string) string {
	t.Helper()
	return string(waitPod(t, n.api(t), pod, time.Minute, "listed", func(*v1.Pod) error { return nil }).UID)
}

// waitCpus waits until the main container of pod runs on cpus, as the
// kernel says (Cpus_allowed_list of its process).
func waitCpus(t *testing.T, pod, cpus string) {
	t.Helper()
	eventually(t, 90*time.Second, pod+" on CPUs "+cpus, func() error {
		c, err := runningContainer(context.Background(), shared.rt, pod, "main")
		if err != nil {
			return err
		}
		got, err := allowedCPUs(containerPID(t, c.Id))
		if err != nil || got != cpus {
			return fmt.Errorf("Cpus_allowed_list %q (%v)", got, err)
		}
		return nil
	})
}

func allowedCPUs(pid int) (string, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "Cpus_allowed_list:"); ok {
			return strings.TrimSpace(v), nil
		}
	}
	return "", fmt.Errorf("no Cpus_allowed_list in /proc/%d/status", pid)
}

type cpuState struct {
	PolicyName    string                       `json:"policyName"`
	DefaultCPUSet string                       `json:"defaultCpuSet"`
	Entries       map[string]map[string]string `json:"entries"`
}

func readCPUState(t *testing.T, root string) cpuState {
	t.Helper()
	var s cpuState
	b, err := os.ReadFile(filepath.Join(root, "cpu_manager_state"))
	if err == nil {
		err = json.Unmarshal(b, &s)
	}
	if err != nil {
		t.Fatalf("cpu_manager_state: %v", err)
	}
	return s
}
