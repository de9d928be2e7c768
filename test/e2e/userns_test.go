//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/internal/node/userns"
)

// usernsPod asks for its own user namespace; hostUsers: true asks for
// none.
const usernsPod = `apiVersion: v1
kind: Pod
metadata: {name: %s}
spec:
  hostUsers: %t
  terminationGracePeriodSeconds: 1
  volumes: [{name: scratch, emptyDir: {}}]
  containers:
  - name: main
    image: busybox:1.35
    command: ["sleep", "3600"]
    volumeMounts: [{name: scratch, mountPath: /scratch}]
`

// runtimeUserNamespaces says whether the shared runtime's default handler
// supports user namespaces, as its CRI status says, and describes what it
// reports.
func runtimeUserNamespaces(t *testing.T) (bool, string) {
	t.Helper()
	resp, err := shared.rt.Status(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetRuntimeHandlers()) == 0 {
		return false, "its CRI status lists no runtime handlers"
	}
	for _, h := range resp.GetRuntimeHandlers() {
		if h.GetName() == "" {
			return h.GetFeatures().GetUserNamespaces(), fmt.Sprintf("default handler features: user_namespaces=%t", h.GetFeatures().GetUserNamespaces())
		}
	}
	return false, "its CRI status lists no default handler"
}

// A runtime without user namespaces (Debian's containerd 1.6) gets no
// sandbox for a pod with hostUsers: false: the pod stays pending with the
// kubelet's FailedCreatePodSandBox event saying why, and nothing of it
// runs, while a pod on the host's user namespace runs beside it.
func TestUserNamespacesRefusedWithoutRuntimeSupport(t *testing.T) {
	if ok, _ := runtimeUserNamespaces(t); ok {
		t.Skip("the runtime supports user namespaces: TestUserNamespaceMapping covers it")
	}
	n, dir, _ := lifecycleNodelet(t, "userns-refused")
	writeManifest(t, dir, "own.yaml", fmt.Sprintf(usernsPod, "own", false))
	writeManifest(t, dir, "host.yaml", fmt.Sprintf(usernsPod, "host", true))
	api := n.api(t)
	waitEvent(t, api, 60*time.Second, "user namespace refused", podEvent("own-e2e", "Warning", "FailedCreatePodSandBox",
		"Failed to create pod sandbox: can't set `spec.hostUsers: false`, runtime does not support user namespaces"))
	waitContainerRunning(t, 60*time.Second, "host-e2e", "main")
	waitPod(t, api, "own-e2e", 10*time.Second, "pending", func(p *v1.Pod) error {
		if p.Status.Phase != v1.PodPending {
			return fmt.Errorf("phase %s", p.Status.Phase)
		}
		return nil
	})
	if c, err := runningContainer(context.Background(), shared.rt, "own-e2e", "main"); err == nil {
		t.Errorf("container %s of the refused pod runs", c.Id)
	}
}

// A pod with hostUsers: false runs in its own user namespace: inside,
// /proc/self/uid_map and gid_map map IDs 0-65535 to one block of 65536
// host IDs at or above 65536, the one nodelet wrote in the pod's
// directory; its emptyDir is its root's (an idmapped mount). A pod on the
// host's user namespace sees the identity mapping. After a restart of
// nodelet the pod keeps its container and block, and a new pod gets
// another.
func TestUserNamespaceMapping(t *testing.T) {
	if ok, why := runtimeUserNamespaces(t); !ok {
		t.Skipf("the runtime at %s does not support user namespaces (%s); containerd 2.0 or newer with runc 1.2 or newer does",
			shared.endpoint, why)
	}
	root := filepath.Join(shared.work, "root-userns")
	n, dir, args := lifecycleNodelet(t, "userns")
	writeManifest(t, dir, "own.yaml", fmt.Sprintf(usernsPod, "own", false))
	writeManifest(t, dir, "host.yaml", fmt.Sprintf(usernsPod, "host", true))
	waitContainerRunning(t, 90*time.Second, "own-e2e", "main")
	waitContainerRunning(t, 60*time.Second, "host-e2e", "main")

	pod, err := n.api(t).pod("own-e2e")
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, "pods", string(pod.UID), userns.FileName))
	if err != nil {
		t.Fatalf("the pod's mapping file: %v", err)
	}
	hostID := mappingInFile(t, string(data))
	for _, file := range []string{"/proc/self/uid_map", "/proc/self/gid_map"} {
		got := strings.Fields(execOut(t, "own-e2e", "main", "cat", file))
		want := []string{"0", strconv.FormatUint(uint64(hostID), 10), "65536"}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("%s in the pod: %q, want %q (the file says host ID %d)", file, got, want, hostID)
		}
		if host := strings.Fields(execOut(t, "host-e2e", "main", "cat", file)); strings.Join(host, " ") != "0 0 4294967295" {
			t.Errorf("%s in the host-users pod: %q", file, host)
		}
	}
	if id := strings.TrimSpace(execOut(t, "own-e2e", "main", "id")); !strings.HasPrefix(id, "uid=0(root) gid=0(root)") {
		t.Errorf("id in the pod: %q", id)
	}
	// The emptyDir, owned by the host's root, is an idmapped mount: the
	// pod's root owns it (without the mapping it would show as the
	// overflow ID 65534) and writes to it.
	if owner := strings.TrimSpace(execOut(t, "own-e2e", "main", "stat", "-c", "%u:%g", "/scratch")); owner != "0:0" {
		t.Errorf("the emptyDir in the pod is owned by %s, want 0:0 (an idmapped mount)", owner)
	}
	execOut(t, "own-e2e", "main", "touch", "/scratch/written")

	// A restarted nodelet keeps the running pod's block and its container,
	// and gives a new pod another block.
	before, _ := runningContainer(context.Background(), shared.rt, "own-e2e", "main")
	if err := n.stop(t); err != nil {
		t.Fatal(err)
	}
	startNodelet(t, args...)
	writeManifest(t, dir, "second.yaml", fmt.Sprintf(usernsPod, "second", false))
	waitContainerRunning(t, 60*time.Second, "second-e2e", "main")
	if after, err := runningContainer(context.Background(), shared.rt, "own-e2e", "main"); err != nil || after.Id != before.Id {
		t.Errorf("own-e2e's container after the restart: %v, %v (was %s)", after, err, before.Id)
	}
	if got := strings.Fields(execOut(t, "own-e2e", "main", "cat", "/proc/self/uid_map")); len(got) != 3 || got[1] != strconv.FormatUint(uint64(hostID), 10) {
		t.Errorf("own-e2e's uid_map after the restart: %q, want host ID %d", got, hostID)
	}
	second := strings.Fields(execOut(t, "second-e2e", "main", "cat", "/proc/self/uid_map"))
	if len(second) != 3 || second[0] != "0" || second[2] != "65536" || second[1] == strconv.FormatUint(uint64(hostID), 10) {
		t.Errorf("second-e2e's uid_map %q: want its own block, not %d", second, hostID)
	}
}

// mappingInFile is the host ID of the one mapping of a userns file, after
// checking it is what nodelet writes.
func mappingInFile(t *testing.T, data string) uint32 {
	t.Helper()
	var host uint32
	if _, err := fmt.Sscanf(data, `{"uidMappings":[{"hostId":%d,"containerId":0,"length":65536}]`, &host); err != nil {
		t.Fatalf("userns file %q: %v", data, err)
	}
	if host < 65536 || host%65536 != 0 {
		t.Fatalf("host ID %d is not a block of the default range", host)
	}
	return host
}
