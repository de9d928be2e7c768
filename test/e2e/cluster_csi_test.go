//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/ptr"
)

const (
	csiDriverName  = "hostpath.csi.nodelet.test"
	csiTopologyKey = "topology.hostpath.csi.nodelet.test/node"
)

// csiDriverProc is test/csihostpath running for one node.
type csiDriverProc struct {
	driverProcess
	bin, rootDir, state, calls, nodeID string
}

// startCSIDriver builds test/csihostpath and runs it for the node whose
// root directory is rootDir. Started before the node, it is stopped after
// it; then whatever is still mounted below rootDir or its state directory
// is unmounted, so that nothing of the test stays mounted.
func startCSIDriver(t *testing.T, rootDir, nodeID string) *csiDriverProc {
	t.Helper()
	dir := filepath.Join(shared.work, "csi-"+nodeID)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	d := &csiDriverProc{driverProcess: driverProcess{name: "csihostpath"}, bin: filepath.Join(dir, "csihostpath"), rootDir: rootDir, state: filepath.Join(dir, "state"),
		calls: filepath.Join(dir, "calls.log"), nodeID: nodeID}
	if err := goBuild(shared.repoRoot, d.bin, "./test/csihostpath", false); err != nil {
		t.Fatal(err)
	}
	os.Remove(d.calls)
	d.start(t)
	t.Cleanup(func() {
		d.stop(t)
		unmountAllBelow(t, rootDir)
		unmountAllBelow(t, d.state)
	})
	return d
}

func (d *csiDriverProc) start(t *testing.T) {
	t.Helper()
	out := &strings.Builder{}
	cmd := exec.Command(d.bin, "-root-dir", d.rootDir, "-state-dir", d.state, "-node-id", d.nodeID, "-call-log", d.calls)
	cmd.Stderr = out
	d.run(t, cmd)
}

// driverProcess is a node plugin the test runs beside a nodelet (a CSI or
// DRA driver), as a DaemonSet's pod would run it.
type driverProcess struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
}

// run starts cmd and follows its end.
func (p *driverProcess) run(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p.cmd, p.done = cmd, make(chan struct{})
	go func() { cmd.Wait(); close(p.done) }()
}

// stop sends SIGTERM (the driver removes its sockets) and waits.
func (p *driverProcess) stop(t *testing.T) {
	select {
	case <-p.done:
		return
	default:
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
		t.Errorf("%s did not exit within 30s of SIGTERM", p.name)
	}
}

// callCount counts the lines of the call log that start with prefix.
func (d *csiDriverProc) callCount(t *testing.T, prefix string) int {
	t.Helper()
	f, err := os.Open(d.calls)
	if os.IsNotExist(err) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), prefix) {
			n++
		}
	}
	return n
}

// unmountAllBelow unmounts (lazily) every mount point below dir.
func unmountAllBelow(t *testing.T, dir string) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return
	}
	var points []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			points = append(points, f[4])
		}
	}
	slices.Reverse(points)
	for _, p := range points {
		if err := syscall.Unmount(p, syscall.MNT_DETACH); err == nil {
			t.Logf("unmounted leftover %s", p)
		}
	}
}

