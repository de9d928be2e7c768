//go:build e2e

package e2e

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/serve/server"
)

// storagePod is a busybox pod whose container main writes writeMiB MiB to
// path, then sleeps. limit is main's ephemeral-storage limit ("" for
// none); volume, if not empty, is the YAML of one volume named data
// mounted at /data; idleLimit adds a second, idle container with that
// limit.
func storagePod(name, path string, writeMiB int, limit, volume, idleLimit string) string {
	res := func(l string) string {
		if l == "" {
			return ""
		}
		return "\n    resources: {limits: {ephemeral-storage: " + l + "}}"
	}
	mounts, volumes := "", ""
	if volume != "" {
		mounts = "\n    volumeMounts: [{name: data, mountPath: /data}]"
		volumes = "\n  volumes:\n  - name: data\n    " + volume
	}
	idle := ""
	if idleLimit != "" {
		idle = "\n  - name: idle\n    image: busybox:1.35\n    command: [\"/bin/sh\", \"-c\", \"sleep 3600\"]" + res(idleLimit)
	}
	script := fmt.Sprintf("dd if=/dev/zero of=%s bs=1M count=%d; sync; sleep 3600", path, writeMiB)
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s}
spec:
  terminationGracePeriodSeconds: 30
  containers:
  - name: main
    image: busybox:1.35
    command: ["/bin/sh", "-c", %q]%s%s%s%s
`, name, script, res(limit), mounts, idle, volumes)
}

// sidecarStoragePod is a pod whose sidecar (an init container with
// restartPolicy Always) side writes writeMiB MiB to its writable layer
// under limit, beside an idle container main under mainLimit.
func sidecarStoragePod(name string, writeMiB int, limit, mainLimit string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s}
spec:
  terminationGracePeriodSeconds: 30
  initContainers:
  - name: side
    image: busybox:1.35
    restartPolicy: Always
    command: ["/bin/sh", "-c", "dd if=/dev/zero of=/fill bs=1M count=%d; sync; sleep 3600"]
    resources: {limits: {ephemeral-storage: %s}}
  containers:
  - name: main
    image: busybox:1.35
    command: ["/bin/sh", "-c", "sleep 3600"]
    resources: {limits: {ephemeral-storage: %s}}
`, name, writeMiB, limit, mainLimit)
}

