//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/pure/podspec"
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
	waitContainerRunning(t, 60*time.Second, "envpod-e2e", "main")
	env := execOut(t, "envpod-e2e", "main", "env")
	for _, want := range []string{"GREETING=hello", "PASSWORD=s3cret", "POD_NAME=envpod-e2e", "TIER=web",
		"MESSAGE=hello from envpod-e2e", "CFG_greeting=hello", "CFG_color=blue", "POD_IP=10.43."} {
		if !strings.Contains(env, want) {
			t.Errorf("env lacks %q:\n%s", want, env)
		}
	}
	waitPod(t, n.api(t), "missingkey-e2e", 30*time.Second, "main waits for its env", func(p *v1.Pod) error {
		if p.Status.Phase != v1.PodPending {
			return fmt.Errorf("phase %s", p.Status.Phase)
		}
		return waitingWith("main", "CreateContainerConfigError", "couldn't find key nosuchkey in ConfigMap default/settings")(p)
	})
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
	waitContainerRunning(t, 60*time.Second, "named-e2e", "main")
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

// A container that allocates past its memory limit is OOMKilled and
// reported so; its pod sits in the burstable QoS cgroup.
func TestMemoryLimitOOMKilled(t *testing.T) {
	n, dir, _ := lifecycleNodelet(t, "oom")
	writeManifest(t, dir, "hog.yaml", `apiVersion: v1
kind: Pod
metadata: {name: hog}
spec:
  restartPolicy: Never
  containers:
  - name: main
    image: busybox:1.35
    command: ["sh", "-c", "while [ ! -e /tmp/go ]; do sleep 0.1; done; x=aaaaaaaaaaaaaaaa; while true; do x=$x$x; done"]
    resources:
      requests: {memory: 16Mi}
      limits: {memory: 32Mi}
`)
	// While it runs, the pod sits in the burstable tier (its cgroup goes
	// once the pod has terminated).
	waitContainerRunning(t, 60*time.Second, "hog-e2e", "main")
	sbs, err := shared.rt.ListPodSandbox(context.Background(), &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{podspec.LabelPodName: "hog-e2e"}})
	if err != nil || len(sbs) == 0 {
		t.Fatalf("sandbox: %v %v", sbs, err)
	}
	uid := sbs[0].Labels[podspec.LabelPodUID]
	if _, err := os.Stat("/sys/fs/cgroup/memory" + shared.cgroupRoot + "/kubepods/burstable/pod" + uid); err != nil {
		t.Errorf("no burstable pod cgroup: %v", err)
	}
	execOut(t, "hog-e2e", "main", "touch", "/tmp/go")
	waitPod(t, n.api(t), "hog-e2e", 60*time.Second, "OOMKilled", func(p *v1.Pod) error {
		term := containerStatus(p, "main").State.Terminated
		if p.Status.Phase != v1.PodFailed || term == nil || term.Reason != "OOMKilled" {
			return fmt.Errorf("phase %s, main %+v", p.Status.Phase, containerStatus(p, "main").State)
		}
		return nil
	})
}

