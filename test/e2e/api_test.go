//go:build e2e

package e2e

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodelet/nodelet/internal/base/testutil"
	"github.com/nodelet/nodelet/internal/pure/podspec"
)

// The kubelet API over HTTPS with the local admin credentials, through the
// CLI, and refused without credentials.
func TestAPIAndCLI(t *testing.T) {
	port := freePort(t)
	root := filepath.Join(shared.work, "root-api")
	_, dir, _ := lifecycleNodelet(t, "api", "--port", port, "--address", "127.0.0.1", "--root-dir", root)
	writeManifest(t, dir, "talker.yaml", `apiVersion: v1
kind: Pod
metadata: {name: talker}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: busybox:1.35
    env: [{name: NONCE, value: "`+strconv.FormatInt(time.Now().UnixNano(), 10)+`"}]
    command: ["sh", "-c", "i=0; while true; do i=$((i+1)); echo line $i; sleep 0.2; done"]
`)
	server := "https://127.0.0.1:" + port
	nodelet := func(args ...string) (string, error) {
		out, err := exec.Command(shared.nodelet, append(args, "--root-dir", root, "--server", server)...).CombinedOutput()
		return string(out), err
	}
	eventually(t, 60*time.Second, "get pods shows talker running", func() error {
		out, err := nodelet("get", "pods")
		if err != nil || !strings.Contains(out, "talker-e2e") || !strings.Contains(out, "Running") {
			return errorf("get pods: %v\n%s", err, out)
		}
		return nil
	})
	if out, err := nodelet("describe", "pod", "talker-e2e"); err != nil || !strings.Contains(out, "Timeline") || !strings.Contains(out, "Started") {
		t.Errorf("describe: %v\n%s", err, out)
	}
	eventually(t, 20*time.Second, "logs", func() error {
		out, err := nodelet("logs", "talker-e2e", "--tail", "2")
		if err != nil || strings.Count(out, "line ") != 2 {
			return errorf("logs: %v\n%s", err, out)
		}
		return nil
	})
	if out, err := nodelet("describe", "pod", "nosuch"); err == nil || !strings.Contains(out, "pod default/nosuch not found") {
		t.Errorf("describe of an unknown pod: %v\n%s", err, out)
	}

	// Without credentials: 401 on every kind of route; traversal is 4xx.
	insecure := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	for _, path := range []string{"/pods", "/stats/summary", "/metrics", "/containerLogs/default/talker-e2e/main", "/runningpods/", "/configz", "/events"} {
		resp, err := insecure.Get(server + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("GET %s without credentials: %d, want 401", path, resp.StatusCode)
		}
	}
	admin := adminClient(t, root)
	for _, path := range []string{"/containerLogs/default/talker-e2e/..", "/containerLogs/default/..%2F..%2Fetc/main", "/containerLogs/default/nosuch-e2e/main"} {
		resp, err := admin.Get(server + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode < 400 || resp.StatusCode >= 500 {
			t.Errorf("GET %s: %d, want 4xx", path, resp.StatusCode)
		}
	}
	// A summary may be up to 10 s old (served while it is refreshed, and
	// the eviction manager reads one every 10 s): the new pod shows in one
	// of the next.
	var summaryWS, summaryCPU uint64
	var podUID string
	eventually(t, 30*time.Second, "talker-e2e's container memory and the node's CPU in /stats/summary", func() error {
		resp, err := admin.Get(server + "/stats/summary")
		if err != nil {
			return err
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var summary statsv1alpha1.Summary
		if err := json.Unmarshal(body, &summary); err != nil {
			return errorf("/stats/summary: %w\n%s", err, body)
		}
		for _, p := range summary.Pods {
			if p.PodRef.Name == "talker-e2e" && len(p.Containers) == 1 && p.Containers[0].Memory != nil &&
				p.Containers[0].Memory.WorkingSetBytes != nil && p.Containers[0].CPU != nil && p.Containers[0].CPU.UsageCoreNanoSeconds != nil {
				summaryWS, summaryCPU, podUID = *p.Containers[0].Memory.WorkingSetBytes, *p.Containers[0].CPU.UsageCoreNanoSeconds, p.PodRef.UID
			}
		}
		if summaryWS == 0 || summary.Node.CPU == nil {
			return errorf("lacks them:\n%.2000s", body)
		}
		return nil
	})
	// The numbers are the runtime's: the same container's CRI stats agree
	// (memory within a factor of two; CPU time only grows).
	cs0, err := shared.rt.ListContainerStats(context.Background(), &runtimeapi.ContainerStatsFilter{
		LabelSelector: map[string]string{podspec.LabelPodUID: podUID}})
	if err != nil || len(cs0) != 1 {
		t.Fatalf("CRI stats of pod %s: %d (%v)", podUID, len(cs0), err)
	}
	cs := cs0[0]
	if err != nil {
		t.Fatal(err)
	}
	criWS, criCPU := cs.GetMemory().GetWorkingSetBytes().GetValue(), cs.GetCpu().GetUsageCoreNanoSeconds().GetValue()
	if summaryWS > 2*criWS || criWS > 2*summaryWS || summaryCPU > criCPU {
		t.Errorf("/stats/summary says working set %d, CPU %dns; CRI says %d, %dns", summaryWS, summaryCPU, criWS, criCPU)
	}
	resp, err := admin.Get(server + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metricsText, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, name := range []string{"kubelet_running_pods 1", `kubelet_runtime_operations_total{operation_type="run_podsandbox"}`,
		"kubelet_pleg_relist_duration_seconds_count", "kubelet_pod_start_duration_seconds_count 1",
		`kubelet_pod_worker_duration_seconds_count{operation_type="create"}`, "nodelet_manifest_errors_total"} {
		if !strings.Contains(string(metricsText), name) {
			t.Errorf("/metrics lacks %s", name)
		}
	}
}

// adminClient trusts the server's certificate and presents the local
// admin credentials nodelet wrote under root.
func adminClient(t *testing.T, root string) *http.Client { return adminClientTB(t, root) }

func adminClientTB(t testing.TB, root string) *http.Client {
	dir := filepath.Join(root, "pki")
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "admin.crt"), filepath.Join(dir, "admin.key"))
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{
		Certificates: []tls.Certificate{cert}, InsecureSkipVerify: true}}}
}

