//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// memorySwap's default, NoSwap, on the real runtime: a container with a
// memory limit may not swap, as the kubelet configures it where the kernel
// accounts swap in memory cgroups (swap on the node or not). cgroup v1:
// memory+swap equal to the memory limit (memory.memsw.limit_in_bytes);
// v2: memory.swap.max 0. LimitedSwap's formula and failSwapOn are
// unit-tested (internal/node/podresources): this machine has no swap.
func TestSwapNoSwap(t *testing.T) {
	v2 := fileExists("/sys/fs/cgroup/cgroup.controllers")
	if !v2 && !fileExists("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes") {
		t.Skip("the kernel does not account swap in memory cgroups (swapaccount=0): nodelet sets nothing, as the kubelet")
	}
	// Registered before nodelet starts, so run after it stopped.
	t.Cleanup(func() { removeSandboxes("noswap-e2e") })
	_, dir, _ := lifecycleNodelet(t, "swap")
	writeManifest(t, dir, "noswap.yaml", `apiVersion: v1
kind: Pod
metadata: {name: noswap}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: busybox:1.35
    command: ["sleep", "3600"]
    resources:
      limits: {memory: 48Mi}
`)
	waitContainerRunning(t, 60*time.Second, "noswap-e2e", "main")
	c, err := runningContainer(context.Background(), shared.rt, "noswap-e2e", "main")
	if err != nil {
		t.Fatal(err)
	}
	pid := containerPID(t, c.Id)
	if v2 {
		got := readCgroupFile(t, "/sys/fs/cgroup", cgroupOf(t, pid, ""), "memory.swap.max")
		if got != "0" {
			t.Errorf("memory.swap.max = %q, want 0", got)
		}
		return
	}
	mem := filepath.Join("/sys/fs/cgroup/memory", cgroupOf(t, pid, "memory"))
	limit := readCgroupFile(t, mem, "", "memory.limit_in_bytes")
	memsw := readCgroupFile(t, mem, "", "memory.memsw.limit_in_bytes")
	if want := fmt.Sprint(48 << 20); limit != want || memsw != want {
		t.Errorf("memory.limit_in_bytes %s, memory.memsw.limit_in_bytes %s: want both %s", limit, memsw, want)
	}
}

// cgroupOf is the cgroup path of process pid in the v1 hierarchy of
// controller, or in the unified one ("").
func cgroupOf(t *testing.T, pid int, controller string) string {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// hierarchy-ID:controller-list:path
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if controller == "" && parts[0] == "0" || controller != "" && strings.Contains(","+parts[1]+",", ","+controller+",") {
			return parts[2]
		}
	}
	t.Fatalf("process %d has no cgroup for %q", pid, controller)
	return ""
}

func readCgroupFile(t *testing.T, root, path, file string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, path, file))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}