// A CSI node plugin on a cluster node, as the kubelet runs one: it
// registers through <root-dir>/plugins_registry and the CSINode object and
// the Node's topology label show it; a pod's inline (ephemeral) csi volume
// is published at the kubelet's path with the pod's identity, written
// through to the driver's storage, and survives a nodelet restart with no
// second NodePublishVolume; deleting the pod unpublishes it; a driver that
// went away gives a pod FailedMount events with the kubelet's words, and
// the pod starts once the driver is back.
func TestClusterCSI(t *testing.T) {
	cp := startCluster(t)
	cp.logsOnFailure(t)
	const node = "csi-a"
	rootDir := filepath.Join(shared.work, "root-"+node)
	drv := startCSIDriver(t, rootDir, node)
	n := joinNode(t, cp, node)
	c := cp.Admin
	ctx := clusterContext(t, 10*time.Minute)

	// Registration: the CSINode object and the Node.
	waitCSINode(t, c, node, []string{csiDriverName})
	cn, err := c.StorageV1().CSINodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if d := cn.Spec.Drivers[0]; d.NodeID != node || !slices.Equal(d.TopologyKeys, []string{csiTopologyKey}) ||
		d.Allocatable == nil || d.Allocatable.Count == nil || *d.Allocatable.Count != 10 {
		t.Errorf("CSINode driver %+v", d)
	}
	if len(cn.OwnerReferences) != 1 || cn.OwnerReferences[0].Kind != "Node" || cn.OwnerReferences[0].Name != node {
		t.Errorf("CSINode owners %+v", cn.OwnerReferences)
	}
	nodeObj, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if nodeObj.Labels[csiTopologyKey] != node {
		t.Errorf("Node labels %v, want %s=%s", nodeObj.Labels, csiTopologyKey, node)
	}
	if got, want := nodeObj.Annotations["csi.volume.kubernetes.io/nodeid"], fmt.Sprintf(`{%q:%q}`, csiDriverName, node); got != want {
		t.Errorf("Node annotation nodeid %q, want %q", got, want)
	}

	// The CSIDriver object: no attach, the pod's identity on mount,
	// persistent and inline volumes.
	driverObj := &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: csiDriverName}, Spec: storagev1.CSIDriverSpec{
		AttachRequired: ptr.To(false), PodInfoOnMount: ptr.To(true),
		VolumeLifecycleModes: []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent, storagev1.VolumeLifecycleEphemeral},
	}}
	if _, err := c.StorageV1().CSIDrivers().Create(ctx, driverObj, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.StorageV1().CSIDrivers().Delete(context.Background(), csiDriverName, metav1.DeleteOptions{}) })

	const ns = "csi-test"
	clusterNamespace(t, c, ns)
	inlinePod := func(name, script string) *v1.Pod {
		return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": name}},
			Spec: v1.PodSpec{NodeSelector: map[string]string{"kubernetes.io/hostname": node},
				TerminationGracePeriodSeconds: ptr.To[int64](2),
				Volumes: []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{CSI: &v1.CSIVolumeSource{
					Driver: csiDriverName, VolumeAttributes: map[string]string{"purpose": "e2e"}}}}},
				Containers: []v1.Container{func() v1.Container {
					ct := shellContainer("app", script)
					ct.VolumeMounts = []v1.VolumeMount{{Name: "data", MountPath: "/data"}}
					return ct
				}()}}}
	}

	// A pod writes through its inline volume.
	if _, err := c.CoreV1().Pods(ns).Create(ctx, inlinePod("writer", "echo csi-data > /data/file"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	writer := waitPodsReady(t, c, ns, "app=writer", 1, 2*time.Minute)[0]
	handle := fmt.Sprintf("csi-%x", sha256.Sum256([]byte(string(writer.UID)+"data")))
	target := filepath.Join(rootDir, "pods", string(writer.UID), "volumes", "kubernetes.io~csi", "data", "mount")
	if !isMounted(t, target) {
		t.Fatalf("%s is not a mount point", target)
	}
	eventually(t, time.Minute, "the pod's file in the driver's storage", func() error {
		b, err := os.ReadFile(filepath.Join(drv.state, handle, "file"))
		if err != nil || string(b) != "csi-data\n" {
			return fmt.Errorf("%q, %v", b, err)
		}
		return nil
	})
	if got := drv.callCount(t, "NodePublishVolume "+handle); got != 1 {
		t.Errorf("%d NodePublishVolume calls for %s, want 1", got, handle)
	}
	if got := drv.callCount(t, "NodeStageVolume"); got != 0 {
		t.Errorf("an inline volume was staged (%d calls)", got)
	}
	// The driver's stats of the volume (NodeGetVolumeStats) in
	// /stats/summary.
	api := n.proc.api(t)
	eventually(t, time.Minute, "writer's volume in /stats/summary", func() error {
		raw, err := api.get("/stats/summary")
		if err != nil {
			return err
		}
		var sum statsapi.Summary
		if err := json.Unmarshal(raw, &sum); err != nil {
			return err
		}
		for _, p := range sum.Pods {
			if p.PodRef.UID != string(writer.UID) {
				continue
			}
			for _, v := range p.VolumeStats {
				if v.Name == "data" && v.CapacityBytes != nil && *v.CapacityBytes > 0 && v.UsedBytes != nil && v.Inodes != nil {
					return nil
				}
			}
			return fmt.Errorf("volume stats %+v", p.VolumeStats)
		}
		return fmt.Errorf("no stats of pod writer")
	})
	if drv.callCount(t, "NodeGetVolumeStats "+handle) == 0 {
		t.Error("no NodeGetVolumeStats call")
	}

	// A restarted nodelet keeps the volume as it is: still mounted, no
	// second NodePublishVolume, nothing unpublished. A second pod started
	// after the restart shows the new nodelet has synced its pods.
	if err := n.proc.stop(t); err != nil {
		t.Logf("nodelet exit: %v", err)
	}
	n.start(t)
	waitNodeReady(t, c, node, 2*time.Minute)
	if _, err := c.CoreV1().Pods(ns).Create(ctx, inlinePod("second", "true"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPodsReady(t, c, ns, "app=second", 1, 2*time.Minute)
	if !isMounted(t, target) {
		t.Errorf("%s is not mounted after the restart", target)
	}
	if got := drv.callCount(t, "NodePublishVolume "+handle); got != 1 {
		t.Errorf("%d NodePublishVolume calls for %s after the restart, want 1", got, handle)
	}
	if got := drv.callCount(t, "NodeUnpublishVolume "+handle); got != 0 {
		t.Errorf("the restart unpublished %s", handle)
	}
	out, err := kubectl(t, cp, 30*time.Second, "-n", ns, "exec", "writer", "--", "cat", "/data/file")
	if err != nil || out != "csi-data\n" {
		t.Errorf("reading the volume after the restart: %q, %v", out, err)
	}

	// Deleting the pod unpublishes its volume.
	if err := c.CoreV1().Pods(ns).Delete(ctx, "writer", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, "writer's volume unpublished", func() error {
		if isMounted(t, target) {
			return fmt.Errorf("%s still mounted", target)
		}
		if n := drv.callCount(t, "NodeUnpublishVolume "+handle); n != 1 {
			return fmt.Errorf("%d NodeUnpublishVolume calls", n)
		}
		if _, err := os.Lstat(filepath.Dir(target)); !os.IsNotExist(err) {
			return fmt.Errorf("%s left: %v", filepath.Dir(target), err)
		}
		return nil
	})

	// The driver goes away: the CSINode loses it, and a new pod gets the
	// kubelet's FailedMount until the driver is back.
	drv.stop(t)
	waitCSINode(t, c, node, nil)
	if _, err := c.CoreV1().Pods(ns).Create(ctx, inlinePod("orphan", "true"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	want := "driver name " + csiDriverName + " not found in the list of registered CSI drivers"
	eventually(t, 2*time.Minute, "FailedMount of pod orphan", func() error {
		list, err := c.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{
			FieldSelector: "involvedObject.kind=Pod,involvedObject.name=orphan"})
		if err != nil {
			return err
		}
		var seen []string
		for _, e := range list.Items {
			if e.Reason == "FailedMount" && strings.Contains(e.Message, want) {
				return nil
			}
			seen = append(seen, e.Reason+": "+e.Message)
		}
		return fmt.Errorf("events %q", seen)
	})
	drv.start(t)
	waitCSINode(t, c, node, []string{csiDriverName})
	waitPodsReady(t, c, ns, "app=orphan", 1, 3*time.Minute)

	for _, p := range []string{"second", "orphan"} {
		_ = c.CoreV1().Pods(ns).Delete(ctx, p, metav1.DeleteOptions{})
	}
	eventually(t, 2*time.Minute, "every CSI volume of the test unpublished", func() error {
		if pub, unpub := drv.callCount(t, "NodePublishVolume"), drv.callCount(t, "NodeUnpublishVolume"); pub != unpub {
			return fmt.Errorf("%d published, %d unpublished", pub, unpub)
		}
		return nil
	})
}

// waitCSINode waits until the node's CSINode lists exactly these drivers.
func waitCSINode(t *testing.T, c kubernetes.Interface, node string, drivers []string) {
	t.Helper()
	eventually(t, 2*time.Minute, fmt.Sprintf("CSINode %s with drivers %v", node, drivers), func() error {
		cn, err := c.StorageV1().CSINodes().Get(context.Background(), node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		var names []string
		for _, d := range cn.Spec.Drivers {
			names = append(names, d.Name)
		}
		if !slices.Equal(names, drivers) {
			return fmt.Errorf("drivers %v", names)
		}
		return nil
	})
}
