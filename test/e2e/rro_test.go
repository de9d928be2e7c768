//go:build e2e

package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

// rroPod is the upstream mount_rro spec's pod (podForRROSupported): a
// privileged init container mounts a tmpfs inside an emptyDir
// (Bidirectional, so that the mount reaches the volume); the test
// container can write to it only where the volume is not recursively
// read-only.
const rroPod = `apiVersion: v1
kind: Pod
metadata:
  name: rro
spec:
  restartPolicy: Never
  initContainers:
  - name: mount
    image: busybox:1.35
    command: ["sh", "-euxc", "mkdir -p /mnt/tmpfs && mount -t tmpfs none /mnt/tmpfs"]
    securityContext: {privileged: true}
    volumeMounts: [{name: mnt, mountPath: /mnt, mountPropagation: Bidirectional}]
  - name: test
    image: busybox:1.35
    command: ["sh", "-euxc", "for f in rro rro-if-possible; do touch /mnt-$f/tmpfs/foo 2>&1 | grep Read-only; done; for f in rro-disabled ro rw; do touch /mnt-$f/tmpfs/foo; done"]
    volumeMounts:
    - {name: mnt, mountPath: /mnt-rro, readOnly: true, mountPropagation: None, recursiveReadOnly: Enabled}
    - {name: mnt, mountPath: /mnt-rro-if-possible, readOnly: true, recursiveReadOnly: IfPossible}
    - {name: mnt, mountPath: /mnt-rro-disabled, readOnly: true, recursiveReadOnly: Disabled}
    - {name: mnt, mountPath: /mnt-ro, readOnly: true}
    - {name: mnt, mountPath: /mnt-rw}
  - name: unmount
    image: busybox:1.35
    command: ["umount", "/mnt/tmpfs"]
    securityContext: {privileged: true}
    volumeMounts: [{name: mnt, mountPath: /mnt, mountPropagation: Bidirectional}]
  containers:
  - name: completion
    image: busybox:1.35
    command: ["echo", "OK"]
  volumes:
  - name: mnt
    emptyDir: {}
`

// A recursiveReadOnly mount is read-only down to its submounts on a
// runtime that supports it (containerd 2 with runc 1.2+), and the
// container statuses say so, as the upstream spec checks.
func TestRecursiveReadOnlyMounts(t *testing.T) {
	if shared.containerd.Config().Major < 2 {
		// containerd 1.x lists no runtime handler features: Enabled is
		// refused there, as the kubelet refuses it (podruntime's tests).
		t.Skip("containerd 1.x does not support recursive read-only mounts")
	}
	n, manifests, _ := lifecycleNodelet(t, "rro")
	writeManifest(t, manifests, "rro.yaml", rroPod)
	pod := waitPod(t, n.api(t), "rro-e2e", 120*time.Second, "phase Succeeded", func(p *v1.Pod) error {
		if p.Status.Phase == v1.PodFailed {
			return fmt.Errorf("failed: %+v", p.Status.InitContainerStatuses)
		}
		if p.Status.Phase != v1.PodSucceeded {
			return fmt.Errorf("phase %q", p.Status.Phase)
		}
		return nil
	})
	if pod.Status.Phase != v1.PodSucceeded {
		t.Fatalf("pod %s: %+v", pod.Status.Phase, pod.Status.InitContainerStatuses)
	}
	if len(pod.Status.InitContainerStatuses) != 3 {
		t.Fatalf("%d init container statuses", len(pod.Status.InitContainerStatuses))
	}
	var got []string
	for _, vm := range pod.Status.InitContainerStatuses[1].VolumeMounts {
		rro := "<nil>"
		if vm.RecursiveReadOnly != nil {
			rro = string(*vm.RecursiveReadOnly)
		}
		got = append(got, vm.MountPath+"="+rro)
	}
	const want = "/mnt-rro=Enabled /mnt-rro-if-possible=Enabled /mnt-rro-disabled=Disabled /mnt-ro=Disabled /mnt-rw=<nil>"
	if strings.Join(got, " ") != want {
		t.Errorf("volumeMounts %s, want %s", strings.Join(got, " "), want)
	}
}
