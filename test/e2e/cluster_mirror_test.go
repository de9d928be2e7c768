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
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// mirrorGrace is the static pods' grace period; their container ignores
// SIGTERM, so each takes all of it to stop.
const mirrorGrace = 15 * time.Second

// graceManifest is a static pod whose container traps SIGTERM and goes on
// (as the upstream MirrorPodWithGracePeriod's); version tells versions
// apart (a new version is a new static pod).
func graceManifest(ns, version string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: graceful
  namespace: %s
  labels:
    version: %q
spec:
  terminationGracePeriodSeconds: %d
  containers:
  - name: m-test
    image: busybox:1.35
    command: ["sh", "-c", "trap 'echo caught SIGTERM; sleep 100' TERM; sleep 1000 & wait $!; sleep 1000"]
`, ns, version, int(mirrorGrace/time.Second))
}

// A static pod's mirror pod outlives the static pod's graceful
// termination, as the kubelet's (MirrorPodWithGracePeriod): the manifest
// removed or changed, the mirror pod stays, same UID, Running, while the
// old version's container is given its grace period; a changed manifest,
// even rewritten many times meanwhile, then runs its newest version with
// a new mirror pod.
func TestClusterMirrorGracePeriod(t *testing.T) {
	cp := startCluster(t)
	cp.logsOnFailure(t)
	const node = "mirror-a"
	n := joinNode(t, cp, node)
	c := cp.Admin
	ctx := clusterContext(t, 10*time.Minute)
	ns := "mirror-grace"
	if _, err := c.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	name := "graceful-" + node
	const file = "graceful.yaml"

	start := func(t *testing.T) types.UID {
		writeManifest(t, n.manifests, file, graceManifest(ns, "first"))
		var uid types.UID
		eventually(t, 2*time.Minute, "mirror pod Running", func() error {
			p, err := mirrorVersion(c, ns, name, "first")
			if err == nil {
				uid = p.UID
			}
			return err
		})
		return uid
	}

	t.Run("deleted", func(t *testing.T) {
		uid := start(t)
		if err := os.Remove(filepath.Join(n.manifests, file)); err != nil {
			t.Fatal(err)
		}
		mirrorStays(t, c, ns, name, uid, mirrorGrace-2*time.Second)
		eventually(t, time.Minute, "mirror pod deleted", func() error {
			_, err := c.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("still there: %v", err)
		})
	})

	t.Run("updated many times", func(t *testing.T) {
		uid := start(t)
		for i := range 30 {
			writeManifest(t, n.manifests, file, graceManifest(ns, fmt.Sprintf("v%d", i)))
			time.Sleep(100 * time.Millisecond)
		}
		writeManifest(t, n.manifests, file, graceManifest(ns, "last"))
		mirrorStays(t, c, ns, name, uid, mirrorGrace-5*time.Second)
		eventually(t, 2*time.Minute, "the last version's mirror pod Running", func() error {
			p, err := mirrorVersion(c, ns, name, "last")
			if err == nil && p.UID == uid {
				return fmt.Errorf("mirror pod not replaced")
			}
			return err
		})
		if err := os.Remove(filepath.Join(n.manifests, file)); err != nil {
			t.Fatal(err)
		}
		eventually(t, time.Minute+mirrorGrace, "mirror pod deleted", func() error {
			_, err := c.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("still there: %v", err)
		})
	})
}

// mirrorVersion returns the mirror pod name in ns if it is Running and
// Ready (its container runs) and of the static pod's version. Running
// alone is not enough: a static pod written again with the same content
// while its earlier self was stopping restarts with the same UID, and is
// Running, its container terminated, until the container starts again; a
// new version then replaces it at once, with no grace period to wait.
func mirrorVersion(c kubernetes.Interface, ns, name, version string) (*v1.Pod, error) {
	p, err := c.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	switch {
	case err != nil:
		return nil, err
	case p.Labels["version"] != version:
		return nil, fmt.Errorf("version %q, want %q", p.Labels["version"], version)
	case p.Status.Phase != v1.PodRunning:
		return nil, fmt.Errorf("phase %s", p.Status.Phase)
	case !podReady(p):
		return nil, fmt.Errorf("not ready: %+v", p.Status.ContainerStatuses)
	}
	return p, nil
}

// mirrorStays checks, every 200 ms for d, that the mirror pod is still
// the one with uid and Running, as the upstream test does.
func mirrorStays(t *testing.T, c kubernetes.Interface, ns, name string, uid types.UID, d time.Duration) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		p, err := c.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		switch {
		case err != nil:
			t.Fatalf("mirror pod during the grace period: %v", err)
		case p.UID != uid:
			t.Fatalf("mirror pod replaced during the grace period: uid %s, want %s", p.UID, uid)
		case p.Status.Phase != v1.PodRunning:
			t.Fatalf("mirror pod during the grace period: phase %s, want Running", p.Status.Phase)
		}
	}
}
