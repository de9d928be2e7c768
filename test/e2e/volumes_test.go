//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

const volumesManifest = `apiVersion: v1
kind: ConfigMap
metadata: {name: app-config}
data: {greeting: "%s", other: unused}
---
apiVersion: v1
kind: Secret
metadata: {name: app-secret}
stringData: {token: t0ken}
---
apiVersion: v1
kind: Pod
metadata: {name: vols, labels: {app: vols}}
spec:
  terminationGracePeriodSeconds: 1
  securityContext: {fsGroup: 2000}
  initContainers:
  - name: seed
    image: busybox:1.35
    command: ["sh", "-c", "echo seeded > /scratch/from-init"]
    volumeMounts: [{name: scratch, mountPath: /scratch}]
  containers:
  - name: main
    image: busybox:1.35
    command: ["sleep", "3600"]
    volumeMounts:
    - {name: scratch, mountPath: /scratch}
    - {name: mem, mountPath: /mem}
    - {name: host, mountPath: /host}
    - {name: hostro, mountPath: /hostro, readOnly: true}
    - {name: config, mountPath: /config}
    - {name: config, mountPath: /etc/greeting.txt, subPath: greeting.txt}
    - {name: secret, mountPath: /secret}
    - {name: podinfo, mountPath: /podinfo}
    - {name: all, mountPath: /all}
  volumes:
  - {name: scratch, emptyDir: {}}
  - {name: mem, emptyDir: {medium: Memory, sizeLimit: 8Mi}}
  - {name: host, hostPath: {path: "%s", type: DirectoryOrCreate}}
  - {name: hostro, hostPath: {path: "%s", type: Directory}}
  - name: config
    configMap:
      name: app-config
      items: [{key: greeting, path: greeting.txt}]
      defaultMode: 0440
  - {name: secret, secret: {secretName: app-secret}}
  - name: podinfo
    downwardAPI:
      items: [{path: labels, fieldRef: {fieldPath: metadata.labels}}]
  - name: all
    projected:
      sources:
      - configMap: {name: app-config, items: [{key: greeting, path: greeting}]}
      - downwardAPI: {items: [{path: name, fieldRef: {fieldPath: metadata.name}}]}
`

// Every volume type: the container reads what it should and cannot write
// what it should not; a ConfigMap edit reaches the running container.
func TestVolumes(t *testing.T) {
	_, dir, _ := lifecycleNodelet(t, "volumes")
	hostDir := filepath.Join(shared.work, "hostvol")
	roDir := filepath.Join(shared.work, "hostvol-ro")
	os.MkdirAll(roDir, 0o755)
	os.WriteFile(filepath.Join(roDir, "hello"), []byte("from the host\n"), 0o644)
	writeManifest(t, dir, "vols.yaml", fmt.Sprintf(volumesManifest, "hello v1", hostDir, roDir))
	ctx := context.Background()
	waitContainerRunning(t, 60*time.Second, "vols-e2e", "main")
	sh := func(cmd string) (string, int) {
		c, err := runningContainer(ctx, shared.rt, "vols-e2e", "main")
		if err != nil {
			t.Fatal(err)
		}
		out, errOut, code, err := shared.rt.ExecSync(ctx, c.Id, []string{"sh", "-c", cmd}, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(out) + string(errOut)), int(code)
	}
	expect := func(cmd, want string) {
		t.Helper()
		if got, code := sh(cmd); code != 0 || !strings.Contains(got, want) {
			t.Errorf("%s: %q (exit %d), want %q", cmd, got, code, want)
		}
	}
	refused := func(cmd string) {
		t.Helper()
		if got, code := sh(cmd); code == 0 {
			t.Errorf("%s succeeded (%q); it must be refused", cmd, got)
		}
	}
	expect("cat /scratch/from-init", "seeded")
	expect("grep ' /mem ' /proc/mounts", "tmpfs")
	expect("echo written > /host/f && cat /host/f", "written")
	if data, _ := os.ReadFile(filepath.Join(hostDir, "f")); string(data) != "written\n" {
		t.Errorf("hostPath write not on the host: %q", data)
	}
	expect("cat /hostro/hello", "from the host")
	refused("touch /hostro/x")
	expect("cat /config/greeting.txt", "hello v1")
	refused("test -e /config/other")
	refused("touch /config/x")
	expect("stat -L -c %a /config/greeting.txt", "440")
	expect("cat /etc/greeting.txt", "hello v1")
	expect("cat /secret/token", "t0ken")
	refused("echo x > /secret/token")
	expect("cat /podinfo/labels", `app="vols"`)
	expect("cat /all/greeting /all/name", "hello v1")
	expect("cat /all/name", "vols-e2e")
	expect("stat -c %g /scratch", "2000")

	// Edit the ConfigMap: the mounted file follows (not the subPath one,
	// as with the kubelet).
	writeManifest(t, dir, "vols.yaml", fmt.Sprintf(volumesManifest, "hello v2", hostDir, roDir))
	eventually(t, 60*time.Second, "configMap update visible", func() error {
		if got, _ := sh("cat /config/greeting.txt"); got != "hello v2" {
			return fmt.Errorf("still %q", got)
		}
		return nil
	})
}

