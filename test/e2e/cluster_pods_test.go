//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/internal/pure/podspec"
)

// shellPod is a busybox container running script, exiting at once on
// SIGTERM.
func shellContainer(name, script string) v1.Container {
	return v1.Container{Name: name, Image: "busybox:1.35",
		Command: []string{"sh", "-c", "trap 'exit 0' TERM; " + script + "; while true; do sleep 3600 & wait $!; done"}}
}

// Pods from the API server run on the node and are reported back: a
// Deployment's replicas Running and Ready in the API; kubectl logs, exec
// and port-forward through the API server to the node; a deletion with
// grace; a ConfigMap update reaching a volume; a service account token
// that TokenReview accepts; a static pod's mirror pod through its life.
func TestClusterPods(t *testing.T) {
	cp := startCluster(t)
	cp.logsOnFailure(t)
	const node = "pods-a"
	n := joinNode(t, cp, node)
	c := cp.Admin
	ctx := clusterContext(t, 10*time.Minute)
	ns := "pods-test"
	clusterNamespace(t, c, ns)
	onNode := map[string]string{"kubernetes.io/hostname": node}

	t.Run("Deployment", func(t *testing.T) {
		web := shellContainer("web", "mkdir -p /www && echo hello-from-nodelet > /www/index.html && httpd -p 8080 -h /www; echo started")
		web.ReadinessProbe = &v1.Probe{ProbeHandler: v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Path: "/", Port: intstr.FromInt32(8080)}}, PeriodSeconds: 2}
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
			Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](3),
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
				Template: v1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
					Spec: v1.PodSpec{NodeSelector: onNode, Containers: []v1.Container{web}}}}}
		if _, err := c.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		pods := waitPodsReady(t, c, ns, "app=web", 3, 2*time.Minute)
		for _, p := range pods {
			if p.Status.PodIP == "" || p.Status.HostIP != "127.0.0.1" || p.Status.QOSClass != v1.PodQOSBestEffort ||
				len(p.Status.ContainerStatuses) != 1 || !strings.HasPrefix(p.Status.ContainerStatuses[0].ContainerID, "containerd://") {
				t.Errorf("pod %s status: %+v", p.Name, p.Status)
			}
		}
		eventually(t, time.Minute, "deployment available", func() error {
			d, err := c.AppsV1().Deployments(ns).Get(context.Background(), "web", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if d.Status.AvailableReplicas != 3 {
				return fmt.Errorf("available %d", d.Status.AvailableReplicas)
			}
			return nil
		})

		pod := pods[0].Name
		out, err := kubectl(t, cp, 30*time.Second, "-n", ns, "logs", pod)
		if err != nil || !strings.Contains(out, "started") {
			t.Errorf("kubectl logs: %v %q", err, out)
		}
		out, err = kubectl(t, cp, 30*time.Second, "-n", ns, "exec", pod, "--", "cat", "/www/index.html")
		if err != nil || strings.TrimSpace(out) != "hello-from-nodelet" {
			t.Errorf("kubectl exec: %v %q", err, out)
		}
		if body, err := portForward(t, cp, ns, pod, 8080); err != nil || strings.TrimSpace(body) != "hello-from-nodelet" {
			t.Errorf("kubectl port-forward: %v %q", err, body)
		}
		// Why a pod does not start reaches kubectl describe: the node's
		// Warning events, as the kubelet's.
		broken := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "broken", Namespace: ns},
			Spec: v1.PodSpec{NodeSelector: onNode, Containers: []v1.Container{{Name: "main", Image: "busybox:no-such-tag"}}}}
		if _, err := c.CoreV1().Pods(ns).Create(ctx, broken, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, time.Minute, "the node's Warning events of pod broken in the API", func() error {
			list, err := c.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{
				FieldSelector: "involvedObject.kind=Pod,involvedObject.name=broken"})
			if err != nil {
				return err
			}
			var reasons []string
			for _, e := range list.Items {
				if e.Source.Component == "kubelet" && e.Source.Host == node && e.Type == v1.EventTypeWarning {
					reasons = append(reasons, e.Reason)
				}
			}
			if !slices.Contains(reasons, "Failed") {
				return fmt.Errorf("Warning reasons from kubelet on %s: %v, want Failed", node, reasons)
			}
			return nil
		})
		_ = c.CoreV1().Pods(ns).Delete(ctx, "broken", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	})

	t.Run("DeleteWithGrace", func(t *testing.T) {
		// Stops 3 s after SIGTERM: the pod stays (terminating) until its
		// container stopped, then nodelet deletes it for good.
		slow := v1.Container{Name: "slow", Image: "busybox:1.35",
			Command: []string{"sh", "-c", "trap 'sleep 3; exit 0' TERM; while true; do sleep 1; done"}}
		pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "graceful", Namespace: ns, Labels: map[string]string{"app": "graceful"}},
			Spec: v1.PodSpec{NodeSelector: onNode, Containers: []v1.Container{slow}, TerminationGracePeriodSeconds: ptr.To[int64](30)}}
		if _, err := c.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		running := waitPodsReady(t, c, ns, "app=graceful", 1, 2*time.Minute)
		id := strings.TrimPrefix(running[0].Status.ContainerStatuses[0].ContainerID, "containerd://")
		start := time.Now()
		if err := c.CoreV1().Pods(ns).Delete(ctx, "graceful", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		p, err := c.CoreV1().Pods(ns).Get(ctx, "graceful", metav1.GetOptions{})
		if err != nil || p.DeletionTimestamp == nil {
			t.Fatalf("right after the delete the pod is not terminating: %v %v", err, p)
		}
		eventually(t, time.Minute, "pod deleted from the API", func() error {
			_, err := c.CoreV1().Pods(ns).Get(context.Background(), "graceful", metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("still there: %v", err)
		})
		took := time.Since(start)
		if took < 3*time.Second {
			t.Errorf("pod gone after %v, before its container could stop (3 s after SIGTERM)", took)
		}
		st, err := shared.rt.ContainerStatus(ctx, id)
		if err == nil && st.Status.State != 2 { // CONTAINER_EXITED; a removed container is fine too
			t.Errorf("container %s still %v after the pod was deleted", id, st.Status.State)
		}
		t.Logf("deleted with grace in %v", took.Round(100*time.Millisecond))
	})

	t.Run("ConfigMapVolumeAndToken", func(t *testing.T) {
		cm := &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings", Namespace: ns}, Data: map[string]string{"color": "blue"}}
		if _, err := c.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		reader := shellContainer("reader", "true")
		reader.VolumeMounts = []v1.VolumeMount{{Name: "settings", MountPath: "/etc/settings"}}
		pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "reader", Namespace: ns, Labels: map[string]string{"app": "reader"}},
			Spec: v1.PodSpec{NodeSelector: onNode, Containers: []v1.Container{reader},
				Volumes: []v1.Volume{{Name: "settings", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
					LocalObjectReference: v1.LocalObjectReference{Name: "settings"}}}}}}}
		if _, err := c.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitPodsReady(t, c, ns, "app=reader", 1, 2*time.Minute)
		cat := func(path string) (string, error) {
			out, err := kubectl(t, cp, 30*time.Second, "-n", ns, "exec", "reader", "--", "cat", path)
			return strings.TrimSpace(out), err
		}
		if got, err := cat("/etc/settings/color"); err != nil || got != "blue" {
			t.Fatalf("configmap file: %v %q", err, got)
		}
		cm.Data["color"] = "green"
		if _, err := c.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		eventually(t, 90*time.Second, "the update in the volume", func() error {
			got, err := cat("/etc/settings/color")
			if err != nil || got != "green" {
				return fmt.Errorf("%q %v", got, err)
			}
			return nil
		})
		t.Logf("configmap update reached the volume in %v", time.Since(start).Round(100*time.Millisecond))

		// The service account token projected into every pod is the API
		// server's, bound to the pod.
		token, err := cat("/var/run/secrets/kubernetes.io/serviceaccount/token")
		if err != nil || token == "" {
			t.Fatalf("token: %v", err)
		}
		tr, err := c.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !tr.Status.Authenticated || tr.Status.User.Username != "system:serviceaccount:"+ns+":default" ||
			len(tr.Status.User.Extra["authentication.kubernetes.io/pod-name"]) != 1 || tr.Status.User.Extra["authentication.kubernetes.io/pod-name"][0] != "reader" {
			t.Errorf("TokenReview: %+v", tr.Status)
		}
		if ca, err := cat("/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"); err != nil || !strings.Contains(ca, "BEGIN CERTIFICATE") {
			t.Errorf("ca.crt from kube-root-ca.crt: %v %q", err, ca)
		}
	})

	t.Run("MirrorPod", func(t *testing.T) {
		manifest := `apiVersion: v1
kind: Pod
metadata:
  name: static-web
  namespace: ` + ns + `
spec:
  containers:
  - name: web
    image: busybox:1.35
    command: ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"]
`
		writeManifest(t, n.manifests, "static-web.yaml", manifest)
		name := "static-web-" + node
		var mirror *v1.Pod
		eventually(t, time.Minute, "mirror pod Running", func() error {
			p, err := c.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if p.Status.Phase != v1.PodRunning || !podReady(p) {
				return fmt.Errorf("phase %s", p.Status.Phase)
			}
			mirror = p
			return nil
		})
		nodeObj, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if mirror.Annotations[podspec.AnnotationConfigMirror] == "" || len(mirror.OwnerReferences) != 1 ||
			mirror.OwnerReferences[0].Kind != "Node" || mirror.OwnerReferences[0].UID != nodeObj.UID || mirror.Spec.NodeName != node {
			t.Errorf("mirror pod: annotations %v owners %+v node %q", mirror.Annotations, mirror.OwnerReferences, mirror.Spec.NodeName)
		}
		// Deleted by a user: created again; the static pod keeps running.
		id := mirror.Status.ContainerStatuses[0].ContainerID
		if err := c.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, time.Minute, "mirror pod recreated", func() error {
			p, err := c.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if p.UID == mirror.UID || p.Status.Phase != v1.PodRunning {
				return fmt.Errorf("uid %s phase %s", p.UID, p.Status.Phase)
			}
			if len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].ContainerID != id {
				return fmt.Errorf("container %v, want still %s", p.Status.ContainerStatuses, id)
			}
			return nil
		})
		// The manifest removed: the static pod stops and its mirror goes.
		if err := os.Remove(filepath.Join(n.manifests, "static-web.yaml")); err != nil {
			t.Fatal(err)
		}
		eventually(t, time.Minute, "mirror pod deleted", func() error {
			_, err := c.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("still there: %v", err)
		})
	})
}

// portForward runs kubectl port-forward to the pod's port and GETs / over
// it.
func portForward(t *testing.T, cp *controlPlane, ns, pod string, port int) (string, error) {
	t.Helper()
	local := freePort(t)
	cmd := exec.Command(kubectlBin(t), "--kubeconfig", cp.AdminKubeconfig, "-n", ns, "port-forward", "pod/"+pod, fmt.Sprintf("%s:%d", local, port))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return "", err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	ready := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(io.LimitReader(stdout, 1<<20))
		for sc.Scan() {
			if strings.Contains(sc.Text(), "Forwarding from") {
				ready <- nil
				go func() { _, _ = io.Copy(io.Discard, stdout) }()
				return
			}
		}
		ready <- fmt.Errorf("port-forward ended: %v", sc.Err())
	}()
	select {
	case err := <-ready:
		if err != nil {
			return "", err
		}
	case <-time.After(30 * time.Second):
		return "", fmt.Errorf("port-forward not ready in 30s")
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + net.JoinHostPort("127.0.0.1", local) + "/")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	return string(b), err
}
