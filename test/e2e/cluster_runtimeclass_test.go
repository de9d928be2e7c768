//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/internal/pure/podspec"
)

// TestClusterRuntimeClass runs pods naming RuntimeClasses on a node of the
// shared runtime, which defines runc and a second runc-based handler
// (secondHandler): each sandbox runs with its class's handler (as CRI's
// PodSandboxStatus reports it); a class whose handler the runtime lacks
// leaves its pod pending with the kubelet's FailedCreatePodSandBox event
// and a status saying why, nothing running; a class's overhead (set on
// the pod by the API server's RuntimeClass admission) counts in the pod
// cgroup's limits and in nodelet's admission.
func TestClusterRuntimeClass(t *testing.T) {
	cp := startCluster(t)
	cp.logsOnFailure(t)
	const node = "rtclass-a"
	joinNode(t, cp, node)
	c := cp.Admin
	ctx := clusterContext(t, 10*time.Minute)
	const ns = "rtclass-test"
	clusterNamespace(t, c, ns)
	overhead := v1.ResourceList{v1.ResourceCPU: resource.MustParse("50m"), v1.ResourceMemory: resource.MustParse("16Mi")}
	classes := []*nodev1.RuntimeClass{
		{ObjectMeta: metav1.ObjectMeta{Name: "e2e-runc"}, Handler: "runc"},
		{ObjectMeta: metav1.ObjectMeta{Name: "e2e-second"}, Handler: secondHandler},
		{ObjectMeta: metav1.ObjectMeta{Name: "e2e-missing"}, Handler: "no-such-handler"},
		{ObjectMeta: metav1.ObjectMeta{Name: "e2e-overhead"}, Handler: "runc", Overhead: &nodev1.Overhead{PodFixed: overhead}},
	}
	for _, rc := range classes {
		_ = c.NodeV1().RuntimeClasses().Delete(ctx, rc.Name, metav1.DeleteOptions{})
		if _, err := c.NodeV1().RuntimeClasses().Create(ctx, rc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		name := rc.Name
		t.Cleanup(func() { _ = c.NodeV1().RuntimeClasses().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	}
	onNode := map[string]string{"kubernetes.io/hostname": node}
	newPod := func(name, class string, res v1.ResourceRequirements) *v1.Pod {
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": name}},
			Spec: v1.PodSpec{NodeSelector: onNode, TerminationGracePeriodSeconds: ptr.To[int64](1),
				Containers: []v1.Container{{Name: "main", Image: "busybox:1.35", Command: []string{"sleep", "3600"}, Resources: res}}}}
		if class != "" {
			p.Spec.RuntimeClassName = ptr.To(class)
		}
		return p
	}
	create := func(t *testing.T, p *v1.Pod) *v1.Pod {
		t.Helper()
		got, err := c.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = c.CoreV1().Pods(ns).Delete(context.Background(), p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		})
		return got
	}

	// First, on the empty node: a pod that fits only without its class's
	// overhead. Bound by hand (spec.nodeName), so that the scheduler, which
	// counts the overhead too, does not keep it away: nodelet's admission
	// refuses it as the kubelet's does.
	t.Run("AdmissionCountsOverhead", func(t *testing.T) {
		n, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		request := n.Status.Allocatable.Memory().DeepCopy()
		request.Sub(resource.MustParse("8Mi")) // fits; with 16Mi of overhead it does not
		p := newPod("too-big", "e2e-overhead", v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceMemory: request}})
		p.Spec.NodeSelector, p.Spec.NodeName = nil, node
		got := create(t, p)
		if got.Spec.Overhead.Memory().Cmp(overhead[v1.ResourceMemory]) != 0 {
			t.Fatalf("the API server set overhead %v, want %v", got.Spec.Overhead, overhead)
		}
		// Requested counts the overhead; the capacity is the allocatable
		// the Node reports, so without the overhead the pod would fit.
		withOverhead := request.DeepCopy()
		withOverhead.Add(overhead[v1.ResourceMemory])
		msg := fmt.Sprintf("Pod was rejected: Node didn't have enough resource: memory, requested: %d, used: 0, capacity: %d",
			withOverhead.Value(), n.Status.Allocatable.Memory().Value())
		eventually(t, time.Minute, "pod too-big rejected", func() error {
			p, err := c.CoreV1().Pods(ns).Get(context.Background(), "too-big", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if p.Status.Phase != v1.PodFailed || p.Status.Reason != "OutOfmemory" ||
				p.Status.Message != msg {
				return fmt.Errorf("phase %s, reason %q, message %q; want Failed, OutOfmemory, %q", p.Status.Phase, p.Status.Reason, p.Status.Message, msg)
			}
			return nil
		})
	})

	t.Run("Handlers", func(t *testing.T) {
		want := map[string]string{"with-runc": "runc", "with-second": secondHandler}
		create(t, newPod("with-runc", "e2e-runc", v1.ResourceRequirements{}))
		create(t, newPod("with-second", "e2e-second", v1.ResourceRequirements{}))
		for name, handler := range want {
			p := waitPodsReady(t, c, ns, "app="+name, 1, 2*time.Minute)[0]
			sb := podSandbox(t, p.UID)
			st, err := shared.rt.PodSandboxStatus(ctx, sb.Id)
			if err != nil {
				t.Fatal(err)
			}
			if got := st.GetStatus().GetRuntimeHandler(); got != handler || sb.RuntimeHandler != handler {
				t.Errorf("pod %s: sandbox runtime handler %q (listed %q), want %q", name, got, sb.RuntimeHandler, handler)
			}
		}
	})

	t.Run("UnknownHandler", func(t *testing.T) {
		p := create(t, newPod("with-missing", "e2e-missing", v1.ResourceRequirements{}))
		const cause = `no runtime for "no-such-handler" is configured`
		eventually(t, 2*time.Minute, "FailedCreatePodSandBox of pod with-missing in the API", func() error {
			list, err := c.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{
				FieldSelector: "involvedObject.kind=Pod,involvedObject.name=with-missing,reason=FailedCreatePodSandBox"})
			if err != nil {
				return err
			}
			for _, e := range list.Items {
				if e.Source.Component == "kubelet" && e.Source.Host == node && e.Type == v1.EventTypeWarning && strings.Contains(e.Message, cause) {
					return nil
				}
			}
			return fmt.Errorf("%d FailedCreatePodSandBox events, none from %s saying %s", len(list.Items), node, cause)
		})
		eventually(t, time.Minute, "pod with-missing pending, saying why", func() error {
			got, err := c.CoreV1().Pods(ns).Get(context.Background(), p.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if got.Status.Phase != v1.PodPending || len(got.Status.ContainerStatuses) != 1 {
				return fmt.Errorf("phase %s, %d container statuses", got.Status.Phase, len(got.Status.ContainerStatuses))
			}
			w := got.Status.ContainerStatuses[0].State.Waiting
			if w == nil || w.Reason != "ContainerCreating" || !strings.Contains(w.Message, cause) {
				return fmt.Errorf("main: %+v", got.Status.ContainerStatuses[0].State)
			}
			return nil
		})
		label := map[string]string{podspec.LabelPodUID: string(p.UID)}
		sbs, err := shared.rt.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{LabelSelector: label})
		if err != nil {
			t.Fatal(err)
		}
		cs, err := shared.rt.ListContainers(ctx, &runtimeapi.ContainerFilter{LabelSelector: label})
		if err != nil {
			t.Fatal(err)
		}
		if len(sbs) != 0 || len(cs) != 0 {
			t.Errorf("pod with-missing has %d sandboxes and %d containers in the runtime, want none", len(sbs), len(cs))
		}
	})

	t.Run("OverheadInPodCgroup", func(t *testing.T) {
		limits := v1.ResourceList{v1.ResourceCPU: resource.MustParse("100m"), v1.ResourceMemory: resource.MustParse("32Mi")}
		create(t, newPod("with-overhead", "e2e-overhead", v1.ResourceRequirements{Requests: limits, Limits: limits}))
		p := waitPodsReady(t, c, ns, "app=with-overhead", 1, 2*time.Minute)[0]
		if p.Status.QOSClass != v1.PodQOSGuaranteed {
			t.Errorf("QoS class %s", p.Status.QOSClass)
		}
		// 32Mi + 16Mi of memory; 100m + 50m of CPU, a quota of 15ms a
		// 100ms period.
		mem, quota := podCgroupLimits(t, string(p.UID))
		if mem != 48<<20 || quota != 15000 {
			t.Errorf("pod cgroup: memory limit %d, CPU quota %d; want %d and 15000", mem, quota, 48<<20)
		}
	})
}

