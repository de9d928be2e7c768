//go:build e2e

package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/internal/serve/server"
	"github.com/nodelet/nodelet/internal/serve/stats"
)

// evictionPod is a busybox pod that fills a memory-backed emptyDir with
// fillMiB MiB, then sleeps; priorityClass and memRequest may be empty.
func evictionPod(name string, fillMiB int, priorityClass, memRequest string) string {
	extra, resources := "", ""
	if priorityClass != "" {
		extra = "\n  priorityClassName: " + priorityClass
	}
	if memRequest != "" {
		resources = "\n    resources: {requests: {memory: " + memRequest + "}}"
	}
	script := "sleep 3600"
	if fillMiB > 0 {
		script = fmt.Sprintf("dd if=/dev/zero of=/fill/data bs=1M count=%d; sleep 3600", fillMiB)
	}
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s}
spec:
  terminationGracePeriodSeconds: 1%s
  containers:
  - name: main
    image: busybox:1.35
    command: ["/bin/sh", "-c", %q]
    volumeMounts: [{name: fill, mountPath: /fill}]%s
  volumes:
  - name: fill
    emptyDir: {medium: Memory}
`, name, extra, script, resources)
}

// Memory pressure on the real runtime: the hard threshold is set 1 GiB
// below what the node has available now, so it holds on any machine, and
// one BestEffort pod fills 2 GiB of memory. The eviction manager evicts
// that pod, the first of the kubelet's ranking, with the kubelet's status
// (Failed, Evicted, the message, DisruptionTarget), while the other pods
// (an idle BestEffort pod, a Burstable one within its request, a critical
// one) keep running with the same containers. Under the pressure that
// remains for the transition period, a BestEffort pod is refused and a
// Burstable one admitted, and /pods carries the condition as a warning.
func TestEvictionMemoryPressure(t *testing.T) {
	_, _, available, _, _, _, err := stats.NewHostMachine().NodeMemory()
	if err != nil {
		t.Fatal(err)
	}
	const fillMiB = 2048
	threshold := int64(available)/(1<<20) - 1024
	if threshold < 512 {
		t.Skipf("only %d MiB available: too little to fill 2 GiB safely", available>>20)
	}
	// Registered first, so it runs once the nodelet has stopped: the
	// evicted pod's sandbox is not left in the shared runtime for a later
	// test's pod of the same name to be mistaken for.
	t.Cleanup(func() { removePodsWithPrefix(shared.rt, "evict-") })
	n, dir, _ := lifecycleNodelet(t, "evict", "--eviction-hard", fmt.Sprintf("memory.available<%dMi", threshold),
		"--eviction-pressure-transition-period", "2m")
	t.Logf("memory available %d MiB: threshold memory.available<%d MiB, the hog fills %d MiB", available>>20, threshold, fillMiB)
	api := n.api(t)

	keep := []string{"evict-idle", "evict-requested", "evict-critical"}
	writeManifest(t, dir, "evict-idle.yaml", evictionPod("evict-idle", 0, "", ""))
	writeManifest(t, dir, "evict-requested.yaml", evictionPod("evict-requested", 0, "", "64Mi"))
	writeManifest(t, dir, "evict-critical.yaml", evictionPod("evict-critical", 0, "system-node-critical", ""))
	ids := map[string]string{}
	for _, name := range keep {
		ids[name] = waitPhase(t, n, name+"-e2e", "Running", 90*time.Second).Status.ContainerStatuses[0].ContainerID
	}
	writeManifest(t, dir, "evict-hog.yaml", evictionPod("evict-hog", fillMiB, "", ""))

	hog := waitPod(t, api, "evict-hog-e2e", 3*time.Minute, "evicted", func(p *v1.Pod) error {
		if p.Status.Phase != v1.PodFailed || p.Status.Reason != "Evicted" {
			return fmt.Errorf("phase %s reason %q", p.Status.Phase, p.Status.Reason)
		}
		return nil
	})
	if want := "The node was low on resource: memory. Threshold quantity: "; !strings.HasPrefix(hog.Status.Message, want) ||
		!strings.Contains(hog.Status.Message, "Container main was using") {
		t.Errorf("message %q, want the kubelet's", hog.Status.Message)
	}
	var disruption *v1.PodCondition
	for i := range hog.Status.Conditions {
		if hog.Status.Conditions[i].Type == v1.DisruptionTarget {
			disruption = &hog.Status.Conditions[i]
		}
	}
	if disruption == nil || disruption.Status != v1.ConditionTrue || disruption.Reason != v1.PodReasonTerminationByKubelet {
		t.Errorf("DisruptionTarget %+v, want True TerminationByKubelet", disruption)
	}
	waitEvent(t, api, 30*time.Second, "Evicted event of hog", func(e server.EventItem) bool {
		return e.Pod == "evict-hog-e2e" && e.Reason == "Evicted"
	})
	// The evicted pod stays down: its manifest is there, but it is not
	// started again.
	waitPod(t, api, "evict-hog-e2e", 60*time.Second, "containers stopped", func(p *v1.Pod) error {
		if len(instances(t, "evict-hog-e2e", "main")) == 0 {
			return nil
		}
		for _, c := range instances(t, "evict-hog-e2e", "main") {
			if c.State.String() == "CONTAINER_RUNNING" {
				return fmt.Errorf("container %s runs", c.Id)
			}
		}
		return nil
	})
	for _, name := range keep {
		p, err := api.pod(name + "-e2e")
		if err != nil {
			t.Fatal(err)
		}
		if p.Status.Phase != v1.PodRunning || p.Status.ContainerStatuses[0].ContainerID != ids[name] || p.Status.ContainerStatuses[0].RestartCount != 0 {
			t.Errorf("%s: phase %s container %s restarts %d, want it running untouched (%s)", name, p.Status.Phase,
				p.Status.ContainerStatuses[0].ContainerID, p.Status.ContainerStatuses[0].RestartCount, ids[name])
		}
	}
	if v, err := api.metric("/metrics", "kubelet_evictions", map[string]string{"eviction_signal": "memory.available"}); err != nil || v != 1 {
		t.Errorf("kubelet_evictions{memory.available} = %v (%v), want 1", v, err)
	}

	// Still within the transition period: admission under MemoryPressure.
	resp, err := api.client.Get(api.base + "/pods")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if w := resp.Header.Values("Warning"); resp.StatusCode != http.StatusOK || len(w) != 1 || !strings.Contains(w[0], "node has condition MemoryPressure") {
		t.Errorf("/pods warnings %q, want the MemoryPressure condition", w)
	}
	writeManifest(t, dir, "evict-late-besteffort.yaml", evictionPod("evict-late-besteffort", 0, "", ""))
	writeManifest(t, dir, "evict-late-burstable.yaml", evictionPod("evict-late-burstable", 0, "", "32Mi"))
	rejected := waitPhase(t, n, "evict-late-besteffort-e2e", "Failed", 60*time.Second)
	if rejected.Status.Reason != "Evicted" || rejected.Status.Message != "Pod was rejected: The node had condition: [MemoryPressure]. " {
		t.Errorf("late BestEffort pod: reason %q message %q", rejected.Status.Reason, rejected.Status.Message)
	}
	waitPhase(t, n, "evict-late-burstable-e2e", "Running", 90*time.Second)
}
