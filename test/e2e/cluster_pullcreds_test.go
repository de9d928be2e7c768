//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// In cluster mode a pod's imagePullSecrets are kubernetes.io/dockerconfigjson
// Secrets of the API (read through the Node authorizer, which allows the
// Secrets of pods bound to the node): the pod pulls from the private
// registry with them and runs; a pod without them waits on its image. No
// event in the API shows the password.
func TestClusterImagePullSecrets(t *testing.T) {
	r, refs := privateRegistry(t, "cluster-withsecret", "cluster-nosecret")
	cp := startCluster(t)
	cp.logsOnFailure(t)
	const node = "pullcreds-a"
	joinNode(t, cp, node)
	c := cp.Admin
	ctx := clusterContext(t, 10*time.Minute)
	const ns = "pullcreds-test"
	clusterNamespace(t, c, ns)
	secret := &v1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "regcred", Namespace: ns}, Type: v1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{v1.DockerConfigJsonKey: []byte(dockerConfigJSON(r.Host, pullUser, pullPassword))}}
	if _, err := c.CoreV1().Secrets(ns).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := func(name, image string, secrets ...string) *v1.Pod {
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": name}},
			Spec: v1.PodSpec{NodeSelector: map[string]string{"kubernetes.io/hostname": node}, TerminationGracePeriodSeconds: ptr.To[int64](1),
				Containers: []v1.Container{shellContainer("main", "echo started")}}}
		p.Spec.Containers[0].Image, p.Spec.Containers[0].ImagePullPolicy = image, v1.PullAlways
		for _, s := range secrets {
			p.Spec.ImagePullSecrets = append(p.Spec.ImagePullSecrets, v1.LocalObjectReference{Name: s})
		}
		return p
	}
	for _, p := range []*v1.Pod{pod("withsecret", refs["cluster-withsecret"], "regcred"), pod("nosecret", refs["cluster-nosecret"])} {
		if _, err := c.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	waitPodsReady(t, c, ns, "app=withsecret", 1, 2*time.Minute)
	if !pulledAs(r, "cluster-withsecret", pullUser) {
		t.Errorf("the registry served no manifest to %s: %+v", pullUser, r.Requests())
	}
	eventually(t, 2*time.Minute, "nosecret waits on its image", func() error {
		p, err := c.CoreV1().Pods(ns).Get(context.Background(), "nosecret", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(p.Status.ContainerStatuses) != 1 {
			return fmt.Errorf("container statuses %+v", p.Status.ContainerStatuses)
		}
		w := p.Status.ContainerStatuses[0].State.Waiting
		if w == nil || (w.Reason != "ErrImagePull" && w.Reason != "ImagePullBackOff") {
			return fmt.Errorf("main %+v, want waiting on its image", p.Status.ContainerStatuses[0].State)
		}
		return nil
	})
	if !refusedWith401(r, "cluster-nosecret") {
		t.Errorf("the registry refused no request for nosecret with 401: %+v", r.Requests())
	}
	eventually(t, time.Minute, "nosecret's Failed event in the API", func() error {
		list, err := c.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=nosecret"})
		if err != nil {
			return err
		}
		for _, e := range list.Items {
			if e.Reason == "Failed" && strings.Contains(e.Message, `Failed to pull image "`+refs["cluster-nosecret"]+`"`) {
				return nil
			}
		}
		return fmt.Errorf("%d events, none Failed to pull", len(list.Items))
	})
	list, err := c.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range list.Items {
		if strings.Contains(e.Message, pullPassword) {
			t.Errorf("event %s/%s shows the pull password", e.Reason, e.InvolvedObject.Name)
		}
	}
}