// podSandbox is the sandbox of the pod with uid in the shared runtime.
func podSandbox(t *testing.T, uid types.UID) *runtimeapi.PodSandbox {
	t.Helper()
	sbs, err := shared.rt.ListPodSandbox(context.Background(), &runtimeapi.PodSandboxFilter{
		LabelSelector: map[string]string{podspec.LabelPodUID: string(uid)}})
	if err != nil || len(sbs) != 1 {
		t.Fatalf("sandboxes of pod %s: %d (%v)", uid, len(sbs), err)
	}
	return sbs[0]
}

// podCgroupLimits reads the memory limit and the CPU quota (per 100ms
// period) of the pod cgroup of uid, wherever in the hierarchy the node
// put it: cgroup v1's memory.limit_in_bytes and cpu.cfs_quota_us, or
// v2's memory.max and cpu.max.
func podCgroupLimits(t *testing.T, uid string) (mem, quota int64) {
	t.Helper()
	if fileExists("/sys/fs/cgroup/cgroup.controllers") {
		dir := findPodCgroup(t, "/sys/fs/cgroup", uid)
		mem = readInt(t, filepath.Join(dir, "memory.max"))
		quota = readInt(t, filepath.Join(dir, "cpu.max")) // "15000 100000": the first field
		return mem, quota
	}
	mem = readInt(t, filepath.Join(findPodCgroup(t, "/sys/fs/cgroup/memory", uid), "memory.limit_in_bytes"))
	quota = readInt(t, filepath.Join(findPodCgroup(t, "/sys/fs/cgroup/cpu", uid), "cpu.cfs_quota_us"))
	return mem, quota
}

