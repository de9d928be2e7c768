//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/mutate"
	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// An exec liveness probe that starts failing restarts the container, and
// the reason is recorded.
func TestLivenessProbeRestarts(t *testing.T) {
	port := freePort(t)
	n, dir, _ := lifecycleNodelet(t, "liveness", "--read-only-port", port, "--address", "127.0.0.1")
	writeManifest(t, dir, "live.yaml", `apiVersion: v1
kind: Pod
metadata: {name: live}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: busybox:1.35
    command: ["sh", "-c", "touch /tmp/healthy; sleep 3; rm /tmp/healthy; sleep 3600"]
    livenessProbe:
      exec: {command: ["cat", "/tmp/healthy"]}
      periodSeconds: 1
      failureThreshold: 2
`)
	eventually(t, 60*time.Second, "live restarted", func() error {
		if got := len(instances(t, "live-e2e", "main")); got < 2 {
			return fmt.Errorf("%d instances", got)
		}
		return nil
	})
	api := n.api(t)
	waitEvent(t, api, 5*time.Second, "live-e2e Unhealthy", podEvent("live-e2e", v1.EventTypeWarning, "Unhealthy", "Liveness probe failed"))
	waitEvent(t, api, 5*time.Second, "live-e2e Killing", podEvent("live-e2e", v1.EventTypeNormal, "Killing", "Container main failed liveness probe"))
	metrics := httpGet(t, "http://127.0.0.1:"+port+"/metrics/probes")
	if !regexp.MustCompile(`prober_probe_total\{[^}]*pod="live-e2e"[^}]*probe_type="Liveness"[^}]*result="failed"[^}]*\} [1-9]`).MatchString(metrics) {
		t.Errorf("/metrics/probes has no failed liveness count for live-e2e:\n%s", metrics)
	}
	if body := httpGet(t, "http://127.0.0.1:"+port+"/healthz"); body != "ok" {
		t.Errorf("/healthz = %q", body)
	}
}

func freePort(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
}

func httpGet(t testing.TB, url string) string {
	t.Helper()
	var body string
	eventually(t, 10*time.Second, "GET "+url, func() error {
		resp, err := http.Get(url)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		body = string(b)
		return err
	})
	return body
}

// An HTTP readiness probe against busybox httpd flips Ready both ways.
func TestReadinessProbeFlips(t *testing.T) {
	n, dir, _ := lifecycleNodelet(t, "readiness")
	writeManifest(t, dir, "web.yaml", `apiVersion: v1
kind: Pod
metadata: {name: ready}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: web
    image: busybox:1.35
    command: ["sh", "-c", "mkdir -p /www && exec httpd -f -p 8080 -h /www"]
    ports: [{name: http, containerPort: 8080}]
    readinessProbe:
      httpGet: {path: /ready.html, port: http}
      periodSeconds: 1
      failureThreshold: 1
`)
	ctx := context.Background()
	var c *runtimeapi.Container
	eventually(t, 60*time.Second, "web running", func() (err error) {
		c, err = runningContainer(ctx, shared.rt, "ready-e2e", "web")
		return err
	})
	api := n.api(t)
	waitPod(t, api, "ready-e2e", 20*time.Second, "not ready", readyIs(v1.ConditionFalse))
	exec := func(cmd ...string) {
		if _, _, code, err := shared.rt.ExecSync(ctx, c.Id, cmd, 10*time.Second); err != nil || code != 0 {
			t.Fatalf("exec %v: %d %v", cmd, code, err)
		}
	}
	exec("sh", "-c", "echo ok > /www/ready.html")
	ready := waitPod(t, api, "ready-e2e", 20*time.Second, "ready", readyIs(v1.ConditionTrue))
	if !containerStatus(ready, "web").Ready {
		t.Errorf("pod Ready but container web not: %+v", containerStatus(ready, "web"))
	}
	exec("rm", "/www/ready.html")
	waitPod(t, api, "ready-e2e", 20*time.Second, "not ready again", readyIs(v1.ConditionFalse))
	if p, _ := api.pod("ready-e2e"); p != nil && containerStatus(p, "web").RestartCount != 0 {
		t.Errorf("a readiness failure restarted web: %+v", containerStatus(p, "web"))
	}
}

