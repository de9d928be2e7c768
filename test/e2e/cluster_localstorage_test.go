//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Local ephemeral storage in cluster mode, the same checks against nodelet
// and the upstream kubelet: the Node's ephemeral-storage capacity is the
// root directory's filesystem; a pod over its limit, created through the
// API (its pod's total, a container's own, an emptyDir's sizeLimit), ends
// Failed/Evicted in the API with the kubelet's message, its Evicted event
// from the kubelet and no DisruptionTarget; a pod bound to the node that
// requests more ephemeral storage than the Node's allocatable is refused
// with the kubelet's reason and message, whose capacity is that
// allocatable.
func TestClusterLocalStorage(t *testing.T) {
	cp := startCluster(t)
	cp.logsOnFailure(t)
	t.Run("nodelet", func(t *testing.T) {
		n := joinNode(t, cp, "ephst-nodelet", "--volume-stats-agg-period", "1s")
		checkClusterLocalStorage(t, cp, n.name, n.rootDir)
	})
	t.Run("kubelet", func(t *testing.T) {
		// The same period as nodelet's above: the kubelet's default (1m)
		// only makes the test a minute longer.
		k := startClusterKubelet(t, cp, "ephst-kubelet", "volumeStatsAggPeriod: 1s")
		checkClusterLocalStorage(t, cp, k.node, k.rootDir)
	})
}

func checkClusterLocalStorage(t *testing.T, cp *controlPlane, node, rootDir string) {
	c := cp.Admin
	ctx := clusterContext(t, 5*time.Minute)
	ns := "localstorage-" + node
	resilNamespace(t, c, ns)

	nodeObj, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(rootDir, &st); err != nil {
		t.Fatal(err)
	}
	capacity := nodeObj.Status.Capacity[v1.ResourceEphemeralStorage]
	allocatable := nodeObj.Status.Allocatable[v1.ResourceEphemeralStorage]
	if capacity.Value() != int64(st.Blocks)*st.Bsize || allocatable.Sign() <= 0 || allocatable.Cmp(capacity) > 0 {
		t.Errorf("Node ephemeral-storage capacity %s allocatable %s, want capacity %d (the root directory's filesystem)",
			capacity.String(), allocatable.String(), int64(st.Blocks)*st.Bsize)
	}

	// Each over one limit, created at once: the kubelet measures emptyDirs
	// every volumeStatsAggPeriod (1s for both agents here).
	limits := func(l string) v1.ResourceRequirements {
		return v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceEphemeralStorage: resource.MustParse(l)}}
	}
	writer := func(name, path, limit string) v1.Container {
		c := v1.Container{Name: name, Image: "busybox:1.35",
			Command: []string{"sh", "-c", "dd if=/dev/zero of=" + path + " bs=1M count=8; sync; sleep 3600"}}
		if limit != "" {
			c.Resources = limits(limit)
		}
		return c
	}
	sizeLimit := resource.MustParse("4Mi")
	cases := []struct {
		pod     v1.PodSpec
		name    string
		message string
	}{
		{name: "over-pod", message: "Pod ephemeral local storage usage exceeds the total limit of containers 4Mi. ",
			pod: v1.PodSpec{Containers: []v1.Container{writer("main", "/fill", "4Mi")}}},
		{name: "over-container", message: `Container main exceeded its local ephemeral storage limit "4Mi". `,
			pod: v1.PodSpec{Containers: []v1.Container{writer("main", "/fill", "4Mi"),
				{Name: "idle", Image: "busybox:1.35", Command: []string{"sleep", "3600"}, Resources: limits("64Mi")}}}},
		{name: "over-emptydir", message: `Usage of EmptyDir volume "data" exceeds the limit "4Mi". `,
			pod: v1.PodSpec{Containers: []v1.Container{func() v1.Container {
				c := writer("main", "/data/fill", "")
				c.VolumeMounts = []v1.VolumeMount{{Name: "data", MountPath: "/data"}}
				return c
			}()}, Volumes: []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{SizeLimit: &sizeLimit}}}}}},
	}
	for _, tc := range cases {
		tc.pod.NodeSelector = map[string]string{"kubernetes.io/hostname": node}
		pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: tc.name, Namespace: ns}, Spec: tc.pod}
		if _, err := c.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range cases {
		var evicted *v1.Pod
		eventually(t, 3*time.Minute, tc.name+" evicted in the API", func() error {
			p, err := c.CoreV1().Pods(ns).Get(context.Background(), tc.name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if p.Status.Phase != v1.PodFailed || p.Status.Reason != "Evicted" {
				return fmt.Errorf("phase %s reason %q", p.Status.Phase, p.Status.Reason)
			}
			evicted = p
			return nil
		})
		if evicted.Status.Message != tc.message {
			t.Errorf("%s: message %q, want %q", tc.name, evicted.Status.Message, tc.message)
		}
		for _, cond := range evicted.Status.Conditions {
			if cond.Type == v1.DisruptionTarget {
				t.Errorf("%s: condition %+v; the kubelet sets no DisruptionTarget for a local storage eviction", tc.name, cond)
			}
		}
		eventually(t, time.Minute, "the kubelet's Evicted event of "+tc.name+" in the API", func() error {
			list, err := c.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{
				FieldSelector: "involvedObject.kind=Pod,involvedObject.name=" + tc.name})
			if err != nil {
				return err
			}
			for _, e := range list.Items {
				if e.Source.Component == "kubelet" && e.Source.Host == node && e.Type == v1.EventTypeWarning && e.Reason == "Evicted" && e.Message == tc.message {
					return nil
				}
			}
			return fmt.Errorf("%d events, none Evicted", len(list.Items))
		})
	}

	// Bound to the node without the scheduler: the node's admission.
	huge := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "huge", Namespace: ns}, Spec: v1.PodSpec{
		NodeName: node,
		Containers: []v1.Container{{Name: "main", Image: "busybox:1.35", Command: []string{"sleep", "3600"},
			Resources: v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceEphemeralStorage: resource.MustParse("1Pi")}}}},
	}}
	if _, err := c.CoreV1().Pods(ns).Create(ctx, huge, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var rejected *v1.Pod
	eventually(t, time.Minute, "pod huge refused in the API", func() error {
		p, err := c.CoreV1().Pods(ns).Get(context.Background(), "huge", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase != v1.PodFailed {
			return fmt.Errorf("phase %s", p.Status.Phase)
		}
		rejected = p
		return nil
	})
	want := fmt.Sprintf("Pod was rejected: Node didn't have enough resource: ephemeral-storage, requested: %d, used: 0, capacity: %d", int64(1)<<50, allocatable.Value())
	if rejected.Status.Reason != "OutOfephemeral-storage" || rejected.Status.Message != want {
		t.Errorf("huge: reason %q message %q, want OutOfephemeral-storage %q", rejected.Status.Reason, rejected.Status.Message, want)
	}
}