// Local ephemeral storage on the real runtime, as the kubelet isolates it
// (LocalStorageCapacityIsolation) with no eviction threshold at all: a pod
// whose emptyDir passes its sizeLimit, a pod whose writable layer passes
// the pod's total limit, a pod one of whose containers passes its own
// limit and one whose sidecar passes its own are each evicted with the
// kubelet's reason, message, event and kubelet_evictions signal and no
// DisruptionTarget condition; a pod within its limits and a memory-backed
// emptyDir filled to its size stay as they are. A pod requesting more
// ephemeral storage than the node's allocatable (the root directory's
// filesystem) is refused with the kubelet's reason.
func TestEvictionLocalStorage(t *testing.T) {
	t.Cleanup(func() { removePodsWithPrefix(shared.rt, "ls-") })
	n, dir, _ := lifecycleNodelet(t, "localstorage", "--eviction-hard", "memory.available<0%", "--volume-stats-agg-period", "1s")
	api := n.api(t)

	keep := map[string]string{
		"ls-under":  storagePod("ls-under", "/fill", 2, "16Mi", "", ""),
		"ls-memory": storagePod("ls-memory", "/data/fill", 8, "", "emptyDir: {medium: Memory, sizeLimit: 4Mi}", ""),
	}
	evict := map[string]struct{ manifest, message, signal string }{
		"ls-emptydir": {storagePod("ls-emptydir", "/data/fill", 8, "", "emptyDir: {sizeLimit: 4Mi}", ""),
			`Usage of EmptyDir volume "data" exceeds the limit "4Mi". `, "emptydirfs.limit"},
		"ls-pod": {storagePod("ls-pod", "/fill", 8, "4Mi", "", ""),
			"Pod ephemeral local storage usage exceeds the total limit of containers 4Mi. ", "ephemeralpodfs.limit"},
		"ls-container": {storagePod("ls-container", "/fill", 8, "4Mi", "", "64Mi"),
			`Container main exceeded its local ephemeral storage limit "4Mi". `, "ephemeralcontainerfs.limit"},
		"ls-sidecar": {sidecarStoragePod("ls-sidecar", 8, "4Mi", "64Mi"),
			`Container side exceeded its local ephemeral storage limit "4Mi". `, "ephemeralcontainerfs.limit"},
	}
	ids := map[string]string{}
	for name, m := range keep {
		writeManifest(t, dir, name+".yaml", m)
	}
	for name := range keep {
		ids[name] = waitPhase(t, n, name+"-e2e", "Running", 90*time.Second).Status.ContainerStatuses[0].ContainerID
	}
	for name, e := range evict {
		writeManifest(t, dir, name+".yaml", e.manifest)
	}

	for name, e := range evict {
		p := waitPod(t, api, name+"-e2e", 3*time.Minute, "evicted", func(p *v1.Pod) error {
			if p.Status.Phase != v1.PodFailed || p.Status.Reason != "Evicted" {
				return fmt.Errorf("phase %s reason %q", p.Status.Phase, p.Status.Reason)
			}
			return nil
		})
		if p.Status.Message != e.message {
			t.Errorf("%s: message %q, want %q", name, p.Status.Message, e.message)
		}
		for _, c := range p.Status.Conditions {
			if c.Type == v1.DisruptionTarget {
				t.Errorf("%s: condition %+v; the kubelet sets no DisruptionTarget for a local storage eviction", name, c)
			}
		}
		waitEvent(t, api, 30*time.Second, "Evicted event of "+name, func(ev server.EventItem) bool {
			return ev.Pod == name+"-e2e" && ev.Reason == "Evicted" && ev.Type == v1.EventTypeWarning && ev.Message == e.message
		})
		want := 0
		for _, other := range evict {
			if other.signal == e.signal {
				want++
			}
		}
		// The others of the same signal may not be evicted yet.
		if v, err := api.metric("/metrics", "kubelet_evictions", map[string]string{"eviction_signal": e.signal}); err != nil || v < 1 || v > float64(want) {
			t.Errorf("kubelet_evictions{eviction_signal=%q} = %v (%v), want 1 to %d", e.signal, v, err, want)
		}
		// Evicted for good: not started again, nothing left running.
		waitPod(t, api, name+"-e2e", 60*time.Second, "containers stopped", func(*v1.Pod) error {
			var all []*runtimeapi.Container
			for _, c := range []string{"main", "idle", "side"} {
				all = append(all, instances(t, name+"-e2e", c)...)
			}
			for _, c := range all {
				if c.State.String() == "CONTAINER_RUNNING" {
					return fmt.Errorf("container %s runs", c.Id)
				}
			}
			return nil
		})
	}
	for sig, want := range map[string]float64{"emptydirfs.limit": 1, "ephemeralpodfs.limit": 1, "ephemeralcontainerfs.limit": 2} {
		if v, err := api.metric("/metrics", "kubelet_evictions", map[string]string{"eviction_signal": sig}); err != nil || v != want {
			t.Errorf("kubelet_evictions{eviction_signal=%q} = %v (%v), want %v", sig, v, err, want)
		}
	}
	for name := range keep {
		p, err := api.pod(name + "-e2e")
		if err != nil {
			t.Fatal(err)
		}
		if p.Status.Phase != v1.PodRunning || p.Status.ContainerStatuses[0].ContainerID != ids[name] || p.Status.ContainerStatuses[0].RestartCount != 0 {
			t.Errorf("%s: phase %s reason %q container %s restarts %d, want it running untouched (%s)", name, p.Status.Phase, p.Status.Reason,
				p.Status.ContainerStatuses[0].ContainerID, p.Status.ContainerStatuses[0].RestartCount, ids[name])
		}
	}

	// Admission: allocatable ephemeral storage is the root directory's
	// filesystem (no reservation, no nodefs threshold here).
	var st unix.Statfs_t
	if err := unix.Statfs(filepath.Join(shared.work, "root-localstorage"), &st); err != nil {
		t.Fatal(err)
	}
	capacity := int64(st.Blocks) * st.Bsize
	writeManifest(t, dir, "ls-huge.yaml", `apiVersion: v1
kind: Pod
metadata: {name: ls-huge}
spec:
  containers:
  - name: main
    image: busybox:1.35
    command: ["sleep", "3600"]
    resources: {requests: {ephemeral-storage: 1Pi}}
`)
	rejected := waitPhase(t, n, "ls-huge-e2e", "Failed", 60*time.Second)
	// Used: ls-under's 16Mi, its limit defaulted to its request as the
	// API server's defaults do (the evicted pods hold nothing).
	want := fmt.Sprintf("Pod was rejected: Node didn't have enough resource: ephemeral-storage, requested: %d, used: %d, capacity: %d", int64(1)<<50, 16<<20, capacity)
	if rejected.Status.Reason != "OutOfephemeral-storage" || rejected.Status.Message != want {
		t.Errorf("ls-huge: reason %q message %q, want OutOfephemeral-storage %q", rejected.Status.Reason, rejected.Status.Message, want)
	}
	if len(instances(t, "ls-huge-e2e", "main")) != 0 {
		t.Errorf("ls-huge: a container was created for a rejected pod")
	}
}
