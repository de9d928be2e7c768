//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/internal/managed/containerd"
)

// draDriverName is upstream's test driver's default name.
const draDriverName = "test-driver.cdi.k8s.io"

// draDriverProc is upstream's DRA test driver (test/e2e/dra/test-driver,
// built from the k8s.io/kubernetes module of test/cluster) running as the
// kubelet plugin of one node.
type draDriverProc struct {
	driverProcess
	bin, rootDir, cdiDir, node, kubeconfig string
	log                                    *os.File
}

// startDRADriver builds and runs the test driver for node: it registers
// in <rootDir>/plugins_registry, publishes two devices in a ResourceSlice
// of the node with the admin's credentials, and writes its CDI specs in
// cdiDir, where the node's containerd reads them.
func startDRADriver(t *testing.T, cp *controlPlane, rootDir, node, cdiDir string) *draDriverProc {
	t.Helper()
	dir := filepath.Join(shared.work, "dra-"+node)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	d := &draDriverProc{driverProcess: driverProcess{name: "the DRA test driver"}, bin: filepath.Join(dir, "dra-test-driver"), rootDir: rootDir, node: node,
		cdiDir: cdiDir, kubeconfig: cp.AdminKubeconfig}
	if err := goBuild(filepath.Join(shared.repoRoot, "test", "cluster"), d.bin, "k8s.io/kubernetes/test/e2e/dra/test-driver", false); err != nil {
		t.Fatal(err)
	}
	log, err := os.Create(filepath.Join(dir, "driver.log"))
	if err != nil {
		t.Fatal(err)
	}
	d.log = log
	d.start(t)
	t.Cleanup(func() {
		d.stop(t)
		log.Close()
		if t.Failed() {
			t.Logf("DRA test driver log (last 40 lines):\n%s", tail(log.Name(), 40))
		}
	})
	return d
}

func (d *draDriverProc) start(t *testing.T) {
	t.Helper()
	// The driver makes <datadir> but not its own <datadir>/<driver>, where
	// it listens: upstream's DaemonSet mounts that as a hostPath with
	// DirectoryOrCreate.
	if err := os.MkdirAll(filepath.Join(d.rootDir, "plugins", draDriverName), 0o750); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(d.bin, "--kubeconfig", d.kubeconfig, "-v", "5", "kubelet-plugin",
		"--node-name", d.node, "--num-devices", "2", "--cdi-dir", d.cdiDir,
		"--plugin-registration-path", filepath.Join(d.rootDir, "plugins_registry"),
		"--datadir", filepath.Join(d.rootDir, "plugins"))
	cmd.Stdout, cmd.Stderr = d.log, d.log
	d.run(t, cmd)
}

// cdiSpecs lists the driver's CDI spec files of claim uid.
func (d *draDriverProc) cdiSpecs(uid string) []string {
	m, _ := filepath.Glob(filepath.Join(d.cdiDir, draDriverName+"-"+uid+"-*.json"))
	return m
}

