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

	"github.com/nodelet/nodelet/internal/managed/registry"
	"github.com/nodelet/nodelet/internal/serve/server"
	"github.com/nodelet/nodelet/test/authregistry"
)

// pullUser and pullPassword are the private registry's credentials; the
// password must never show in nodelet's log, events or pod status.
const (
	pullUser     = "e2e-puller"
	pullPassword = "pull-hunter2-e2e"
)

// privateRegistry starts an authenticating registry on 127.0.0.1 (plain
// HTTP) and pushes the busybox image there once per tag, so that every
// pod pulls an image no other pod pulled; it removes them from the runtime
// when the test ends.
func privateRegistry(t *testing.T, tags ...string) (*authregistry.Registry, map[string]string) {
	t.Helper()
	r, err := authregistry.Start(authregistry.Options{User: pullUser, Password: pullPassword})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	base, err := shared.registryImage(registry.BusyboxRef)
	if err != nil {
		t.Fatal(err)
	}
	refs := map[string]string{}
	for _, tag := range tags {
		ref, err := r.Push("private/busybox", tag, base)
		if err != nil {
			t.Fatal(err)
		}
		refs[tag] = ref
	}
	t.Cleanup(func() {
		for _, ref := range refs {
			_ = shared.rt.RemoveImage(context.Background(), &runtimeapi.ImageSpec{Image: ref})
		}
	})
	return r, refs
}

// dockerConfigJSON is a config.json for host with user and password.
func dockerConfigJSON(host, user, password string) string {
	auth := base64.StdEncoding.EncodeToString([]byte(user + ":" + password))
	return fmt.Sprintf(`{"auths":{%q:{"auth":%q}}}`, host, auth)
}

