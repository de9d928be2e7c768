//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/pure/podspec"
)

// sideBySideEnv is how long TestTwoNodeletsSideBySide churns pods (a Go
// duration; default 20s: ten housekeeping rounds of each), for longer
// local runs.
const sideBySideEnv = "NODELET_E2E_SIDE_BY_SIDE"

// sideNode is one of the two nodelets of TestTwoNodeletsSideBySide.
type sideNode struct {
	name       string // node name and pod name prefix
	cgroupRoot string
	m          *managedNode
	// stable are the pods that run the whole time: name -> pod UID, and
	// their containers' IDs, which must not change.
	stable     map[string]string
	containers map[string]string
	// churn are the manifests written and removed during the run, and
	// whether each is there now.
	churn map[string]bool
	// uids are every pod UID this node's runtime showed.
	uids map[string]bool
}

// Two nodelets on one machine, each its own node with its own
// --root-dir (runtime, registry, pod directories), --cgroup-root,
// --cni-bridge-name, --pod-cidr and ports, and one shared pod logs
// directory (as /var/log/pods is for users), churn static pods side by
// side. Neither ever touches the other's pods or pod cgroups: the pods
// each keeps run all along in their own cgroup subtree (checked through
// the run), neither's log names a pod of the other (an orphan found, a
// cgroup removed), and at the end each runs exactly what its manifests
// say.
func TestTwoNodeletsSideBySide(t *testing.T) {
	churnFor := 20 * time.Second
	if v := os.Getenv(sideBySideEnv); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("%s=%q: %v", sideBySideEnv, v, err)
		}
		churnFor = d
	}
	logs := filepath.Join(shared.work, "pod-logs-side")
	nodes := []*sideNode{
		{name: "side-a", cgroupRoot: shared.cgroupRoot + "-side-a"},
		{name: "side-b", cgroupRoot: shared.cgroupRoot + "-side-b"},
	}
	for i, n := range nodes {
		// Registered first, so that it runs last: after the nodelet has
		// stopped and its pods are gone.
		makeCgroupRoot(t, n.cgroupRoot)
		n.m = startManaged(t, n.name, fmt.Sprintf("nle2e%d", 7+i), fmt.Sprintf("10.%d.0.0/24", 70+i),
			"--hostname-override", n.name, "--cgroup-root", n.cgroupRoot, "--pod-logs-dir", logs,
			"--port", freePort(t), "--healthz-port", freePort(t), "--address", "127.0.0.1", "--file-check-frequency", "1s")
		n.stable, n.containers, n.churn, n.uids = map[string]string{}, map[string]string{}, map[string]bool{}, map[string]bool{}
		for j := range 2 {
			pod := fmt.Sprintf("%s-stable-%d", n.name, j)
			writeManifest(t, n.m.manifests, pod+".yaml", fmt.Sprintf(sleeperPod, pod))
			n.stable[pod+"-"+n.name] = ""
		}
		for j := range 4 {
			n.churn[fmt.Sprintf("%s-churn-%d", n.name, j)] = false
		}
	}
	ctx := context.Background()
	for _, n := range nodes {
		for pod := range n.stable {
			eventually(t, 120*time.Second, n.name+": "+pod+" running", func() error {
				c, err := runningContainer(ctx, n.m.rt, pod, "main")
				if err != nil {
					return err
				}
				n.stable[pod], n.containers[pod] = c.GetLabels()[podspec.LabelPodUID], c.GetId()
				return nil
			})
		}
	}
	// Each stable pod's container runs in the pod cgroup under its own
	// node's cgroupRoot.
	for _, n := range nodes {
		for pod, id := range n.containers {
			cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", containerPID(t, id)))
			if err != nil {
				t.Fatal(err)
			}
			if want := n.cgroupRoot + "/kubepods/besteffort/pod" + n.stable[pod] + "/"; !strings.Contains(string(cg), want) {
				t.Fatalf("%s: container of %s is not in %s:\n%s", n.name, pod, want, cg)
			}
		}
	}

	// Each kubepods has the node's allocatable resources as its limits:
	// every CPU's shares and the kernel's pid_max (nothing is reserved).
	pidMax, err := os.ReadFile("/proc/sys/kernel/pid_max")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		for file, want := range map[string]string{
			"cpu/" + n.cgroupRoot + "/kubepods/cpu.shares": strconv.Itoa(runtime.NumCPU() * 1024),
			"pids/" + n.cgroupRoot + "/kubepods/pids.max":  strings.TrimSpace(string(pidMax)),
		} {
			if got, err := os.ReadFile(filepath.Join("/sys/fs/cgroup", file)); err != nil || strings.TrimSpace(string(got)) != want {
				t.Errorf("%s: %s = %q (%v), want %s", n.name, file, got, err, want)
			}
		}
	}

	// Churn: write or remove a random manifest of a random node, every
	// half second, while checking that the stable pods' cgroups are all
	// there.
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0))
	steps := 0
	for end := time.Now().Add(churnFor); time.Now().Before(end); steps++ {
		n := nodes[rng.IntN(len(nodes))]
		names := slices.Sorted(func(yield func(string) bool) {
			for k := range n.churn {
				if !yield(k) {
					return
				}
			}
		})
		pod := names[rng.IntN(len(names))]
		if n.churn[pod] {
			if err := os.Remove(filepath.Join(n.m.manifests, pod+".yaml")); err != nil {
				t.Fatal(err)
			}
		} else {
			writeManifest(t, n.m.manifests, pod+".yaml", fmt.Sprintf(sleeperPod, pod))
		}
		n.churn[pod] = !n.churn[pod]
		for _, o := range nodes {
			o.checkCgroups(t)
			o.noteUIDs(ctx, t)
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("%d churn steps in %v", steps, churnFor)

	// The end: each node runs its stable pods (the same containers) and
	// the churn pods whose manifests are there, and nothing else.
	for _, n := range nodes {
		eventually(t, 120*time.Second, n.name+" runs what its manifests say", func() error {
			n.noteUIDs(ctx, t)
			return n.converged(ctx)
		})
		n.checkCgroups(t)
		for pod, id := range n.containers {
			c, err := runningContainer(ctx, n.m.rt, pod, "main")
			if err != nil || c.GetId() != id {
				t.Errorf("%s: %s runs %v (%v), want container %s all along", n.name, pod, c.GetId(), err, id)
			}
			if _, err := os.Stat(filepath.Join(logs, "default_"+pod+"_"+n.stable[pod])); err != nil {
				t.Errorf("%s: log directory of %s: %v", n.name, pod, err)
			}
		}
	}
	// Neither log names a pod of the other: no orphan found, no cgroup
	// removed, no log directory collected.
	for i, n := range nodes {
		other := nodes[1-i]
		out := n.m.n.stderr.String()
		for uid := range other.uids {
			if strings.Contains(out, uid) {
				for _, line := range strings.Split(out, "\n") {
					if strings.Contains(line, uid) {
						t.Errorf("%s's log names %s's pod %s: %s", n.name, other.name, uid, line)
					}
				}
			}
		}
		// What would have shown the bug is there for its own pods: the
		// check above looked at the right log.
		if !strings.Contains(out, "removed pod cgroup") {
			t.Errorf("%s never logged removing a pod cgroup of its own churned pods; the log check proves nothing", n.name)
		}
	}
}

// checkCgroups fails the test unless every stable pod's cgroup is there,
// under the node's cgroupRoot, in the memory and cpu hierarchies.
func (n *sideNode) checkCgroups(t *testing.T) {
	t.Helper()
	for pod, uid := range n.stable {
		for _, h := range []string{"memory", "cpu"} {
			dir := filepath.Join("/sys/fs/cgroup", h, n.cgroupRoot, "kubepods/besteffort/pod"+uid)
			if _, err := os.Stat(dir); err != nil {
				t.Fatalf("%s: cgroup of %s: %v", n.name, pod, err)
			}
		}
	}
}

// noteUIDs records the pod UIDs the node's runtime shows.
func (n *sideNode) noteUIDs(ctx context.Context, t *testing.T) {
	t.Helper()
	sbs, err := n.m.rt.ListPodSandbox(ctx, nil)
	if err != nil {
		t.Fatalf("%s: list sandboxes: %v", n.name, err)
	}
	for _, sb := range sbs {
		if uid := sb.GetMetadata().GetUid(); uid != "" {
			n.uids[uid] = true
		}
	}
}

// converged is nil when the node's runtime runs the stable pods and the
// churn pods whose manifests are there, and no other.
func (n *sideNode) converged(ctx context.Context) error {
	cs, err := n.m.rt.ListContainers(ctx, &runtimeapi.ContainerFilter{
		State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING}})
	if err != nil {
		return err
	}
	var running, want []string
	for _, c := range cs {
		running = append(running, c.GetLabels()[podspec.LabelPodName])
	}
	for pod := range n.stable {
		want = append(want, pod)
	}
	for pod, there := range n.churn {
		if there {
			want = append(want, pod+"-"+n.name)
		}
	}
	slices.Sort(running)
	slices.Sort(want)
	if !slices.Equal(running, want) {
		return fmt.Errorf("running %v, want %v", running, want)
	}
	return nil
}

// makeCgroupRoot is makeCgroupRootB for a test, which fails if it cannot.
// When the test ends it removes the root with whatever is left under it,
// deepest first: the pods are gone by then.
func makeCgroupRoot(t testing.TB, root string) {
	t.Helper()
	// Registered first: a root made in some hierarchies only goes too.
	t.Cleanup(func() {
		if err := removeCgroupRoot(root); err != nil {
			t.Error(err)
		}
	})
	if err := makeCgroupRootB(root); err != nil {
		t.Fatal(err)
	}
}
