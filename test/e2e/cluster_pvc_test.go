//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// TestClusterPersistentVolumes runs pods on persistentVolumeClaim and
// generic ephemeral volumes against the real control plane, whose
// controller manager binds claims (the PV binder) and makes the claims of
// ephemeral volumes (the ephemeral volume controller); nodelet resolves
// each claim to its PersistentVolume through the API server as the Node
// authorizer allows it:
//   - a static hostPath PV (what k3s's local-path provisioner makes):
//     a pod writes to it, is deleted, and a new pod on the same claim,
//     read-only, reads the data and cannot write;
//   - a pod bound to the node while its claim is unbound waits
//     (ContainerCreating) with the kubelet's FailedMount event, and starts
//     once a PV binds;
//   - a generic ephemeral volume runs; a claim of that name the pod does
//     not own is refused with the kubelet's message;
//   - a local PV gets the pod's fsGroup (a non-root container writes to
//     it), is a bind mount in the pod directory that goes with the pod
//     (the data stays), and a local PV whose path is missing is refused.
//
// Each PV is pre-bound to its claim (spec.claimRef), without a storage
// class, so no other claim can take it and no provisioner is involved.
// Pods are bound to the node by spec.nodeName: the scheduler would not
// place a pod whose claim is unbound.
func TestClusterPersistentVolumes(t *testing.T) {
	cp := startCluster(t)
	cp.logsOnFailure(t)
	const node = "pvc-a"
	n := joinNode(t, cp, node)
	c := cp.Admin
	ctx := clusterContext(t, 15*time.Minute)
	const ns = "pvc-test"
	clusterNamespace(t, c, ns)
	storage := filepath.Join(shared.work, "pvc-storage")
	if err := os.MkdirAll(storage, 0o755); err != nil {
		t.Fatal(err)
	}
	pvs := pvMaker{t: t, c: c, ns: ns, node: node}
	newPod := func(name string, claim v1.VolumeSource, script string) *v1.Pod {
		return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": name}},
			Spec: v1.PodSpec{NodeName: node, TerminationGracePeriodSeconds: ptr.To[int64](1),
				Volumes: []v1.Volume{{Name: "data", VolumeSource: claim}},
				Containers: []v1.Container{{Name: "main", Image: "busybox:1.35", Command: []string{"sh", "-c", script},
					VolumeMounts: []v1.VolumeMount{{Name: "data", MountPath: "/data"}}}}}}
	}
	create := func(t *testing.T, p *v1.Pod) *v1.Pod {
		t.Helper()
		got, err := c.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { deletePodAndWait(t, c, ns, p.Name) })
		return got
	}
	claimSource := func(name string, readOnly bool) v1.VolumeSource {
		return v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: name, ReadOnly: readOnly}}
	}
	const sleep = "; trap 'exit 0' TERM; while true; do sleep 3600 & wait $!; done"
	// The node read every claim and volume as the Node authorizer allows
	// it: none of its reads of them was refused (but while the
	// authorizer's graph lagged a binding).
	t.Cleanup(func() {
		counts, denied, _ := readNodeAudit(t, cp.AuditLog, "system:node:"+node)
		for _, e := range denied {
			if r := e.ObjectRef; r != nil && (r.Resource == "persistentvolumeclaims" || r.Resource == "persistentvolumes") {
				t.Errorf("the node's %s %s was refused: %s", e.Verb, e.RequestURI, e.reason())
			}
		}
		for k, n := range counts {
			if k.resource == "persistentvolumeclaims" || k.resource == "persistentvolumes" {
				t.Logf("node %s: %d × %s %s → %d", node, n, k.verb, k.resource, k.code)
			}
		}
	})

	t.Run("HostPathSurvivesThePod", func(t *testing.T) {
		dir := filepath.Join(storage, "hostpath")
		pvs.volume("e2e-pvc-hostpath", "hp", v1.PersistentVolumeSource{HostPath: &v1.HostPathVolumeSource{Path: dir, Type: ptr.To(v1.HostPathDirectoryOrCreate)}})
		pvs.claim("hp")
		pvs.waitBound("hp")
		create(t, newPod("writer", claimSource("hp", false), "echo hello-pvc > /data/file && echo written"+sleep))
		waitPodsReady(t, c, ns, "app=writer", 1, 2*time.Minute)
		waitLog(t, c, ns, "writer", "written")
		if got, err := os.ReadFile(filepath.Join(dir, "file")); err != nil || string(got) != "hello-pvc\n" {
			t.Fatalf("the host path holds %q, %v", got, err)
		}
		deletePodAndWait(t, c, ns, "writer")
		create(t, newPod("reader", claimSource("hp", true),
			`echo "read=$(cat /data/file)"; if touch /data/other 2>/dev/null; then echo write=allowed; else echo write=refused; fi`+sleep))
		waitPodsReady(t, c, ns, "app=reader", 1, 2*time.Minute)
		waitLog(t, c, ns, "reader", "read=hello-pvc\nwrite=refused")
	})

	t.Run("UnboundClaimWaits", func(t *testing.T) {
		pvs.claim("late")
		p := create(t, newPod("waiter", claimSource("late", false), "echo started"+sleep))
		const msg = "Unable to attach or mount volumes: unmounted volumes=[data], unattached volumes=[], failed to process volumes=[data]: " +
			"error processing PVC pvc-test/late: PVC is not bound"
		waitPodEvent(t, c, ns, p.Name, node, "FailedMount", msg)
		eventually(t, time.Minute, "pod waiter waiting in ContainerCreating", func() error {
			got, err := c.CoreV1().Pods(ns).Get(context.Background(), p.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if got.Status.Phase != v1.PodPending || len(got.Status.ContainerStatuses) != 1 ||
				got.Status.ContainerStatuses[0].State.Waiting == nil || got.Status.ContainerStatuses[0].State.Waiting.Reason != "ContainerCreating" {
				return fmt.Errorf("phase %s, statuses %+v", got.Status.Phase, got.Status.ContainerStatuses)
			}
			return nil
		})
		pvs.volume("e2e-pvc-late", "late", v1.PersistentVolumeSource{HostPath: &v1.HostPathVolumeSource{Path: filepath.Join(storage, "late"), Type: ptr.To(v1.HostPathDirectoryOrCreate)}})
		pvs.waitBound("late")
		waitPodsReady(t, c, ns, "app=waiter", 1, 2*time.Minute)
		waitLog(t, c, ns, "waiter", "started")
	})

	t.Run("GenericEphemeral", func(t *testing.T) {
		template := func() v1.VolumeSource {
			return v1.VolumeSource{Ephemeral: &v1.EphemeralVolumeSource{VolumeClaimTemplate: &v1.PersistentVolumeClaimTemplate{
				Spec: pvs.claimSpec()}}}
		}
		// The controller manager names the claim <pod>-<volume>.
		pvs.volume("e2e-pvc-ephemeral", "eph-data", v1.PersistentVolumeSource{HostPath: &v1.HostPathVolumeSource{Path: filepath.Join(storage, "eph"), Type: ptr.To(v1.HostPathDirectoryOrCreate)}})
		p := create(t, newPod("eph", template(), "echo ephemeral > /data/f && cat /data/f"+sleep))
		waitPodsReady(t, c, ns, "app=eph", 1, 3*time.Minute)
		waitLog(t, c, ns, "eph", "ephemeral")
		pvc, err := c.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "eph-data", metav1.GetOptions{})
		if err != nil || !metav1.IsControlledBy(pvc, p) {
			t.Fatalf("claim eph-data: %v, owners %v; want controlled by pod eph", err, pvc.GetOwnerReferences())
		}

		// A claim of that name made by someone else: refused, as the
		// kubelet refuses it.
		pvs.volume("e2e-pvc-notmine", "notmine-data", v1.PersistentVolumeSource{HostPath: &v1.HostPathVolumeSource{Path: filepath.Join(storage, "notmine"), Type: ptr.To(v1.HostPathDirectoryOrCreate)}})
		pvs.claim("notmine-data")
		pvs.waitBound("notmine-data")
		create(t, newPod("notmine", template(), "echo started"+sleep))
		waitPodEvent(t, c, ns, "notmine", node, "FailedMount",
			"Unable to attach or mount volumes: unmounted volumes=[data], unattached volumes=[], failed to process volumes=[data]: "+
				"PVC pvc-test/notmine-data was not created for pod pvc-test/notmine (pod is not owner)")
	})

	t.Run("LocalWithFSGroup", func(t *testing.T) {
		dir := filepath.Join(storage, "local")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "before"), []byte("old\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		pvs.volume("e2e-pvc-local", "local", v1.PersistentVolumeSource{Local: &v1.LocalVolumeSource{Path: dir}})
		pvs.claim("local")
		pvs.waitBound("local")
		p := newPod("fsgroup", claimSource("local", false),
			`echo "groups=$(id -G)"; echo "gid=$(stat -c %g /data/before)"; if echo new > /data/by-user; then echo write=ok; fi`+sleep)
		p.Spec.SecurityContext = &v1.PodSecurityContext{RunAsUser: ptr.To[int64](1000), RunAsGroup: ptr.To[int64](1000), FSGroup: ptr.To[int64](2345)}
		p = create(t, p)
		waitPodsReady(t, c, ns, "app=fsgroup", 1, 2*time.Minute)
		waitLog(t, c, ns, "fsgroup", "gid=2345\nwrite=ok")
		for _, f := range []string{dir, filepath.Join(dir, "before")} {
			var st syscall.Stat_t
			if err := syscall.Stat(f, &st); err != nil || st.Gid != 2345 || st.Mode&0o060 != 0o060 {
				t.Errorf("%s: gid %d mode %o (%v), want group 2345 with g+rw", f, st.Gid, st.Mode&0o7777, err)
			}
		}
		mountDir := filepath.Join(n.rootDir, "pods", string(p.UID), "volumes", "kubernetes.io~local-volume", "e2e-pvc-local")
		if !isMounted(t, mountDir) {
			t.Fatalf("%s is not a mount point", mountDir)
		}
		deletePodAndWait(t, c, ns, "fsgroup")
		eventually(t, time.Minute, "the local volume's bind mount gone", func() error {
			if isMounted(t, mountDir) {
				return fmt.Errorf("%s still mounted", mountDir)
			}
			return nil
		})
		if got, err := os.ReadFile(filepath.Join(dir, "by-user")); err != nil || string(got) != "new\n" {
			t.Fatalf("the local volume's data after the pod went: %q, %v", got, err)
		}

		missing := filepath.Join(storage, "no-such-dir")
		pvs.volume("e2e-pvc-missing", "missing", v1.PersistentVolumeSource{Local: &v1.LocalVolumeSource{Path: missing}})
		pvs.claim("missing")
		pvs.waitBound("missing")
		create(t, newPod("missing", claimSource("missing", false), "echo started"+sleep))
		waitPodEvent(t, c, ns, "missing", node, "FailedMount",
			fmt.Sprintf("MountVolume.NewMounter initialization failed for volume %q : path %q does not exist", "e2e-pvc-missing", missing))
	})
}

