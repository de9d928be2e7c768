//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/node/localnet"
	"github.com/nodelet/nodelet/internal/pure/podspec"
)

// localnetRule is the kubelet's drop rule in KUBE-FIREWALL, as iptables
// arguments after the chain.
var localnetRule = []string{"-m", "comment", "--comment", "block incoming localnet connections",
	"--dst", "127.0.0.0/8", "!", "--src", "127.0.0.0/8",
	"-m", "conntrack", "!", "--ctstate", "RELATED,ESTABLISHED,DNAT", "-j", "DROP"}

func iptablesRun(args ...string) error {
	out, err := exec.Command("iptables", append([]string{"-w", "5", "-t", "filter"}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("iptables %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

func localnetRulePresent() bool {
	return iptablesRun(append([]string{"-C", localnet.Chain}, localnetRule...)...) == nil
}

// removeLocalnetRule deletes every copy of the drop rule (leaving the
// chain and the jumps, as a firewall reload that drops one rule would).
func removeLocalnetRule(t *testing.T) {
	t.Helper()
	for range 10 {
		if iptablesRun(append([]string{"-D", localnet.Chain}, localnetRule...)...) != nil {
			return
		}
	}
	t.Fatal("the localnet rule is still there after 10 deletions")
}

// restoreLocalnetRule puts back, when the test ends, what the test may
// have taken away, as the kubelet makes it.
func restoreLocalnetRule(t *testing.T) {
	t.Cleanup(func() {
		_ = iptablesRun("-N", localnet.Chain) // exists: fine
		for _, jump := range [][]string{{"OUTPUT"}, {"INPUT"}} {
			if iptablesRun("-C", jump[0], "-j", localnet.Chain) != nil {
				if err := iptablesRun("-I", jump[0], "-j", localnet.Chain); err != nil {
					t.Error(err)
				}
			}
		}
		if !localnetRulePresent() {
			if err := iptablesRun(append([]string{"-A", localnet.Chain}, localnetRule...)...); err != nil {
				t.Error(err)
			}
		}
	})
}

// countLines counts the lines of `iptables -S chain` that contain s.
func countLines(t *testing.T, chain, s string) int {
	t.Helper()
	out, err := exec.Command("iptables", "-w", "5", "-t", "filter", "-S", chain).CombinedOutput()
	if err != nil {
		t.Fatalf("iptables -S %s: %v: %s", chain, err, out)
	}
	return strings.Count(string(out), s)
}

// reaches reports whether the pod's container gets an HTTP answer from
// 127.0.0.1:port (busybox nc, 2 s timeout; the e2e busybox is Debian's
// static one, whose wget crashes in a container).
func reaches(t *testing.T, pod, container, port, path string) bool {
	t.Helper()
	c, err := runningContainer(context.Background(), shared.rt, pod, container)
	if err != nil {
		t.Fatal(err)
	}
	script := `printf 'GET ` + path + ` HTTP/1.0\r\n\r\n' | nc -w 2 127.0.0.1 ` + port
	stdout, _, _, err := shared.rt.ExecSync(context.Background(), c.Id, []string{"sh", "-c", script}, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return strings.HasPrefix(string(stdout), "HTTP/1.")
}

// removeSandboxes stops and removes the sandboxes of the named pods.
func removeSandboxes(pods ...string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, pod := range pods {
		sbs, _ := shared.rt.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{podspec.LabelPodName: pod}})
		for _, s := range sbs {
			shared.rt.StopPodSandbox(ctx, s.Id)
			shared.rt.RemovePodSandbox(ctx, s.Id)
		}
	}
}

// CVE-2020-8558: once portmap has set route_localnet on the bridge (a
// hostPort pod runs), a pod that routes 127.0.0.1 through its gateway must
// still not reach the node's loopback services: the registry containerd
// pulls from and nodelet's /healthz. The kubelet's rule blocks it; nodelet
// installs it at start and re-creates it when it is removed. All traffic
// goes to 127.0.0.1 only.
func TestLocalnetBlocked(t *testing.T) {
	restoreLocalnetRule(t)
	// A kubelet run earlier on this machine may have left the rule: take it
	// away, so that what blocks below is nodelet's doing.
	removeLocalnetRule(t)
	// Registered before nodelet starts, so run after it stopped.
	t.Cleanup(func() { removeSandboxes("lnweb-e2e", "lnattacker-e2e", "lnafter-e2e") })
	healthz := freePort(t)
	start := time.Now()
	n, dir, args := lifecycleNodelet(t, "localnet", "--healthz-port", healthz)
	eventually(t, 10*time.Second, "nodelet installs the localnet rule", func() error {
		if !localnetRulePresent() {
			return fmt.Errorf("not installed")
		}
		return nil
	})
	t.Logf("installed %v after nodelet started", time.Since(start).Round(time.Millisecond))
	// Beside the rules of a kubelet (or another nodelet), nothing is doubled.
	if n := countLines(t, localnet.Chain, localnet.Comment); n != 1 {
		t.Errorf("%d copies of the rule, want 1", n)
	}
	for _, chain := range []string{"INPUT", "OUTPUT"} {
		if n := countLines(t, chain, "-j "+localnet.Chain); n != 1 {
			t.Errorf("%s jumps %d times to %s, want once", chain, n, localnet.Chain)
		}
	}

	hostPort := freePort(t)
	writeManifest(t, dir, "web.yaml", `apiVersion: v1
kind: Pod
metadata: {name: lnweb}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: web
    image: busybox:1.35
    command: ["sh", "-c", "mkdir -p /www && echo hi > /www/index.html && exec httpd -f -p 8080 -h /www"]
    ports: [{containerPort: 8080, hostPort: `+hostPort+`}]
`)
	writeManifest(t, dir, "attacker.yaml", `apiVersion: v1
kind: Pod
metadata: {name: lnattacker}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: busybox:1.35
    command: ["sleep", "3600"]
    securityContext:
      capabilities: {add: ["NET_ADMIN"]}
`)
	waitContainerRunning(t, 60*time.Second, "lnweb-e2e", "web")
	waitContainerRunning(t, 60*time.Second, "lnattacker-e2e", "main")
	bridge := shared.containerd.Config().BridgeName
	if b, err := os.ReadFile("/proc/sys/net/ipv4/conf/" + bridge + "/route_localnet"); err != nil || strings.TrimSpace(string(b)) != "1" {
		t.Fatalf("route_localnet on %s = %q (%v): portmap should have set it for the hostPort pod", bridge, b, err)
	}
	// Route 127.0.0.1 out through the pod's gateway, as the CVE's exploits
	// do: without the address on lo its local routes go, and 127.0.0.1 follows the
	// added route to the bridge.
	gw := strings.Fields(execOut(t, "lnattacker-e2e", "main", "ip", "route", "show", "default"))
	if len(gw) < 3 || gw[1] != "via" {
		t.Fatalf("default route in the pod: %q", gw)
	}
	execOut(t, "lnattacker-e2e", "main", "ip", "addr", "del", "127.0.0.1/8", "dev", "lo")
	execOut(t, "lnattacker-e2e", "main", "ip", "route", "add", "127.0.0.1/32", "via", gw[2], "dev", "eth0")
	// The node's answers come from 127.0.0.1, a martian source to the pod's
	// own kernel unless its namespace routes localnet too. The CVE's
	// exploits read them with raw sockets; here the pod's namespace gets
	// route_localnet from outside (a container's /proc/sys is read-only).
	// It changes nothing on the node: what the rule drops is the request.
	c, err := runningContainer(context.Background(), shared.rt, "lnattacker-e2e", "main")
	if err != nil {
		t.Fatal(err)
	}
	pid := strconv.Itoa(containerPID(t, c.Id))
	if out, err := exec.Command("nsenter", "-t", pid, "-n", "sysctl", "-w", "net.ipv4.conf.all.route_localnet=1").CombinedOutput(); err != nil {
		t.Fatalf("route_localnet in the pod's network namespace: %v: %s", err, out)
	}
	_, registryPort, err := net.SplitHostPort(shared.registry.Addr())
	if err != nil {
		t.Fatal(err)
	}
	targets := [][2]string{{registryPort, "/v2/"}, {healthz, "/healthz"}}
	for _, to := range targets {
		if reaches(t, "lnattacker-e2e", "main", to[0], to[1]) {
			t.Errorf("the pod reaches 127.0.0.1:%s with the rule in place", to[0])
		}
	}

	// Without the rule the same pod reaches both: the rule is what blocks.
	// nodelet may put it back between the removal and the try (a minute's
	// check): then try again.
	for try := 0; ; try++ {
		removeLocalnetRule(t)
		removed := time.Now()
		reached := 0
		for _, to := range targets {
			if reaches(t, "lnattacker-e2e", "main", to[0], to[1]) {
				reached++
			}
		}
		if reached == len(targets) {
			break
		}
		if localnetRulePresent() && try < 3 {
			continue
		}
		t.Fatalf("without the rule the pod reached %d of %v (after %v)", reached, targets, time.Since(removed))
	}

	// nodelet adds it again within its check period (a minute: make
	// chaos waits for it; make test restarts nodelet, which adds it at
	// once, and TestRunRecreatesRemovedRules checks the period with a
	// fake clock).
	removed := time.Now()
	wait := localnet.Period + 15*time.Second
	if !chaosLong() {
		if err := n.stop(t); err != nil {
			t.Fatalf("nodelet exit after SIGINT: %v", err)
		}
		startNodelet(t, args...)
		wait = 10 * time.Second
	}
	eventually(t, wait, "nodelet re-creates the localnet rule", func() error {
		if !localnetRulePresent() {
			return fmt.Errorf("not re-created")
		}
		return nil
	})
	t.Logf("re-created %v after removal (check period %v, nodelet restarted: %v)", time.Since(removed).Round(time.Millisecond), localnet.Period, !chaosLong())
	if n := countLines(t, localnet.Chain, localnet.Comment); n != 1 {
		t.Errorf("%d copies of the rule after re-creation, want 1", n)
	}
	for _, to := range targets {
		if reaches(t, "lnattacker-e2e", "main", to[0], to[1]) {
			t.Errorf("the pod reaches 127.0.0.1:%s after the rule was re-created", to[0])
		}
	}
	// Pulls from the loopback registry still work: a new pod pulls and runs.
	writeManifest(t, dir, "after.yaml", `apiVersion: v1
kind: Pod
metadata: {name: lnafter}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: busybox:1.35
    imagePullPolicy: Always
    command: ["sleep", "3600"]
`)
	waitContainerRunning(t, 60*time.Second, "lnafter-e2e", "main")
	if body := httpGet(t, "http://127.0.0.1:"+hostPort+"/"); !strings.Contains(body, "hi") {
		t.Errorf("hostPort on 127.0.0.1 (DNAT) = %q", body)
	}
}
