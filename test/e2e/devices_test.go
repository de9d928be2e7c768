//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/internal/base/testutil"
)

// sampleResource is what upstream's sample device plugin serves: two
// devices, Dev-1 and Dev-2, each mounted at /tmp/<id> from the host's
// /tmp/<id>.
const sampleResource = "example.com/resource"

// samplePluginBin is upstream's test/images/sample-device-plugin: from
// $NODELET_SAMPLE_DEVICE_PLUGIN, else built (cached) by
// hack/build-upstream.sh.
func samplePluginBin(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv("NODELET_SAMPLE_DEVICE_PLUGIN"); bin != "" {
		return bin
	}
	out, err := exec.Command(filepath.Join(shared.repoRoot, "hack", "build-upstream.sh"), "sample-device-plugin").Output()
	if err != nil {
		t.Fatalf("sample-device-plugin: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// startSamplePlugin runs the sample device plugin for the nodelet of
// rootDir. The plugin knows only the kubelet's fixed directory
// /var/lib/kubelet/device-plugins: it runs where that directory is the
// nodelet's <root-dir>/device-plugins (inDevicePluginDir).
func startSamplePlugin(t *testing.T, rootDir string) (stop func()) {
	t.Helper()
	dir := filepath.Join(rootDir, "device-plugins")
	eventually(t, 30*time.Second, "the registration socket", func() error {
		_, err := os.Stat(filepath.Join(dir, "kubelet.sock"))
		return err
	})
	cmd := inDevicePluginDir(dir, samplePluginBin(t))
	out := &testutil.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	stop = sync.OnceFunc(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("sample device plugin output:\n%s", out.String())
		}
	})
	return stop
}

// inDevicePluginDir runs argv in a mount namespace of its own where
// upstream's fixed device plugin directory, /var/lib/kubelet/device-plugins
// (pluginapi.DevicePluginPath, which upstream's plugins and the kubelet
// know), is dir, an agent's <root-dir>/device-plugins. The directory is
// mounted over a tmpfs on /var/lib, so that nothing of the host's /var/lib
// is touched or seen, and the mounts end with the namespace's last
// process: several agents on this machine never meet each other's
// plugins, and nothing is left to clean up. unshare and sh exec argv: the
// process started is argv's.
func inDevicePluginDir(dir string, argv ...string) *exec.Cmd {
	const script = `mount -t tmpfs -o mode=0755 tmpfs /var/lib && mkdir -p /var/lib/kubelet/device-plugins &&
mount --bind "$1" /var/lib/kubelet/device-plugins && shift && exec "$@"`
	return exec.Command("unshare", append([]string{"--mount", "--propagation", "private", "sh", "-c", script, "sh", dir}, argv...)...)
}

// podResources asks the nodelet's pod-resources API, as a monitoring agent
// does.
func podResources(t *testing.T, rootDir string) podresourcesapi.PodResourcesListerClient {
	t.Helper()
	// Calls wait for the socket, which a restarted nodelet makes again.
	conn, err := grpc.NewClient("unix://"+filepath.Join(rootDir, "pod-resources", "kubelet.sock"),
		grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithDefaultCallOptions(grpc.WaitForReady(true)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return podresourcesapi.NewPodResourcesListerClient(conn)
}

// devicesOf is the devices the pod-resources API lists for a container.
func devicesOf(ctx context.Context, c podresourcesapi.PodResourcesListerClient, pod, container string) ([]string, error) {
	resp, err := c.Get(ctx, &podresourcesapi.GetPodResourcesRequest{PodName: pod, PodNamespace: "default"})
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, cr := range resp.GetPodResources().GetContainers() {
		if cr.GetName() != container {
			continue
		}
		for _, d := range cr.GetDevices() {
			if d.GetResourceName() == sampleResource {
				ids = append(ids, d.GetDeviceIds()...)
			}
		}
	}
	return ids, nil
}

const devicePod = `apiVersion: v1
kind: Pod
metadata: {name: %s}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: busybox:1.35
    command: ["sleep", "3600"]
    resources: {limits: {%s: "%d"}}
`

// A device plugin registers with nodelet; a pod asking for one device
// gets one of its devices, whose mount the plugin's Allocate answered is
// in the container, and the pod-resources API lists it; a pod asking for
// more devices than are free is refused with the kubelet's
// UnexpectedAdmissionError; after a restart of nodelet the running pod
// keeps its container and its device (the checkpoint).
func TestDevicePluginAllocation(t *testing.T) {
	const name = "devices"
	rootDir := filepath.Join(shared.work, "root-"+name)
	n, dir, args := lifecycleNodelet(t, name)
	startSamplePlugin(t, rootDir)
	pr := podResources(t, rootDir)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	eventually(t, time.Minute, "the plugin's devices", func() error {
		resp, err := pr.GetAllocatableResources(ctx, &podresourcesapi.AllocatableResourcesRequest{})
		if err != nil {
			return err
		}
		var ids []string
		for _, d := range resp.GetDevices() {
			if d.GetResourceName() == sampleResource {
				ids = append(ids, d.GetDeviceIds()...)
			}
		}
		slices.Sort(ids)
		if !slices.Equal(ids, []string{"Dev-1", "Dev-2"}) {
			return fmt.Errorf("allocatable devices %v", ids)
		}
		return nil
	})

	start := time.Now()
	writeManifest(t, dir, "dev.yaml", fmt.Sprintf(devicePod, "dev", sampleResource, 1))
	waitContainerRunning(t, 2*time.Minute, "dev-e2e", "main")
	t.Logf("a pod with one device ran %v after its manifest was written", time.Since(start))
	// The device allocation's share of that start: the plugin's Allocate
	// as nodelet timed it (the kubelet's metric).
	api := n.api(t)
	calls, err := api.metric("/metrics", "kubelet_device_plugin_alloc_duration_seconds_count", map[string]string{"resource_name": sampleResource})
	if err != nil || calls != 1 {
		t.Errorf("kubelet_device_plugin_alloc_duration_seconds_count %v (%v), want one Allocate", calls, err)
	}
	if took, err := api.metric("/metrics", "kubelet_device_plugin_alloc_duration_seconds_sum", map[string]string{"resource_name": sampleResource}); err == nil {
		t.Logf("the pod's device allocation (Allocate over the plugin's socket): %v", time.Duration(took*float64(time.Second)))
	}
	c, err := runningContainer(ctx, shared.rt, "dev-e2e", "main")
	if err != nil {
		t.Fatal(err)
	}
	ids, err := devicesOf(ctx, pr, "dev-e2e", "main")
	if err != nil || len(ids) != 1 {
		t.Fatalf("pod-resources devices of dev-e2e: %v, %v; want one", ids, err)
	}
	st, err := shared.rt.ContainerStatus(ctx, c.Id)
	if err != nil {
		t.Fatal(err)
	}
	mounted := false
	for _, m := range st.GetStatus().GetMounts() {
		mounted = mounted || m.GetContainerPath() == "/tmp/"+ids[0] && m.GetHostPath() == "/tmp/"+ids[0]
	}
	if !mounted {
		t.Errorf("container mounts %v, want the plugin's /tmp/%s", st.GetStatus().GetMounts(), ids[0])
	}

	// One device is left: a pod asking for two is refused at admission.
	writeManifest(t, dir, "two.yaml", fmt.Sprintf(devicePod, "two", sampleResource, 2))
	waitPod(t, api, "two-e2e", time.Minute, "refused", hasPhase(v1.PodFailed, "UnexpectedAdmissionError"))

	// A restarted nodelet keeps the running pod's container and device.
	if err := n.stop(t); err != nil {
		t.Fatalf("nodelet exit: %v", err)
	}
	api = startNodelet(t, args...).api(t)
	waitPod(t, api, "dev-e2e", time.Minute, "adopted", runsContainer("main", c.Id))
	after, err := devicesOf(ctx, pr, "dev-e2e", "main")
	if err != nil || !slices.Equal(after, ids) {
		t.Errorf("devices after the restart %v (%v), want %v", after, err, ids)
	}
	if got := len(instances(t, "dev-e2e", "main")); got != 1 {
		t.Errorf("%d instances of the device pod's container after the restart, want 1", got)
	}
}

// nodeDevices is the Node's capacity and allocatable of sampleResource
// (-1: absent).
func nodeDevices(ctx context.Context, cp *controlPlane, node string) (capacity, allocatable int64, err error) {
	n, err := cp.Admin.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return 0, 0, err
	}
	capacity, allocatable = -1, -1
	if q, ok := n.Status.Capacity[sampleResource]; ok {
		capacity = q.Value()
	}
	if q, ok := n.Status.Allocatable[sampleResource]; ok {
		allocatable = q.Value()
	}
	return capacity, allocatable, nil
}

// In cluster mode the plugin's devices are the Node's capacity and
// allocatable, the scheduler places a pod asking for one on the node and
// it runs; when the plugin dies, allocatable drops to zero while capacity
// stays, and the running pod keeps running.
func TestClusterDevicePlugin(t *testing.T) {
	cp := startCluster(t)
	cp.logsOnFailure(t)
	const node = "devices-a"
	n := joinNode(t, cp, node)
	stop := startSamplePlugin(t, n.rootDir)
	c := cp.Admin
	ctx := clusterContext(t, 10*time.Minute)
	want := func(wantCap, wantAlloc int64) func() error {
		return func() error {
			capacity, alloc, err := nodeDevices(ctx, cp, node)
			if err != nil {
				return err
			}
			if capacity != wantCap || alloc != wantAlloc {
				return fmt.Errorf("capacity %d allocatable %d, want %d and %d", capacity, alloc, wantCap, wantAlloc)
			}
			return nil
		}
	}
	eventually(t, 2*time.Minute, "the Node's devices", want(2, 2))

	const ns = "devices-test"
	clusterNamespace(t, c, ns)
	ct := shellContainer("main", "ls /tmp/Dev-*")
	ct.Resources.Limits = v1.ResourceList{sampleResource: resource.MustParse("1")}
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "gpu", Namespace: ns, Labels: map[string]string{"app": "gpu"}},
		Spec: v1.PodSpec{TerminationGracePeriodSeconds: ptr.To[int64](1), Containers: []v1.Container{ct},
			NodeSelector: map[string]string{"kubernetes.io/hostname": node}}}
	if _, err := c.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPodsReady(t, c, ns, "app=gpu", 1, 2*time.Minute)

	stop()
	eventually(t, 2*time.Minute, "allocatable zero once the plugin is gone", want(2, 0))
	got, err := c.CoreV1().Pods(ns).Get(ctx, "gpu", metav1.GetOptions{})
	if err != nil || got.Status.Phase != v1.PodRunning {
		t.Errorf("the pod after the plugin died: %v, %v; want Running", got.Status.Phase, err)
	}
}