// A volume that cannot be set up keeps the pod Pending with FailedMount,
// worded per volume as the kubelet's volume manager words it.
func TestFailedMount(t *testing.T) {
	n, dir, _ := lifecycleNodelet(t, "failedmount")
	writeManifest(t, dir, "bad.yaml", `apiVersion: v1
kind: Pod
metadata: {name: badmount}
spec:
  containers:
  - {name: main, image: "busybox:1.35", command: ["sleep", "3600"], volumeMounts: [{name: h, mountPath: /h}]}
  volumes:
  - {name: h, hostPath: {path: /nonexistent/nodelet-e2e, type: Directory}}
`)
	api := n.api(t)
	waitEvent(t, api, 60*time.Second, "badmount-e2e FailedMount", podEvent("badmount-e2e", v1.EventTypeWarning, "FailedMount", `MountVolume.SetUp failed for volume "h"`))
	waitPhase(t, n, "badmount-e2e", "Pending", 5*time.Second)
	waitRuntimeLists(t, api, 3)
	if p, err := api.pod("badmount-e2e"); err != nil || p.Status.Phase != v1.PodPending {
		t.Errorf("badmount-e2e: %+v (err %v), want it still Pending", p, err)
	}
	if _, err := runningContainer(context.Background(), shared.rt, "badmount-e2e", "main"); err == nil {
		t.Error("container started although its volume failed")
	}
}

// Standalone there is no API server to resolve claims: a pod with a
// persistentVolumeClaim or generic ephemeral volume stays Pending with the
// kubelet's FailedMount event saying so, nothing of it starts, and a pod
// beside it in the same manifest runs.
func TestStandaloneClaimRefused(t *testing.T) {
	n, dir, _ := lifecycleNodelet(t, "claims")
	writeManifest(t, dir, "claims.yaml", `apiVersion: v1
kind: Pod
metadata: {name: claimed}
spec:
  containers:
  - name: main
    image: "busybox:1.35"
    command: ["sleep", "3600"]
    volumeMounts: [{name: data, mountPath: /data}, {name: scratch, mountPath: /scratch}]
  volumes:
  - {name: data, persistentVolumeClaim: {claimName: web-data}}
  - name: scratch
    ephemeral:
      volumeClaimTemplate:
        spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}
---
apiVersion: v1
kind: Pod
metadata: {name: beside}
spec:
  containers:
  - {name: main, image: "busybox:1.35", command: ["sleep", "3600"]}
`)
	api := n.api(t)
	const why = "persistent volume claims are not supported by nodelet in standalone mode: there is no API server to resolve them"
	waitEvent(t, api, 60*time.Second, "claimed-e2e FailedMount", podEvent("claimed-e2e", v1.EventTypeWarning, "FailedMount",
		"Unable to attach or mount volumes: unmounted volumes=[data scratch], unattached volumes=[], failed to process volumes=[data scratch]: "+
			"error processing PVC default/web-data: "+why+"; error processing PVC default/claimed-e2e-scratch: "+why))
	waitPhase(t, n, "beside-e2e", "Running", 60*time.Second)
	p := waitPhase(t, n, "claimed-e2e", "Pending", 5*time.Second)
	if cs := p.Status.ContainerStatuses; len(cs) != 1 || cs[0].State.Waiting == nil || cs[0].State.Waiting.Reason != "ContainerCreating" {
		t.Errorf("claimed-e2e container statuses %+v, want main waiting in ContainerCreating", cs)
	}
	if _, err := runningContainer(context.Background(), shared.rt, "claimed-e2e", "main"); err == nil {
		t.Error("container started although its claims cannot be resolved")
	}
}
