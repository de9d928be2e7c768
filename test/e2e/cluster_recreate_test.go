//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// recreateManifest is a static pod whose container exits 0 at SIGTERM
// (as the upstream test's nginx does).
func recreateManifest(ns string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: recreated
  namespace: %s
spec:
  containers:
  - name: main
    image: busybox:1.35
    command: ["sh", "-c", "trap 'exit 0' TERM; sleep 1000 & wait $!"]
`, ns)
}

// A static pod whose manifest is removed and written back at once (the
// same content: the same UID) runs again, its container restarted once,
// as the kubelet's (MirrorPod "should successfully recreate when file is
// removed and recreated").
func TestClusterMirrorRecreate(t *testing.T) {
	cp := startCluster(t)
	cp.logsOnFailure(t)
	const node = "recreate-a"
	n := joinNode(t, cp, node)
	c := cp.Admin
	ctx := clusterContext(t, 10*time.Minute)
	ns := "mirror-recreate"
	if _, err := c.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	name := "recreated-" + node
	const file = "recreated.yaml"
	running := func(restarts int32) error {
		p, err := c.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		switch {
		case err != nil:
			return err
		case p.Status.Phase != v1.PodRunning:
			return fmt.Errorf("phase %s", p.Status.Phase)
		case len(p.Status.ContainerStatuses) != 1:
			return fmt.Errorf("container statuses %+v", p.Status.ContainerStatuses)
		case p.Status.ContainerStatuses[0].RestartCount != restarts:
			return fmt.Errorf("restart count %d, want %d", p.Status.ContainerStatuses[0].RestartCount, restarts)
		case p.Status.ContainerStatuses[0].State.Running == nil:
			return fmt.Errorf("container not running: %+v", p.Status.ContainerStatuses[0].State)
		}
		return nil
	}

	writeManifest(t, n.manifests, file, recreateManifest(ns))
	eventually(t, 2*time.Minute, "mirror pod Running", func() error { return running(0) })
	if err := os.Remove(filepath.Join(n.manifests, file)); err != nil {
		t.Fatal(err)
	}
	writeManifest(t, n.manifests, file, recreateManifest(ns))
	eventually(t, 2*time.Minute, "mirror pod Running again with restart count 1", func() error { return running(1) })
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(2 * time.Second) {
		if err := running(1); err != nil {
			t.Fatalf("mirror pod after its restart: %v", err)
		}
	}
	if err := os.Remove(filepath.Join(n.manifests, file)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, "mirror pod deleted", func() error {
		_, err := c.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there: %v", err)
	})
}