// exec with stdin and exit codes, and port-forward to busybox httpd,
// through the API and the runtime's streaming server.
func TestExecAndPortForward(t *testing.T) {
	port := freePort(t)
	root := filepath.Join(shared.work, "root-stream")
	_, dir, _ := lifecycleNodelet(t, "stream", "--port", port, "--address", "127.0.0.1", "--root-dir", root)
	writeManifest(t, dir, "web.yaml", `apiVersion: v1
kind: Pod
metadata: {name: streamer}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: web
    image: busybox:1.35
    env: [{name: NONCE, value: "`+strconv.FormatInt(time.Now().UnixNano(), 10)+`"}]
    command: ["sh", "-c", "mkdir -p /www && echo forwarded > /www/index.html && exec httpd -f -p 8080 -h /www"]
`)
	server := "https://127.0.0.1:" + port
	waitContainerRunning(t, 60*time.Second, "streamer-e2e", "web")
	cmd := exec.Command(shared.nodelet, "exec", "-i", "streamer-e2e", "--root-dir", root, "--server", server, "--", "sh", "-c", "cat; exit 3")
	cmd.Stdin = strings.NewReader("from stdin\n")
	out, err := cmd.CombinedOutput()
	exitErr, ok := err.(*exec.ExitError)
	if !ok || exitErr.ExitCode() != 3 || !strings.Contains(string(out), "from stdin") {
		t.Errorf("exec: %v (want exit 3)\n%s", err, out)
	}
	// With a tty (and no stdin: an input that ends would hang the
	// terminal up before the command prints): it runs on a terminal.
	ttyCmd := exec.Command(shared.nodelet, "exec", "-t", "streamer-e2e", "--root-dir", root, "--server", server, "--", "sh", "-c", "tty; stty size")
	if out, err := ttyCmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "/dev/pts/") {
		t.Errorf("exec -t: %v\n%s", err, out)
	}
	local := freePort(t)
	pf := exec.Command(shared.nodelet, "port-forward", "streamer-e2e", local+":8080", "--root-dir", root, "--server", server)
	pfOut := &testutil.SyncBuffer{}
	pf.Stdout, pf.Stderr = pfOut, pfOut
	if err := pf.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { pf.Process.Signal(os.Interrupt); pf.Wait() }()
	if body := httpGet(t, "http://127.0.0.1:"+local+"/"); !strings.Contains(body, "forwarded") {
		t.Errorf("port-forward GET = %q\n%s", body, pfOut.String())
	}
}

