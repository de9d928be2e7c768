//go:build e2e

package e2e

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/test/authregistry"
)

// ensurePod is a static pod running image with pull policy policy and the
// image pull secrets given.
func ensurePod(name, image, policy string, secrets ...string) string {
	refs := ""
	for _, s := range secrets {
		refs += fmt.Sprintf("  - name: %s\n", s)
	}
	if refs != "" {
		refs = "  imagePullSecrets:\n" + refs
	}
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s}
spec:
  terminationGracePeriodSeconds: 1
%s  containers:
  - name: main
    image: %s
    imagePullPolicy: %s
    command: ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"]
`, name, refs, image, policy)
}

// authorizedManifestGets counts the registry's answers to user's
// manifest requests for repo: the pulls it served.
func authorizedManifestGets(r *authregistry.Registry, repo, user string) int {
	n := 0
	for _, req := range r.Requests() {
		if req.User == user && req.Status == 200 && strings.HasPrefix(req.Path, "/v2/"+repo+"/manifests/") {
			n++
		}
	}
	return n
}

// refusedManifestGets counts the registry's 401 answers to manifest
// requests for repo without credentials.
func refusedManifestGets(r *authregistry.Registry, repo string) int {
	n := 0
	for _, req := range r.Requests() {
		if req.User == "" && req.Status == 401 && strings.HasPrefix(req.Path, "/v2/"+repo+"/manifests/") {
			n++
		}
	}
	return n
}

// KEP-2535 (KubeletEnsureSecretPulledImages, on by default; the default
// policy NeverVerifyPreloadedImages): pod A pulls a private image with its
// Secret; pod B, without credentials and with pull policy IfNotPresent,
// cannot use the image A pulled (it pulls, ErrImagePull, and the registry
// answers 401), nor can pod N with pull policy Never (ErrImageNeverPull,
// as if the image were not there); pod C with the same Secret uses it
// without a new pull. A restarted nodelet keeps the records: the same
// holds for new pods, and the running ones are left alone.
func TestEnsureSecretPulledImages(t *testing.T) {
	r, refs := privateRegistry(t, "ensure")
	image, repo := refs["ensure"], "private/busybox"
	// The shared runtime may hold the image (same registry port in an
	// earlier run): nodelet must pull it itself.
	_ = shared.rt.RemoveImage(context.Background(), &runtimeapi.ImageSpec{Image: image})

	n, dir, args := lifecycleNodelet(t, "ensurepulled")
	root := lastFlag(args, "--root-dir")
	writeManifest(t, dir, "regcred.yaml", pullSecretManifest("regcred", r.Host, pullUser, pullPassword))
	writeManifest(t, dir, "a.yaml", ensurePod("ens-a", image, "IfNotPresent", "regcred"))
	api := n.api(t)
	waitContainerRunning(t, 120*time.Second, "ens-a-e2e", "main")
	if got := authorizedManifestGets(r, repo, pullUser); got == 0 {
		t.Fatalf("pod A ran without the registry serving %s: %+v", pullUser, r.Requests())
	}

	// denied waits until pod's container waits on its image with reason
	// (ErrImagePull or, later, ImagePullBackOff for a pull; ErrImageNeverPull),
	// after the event of the registry's 401 when it pulled.
	// refusedBefore is refusedManifestGets before the pod was written.
	denied := func(t *testing.T, api *nodeAPI, pod string, never bool, refusedBefore int) {
		t.Helper()
		name := pod + "-e2e"
		if never {
			waitEvent(t, api, 60*time.Second, name+" ErrImageNeverPull", podEvent(name, v1.EventTypeWarning, "ErrImageNeverPull",
				`Container image "`+image+`" is not present with pull policy of Never`))
			waitPod(t, api, name, 60*time.Second, "ErrImageNeverPull", waitingWith("main", "ErrImageNeverPull", "is not present with pull policy of Never"))
			return
		}
		// The registry refused the pod's pull (401 to an anonymous
		// manifest request); containerd words it in the event as it
		// does (2.2: "failed to resolve image: ...: not found").
		waitEvent(t, api, 60*time.Second, name+" pull failed", podEvent(name, v1.EventTypeWarning, "Failed", `Failed to pull image "`+image+`"`))
		eventually(t, 60*time.Second, name+": the registry refused a pull with 401", func() error {
			if refusedManifestGets(r, repo) <= refusedBefore {
				return fmt.Errorf("no anonymous manifest request answered 401: %+v", r.Requests())
			}
			return nil
		})
		waitPod(t, api, name, 60*time.Second, "waiting on its image", func(p *v1.Pod) error {
			w := containerStatus(p, "main").State.Waiting
			if w == nil || (w.Reason != "ErrImagePull" && w.Reason != "ImagePullBackOff") {
				return fmt.Errorf("main %+v, want waiting on its image", containerStatus(p, "main").State)
			}
			return nil
		})
	}
	// usedWithoutPull writes pod (with the Secret) and checks it runs
	// from the image present, with no pull the registry served.
	usedWithoutPull := func(t *testing.T, api *nodeAPI, pod string) {
		t.Helper()
		before := authorizedManifestGets(r, repo, pullUser)
		writeManifest(t, dir, pod+".yaml", ensurePod(pod, image, "IfNotPresent", "regcred"))
		waitContainerRunning(t, 120*time.Second, pod+"-e2e", "main")
		waitEvent(t, api, 30*time.Second, pod+" image present and accessible", podEvent(pod+"-e2e", v1.EventTypeNormal, "Pulled",
			`Container image "`+image+`" already present on machine and can be accessed by the pod`))
		if after := authorizedManifestGets(r, repo, pullUser); after != before {
			t.Errorf("pod %s pulled again: the registry served %d manifests before, %d after", pod, before, after)
		}
	}

	t.Run("without credentials a pod cannot use the image", func(t *testing.T) {
		refused := refusedManifestGets(r, repo)
		writeManifest(t, dir, "b.yaml", ensurePod("ens-b", image, "IfNotPresent"))
		writeManifest(t, dir, "n.yaml", ensurePod("ens-n", image, "Never"))
		denied(t, api, "ens-b", false, refused)
		denied(t, api, "ens-n", true, 0)
	})
	t.Run("with the same Secret a pod uses the image without a pull", func(t *testing.T) {
		usedWithoutPull(t, api, "ens-c")
	})
	t.Run("the records are nodelet's, atomic, and hold no credential", func(t *testing.T) {
		for _, sub := range []string{"image_manager", "image_manager/pulled", "image_manager/pulling"} {
			fi, err := os.Stat(filepath.Join(root, sub))
			if err != nil {
				t.Fatal(err)
			}
			if !fi.IsDir() || fi.Mode().Perm() != 0o700 {
				t.Errorf("%s: %v; want a 0700 directory", sub, fi.Mode())
			}
		}
		files, _ := filepath.Glob(filepath.Join(root, "image_manager", "pulled", "*"))
		if len(files) == 0 {
			t.Fatal("no pulled record")
		}
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if fi, err := os.Stat(f); err != nil || fi.Mode().Perm() != 0o600 {
				t.Errorf("%s: %v; want mode 0600", f, err)
			}
			if strings.Contains(string(data), pullPassword) || strings.Contains(string(data), base64.StdEncoding.EncodeToString([]byte(pullUser+":"+pullPassword))) {
				t.Errorf("%s holds the credential", f)
			}
		}
	})

	t.Run("after a restart the same holds", func(t *testing.T) {
		kept := map[string]string{}
		for _, pod := range []string{"ens-a-e2e", "ens-c-e2e"} {
			c, err := runningContainer(context.Background(), shared.rt, pod, "main")
			if err != nil {
				t.Fatal(err)
			}
			kept[pod] = c.Id
		}
		for _, f := range []string{"b.yaml", "n.yaml"} {
			if err := os.Remove(filepath.Join(dir, f)); err != nil {
				t.Fatal(err)
			}
		}
		if err := n.stop(t); err != nil {
			t.Fatalf("nodelet exit: %v", err)
		}
		n2 := startNodelet(t, args...)
		api2 := n2.api(t)
		refused := refusedManifestGets(r, repo)
		writeManifest(t, dir, "e.yaml", ensurePod("ens-e", image, "IfNotPresent"))
		denied(t, api2, "ens-e", false, refused)
		usedWithoutPull(t, api2, "ens-f")
		for pod, id := range kept {
			c, err := runningContainer(context.Background(), shared.rt, pod, "main")
			if err != nil || c.Id != id {
				t.Errorf("%s runs %v (err %v), want its container %s untouched", pod, c, err, id)
			}
		}
		checkNoPassword(t, n2, api2)
		if strings.Contains(n.stderr.String(), pullPassword) {
			t.Error("the first nodelet's log shows the pull password")
		}
	})
}
