//go:build e2e

package e2e

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// A statically provisioned CSI PersistentVolume (attachRequired: false)
// on a cluster node, through the test driver: a pod writes to its claim,
// the volume staged once at the kubelet's global mount and published into
// the pod directory; a restarted nodelet calls the driver for nothing;
// the pod's deletion unpublishes and unstages it; a new pod on the same
// claim reads the data; the claim's stats are in /stats/summary and the
// kubelet_volume_stats_* metrics.
func TestClusterCSIPersistent(t *testing.T) {
	cp := startCluster(t)
	cp.logsOnFailure(t)
	const node = "csi-pv-a"
	rootDir := filepath.Join(shared.work, "root-"+node)
	drv := startCSIDriver(t, rootDir, node)
	n := joinNode(t, cp, node)
	c := cp.Admin
	ctx := clusterContext(t, 10*time.Minute)
	waitCSINode(t, c, node, []string{csiDriverName})
	driverObj := &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: csiDriverName}, Spec: storagev1.CSIDriverSpec{
		AttachRequired:       ptr.To(false),
		VolumeLifecycleModes: []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent, storagev1.VolumeLifecycleEphemeral},
	}}
	if _, err := c.StorageV1().CSIDrivers().Create(ctx, driverObj, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.StorageV1().CSIDrivers().Delete(context.Background(), csiDriverName, metav1.DeleteOptions{}) })

	const ns = "csi-pv-test"
	clusterNamespace(t, c, ns)
	const pvName, claim, handle = "csi-pv-e2e", "csi-claim", "vol-e2e"
	pvs := pvMaker{t: t, c: c, ns: ns, node: node}
	pvs.volume(pvName, claim, v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{
		Driver: csiDriverName, VolumeHandle: handle, VolumeAttributes: map[string]string{"purpose": "e2e"}}})
	pvs.claim(claim)
	pvs.waitBound(claim)
	newPod := func(name, script string) *v1.Pod {
		ct := shellContainer("main", script)
		ct.VolumeMounts = []v1.VolumeMount{{Name: "data", MountPath: "/data"}}
		return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": name}},
			Spec: v1.PodSpec{NodeName: node, TerminationGracePeriodSeconds: ptr.To[int64](1),
				Volumes: []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{
					PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}},
				Containers: []v1.Container{ct}}}
	}
	staging := filepath.Join(rootDir, "plugins", "kubernetes.io", "csi", csiDriverName, fmt.Sprintf("%x", sha256.Sum256([]byte(handle))), "globalmount")
	calls := func(method string) int { return drv.callCount(t, method+" "+handle) }

	// A pod writes to the claim.
	w, err := c.CoreV1().Pods(ns).Create(ctx, newPod("pv-writer", "echo persisted > /data/file"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitPodsReady(t, c, ns, "app=pv-writer", 1, 2*time.Minute)
	target := filepath.Join(rootDir, "pods", string(w.UID), "volumes", "kubernetes.io~csi", pvName, "mount")
	if !isMounted(t, staging) || !isMounted(t, target) {
		t.Fatalf("staged %v at %s, published %v at %s", isMounted(t, staging), staging, isMounted(t, target), target)
	}
	if s, p := calls("NodeStageVolume"), calls("NodePublishVolume"); s != 1 || p != 1 {
		t.Errorf("%d NodeStageVolume and %d NodePublishVolume calls, want 1 and 1", s, p)
	}

	// The claim's stats: /stats/summary and the kubelet's metrics.
	api := n.proc.api(t)
	eventually(t, time.Minute, "the claim's metrics", func() error {
		raw, err := api.get("/metrics")
		if err != nil {
			return err
		}
		want := fmt.Sprintf(`kubelet_volume_stats_capacity_bytes{namespace=%q,persistentvolumeclaim=%q}`, ns, claim)
		if !strings.Contains(string(raw), want) {
			return fmt.Errorf("no %s", want)
		}
		return nil
	})

	// A restart changes nothing.
	if err := n.proc.stop(t); err != nil {
		t.Logf("nodelet exit: %v", err)
	}
	n.start(t)
	waitNodeReady(t, c, node, 2*time.Minute)
	if _, err := c.CoreV1().Pods(ns).Create(ctx, &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "marker", Namespace: ns, Labels: map[string]string{"app": "marker"}},
		Spec: v1.PodSpec{NodeName: node, TerminationGracePeriodSeconds: ptr.To[int64](1), Containers: []v1.Container{shellContainer("main", "true")}}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPodsReady(t, c, ns, "app=marker", 1, 2*time.Minute)
	if !isMounted(t, staging) || !isMounted(t, target) {
		t.Errorf("after the restart: staged %v, published %v", isMounted(t, staging), isMounted(t, target))
	}
	for _, m := range []string{"NodeStageVolume", "NodePublishVolume"} {
		if got := calls(m); got != 1 {
			t.Errorf("%d %s calls after the restart, want 1", got, m)
		}
	}
	for _, m := range []string{"NodeUnpublishVolume", "NodeUnstageVolume"} {
		if got := calls(m); got != 0 {
			t.Errorf("the restart made %d %s calls", got, m)
		}
	}

	// The pod's deletion unpublishes and unstages the volume.
	deletePodAndWait(t, c, ns, "pv-writer")
	eventually(t, time.Minute, "the volume unpublished and unstaged", func() error {
		if isMounted(t, target) || isMounted(t, staging) {
			return fmt.Errorf("published %v, staged %v", isMounted(t, target), isMounted(t, staging))
		}
		if u, s := calls("NodeUnpublishVolume"), calls("NodeUnstageVolume"); u != 1 || s != 1 {
			return fmt.Errorf("%d NodeUnpublishVolume, %d NodeUnstageVolume calls", u, s)
		}
		if _, err := os.Lstat(filepath.Dir(staging)); !os.IsNotExist(err) {
			return fmt.Errorf("staging directory left: %v", err)
		}
		return nil
	})

	// A new pod on the same claim reads the data.
	if _, err := c.CoreV1().Pods(ns).Create(ctx, newPod("pv-reader", "cat /data/file"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitLog(t, c, ns, "pv-reader", "persisted")
	if s, p := calls("NodeStageVolume"), calls("NodePublishVolume"); s != 2 || p != 2 {
		t.Errorf("%d NodeStageVolume and %d NodePublishVolume calls, want 2 and 2", s, p)
	}
	deletePodAndWait(t, c, ns, "pv-reader")
	deletePodAndWait(t, c, ns, "marker")
	eventually(t, time.Minute, "the volume unstaged again", func() error {
		if u := calls("NodeUnstageVolume"); u != 2 {
			return fmt.Errorf("%d NodeUnstageVolume calls", u)
		}
		return nil
	})
}