// pullSecretManifest is a kubernetes.io/dockerconfigjson Secret for the
// manifest directory.
func pullSecretManifest(name, host, user, password string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Secret
metadata: {name: %s}
type: kubernetes.io/dockerconfigjson
stringData:
  .dockerconfigjson: '%s'
`, name, dockerConfigJSON(host, user, password))
}

// privatePod runs image, naming the image pull secrets given, with pull
// policy Always.
func privatePod(name, image string, secrets ...string) string {
	return ensurePod(name, image, "Always", secrets...)
}

// pulledAs tells whether the registry served the manifest of tag to user.
func pulledAs(r *authregistry.Registry, tag, user string) bool {
	for _, req := range r.Requests() {
		if req.User == user && req.Status == 200 && req.Path == "/v2/private/busybox/manifests/"+tag {
			return true
		}
	}
	return false
}

// refusedWith401 tells whether the registry refused a request for the
// manifest of tag with 401.
func refusedWith401(r *authregistry.Registry, tag string) bool {
	for _, req := range r.Requests() {
		if req.Status == 401 && req.Path == "/v2/private/busybox/manifests/"+tag {
			return true
		}
	}
	return false
}

// checkNoPassword fails if the pull password shows in the pods, the
// events or the log of nodelet n.
func checkNoPassword(t *testing.T, n *nodeletProc, api *nodeAPI) {
	t.Helper()
	checkSecretHidden(t, n, api, pullPassword)
}

// checkSecretHidden fails if secret shows in the pods, the events or the
// log of nodelet n.
func checkSecretHidden(t *testing.T, n *nodeletProc, api *nodeAPI, secret string) {
	t.Helper()
	for _, path := range []string{"/pods", "/events"} {
		body, err := api.get(path)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(body), secret) {
			t.Errorf("GET %s shows a credential", path)
		}
	}
	if strings.Contains(n.stderr.String(), secret) {
		t.Error("nodelet's log shows a credential")
	}
}

// Image pull secrets of a static pod are Secrets of its manifest
// directory: with one the pod pulls from the private registry with its
// credentials; without, or with a wrong password, the registry answers
// 401 and the pull fails with ErrImagePull and then ImagePullBackOff;
// a Secret that is not there is the kubelet's
// FailedToRetrieveImagePullSecret event. No credential shows anywhere.
func TestImagePullSecrets(t *testing.T) {
	r, refs := privateRegistry(t, "withsecret", "nosecret", "wrongsecret", "missingsecret")
	n, dir, _ := lifecycleNodelet(t, "pullsecrets")
	writeManifest(t, dir, "regcred.yaml", pullSecretManifest("regcred", r.Host, pullUser, pullPassword))
	writeManifest(t, dir, "wrongcred.yaml", pullSecretManifest("wrongcred", r.Host, pullUser, "not-the-password"))
	writeManifest(t, dir, "withsecret.yaml", privatePod("withsecret", refs["withsecret"], "regcred"))
	writeManifest(t, dir, "nosecret.yaml", privatePod("nosecret", refs["nosecret"]))
	writeManifest(t, dir, "wrongsecret.yaml", privatePod("wrongsecret", refs["wrongsecret"], "wrongcred"))
	writeManifest(t, dir, "missingsecret.yaml", privatePod("missingsecret", refs["missingsecret"], "nosuchsecret", "regcred"))
	api := n.api(t)

	t.Run("with the Secret the pull carries its credentials", func(t *testing.T) {
		waitContainerRunning(t, 120*time.Second, "withsecret-e2e", "main")
		if !pulledAs(r, "withsecret", pullUser) {
			t.Errorf("the registry served no manifest to %s: %+v", pullUser, r.Requests())
		}
	})
	t.Run("a missing Secret is an event, the pull goes on with the rest", func(t *testing.T) {
		waitEvent(t, api, 60*time.Second, "FailedToRetrieveImagePullSecret", podEvent("missingsecret-e2e", v1.EventTypeWarning,
			"FailedToRetrieveImagePullSecret", "Unable to retrieve some image pull secrets (nosuchsecret); attempting to pull the image may not succeed."))
		waitContainerRunning(t, 120*time.Second, "missingsecret-e2e", "main")
	})
	// Without credentials the registry refuses the anonymous request
	// with 401, which containerd 1.6 reports as such and containerd 2.x
	// as the image "not found" (the kubelet's event would show the same).
	// With the wrong password the registry's 401 is in the event.
	anonymous := "401 Unauthorized"
	if shared.containerd.Config().Major >= 2 {
		anonymous = "not found"
	}
	for pod, says := range map[string]string{"nosecret": anonymous, "wrongsecret": "401 Unauthorized"} {
		t.Run(pod+": ErrImagePull, then back-off", func(t *testing.T) {
			name := pod + "-e2e"
			waitEvent(t, api, 60*time.Second, name+" pull failed", func(e server.EventItem) bool {
				return podEvent(name, v1.EventTypeWarning, "Failed", `Failed to pull image "`+refs[pod]+`"`)(e) && strings.Contains(e.Message, says)
			})
			waitEvent(t, api, 60*time.Second, name+" ErrImagePull", podEvent(name, v1.EventTypeWarning, "Failed", "Error: ErrImagePull"))
			waitPod(t, api, name, 60*time.Second, "back-off", waitingWith("main", "ImagePullBackOff", `Back-off pulling image "`+refs[pod]+`"`))
			if !refusedWith401(r, pod) {
				t.Errorf("the registry refused no request for %s with 401: %+v", pod, r.Requests())
			}
		})
	}
	t.Run("no credential shows", func(t *testing.T) { checkNoPassword(t, n, api) })
}

// The node's config.json under --root-dir gives every pod its
// credentials, as the kubelet's does.
func TestImagePullNodeConfig(t *testing.T) {
	r, refs := privateRegistry(t, "nodeconfig")
	root := filepath.Join(shared.work, "root-pullnodeconfig")
	if err := os.MkdirAll(root, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "config.json"), []byte(dockerConfigJSON(r.Host, pullUser, pullPassword)), 0o600); err != nil {
		t.Fatal(err)
	}
	n, dir, _ := lifecycleNodelet(t, "pullnodeconfig")
	writeManifest(t, dir, "nodeconfig.yaml", privatePod("nodeconfig", refs["nodeconfig"]))
	waitContainerRunning(t, 120*time.Second, "nodeconfig-e2e", "main")
	if !pulledAs(r, "nodeconfig", pullUser) {
		t.Errorf("the registry served no manifest to %s: %+v", pullUser, r.Requests())
	}
	checkNoPassword(t, n, n.api(t))
}