// pvMaker makes PersistentVolumes pre-bound to claims of one namespace,
// and the claims; everything is deleted when the test ends.
type pvMaker struct {
	t    *testing.T
	c    kubernetes.Interface
	ns   string
	node string
}

func (m pvMaker) claimSpec() v1.PersistentVolumeClaimSpec {
	return v1.PersistentVolumeClaimSpec{AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
		Resources: v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")}}}
}

// volume makes the PV name for claim, of source src; a local one gets
// the node affinity the API requires.
func (m pvMaker) volume(name, claim string, src v1.PersistentVolumeSource) {
	m.t.Helper()
	pv := &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.PersistentVolumeSpec{PersistentVolumeSource: src,
			Capacity:                      v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: v1.PersistentVolumeReclaimRetain,
			ClaimRef:                      &v1.ObjectReference{Namespace: m.ns, Name: claim}}}
	if src.Local != nil {
		pv.Spec.NodeAffinity = &v1.VolumeNodeAffinity{Required: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{
			MatchExpressions: []v1.NodeSelectorRequirement{{Key: "kubernetes.io/hostname", Operator: v1.NodeSelectorOpIn, Values: []string{m.node}}}}}}}
	}
	_ = m.c.CoreV1().PersistentVolumes().Delete(context.Background(), name, metav1.DeleteOptions{})
	if _, err := m.c.CoreV1().PersistentVolumes().Create(context.Background(), pv, metav1.CreateOptions{}); err != nil {
		m.t.Fatal(err)
	}
	m.t.Cleanup(func() {
		_ = m.c.CoreV1().PersistentVolumes().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

// claim makes the claim name.
func (m pvMaker) claim(name string) {
	m.t.Helper()
	pvc := &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: m.ns}, Spec: m.claimSpec()}
	if _, err := m.c.CoreV1().PersistentVolumeClaims(m.ns).Create(context.Background(), pvc, metav1.CreateOptions{}); err != nil {
		m.t.Fatal(err)
	}
	m.t.Cleanup(func() {
		_ = m.c.CoreV1().PersistentVolumeClaims(m.ns).Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

func (m pvMaker) waitBound(name string) {
	m.t.Helper()
	eventually(m.t, 2*time.Minute, "claim "+name+" Bound", func() error {
		pvc, err := m.c.CoreV1().PersistentVolumeClaims(m.ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if pvc.Status.Phase != v1.ClaimBound {
			return fmt.Errorf("phase %s", pvc.Status.Phase)
		}
		return nil
	})
}

// waitPodEvent waits for a Warning event of the pod from the node's
// kubelet with reason and message.
func waitPodEvent(t *testing.T, c kubernetes.Interface, ns, pod, node, reason, message string) {
	t.Helper()
	eventually(t, 2*time.Minute, reason+" of pod "+pod+" in the API", func() error {
		list, err := c.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{
			FieldSelector: "involvedObject.kind=Pod,involvedObject.name=" + pod + ",reason=" + reason})
		if err != nil {
			return err
		}
		var got []string
		for _, e := range list.Items {
			if e.Source.Component == "kubelet" && e.Source.Host == node && e.Type == v1.EventTypeWarning && e.Message == message {
				return nil
			}
			got = append(got, e.Message)
		}
		return fmt.Errorf("events %q, want %q", got, message)
	})
}

// waitLog waits until the log of the pod's container holds want.
func waitLog(t *testing.T, c kubernetes.Interface, ns, pod, want string) {
	t.Helper()
	eventually(t, time.Minute, "log of pod "+pod, func() error {
		out, err := c.CoreV1().Pods(ns).GetLogs(pod, &v1.PodLogOptions{}).DoRaw(context.Background())
		if err != nil {
			return err
		}
		if !strings.Contains(string(out), want) {
			return fmt.Errorf("log %q, want %q in it", out, want)
		}
		return nil
	})
}

// deletePodAndWait deletes the pod and waits until the API server no
// longer has it (nodelet stopped it and tore its volumes down).
func deletePodAndWait(t *testing.T, c kubernetes.Interface, ns, name string) {
	t.Helper()
	err := c.CoreV1().Pods(ns).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](1)})
	if apierrors.IsNotFound(err) {
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, "pod "+name+" gone", func() error {
		_, err := c.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there: %v", err)
	})
}

// isMounted tells whether path is a mount point in this mount namespace.
func isMounted(t *testing.T, path string) bool {
	t.Helper()
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == path {
			return true
		}
	}
	return false
}