// findPodCgroup finds the directory pod<uid> (or the systemd driver's
// ...-pod<uid>.slice, with the uid's dashes as underscores) below root,
// at most five levels down.
func findPodCgroup(t *testing.T, root, uid string) string {
	t.Helper()
	names := []string{"pod" + uid, "pod" + strings.ReplaceAll(uid, "-", "_") + ".slice"}
	var found string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		if strings.Count(strings.TrimPrefix(path, root), "/") > 5 {
			return fs.SkipDir
		}
		for _, n := range names {
			if d.Name() == n || strings.HasSuffix(d.Name(), "-"+n) {
				found = path
				return fs.SkipAll
			}
		}
		return nil
	})
	if err != nil || found == "" {
		t.Fatalf("no cgroup of pod %s below %s (%v)", uid, root, err)
	}
	return found
}

func readInt(t *testing.T, path string) int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	field := strings.Fields(string(b))
	if len(field) == 0 {
		t.Fatalf("%s is empty", path)
	}
	n, err := strconv.ParseInt(field[0], 10, 64)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return n
}

// Without an API server there is no RuntimeClass to read: a static pod
// naming one does not run on the default handler, it stays pending with
// FailedCreatePodSandBox events and a status saying why, and the runtime
// holds nothing of it.
func TestStandaloneRuntimeClass(t *testing.T) {
	n, dir, _ := lifecycleNodelet(t, "rtclass")
	writeManifest(t, dir, "classy.yaml", `apiVersion: v1
kind: Pod
metadata: {name: classy}
spec:
  runtimeClassName: gvisor
  containers:
  - {name: main, image: "busybox:1.35", command: ["sleep", "3600"]}
`)
	const cause = `RuntimeClass "gvisor": RuntimeClasses are read from the API server, and nodelet runs without one (standalone)`
	a := n.api(t)
	waitEvent(t, a, time.Minute, "FailedCreatePodSandBox of classy-e2e",
		podEvent("classy-e2e", v1.EventTypeWarning, "FailedCreatePodSandBox", "Failed to create pod sandbox: "+cause))
	p := waitPod(t, a, "classy-e2e", time.Minute, "pending, saying why", func(p *v1.Pod) error {
		if p.Status.Phase != v1.PodPending {
			return fmt.Errorf("phase %s", p.Status.Phase)
		}
		w := containerStatus(p, "main").State.Waiting
		if w == nil || w.Reason != "ContainerCreating" || !strings.Contains(w.Message, cause) {
			return fmt.Errorf("main: %+v", containerStatus(p, "main").State)
		}
		return nil
	})
	sbs, err := shared.rt.ListPodSandbox(context.Background(), &runtimeapi.PodSandboxFilter{
		LabelSelector: map[string]string{podspec.LabelPodUID: string(p.UID)}})
	if err != nil || len(sbs) != 0 {
		t.Errorf("pod classy-e2e has %d sandboxes (%v), want none", len(sbs), err)
	}
}

// The managed containerd's configuration defines the second handler so
// that the containerd under test (2.x, or 1.6/1.7 with the older format)
// runs sandboxes with it, and refuses a handler it does not define.
func TestSecondRuntimeHandler(t *testing.T) {
	ctx := clusterContext(t, 2*time.Minute)
	name := "second-handler"
	sb := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "e2e", Uid: name},
		Hostname:     name,
		LogDirectory: filepath.Join(shared.work, "second-handler-logs"),
		Linux:        &runtimeapi.LinuxPodSandboxConfig{},
	}
	id, err := shared.rt.RunPodSandbox(ctx, sb, secondHandler)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = shared.rt.StopPodSandbox(context.Background(), id)
		_ = shared.rt.RemovePodSandbox(context.Background(), id)
	})
	st, err := shared.rt.PodSandboxStatus(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if st.GetStatus().GetRuntimeHandler() != secondHandler || st.GetStatus().GetState() != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Errorf("sandbox handler %q, state %s; want %s, ready", st.GetStatus().GetRuntimeHandler(), st.GetStatus().GetState(), secondHandler)
	}
	sb.Metadata = &runtimeapi.PodSandboxMetadata{Name: name + "-missing", Namespace: "e2e", Uid: name + "-missing"}
	if id, err := shared.rt.RunPodSandbox(ctx, sb, "no-such-handler"); err == nil || !strings.Contains(err.Error(), "no-such-handler") {
		t.Errorf("a handler containerd lacks: sandbox %q, %v", id, err)
	}
}
