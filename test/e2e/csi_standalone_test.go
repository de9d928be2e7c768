//go:build e2e

package e2e

import (
	"path/filepath"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

// Standalone, the test driver registers through plugins_registry as on a
// cluster node, and a static pod's inline csi volume is refused as the
// kubelet refuses it without a CSIDriver object (only persistent volumes
// then), with FailedMount events, while the driver is never asked to
// publish.
func TestStandaloneCSIInlineRefused(t *testing.T) {
	const name = "csi-standalone"
	rootDir := filepath.Join(shared.work, "root-"+name)
	drv := startCSIDriver(t, rootDir, name)
	n, dir, _ := lifecycleNodelet(t, name)
	a := n.api(t)
	eventually(t, time.Minute, "the driver registered", func() error {
		if drv.callCount(t, "NotifyRegistrationStatus true") != 1 {
			return errorf("not registered yet")
		}
		return nil
	})
	writeManifest(t, dir, "inline.yaml", `apiVersion: v1
kind: Pod
metadata: {name: inline}
spec:
  volumes:
  - name: data
    csi: {driver: `+csiDriverName+`}
  containers:
  - name: main
    image: busybox:1.35
    command: ["sleep", "3600"]
    volumeMounts: [{name: data, mountPath: /data}]
`)
	waitEvent(t, a, time.Minute, "FailedMount of inline-e2e", podEvent("inline-e2e", v1.EventTypeWarning, "FailedMount",
		`MountVolume.SetUp failed for volume "data" : volume mode "Ephemeral" not supported by driver `+csiDriverName+` (no CSIDriver object)`))
	if got := drv.callCount(t, "NodePublishVolume"); got != 0 {
		t.Errorf("%d NodePublishVolume calls for a refused volume", got)
	}
}