// nodelet logs -f follows a container's log across rotations without
// losing or repeating a line.
func TestLogsFollowAcrossRotation(t *testing.T) {
	port := freePort(t)
	root := filepath.Join(shared.work, "root-rotate")
	_, dir, _ := lifecycleNodelet(t, "rotate", "--port", port, "--address", "127.0.0.1", "--root-dir", root,
		"--container-log-max-size", "4Ki", "--container-log-max-files", "3", "--container-log-monitor-interval", "200ms")
	// The nonce makes a new pod (UID) on every run of the test.
	writeManifest(t, dir, "counter.yaml", `apiVersion: v1
kind: Pod
metadata: {name: counter}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: busybox:1.35
    env: [{name: NONCE, value: "`+strconv.FormatInt(time.Now().UnixNano(), 10)+`"}]
    command: ["sh", "-c", "echo ready; while [ ! -e /tmp/go ]; do sleep 0.1; done; i=0; while [ $i -lt 3000 ]; do i=$((i+1)); echo line $i; sleep 0.002; done; sleep 3600"]
`)
	waitContainerRunning(t, 60*time.Second, "counter-e2e", "main")
	// Follow from before the first line, then let the lines flow (an
	// earlier run's pod of the same name may still be running: retry until
	// this pod's container answers).
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out := &testutil.SyncBuffer{}
	var follow *exec.Cmd
	eventually(t, 30*time.Second, "following counter", func() error {
		out.Reset()
		follow = exec.CommandContext(ctx, shared.nodelet, "logs", "-f", "counter-e2e", "--root-dir", root, "--server", "https://127.0.0.1:"+port)
		follow.Stdout, follow.Stderr = out, out
		if err := follow.Start(); err != nil {
			return err
		}
		deadline := time.Now().Add(3 * time.Second)
		for time.Now().Before(deadline) && !strings.Contains(out.String(), "ready") {
			time.Sleep(20 * time.Millisecond)
		}
		if !strings.Contains(out.String(), "ready") {
			follow.Process.Kill()
			follow.Wait()
			return errorf("no ready line: %s", out.String())
		}
		return nil
	})
	ids, _ := shared.rt.ListContainers(context.Background(), &runtimeapi.ContainerFilter{State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
		LabelSelector: map[string]string{podspec.LabelPodName: "counter-e2e"}})
	for _, id := range ids { // the flag goes to every running instance; only this run's is followed
		shared.rt.ExecSync(context.Background(), id.Id, []string{"touch", "/tmp/go"}, 10*time.Second)
	}
	eventually(t, 50*time.Second, "all 3000 lines followed", func() error {
		if !strings.Contains(out.String(), "line 3000\n") {
			return errorf("%d lines so far: %.300s", strings.Count(out.String(), "\n"), out.String())
		}
		return nil
	})
	cancel()
	follow.Wait()
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) > 0 && lines[0] == "ready" {
		lines = lines[1:]
	}
	if len(lines) != 3000 {
		t.Fatalf("followed %d lines, want 3000 (first %q, last %q)", len(lines), lines[0], lines[len(lines)-1])
	}
	for i, l := range lines {
		if l != "line "+strconv.Itoa(i+1) {
			t.Fatalf("line %d is %q", i+1, l)
		}
	}
	rotated, _ := filepath.Glob(filepath.Join(shared.work, "logs-rotate", "default_counter-e2e_*", "main", "0.log.*"))
	if len(rotated) == 0 {
		t.Errorf("the log was never rotated; the test did not cover rotation")
	}
}
