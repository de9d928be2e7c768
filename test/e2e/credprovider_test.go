//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/managed/registry"
	"github.com/nodelet/nodelet/test/authregistry"
)

// The credentials the fake credential provider plugin hands out; the
// password must never show in nodelet's log, events or pod status.
const (
	credprovUser     = "e2e-plugin-user"
	credprovPassword = "plugin-hunter2-e2e"
)

// fakeCredentialProvider is a credential provider plugin: it appends each
// request to $REQUESTS and answers with $PULL_USER/$PULL_PASSWORD for
// $REGISTRY, not to be cached. Its environment is only what its
// configuration gives it.
const fakeCredentialProvider = `#!/bin/sh
cat >> "$REQUESTS"
echo >> "$REQUESTS"
printf '{"apiVersion":"credentialprovider.kubelet.k8s.io/v1","kind":"CredentialProviderResponse","cacheKeyType":"Registry","cacheDuration":"0s","auth":{"%s":{"username":"%s","password":"%s"}}}' "$REGISTRY" "$PULL_USER" "$PULL_PASSWORD"
`

// brokenCredentialProvider fails, as a plugin whose cloud is down does.
const brokenCredentialProvider = `#!/bin/sh
echo "metadata server unreachable" >&2
exit 1
`

// credentialProviders writes the two plugins into a bin directory and a
// configuration giving "fake" the registry's private/ repositories and
// "broken" its other/ ones; it returns the flags and the requests file.
func credentialProviders(t *testing.T, r *authregistry.Registry) (flags []string, requests string) {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, script := range map[string]string{"fake": fakeCredentialProvider, "broken": brokenCredentialProvider} {
		if err := os.WriteFile(filepath.Join(bin, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	requests = filepath.Join(dir, "requests")
	config := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1
kind: CredentialProviderConfig
providers:
- name: fake
  matchImages: ["%[1]s/private"]
  defaultCacheDuration: 0s
  apiVersion: credentialprovider.kubelet.k8s.io/v1
  env:
  - {name: REQUESTS, value: %[2]s}
  - {name: REGISTRY, value: "%[1]s"}
  - {name: PULL_USER, value: %[3]s}
  - {name: PULL_PASSWORD, value: %[4]s}
- name: broken
  matchImages: ["%[1]s/other"]
  defaultCacheDuration: 1h
  apiVersion: credentialprovider.kubelet.k8s.io/v1
`, r.Host, requests, credprovUser, credprovPassword)
	path := filepath.Join(dir, "credential-providers.yaml")
	if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	return []string{"--image-credential-provider-config", path, "--image-credential-provider-bin-dir", bin}, requests
}

// credprovRegistry starts an authenticating registry on 127.0.0.1 and
// pushes busybox as each of repos:plugin; it removes them from the
// runtime when the test ends.
func credprovRegistry(t *testing.T, repos ...string) (*authregistry.Registry, map[string]string) {
	t.Helper()
	r, err := authregistry.Start(authregistry.Options{User: credprovUser, Password: credprovPassword})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	base, err := shared.registryImage(registry.BusyboxRef)
	if err != nil {
		t.Fatal(err)
	}
	refs := map[string]string{}
	for _, repo := range repos {
		ref, err := r.Push(repo, "plugin", base)
		if err != nil {
			t.Fatal(err)
		}
		refs[repo] = ref
	}
	t.Cleanup(func() {
		for _, ref := range refs {
			_ = shared.rt.RemoveImage(context.Background(), &runtimeapi.ImageSpec{Image: ref})
		}
	})
	return r, refs
}

func credprovPod(name, image string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: %s
    imagePullPolicy: Always
    command: ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"]
`, name, image)
}

// A credential provider plugin gives the credentials a private image is
// pulled with: the pod whose image its matchImages match runs, pulled
// with the plugin's user, and the plugin was asked with the image's
// repository. A plugin that fails is a CredentialProviderFailed event on
// the pod and counted; the pull goes on without credentials and the
// registry refuses it (401). The password shows nowhere.
func TestCredentialProviderPlugins(t *testing.T) {
	r, refs := credprovRegistry(t, "private/busybox", "other/busybox")
	flags, requests := credentialProviders(t, r)
	n, dir, _ := lifecycleNodelet(t, "credprov", flags...)
	writeManifest(t, dir, "private.yaml", credprovPod("private", refs["private/busybox"]))
	writeManifest(t, dir, "other.yaml", credprovPod("other", refs["other/busybox"]))
	api := n.api(t)

	t.Run("the plugin's credentials pull the image", func(t *testing.T) {
		waitContainerRunning(t, 120*time.Second, "private-e2e", "main")
		pulled := false
		for _, req := range r.Requests() {
			pulled = pulled || (req.User == credprovUser && req.Status == 200 && req.Path == "/v2/private/busybox/manifests/plugin")
		}
		if !pulled {
			t.Errorf("the registry served no manifest to %s: %+v", credprovUser, r.Requests())
		}
		data, err := os.ReadFile(requests)
		if err != nil {
			t.Fatal(err)
		}
		want := `{"kind":"CredentialProviderRequest","apiVersion":"credentialprovider.kubelet.k8s.io/v1","image":"` + r.Host + `/private/busybox"}`
		if !strings.Contains(string(data), want) {
			t.Errorf("the plugin was asked:\n%s\nwant %s", data, want)
		}
	})

	t.Run("a failing plugin is an event and the pull goes on without it", func(t *testing.T) {
		waitEvent(t, api, 120*time.Second, "CredentialProviderFailed", podEvent("other-e2e", v1.EventTypeWarning, "CredentialProviderFailed",
			"Credential provider broken failed for image \""+r.Host+"/other/busybox\""))
		waitEvent(t, api, 120*time.Second, "the pull failed", podEvent("other-e2e", v1.EventTypeWarning, "Failed", "Failed to pull image"))
		// It went on, without credentials, and the registry refused it.
		refused := false
		for _, req := range r.Requests() {
			refused = refused || (req.User == "" && req.Status == 401 && strings.HasPrefix(req.Path, "/v2/other/busybox/manifests/"))
		}
		if !refused {
			t.Errorf("the registry refused no anonymous request for other/busybox: %+v", r.Requests())
		}
		if v, err := api.metric("/metrics", "kubelet_credential_provider_plugin_errors_total", map[string]string{"plugin_name": "broken"}); err != nil || v < 1 {
			t.Errorf("kubelet_credential_provider_plugin_errors_total{broken} = %v, %v", v, err)
		}
	})

	checkSecretHidden(t, n, api, credprovPassword)
}

// A credential provider configuration that does not check refuses to
// start, naming the field; so does a plugin binary anyone may write.
func TestCredentialProviderConfigRefused(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "fake"), []byte(fakeCredentialProvider), 0o755); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(dir, "config.yaml")
	for _, c := range []struct {
		name, config string
		mode         os.FileMode
		want         string
	}{
		{"no defaultCacheDuration", "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n" +
			"- {name: fake, matchImages: [a.example], apiVersion: credentialprovider.kubelet.k8s.io/v1}\n", 0o755,
			"providers[0].defaultCacheDuration: Required value"},
		{"world-writable plugin", "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n" +
			"- {name: fake, matchImages: [a.example], defaultCacheDuration: 1m, apiVersion: credentialprovider.kubelet.k8s.io/v1}\n", 0o777,
			"is world-writable"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := os.WriteFile(config, []byte(c.config), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(filepath.Join(bin, "fake"), c.mode); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			out, err := exec.CommandContext(ctx, shared.nodelet, "--root-dir", filepath.Join(dir, "root"), "--container-runtime-endpoint", shared.endpoint,
				"--hostname-override", "e2e", "--port", "0", "--healthz-port", "0",
				"--image-credential-provider-config", config, "--image-credential-provider-bin-dir", bin).CombinedOutput()
			if ctx.Err() != nil || err == nil || !strings.Contains(string(out), c.want) {
				t.Errorf("nodelet: %v (%v), output:\n%s\nwant an exit naming %q", err, ctx.Err(), out, c.want)
			}
		})
	}
}
