//go:build e2e

package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// tokenCredentialProvider is a plugin in service account token mode: it
// records each request (one per line) and, when the request carries a
// token, answers with the registry's credentials; without one it fails.
const tokenCredentialProvider = `#!/bin/sh
req=$(cat)
echo "$req" >> "$REQUESTS"
case "$req" in
*'"serviceAccountToken":"'*) ;;
*) echo "no service account token" >&2; exit 1 ;;
esac
printf '{"apiVersion":"credentialprovider.kubelet.k8s.io/v1","kind":"CredentialProviderResponse","cacheKeyType":"Registry","auth":{"%s":{"username":"%s","password":"%s"}}}' "$REGISTRY" "$PULL_USER" "$PULL_PASSWORD"
`

// The registry audience the node asks tokens for, and the annotation a
// service account must carry for the plugin to run.
const (
	credprovAudience   = "e2e-registry.nodelet.test"
	credprovAnnotation = "e2e.nodelet.io/registry-role"
)

// In cluster mode a plugin in service account token mode (KEP-4412) gets a
// token of the pod's service account for its audience, bound to the pod,
// and the annotations its configuration asks for; its credentials pull the
// pod's image. The node may ask for that audience because RBAC lets it
// (request-serviceaccounts-token-audience). A pod whose service account
// lacks the required annotation does not run the plugin, and its pull
// goes on without credentials.
func TestClusterCredentialProviderServiceAccountToken(t *testing.T) {
	r, refs := credprovRegistry(t, "private/busybox", "private/other")
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "token"), []byte(tokenCredentialProvider), 0o755); err != nil {
		t.Fatal(err)
	}
	requests := filepath.Join(dir, "requests")
	config := filepath.Join(dir, "credential-providers.yaml")
	if err := os.WriteFile(config, []byte(fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1
kind: CredentialProviderConfig
providers:
- name: token
  matchImages: ["%[1]s"]
  defaultCacheDuration: 0s
  apiVersion: credentialprovider.kubelet.k8s.io/v1
  tokenAttributes:
    serviceAccountTokenAudience: %[5]s
    requireServiceAccount: true
    cacheType: ServiceAccount
    requiredServiceAccountAnnotationKeys: [%[6]s]
  env:
  - {name: REQUESTS, value: %[2]s}
  - {name: REGISTRY, value: "%[1]s"}
  - {name: PULL_USER, value: %[3]s}
  - {name: PULL_PASSWORD, value: %[4]s}
`, r.Host, requests, credprovUser, credprovPassword, credprovAudience, credprovAnnotation)), 0o644); err != nil {
		t.Fatal(err)
	}

	cp := startCluster(t)
	cp.logsOnFailure(t)
	c := cp.Admin
	ctx := clusterContext(t, 10*time.Minute)
	// What a cluster admin grants for a registry audience no pod mounts:
	// NodeRestriction asks for the verb on the audience as the resource
	// (the service account's name as the resource name).
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "e2e-credprov-audience"}, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{""}, Resources: []string{credprovAudience}, Verbs: []string{"request-serviceaccounts-token-audience"}}}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "e2e-credprov-audience"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "Group", Name: "system:nodes"}}}
	_ = c.RbacV1().ClusterRoleBindings().Delete(ctx, binding.Name, metav1.DeleteOptions{})
	_ = c.RbacV1().ClusterRoles().Delete(ctx, role.Name, metav1.DeleteOptions{})
	if _, err := c.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.RbacV1().ClusterRoleBindings().Delete(context.Background(), binding.Name, metav1.DeleteOptions{})
		_ = c.RbacV1().ClusterRoles().Delete(context.Background(), role.Name, metav1.DeleteOptions{})
	})

	const node, ns = "credprov-a", "credprov-test"
	joinNode(t, cp, node, "--image-credential-provider-config", config, "--image-credential-provider-bin-dir", bin)
	if _, err := c.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	sa, err := c.CoreV1().ServiceAccounts(ns).Create(ctx, &v1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "puller",
		Annotations: map[string]string{credprovAnnotation: "pull"}}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if sa == nil || sa.UID == "" {
		if sa, err = c.CoreV1().ServiceAccounts(ns).Get(ctx, "puller", metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, time.Minute, "default service account", func() error {
		_, err := c.CoreV1().ServiceAccounts(ns).Get(context.Background(), "default", metav1.GetOptions{})
		return err
	})
	newPod := func(name, serviceAccount, image string) *v1.Pod {
		p, err := c.CoreV1().Pods(ns).Create(ctx, &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": name}},
			Spec: v1.PodSpec{NodeName: node, ServiceAccountName: serviceAccount, TerminationGracePeriodSeconds: ptr.To[int64](1),
				Containers: []v1.Container{{Name: "main", Image: image, ImagePullPolicy: v1.PullAlways, Command: []string{"sleep", "3600"}}}}},
			metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = c.CoreV1().Pods(ns).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		})
		return p
	}

	t.Run("the service account's token gets the credentials", func(t *testing.T) {
		pod := newPod("with-token", "puller", refs["private/busybox"])
		waitPodsReady(t, c, ns, "app=with-token", 1, 2*time.Minute)
		data, err := os.ReadFile(requests)
		if err != nil {
			t.Fatal(err)
		}
		var req struct {
			Image                     string            `json:"image"`
			ServiceAccountToken       string            `json:"serviceAccountToken"`
			ServiceAccountAnnotations map[string]string `json:"serviceAccountAnnotations"`
		}
		if err := json.Unmarshal([]byte(strings.SplitN(string(data), "\n", 2)[0]), &req); err != nil {
			t.Fatalf("the plugin's request %q: %v", data, err)
		}
		if req.Image != r.Host+"/private/busybox" || len(req.ServiceAccountAnnotations) != 1 || req.ServiceAccountAnnotations[credprovAnnotation] != "pull" {
			t.Errorf("the plugin was asked image %q, annotations %v", req.Image, req.ServiceAccountAnnotations)
		}
		claims := tokenClaims(t, req.ServiceAccountToken)
		if len(claims.Audience) != 1 || claims.Audience[0] != credprovAudience || claims.Subject != "system:serviceaccount:"+ns+":puller" ||
			claims.Kubernetes.Pod.Name != pod.Name || claims.Kubernetes.Pod.UID != string(pod.UID) || claims.Kubernetes.ServiceAccount.UID != string(sa.UID) {
			t.Errorf("the token's claims: %+v", claims)
		}
		pulled := false
		for _, q := range r.Requests() {
			pulled = pulled || (q.User == credprovUser && q.Status == 200 && q.Path == "/v2/private/busybox/manifests/plugin")
		}
		if !pulled {
			t.Errorf("the registry served no manifest to %s", credprovUser)
		}
	})

	t.Run("without the required annotation the plugin is not run", func(t *testing.T) {
		before, _ := os.ReadFile(requests)
		newPod("no-annotation", "default", refs["private/other"])
		eventually(t, 2*time.Minute, "no-annotation: ErrImagePull or ImagePullBackOff", func() error {
			p, err := c.CoreV1().Pods(ns).Get(context.Background(), "no-annotation", metav1.GetOptions{})
			if err != nil {
				return err
			}
			for _, s := range p.Status.ContainerStatuses {
				if w := s.State.Waiting; w != nil && (w.Reason == "ErrImagePull" || w.Reason == "ImagePullBackOff") {
					return nil
				}
			}
			return fmt.Errorf("container statuses %+v", p.Status.ContainerStatuses)
		})
		after, _ := os.ReadFile(requests)
		if len(after) != len(before) {
			t.Errorf("the plugin was run for a service account without %s:\n%s", credprovAnnotation, after[len(before):])
		}
	})
}

// tokenClaims are the claims of a service account token this test checks.
type tokenClaimSet struct {
	Audience   []string `json:"aud"`
	Subject    string   `json:"sub"`
	Kubernetes struct {
		Pod struct {
			Name string `json:"name"`
			UID  string `json:"uid"`
		} `json:"pod"`
		ServiceAccount struct {
			UID string `json:"uid"`
		} `json:"serviceaccount"`
	} `json:"kubernetes.io"`
}

// tokenClaims decodes a JWT's payload (not verifying it: the API server
// issued it; the test reads what it says).
func tokenClaims(t *testing.T, token string) tokenClaimSet {
	t.Helper()
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		t.Fatalf("not a JWT: %d parts", len(parts))
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var c tokenClaimSet
	if err := json.Unmarshal(payload, &c); err != nil {
		t.Fatal(err)
	}
	return c
}