// runAsNonRoot refuses an image that runs as root, with the reason; a
// numeric runAsUser and a read-only root filesystem apply.
func TestSecurityContext(t *testing.T) {
	n, dir, _ := lifecycleNodelet(t, "security")
	writeManifest(t, dir, "nonroot.yaml", `apiVersion: v1
kind: Pod
metadata: {name: nonroot}
spec:
  securityContext: {runAsNonRoot: true}
  containers:
  - {name: main, image: "busybox:1.35", command: ["sleep", "3600"]}
`)
	writeManifest(t, dir, "user.yaml", `apiVersion: v1
kind: Pod
metadata: {name: user}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: busybox:1.35
    command: ["sleep", "3600"]
    securityContext:
      runAsUser: 1000
      runAsGroup: 3000
      readOnlyRootFilesystem: true
      allowPrivilegeEscalation: false
      capabilities: {drop: ["ALL"]}
`)
	waitPod(t, n.api(t), "nonroot-e2e", 60*time.Second, "refused to run as root", func(p *v1.Pod) error {
		if p.Status.Phase != v1.PodPending {
			return fmt.Errorf("phase %s", p.Status.Phase)
		}
		return waitingWith("main", "CreateContainerConfigError", "container has runAsNonRoot and image will run as root")(p)
	})
	waitContainerRunning(t, 60*time.Second, "user-e2e", "main")
	// Masked as the kubelet masks it (containerd 1.6's default does not).
	if out := execOut(t, "user-e2e", "main", "cat", "/proc/interrupts"); out != "" {
		t.Errorf("/proc/interrupts is readable in the container: %.80q", out)
	}
	if id := strings.TrimSpace(execOut(t, "user-e2e", "main", "id")); !strings.HasPrefix(id, "uid=1000 gid=3000") {
		t.Errorf("id = %q", id)
	}
	c, _ := runningContainer(context.Background(), shared.rt, "user-e2e", "main")
	if _, _, code, err := shared.rt.ExecSync(context.Background(), c.Id, []string{"touch", "/x"}, 10*time.Second); err != nil || code == 0 {
		t.Errorf("wrote to a read-only root filesystem (code %d, err %v)", code, err)
	}
}

// A containerPort with a hostPort answers from the host through portmap.
func TestHostPort(t *testing.T) {
	_, dir, _ := lifecycleNodelet(t, "hostport")
	port := freePort(t)
	writeManifest(t, dir, "web.yaml", `apiVersion: v1
kind: Pod
metadata: {name: hostport}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: web
    image: busybox:1.35
    command: ["sh", "-c", "mkdir -p /www && echo via-hostport > /www/index.html && exec httpd -f -p 8080 -h /www"]
    ports: [{containerPort: 8080, hostPort: `+port+`}]
`)
	waitContainerRunning(t, 60*time.Second, "hostport-e2e", "web")
	// Loopback only: the portmap plugin (snat) DNATs it to the pod.
	body := httpGet(t, "http://127.0.0.1:"+port+"/")
	if !strings.Contains(body, "via-hostport") {
		t.Errorf("GET 127.0.0.1:%s = %q", port, body)
	}
	// The port came from the kernel's ephemeral range: while the pod's
	// DNAT rule stays, a later test's listener given the same port would
	// have its connections sent to this httpd (a registry test once got
	// httpd's 404 page). The pod goes before the test ends, and the port
	// stops reaching it.
	if err := os.Remove(filepath.Join(dir, "web.yaml")); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "127.0.0.1:"+port+" no longer reaching the pod", func() error {
		conn, err := net.DialTimeout("tcp", "127.0.0.1:"+port, time.Second)
		if err != nil {
			return nil
		}
		conn.Close()
		return errors.New("still answers")
	})
}

// A hostNetwork pod shares the node's network and hostname; a
// RuntimeDefault seccomp profile and added capabilities are accepted.
func TestHostNetworkAndSeccomp(t *testing.T) {
	_, dir, _ := lifecycleNodelet(t, "hostnet")
	writeManifest(t, dir, "hostnet.yaml", `apiVersion: v1
kind: Pod
metadata: {name: hostnet}
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 1
  securityContext:
    seccompProfile: {type: RuntimeDefault}
  containers:
  - name: main
    image: busybox:1.35
    command: ["sleep", "3600"]
    securityContext:
      capabilities: {add: ["NET_ADMIN"]}
`)
	waitContainerRunning(t, 60*time.Second, "hostnet-e2e", "main")
	host, _ := os.Hostname()
	if got := strings.TrimSpace(execOut(t, "hostnet-e2e", "main", "hostname")); got != host {
		t.Errorf("hostname %q, want the node's %q", got, host)
	}
	if status := execOut(t, "hostnet-e2e", "main", "cat", "/proc/self/status"); !strings.Contains(status, "Seccomp:\t2") {
		t.Errorf("seccomp not in filter mode:\n%s", status)
	}
}
