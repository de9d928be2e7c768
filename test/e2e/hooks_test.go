//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

const volumePod = `apiVersion: v1
kind: Pod
metadata:
  name: %s
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: busybox:1.35
    command: ["sh", "-c", "echo hi > /data/x; trap 'exit 0' TERM; while true; do sleep 1; done"]
    volumeMounts: [{name: data, mountPath: /data}]
  volumes:
  - name: data
    emptyDir: {}
`

// podUID is the UID the runtime records for a pod (its sandbox label).
func podUID(t *testing.T, pod string) string {
	t.Helper()
	sbs, err := shared.rt.ListPodSandbox(context.Background(), &runtimeapi.PodSandboxFilter{
		LabelSelector: map[string]string{"io.kubernetes.pod.name": pod}})
	if err != nil || len(sbs) == 0 {
		t.Fatalf("sandboxes of %s: %d (%v)", pod, len(sbs), err)
	}
	return sbs[0].Metadata.Uid
}

// held lists what the machine holds for a pod: its pod directory (volumes)
// and its cgroups, in any hierarchy and QoS tier.
func held(root, uid string) []string {
	var out []string
	if _, err := os.Lstat(filepath.Join(root, "pods", uid)); err == nil {
		out = append(out, "pod directory")
	}
	for _, pattern := range []string{"/sys/fs/cgroup/*" + shared.cgroupRoot + "/kubepods/pod" + uid, "/sys/fs/cgroup/*" + shared.cgroupRoot + "/kubepods/*/pod" + uid} {
		matches, _ := filepath.Glob(pattern)
		out = append(out, matches...)
	}
	return out
}

// What the pod hooks prepare for a pod (its volumes' directory and its
// cgroup) is released once the pod has terminated: when its manifest is
// removed while nodelet runs, and when it is removed while nodelet is
// stopped (the next nodelet finds the pod running, stops it and cleans up
// what its predecessor prepared).
func TestPodResourcesReleasedIncludingAfterRestart(t *testing.T) {
	n, manifests, args := lifecycleNodelet(t, "hooks")
	root := filepath.Join(shared.work, "root-hooks")
	writeManifest(t, manifests, "live.yaml", fmt.Sprintf(volumePod, "live"))
	writeManifest(t, manifests, "offline.yaml", fmt.Sprintf(volumePod, "offline"))
	waitContainerRunning(t, 60*time.Second, "live-e2e", "main")
	waitContainerRunning(t, 60*time.Second, "offline-e2e", "main")
	live, offline := podUID(t, "live-e2e"), podUID(t, "offline-e2e")
	for _, uid := range []string{live, offline} {
		if h := held(root, uid); len(h) < 2 {
			t.Fatalf("pod %s holds %v; want its pod directory and its cgroups (the test proves nothing otherwise)", uid, h)
		}
	}

	// Removed while nodelet runs.
	os.Remove(filepath.Join(manifests, "live.yaml"))
	eventually(t, 60*time.Second, "the removed pod's resources released", func() error {
		if h := held(root, live); len(h) > 0 {
			return fmt.Errorf("still held: %v", h)
		}
		return nil
	})

	// Removed while nodelet is stopped.
	if err := n.stop(t); err != nil {
		t.Fatalf("nodelet exit: %v", err)
	}
	os.Remove(filepath.Join(manifests, "offline.yaml"))
	startNodelet(t, args...)
	eventually(t, 60*time.Second, "the pod removed while nodelet was stopped is stopped", func() error {
		_, err := runningContainer(context.Background(), shared.rt, "offline-e2e", "main")
		if err == nil {
			return fmt.Errorf("still running")
		}
		return nil
	})
	eventually(t, 60*time.Second, "its resources released by the next nodelet", func() error {
		if h := held(root, offline); len(h) > 0 {
			return fmt.Errorf("still held: %v", h)
		}
		return nil
	})
}