// A startup probe holds the liveness probe back until it succeeds.
func TestStartupProbeDelaysLiveness(t *testing.T) {
	n, dir, _ := lifecycleNodelet(t, "startup")
	writeManifest(t, dir, "slow.yaml", `apiVersion: v1
kind: Pod
metadata: {name: slow}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: busybox:1.35
    command: ["sh", "-c", "sleep 4; touch /tmp/up; sleep 3600"]
    startupProbe:
      exec: {command: ["test", "-f", "/tmp/up"]}
      periodSeconds: 1
      failureThreshold: 20
    livenessProbe:
      exec: {command: ["test", "-f", "/tmp/up"]}
      periodSeconds: 1
      failureThreshold: 1
`)
	api := n.api(t)
	waitPod(t, api, "slow-e2e", 60*time.Second, "ready", readyIs(v1.ConditionTrue))
	// Liveness now runs, and passes.
	liveness := map[string]string{"pod": "slow-e2e", "probe_type": "Liveness", "result": "successful"}
	eventually(t, 20*time.Second, "two successful liveness probes", func() error {
		if got, err := api.metric("/metrics/probes", "prober_probe_total", liveness); err != nil || got < 2 {
			return fmt.Errorf("%v successful liveness probes (%v)", got, err)
		}
		return nil
	})
	waitRuntimeLists(t, api, 3)
	if got := len(instances(t, "slow-e2e", "main")); got != 1 {
		t.Errorf("%d instances: liveness ran before the startup probe passed", got)
	}
	if p, err := api.pod("slow-e2e"); err != nil || containerStatus(p, "main").RestartCount != 0 {
		t.Errorf("slow-e2e restarted: %+v (err %v)", p, err)
	}
}

// preStop runs before the stop signal and the grace period is honoured;
// the hook's output goes to the container's log through PID 1's stdout.
func TestPreStopHookAndGrace(t *testing.T) {
	_, dir, _ := lifecycleNodelet(t, "prestop")
	writeManifest(t, dir, "hook.yaml", `apiVersion: v1
kind: Pod
metadata: {name: hook}
spec:
  terminationGracePeriodSeconds: 15
  containers:
  - name: main
    image: busybox:1.35
    command: ["sh", "-c", "trap 'echo got TERM; sleep 2; echo bye; exit 0' TERM; while true; do sleep 0.2; done"]
    lifecycle:
      preStop:
        exec: {command: ["sh", "-c", "echo prestop ran > /proc/1/fd/1; sleep 1"]}
`)
	ctx := context.Background()
	var c *runtimeapi.Container
	eventually(t, 60*time.Second, "hook running", func() (err error) {
		c, err = runningContainer(ctx, shared.rt, "hook-e2e", "main")
		return err
	})
	os.Remove(filepath.Join(dir, "hook.yaml"))
	eventually(t, 60*time.Second, "hook stopped", func() error {
		st, err := shared.rt.ContainerStatus(ctx, c.Id)
		if err != nil {
			return err
		}
		if st.GetStatus().GetState() != runtimeapi.ContainerState_CONTAINER_EXITED {
			return fmt.Errorf("state %v", st.GetStatus().GetState())
		}
		return nil
	})
	st, _ := shared.rt.ContainerStatus(ctx, c.Id)
	if code := st.GetStatus().GetExitCode(); code != 0 {
		t.Errorf("exit code %d, want 0: SIGTERM came and the trap had its time", code)
	}
	logs, _ := os.ReadFile(st.GetStatus().GetLogPath())
	text := string(logs)
	pre, term, bye := strings.Index(text, "prestop ran"), strings.Index(text, "got TERM"), strings.Index(text, "bye")
	if pre < 0 || term < 0 || bye < 0 || !(pre < term && term < bye) {
		t.Errorf("log order wrong (want prestop, TERM, bye):\n%s", text)
	}
}

// Sidecars start in order before the app and stop after it, in reverse.
func TestSidecarOrder(t *testing.T) {
	_, dir, _ := lifecycleNodelet(t, "sidecar")
	writeManifest(t, dir, "side.yaml", `apiVersion: v1
kind: Pod
metadata: {name: side}
spec:
  terminationGracePeriodSeconds: 5
  initContainers:
  - {name: proxy, image: "busybox:1.35", restartPolicy: Always, command: ["sh", "-c", "trap 'sleep 0.5; exit 0' TERM; while true; do sleep 0.1; done"]}
  - {name: logger, image: "busybox:1.35", restartPolicy: Always, command: ["sh", "-c", "trap 'sleep 0.5; exit 0' TERM; while true; do sleep 0.1; done"]}
  containers:
  - {name: app, image: "busybox:1.35", command: ["sh", "-c", "trap 'sleep 0.5; exit 0' TERM; while true; do sleep 0.1; done"]}
`)
	ctx := context.Background()
	ids := map[string]string{}
	eventually(t, 60*time.Second, "all running", func() error {
		for _, name := range []string{"proxy", "logger", "app"} {
			c, err := runningContainer(ctx, shared.rt, "side-e2e", name)
			if err != nil {
				return err
			}
			ids[name] = c.Id
		}
		return nil
	})
	started := func(name string) int64 {
		st, _ := shared.rt.ContainerStatus(ctx, ids[name])
		return st.GetStatus().GetStartedAt()
	}
	if !(started("proxy") < started("logger") && started("logger") < started("app")) {
		t.Errorf("start order wrong: proxy %d logger %d app %d", started("proxy"), started("logger"), started("app"))
	}
	os.Remove(filepath.Join(dir, "side.yaml"))
	finished := map[string]int64{}
	eventually(t, 60*time.Second, "all stopped", func() error {
		for name, id := range ids {
			st, err := shared.rt.ContainerStatus(ctx, id)
			if err != nil || st.GetStatus().GetFinishedAt() == 0 {
				return fmt.Errorf("%s not finished", name)
			}
			finished[name] = st.GetStatus().GetFinishedAt()
		}
		return nil
	})
	if !(finished["app"] < finished["logger"] && finished["logger"] < finished["proxy"]) {
		t.Errorf("stop order wrong: app %d logger %d proxy %d", finished["app"], finished["logger"], finished["proxy"])
	}
}

