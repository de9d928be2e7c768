//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"
)

// execOut runs a command in the named running container and returns stdout.
func execOut(t *testing.T, pod, container string, cmd ...string) string {
	t.Helper()
	ctx := context.Background()
	c, err := runningContainer(ctx, shared.rt, pod, container)
	if err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code, err := shared.rt.ExecSync(ctx, c.Id, cmd, 10*time.Second)
	if err != nil || code != 0 {
		t.Fatalf("exec %v: code %d err %v stderr %s", cmd, code, err, stderr)
	}
	return string(stdout)
}

// env, valueFrom (fieldRef, configMapKeyRef, secretKeyRef), envFrom with a
// prefix and $(VAR) expansion in env and args, from objects of the
// manifest directory.
func TestEnvironment(t *testing.T) {
	n, dir, _ := lifecycleNodelet(t, "env")
	writeManifest(t, dir, "app.yaml", `apiVersion: v1
kind: ConfigMap
metadata: {name: settings}
data: {greeting: hello, color: blue}
---
apiVersion: v1
kind: Secret
metadata: {name: creds}
stringData: {password: s3cret}
---
apiVersion: v1
kind: Pod
metadata: {name: envpod, labels: {tier: web}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: busybox:1.35
    command: ["sh", "-c"]
    args: ["echo started $(GREETING); sleep 3600"]
    envFrom:
    - prefix: CFG_
      configMapRef: {name: settings}
    env:
    - name: GREETING
      valueFrom: {configMapKeyRef: {name: settings, key: greeting}}
    - name: PASSWORD
      valueFrom: {secretKeyRef: {name: creds, key: password}}
    - name: POD_NAME
      valueFrom: {fieldRef: {fieldPath: metadata.name}}
    - name: POD_IP
      valueFrom: {fieldRef: {fieldPath: status.podIP}}
    - name: TIER
      valueFrom: {fieldRef: {fieldPath: "metadata.labels['tier']"}}
    - name: MESSAGE
      value: "$(GREETING) from $(POD_NAME)"
`)
	writeManifest(t, dir, "broken.yaml", `apiVersion: v1
kind: Pod
metadata: {name: missingkey}
spec:
  containers:
  - name: main
    image: busybox:1.35
    command: ["sleep", "3600"]
    env:
    - name: X
      valueFrom: {configMapKeyRef: {name: settings, key: nosuchkey}}
`)
	eventually(t, 60*time.Second, "envpod running", func() error {
		_, err := runningContainer(context.Background(), shared.rt, "envpod-e2e", "main")
		return err
	})
	env := execOut(t, "envpod-e2e", "main", "env")
	for _, want := range []string{"GREETING=hello", "PASSWORD=s3cret", "POD_NAME=envpod-e2e", "TIER=web",
		"MESSAGE=hello from envpod-e2e", "CFG_greeting=hello", "CFG_color=blue", "POD_IP=10.43."} {
		if !strings.Contains(env, want) {
			t.Errorf("env lacks %q:\n%s", want, env)
		}
	}
	waitLog(t, n, `pod=default/missingkey-e2e phase=Pending .*main=waiting\(CreateContainerConfigError\)`, 30*time.Second)
	waitLog(t, n, `couldn't find key nosuchkey in ConfigMap default/settings`, 5*time.Second)
}

// hostname, subdomain and hostAliases, and the kubelet-managed /etc/hosts.
func TestHostnameAndHosts(t *testing.T) {
	_, dir, _ := lifecycleNodelet(t, "hosts")
	writeManifest(t, dir, "named.yaml", `apiVersion: v1
kind: Pod
metadata: {name: named}
spec:
  terminationGracePeriodSeconds: 1
  hostname: web-1
  subdomain: web
  hostAliases:
  - {ip: "10.9.9.9", hostnames: ["db.local", "cache.local"]}
  dnsConfig:
    options: [{name: ndots, value: "2"}]
  containers:
  - {name: main, image: "busybox:1.35", command: ["sleep", "3600"]}
`)
	eventually(t, 60*time.Second, "named running", func() error {
		_, err := runningContainer(context.Background(), shared.rt, "named-e2e", "main")
		return err
	})
	if got := strings.TrimSpace(execOut(t, "named-e2e", "main", "hostname")); got != "web-1" {
		t.Errorf("hostname %q, want web-1", got)
	}
	hosts := execOut(t, "named-e2e", "main", "cat", "/etc/hosts")
	for _, want := range []string{"# Kubernetes-managed hosts file", "web-1.web.default.svc.cluster.local\tweb-1", "10.9.9.9\tdb.local\tcache.local"} {
		if !strings.Contains(hosts, want) {
			t.Errorf("/etc/hosts lacks %q:\n%s", want, hosts)
		}
	}
	resolv := execOut(t, "named-e2e", "main", "cat", "/etc/resolv.conf")
	if !strings.Contains(resolv, "ndots:2") {
		t.Errorf("resolv.conf lacks the pod's ndots option:\n%s", resolv)
	}
}