// A pod with a ResourceClaim from a template, on a nodelet node with
// upstream's DRA test driver: the driver registers through the plugin
// watcher, the scheduler allocates one of its devices, nodelet prepares
// the claim (NodePrepareResources) before the sandbox and the container
// that names the claim gets the CDI device's environment from the
// runtime, the one that does not gets nothing; the claim is checkpointed;
// deleting the pod unprepares it (the driver removes its CDI spec). With
// the driver gone, a new pod stays pending with the kubelet's
// FailedPrepareDynamicResources event and starts once the driver is back.
func TestClusterDRA(t *testing.T) {
	cp := startCluster(t)
	cp.logsOnFailure(t)
	const node = "dra-a"
	n := joinNode(t, cp, node)
	drv := startDRADriver(t, cp, n.rootDir, node, shared.containerd.Config().CDISpecDir())
	c := cp.Admin
	ctx := clusterContext(t, 10*time.Minute)

	const ns = "dra-test"
	draPod := draObjects(t, ctx, c, node, ns)

	if _, err := c.CoreV1().Pods(ns).Create(ctx, draPod("gpu"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := waitPodsReady(t, c, ns, "app=gpu", 1, 3*time.Minute)[0]
	claimName := claimOf(t, &pod)
	claim, err := c.ResourceV1().ResourceClaims(ns).Get(ctx, claimName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for container, want := range map[string]string{"with": "user_a=b", "without": "user_a="} {
		eventually(t, time.Minute, "the env of "+container, func() error {
			out, err := c.CoreV1().Pods(ns).GetLogs(pod.Name, &v1.PodLogOptions{Container: container}).DoRaw(ctx)
			if err != nil || strings.TrimSpace(string(out)) != want {
				return fmt.Errorf("%q, %v; want %q", out, err, want)
			}
			return nil
		})
	}
	if specs := drv.cdiSpecs(string(claim.UID)); len(specs) != 1 {
		t.Errorf("CDI specs of the claim: %q", specs)
	}
	state, err := os.ReadFile(filepath.Join(n.rootDir, "dra_manager_state"))
	if err != nil || !strings.Contains(string(state), claimName) || !strings.Contains(string(state), string(pod.UID)) {
		t.Errorf("dra_manager_state %q, %v: want the claim and the pod", state, err)
	}

	if n := drv.prepares(t, string(claim.UID)); n != 1 {
		t.Errorf("the driver prepared the claim %d times, want 1", n)
	}

	// The pod-resources API lists the claim's device and CDI device for
	// the container that names it, nothing for the other.
	resp, err := podResources(t, n.rootDir).Get(ctx, &podresourcesapi.GetPodResourcesRequest{PodName: pod.Name, PodNamespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	for _, cr := range resp.GetPodResources().GetContainers() {
		var got []string
		for _, dr := range cr.GetDynamicResources() {
			for _, r := range dr.GetClaimResources() {
				for _, cdi := range r.GetCdiDevices() {
					got = append(got, dr.GetClaimName()+"/"+r.GetDriverName()+"/"+r.GetDeviceName()+"/"+cdi.GetName())
				}
			}
		}
		want := []string(nil)
		if cr.GetName() == "with" {
			want = []string{claimName + "/" + draDriverName + "/" + claim.Status.Allocation.Devices.Results[0].Device + "/" +
				draDriverName + "/test=claim-" + string(claim.UID) + "-my-device"}
		}
		if !slices.Equal(got, want) {
			t.Errorf("pod-resources of container %s: %q, want %q", cr.GetName(), got, want)
		}
	}

	// The cost of the pod's start: the kubelet's DRA metrics of its one
	// PrepareResources and the driver's call in it.
	api := n.proc.api(t)
	prep := map[string]string{"operation_name": "PrepareResources", "is_error": "false"}
	sum, err1 := api.metric("/metrics", "dra_operations_duration_seconds_sum", prep)
	count, err2 := api.metric("/metrics", "dra_operations_duration_seconds_count", prep)
	call := map[string]string{"driver_name": draDriverName, "method_name": "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources", "grpc_status_code": "OK"}
	grpcSum, err3 := api.metric("/metrics", "dra_grpc_operations_duration_seconds_sum", call)
	if err := errors.Join(err1, err2, err3); err != nil || count != 1 {
		t.Errorf("DRA metrics: %d PrepareResources, %v", int(count), err)
	} else {
		t.Logf("prepare cost of the pod's start: %.1f ms (PrepareResources of one claim), of which %.1f ms the driver's NodePrepareResources",
			sum*1000, grpcSum*1000)
	}

	// A restarted nodelet keeps the prepared claim from its checkpoint:
	// the pod keeps running, nothing is prepared again, and deleting the
	// pod afterwards still unprepares the claim.
	before := containerIDs(&pod)
	if err := n.proc.stop(t); err != nil {
		t.Logf("nodelet exit: %v", err)
	}
	n.start(t)
	waitNodeReady(t, c, node, 2*time.Minute)
	eventually(t, 2*time.Minute, "the restarted nodelet's status of pod gpu", func() error {
		p, err := c.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		ready := slices.ContainsFunc(p.Status.Conditions, func(c v1.PodCondition) bool { return c.Type == v1.PodReady && c.Status == v1.ConditionTrue })
		if after := containerIDs(p); !ready || after != before {
			return fmt.Errorf("ready %v, containers %s, want %s", ready, after, before)
		}
		// Only the new nodelet's sync of the pod registers the metric.
		if _, err := n.proc.api(t).metric("/metrics", "kubelet_pod_worker_duration_seconds_count", nil); err != nil {
			return err
		}
		return nil
	})

	// Deleting the pod unprepares the claim.
	if err := c.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, "the claim unprepared", func() error {
		if specs := drv.cdiSpecs(string(claim.UID)); len(specs) != 0 {
			return fmt.Errorf("CDI specs still there: %q", specs)
		}
		state, err := os.ReadFile(filepath.Join(n.rootDir, "dra_manager_state"))
		if err != nil || strings.Contains(string(state), claimName) {
			return fmt.Errorf("dra_manager_state %q, %v", state, err)
		}
		return nil
	})
	if n := drv.prepares(t, string(claim.UID)); n != 1 {
		t.Errorf("the driver prepared the claim %d times across nodelet's restart, want 1", n)
	}

	// Without the driver: pending, with the kubelet's event; then it
	// starts once the driver registers again.
	drv.stop(t)
	if _, err := c.CoreV1().Pods(ns).Create(ctx, draPod("late"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, "FailedPrepareDynamicResources on pod late", func() error {
		evs, err := c.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=late,reason=FailedPrepareDynamicResources"})
		if err != nil {
			return err
		}
		for _, e := range evs.Items {
			if strings.Contains(e.Message, "Failed to prepare dynamic resources: ") && strings.Contains(e.Message, "DRA driver "+draDriverName+" is not registered") {
				return nil
			}
		}
		return fmt.Errorf("events %+v", evs.Items)
	})
	// Pending as the kubelet shows it (no sandbox: ContainerCreating),
	// while a pod without claims starts on the same node.
	eventually(t, time.Minute, "pod late Pending in ContainerCreating", func() error {
		p, err := c.CoreV1().Pods(ns).Get(ctx, "late", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase != v1.PodPending || len(p.Status.ContainerStatuses) != 2 {
			return fmt.Errorf("phase %s, %d container statuses", p.Status.Phase, len(p.Status.ContainerStatuses))
		}
		for _, cs := range p.Status.ContainerStatuses {
			if cs.State.Waiting == nil || cs.State.Waiting.Reason != "ContainerCreating" {
				return fmt.Errorf("container %s: %+v", cs.Name, cs.State)
			}
		}
		return nil
	})
	plain := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "plain", Namespace: ns, Labels: map[string]string{"app": "plain"}},
		Spec: v1.PodSpec{NodeSelector: map[string]string{"kubernetes.io/hostname": node}, TerminationGracePeriodSeconds: ptr.To[int64](2),
			Containers: []v1.Container{shellContainer("main", "echo up")}}}
	if _, err := c.CoreV1().Pods(ns).Create(ctx, plain, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPodsReady(t, c, ns, "app=plain", 1, 2*time.Minute)
	drv.start(t)
	late := waitPodsReady(t, c, ns, "app=late", 1, 3*time.Minute)[0]
	lateClaim, err := c.ResourceV1().ResourceClaims(ns).Get(ctx, claimOf(t, &late), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Deleted while the driver runs, so that nothing of it stays prepared.
	if err := c.CoreV1().Pods(ns).Delete(ctx, late.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, "the late claim unprepared", func() error {
		if specs := drv.cdiSpecs(string(lateClaim.UID)); len(specs) != 0 {
			return fmt.Errorf("CDI specs still there: %q", specs)
		}
		return nil
	})
}

// On Debian's containerd 1.6, which has no CDI (its CRI plugin drops
// the CDIDevices of a container's config): nodelet prepares the claim,
// then refuses to create the container that names it, with a
// CreateContainerConfigError that says the runtime does not inject CDI
// devices, instead of starting it without its device; the pod's other
// container runs; deleting the pod unprepares the claim.
func TestClusterDRAContainerd16(t *testing.T) {
	if _, err := os.Stat(debianContainerd); err != nil {
		t.Skipf("no distribution containerd: %v", err)
	}
	cp := startCluster(t)
	cp.logsOnFailure(t)
	const node = "dra-16"
	root := filepath.Join(shared.work, "root-"+node)
	startManagedClusterNode(t, cp, node, "nldra16", filepath.Join(shared.work, "cni-"+node), "--containerd-binary", debianContainerd)
	waitNodeReady(t, cp.Admin, node, 2*time.Minute)
	drv := startDRADriver(t, cp, root, node, containerd.DefaultConfig(root).CDISpecDir())
	c := cp.Admin
	ctx := clusterContext(t, 10*time.Minute)
	const ns = "dra-16"
	draPod := draObjects(t, ctx, c, node, ns)

	if _, err := c.CoreV1().Pods(ns).Create(ctx, draPod("gpu"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var pod *v1.Pod
	eventually(t, 3*time.Minute, "container with refused, without running", func() (err error) {
		pod, err = c.CoreV1().Pods(ns).Get(ctx, "gpu", metav1.GetOptions{})
		if err != nil {
			return err
		}
		states := map[string]v1.ContainerState{}
		for _, cs := range pod.Status.ContainerStatuses {
			states[cs.Name] = cs.State
		}
		w := states["with"].Waiting
		if w == nil || w.Reason != "CreateContainerConfigError" || !strings.Contains(w.Message, "the container runtime does not inject CDI devices: containerd's CRI config has no enable_cdi") {
			return fmt.Errorf("with: %+v", states["with"])
		}
		if states["without"].Running == nil {
			return fmt.Errorf("without: %+v", states["without"])
		}
		return nil
	})
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == "with" {
			t.Logf("container with: %s: %s", cs.State.Waiting.Reason, cs.State.Waiting.Message)
		}
	}
	claim, err := c.ResourceV1().ResourceClaims(ns).Get(ctx, claimOf(t, pod), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n := drv.prepares(t, string(claim.UID)); n != 1 {
		t.Errorf("the driver prepared the claim %d times, want 1", n)
	}
	if err := c.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, "the claim unprepared", func() error {
		if specs := drv.cdiSpecs(string(claim.UID)); len(specs) != 0 {
			return fmt.Errorf("CDI specs still there: %q", specs)
		}
		return nil
	})
}

// prepares counts the driver's NodePrepareResources of claim uid, from
// the line its every preparation logs (-v 3).
func (d *draDriverProc) prepares(t *testing.T, uid string) int {
	t.Helper()
	raw, err := os.ReadFile(d.log.Name())
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.Contains(line, `"CDI file(s) created"`) && strings.Contains(line, "claim-"+uid+"-") {
			n++
		}
	}
	return n
}

// containerIDs are the pod's containers' IDs, in order.
func containerIDs(p *v1.Pod) string {
	var ids []string
	for _, s := range p.Status.ContainerStatuses {
		ids = append(ids, s.Name+"="+s.ContainerID)
	}
	return strings.Join(ids, ",")
}

// draObjects waits for the driver's ResourceSlice of node, makes the
// DeviceClass of the driver's devices, namespace ns and a claim template
// of one device with the driver's opaque config {"a":"b"} (its CDI spec
// then sets user_a=b), and returns pods bound to node whose container
// "with" uses the claim and "without" does not; each prints $user_a.
func draObjects(t *testing.T, ctx context.Context, c kubernetes.Interface, node, ns string) func(name string) *v1.Pod {
	t.Helper()
	eventually(t, 2*time.Minute, "the driver's ResourceSlice of "+node, func() error {
		slices, err := c.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, s := range slices.Items {
			if s.Spec.Driver == draDriverName && s.Spec.NodeName != nil && *s.Spec.NodeName == node && len(s.Spec.Devices) == 2 {
				return nil
			}
		}
		return fmt.Errorf("%d slices, none of %s with 2 devices", len(slices.Items), node)
	})

	class := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "dra-e2e"}, Spec: resourceapi.DeviceClassSpec{
		Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "` + draDriverName + `"`}}}}}
	if _, err := c.ResourceV1().DeviceClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.ResourceV1().DeviceClasses().Delete(context.Background(), class.Name, metav1.DeleteOptions{})
	})
	clusterNamespace(t, c, ns)
	tmpl := &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: "one-device", Namespace: ns},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "my-device", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class.Name}}},
			Config: []resourceapi.DeviceClaimConfiguration{{DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
				Driver: draDriverName, Parameters: runtime.RawExtension{Raw: []byte(`{"a":"b"}`)}}}}},
		}}}}
	if _, err := c.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, tmpl, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	draPod := func(name string) *v1.Pod {
		with := shellContainer("with", `echo "user_a=$user_a"`)
		with.Resources.Claims = []v1.ResourceClaim{{Name: "dev"}}
		return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": name}},
			Spec: v1.PodSpec{NodeSelector: map[string]string{"kubernetes.io/hostname": node}, TerminationGracePeriodSeconds: ptr.To[int64](2),
				ResourceClaims: []v1.PodResourceClaim{{Name: "dev", ResourceClaimTemplateName: ptr.To(tmpl.Name)}},
				Containers:     []v1.Container{with, shellContainer("without", `echo "user_a=$user_a"`)}}}
	}

	return draPod
}

// claimOf is the name of the ResourceClaim made for the pod's claim "dev".
func claimOf(t *testing.T, pod *v1.Pod) string {
	t.Helper()
	for _, s := range pod.Status.ResourceClaimStatuses {
		if s.Name == "dev" && s.ResourceClaimName != nil {
			return *s.ResourceClaimName
		}
	}
	t.Fatalf("pod %s has no claim in its status: %+v", pod.Name, pod.Status.ResourceClaimStatuses)
	return ""
}