// activeDeadlineSeconds fails the pod with DeadlineExceeded and stops it.
func TestActiveDeadlineSeconds(t *testing.T) {
	n, dir, _ := lifecycleNodelet(t, "deadline")
	writeManifest(t, dir, "dl.yaml", `apiVersion: v1
kind: Pod
metadata: {name: deadline}
spec:
  activeDeadlineSeconds: 3
  terminationGracePeriodSeconds: 1
  containers:
  - {name: main, image: "busybox:1.35", command: ["sleep", "3600"]}
`)
	waitPod(t, n.api(t), "deadline-e2e", 60*time.Second, "failed by its deadline", hasPhase(v1.PodFailed, "DeadlineExceeded"))
	eventually(t, 30*time.Second, "deadline pod stopped", func() error {
		if _, err := runningContainer(context.Background(), shared.rt, "deadline-e2e", "main"); err == nil {
			return fmt.Errorf("still running")
		}
		return nil
	})
}

// The image's STOPSIGNAL is what stops the container.
func TestImageStopSignal(t *testing.T) {
	base, err := shared.registryImage("docker.io/library/busybox:1.35")
	if err != nil {
		t.Fatal(err)
	}
	cf, _ := base.ConfigFile()
	cfg := cf.Config
	cfg.StopSignal = "SIGUSR1"
	img, err := mutate.Config(base, cfg)
	if err != nil {
		t.Fatal(err)
	}
	const ref = "docker.io/e2e/stopsignal:v1"
	// The registry serves what the store holds: no publishing step.
	if _, err := shared.store.Put(ref, img); err != nil {
		t.Fatal(err)
	}
	_, dir, _ := lifecycleNodelet(t, "stopsignal")
	// sh as PID 1 ignores SIGTERM: only the image's SIGUSR1 ends it with 0
	// before the grace period runs out and SIGKILL (137) would.
	writeManifest(t, dir, "sig.yaml", `apiVersion: v1
kind: Pod
metadata: {name: sig}
spec:
  terminationGracePeriodSeconds: 20
  containers:
  - name: main
    image: `+ref+`
    command: ["sh", "-c", "trap 'echo got USR1; exit 0' USR1; while true; do sleep 0.2; done"]
`)
	ctx := context.Background()
	var c *runtimeapi.Container
	eventually(t, 60*time.Second, "sig running", func() (err error) {
		c, err = runningContainer(ctx, shared.rt, "sig-e2e", "main")
		return err
	})
	os.Remove(filepath.Join(dir, "sig.yaml"))
	start := time.Now()
	eventually(t, 30*time.Second, "sig stopped", func() error {
		st, err := shared.rt.ContainerStatus(ctx, c.Id)
		if err != nil || st.GetStatus().GetState() != runtimeapi.ContainerState_CONTAINER_EXITED {
			return fmt.Errorf("not exited (%v)", err)
		}
		if code := st.GetStatus().GetExitCode(); code != 0 {
			t.Errorf("exit code %d, want 0 from the SIGUSR1 trap", code)
		}
		return nil
	})
	if took := time.Since(start); took > 15*time.Second {
		t.Errorf("stop took %v: the stop signal was not the image's", took)
	}
}

// A Job-like pod (restartPolicy Never) completes when its regular
// container finishes, though its sidecar would run forever.
func TestJobWithSidecarCompletes(t *testing.T) {
	n, dir, _ := lifecycleNodelet(t, "job")
	writeManifest(t, dir, "job.yaml", `apiVersion: v1
kind: Pod
metadata: {name: job}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 2
  initContainers:
  - {name: proxy, image: "busybox:1.35", restartPolicy: Always, command: ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 0.1; done"]}
  containers:
  - {name: work, image: "busybox:1.35", command: ["sh", "-c", "sleep 2; echo done"]}
`)
	waitPhase(t, n, "job-e2e", "Succeeded", 60*time.Second)
	eventually(t, 30*time.Second, "sidecar stopped", func() error {
		if _, err := runningContainer(context.Background(), shared.rt, "job-e2e", "proxy"); err == nil {
			return fmt.Errorf("sidecar still running")
		}
		return nil
	})
}
