//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"testing"
	"time"

	"github.com/nodelet/nodelet/internal/pure/podspec"
	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// lifecycleNodelet starts a nodelet on the shared runtime with its own
// manifest directory, a fast rescan and its HTTPS API on a free port of
// 127.0.0.1 (see nodeletProc.api).
func lifecycleNodelet(t *testing.T, name string, extra ...string) (*nodeletProc, string, []string) {
	t.Helper()
	manifests := filepath.Join(shared.work, "manifests-"+name)
	if err := os.MkdirAll(manifests, 0o755); err != nil {
		t.Fatal(err)
	}
	args := []string{"--container-runtime-endpoint", shared.endpoint, "--root-dir", filepath.Join(shared.work, "root-"+name),
		"--pod-manifest-path", manifests, "--hostname-override", "e2e",
		"--pod-logs-dir", filepath.Join(shared.work, "logs-"+name), "--file-check-frequency", "2s", "--healthz-port", "0", "--port", freePort(t), "--address", "127.0.0.1"}
	args = append(args, extra...)
	return startNodelet(t, args...), manifests, args
}

// waitPhase waits until /pods shows pod in phase, and returns it.
func waitPhase(t *testing.T, n *nodeletProc, pod, phase string, timeout time.Duration) *v1.Pod {
	t.Helper()
	return waitPod(t, n.api(t), pod, timeout, "phase "+phase, func(p *v1.Pod) error {
		if p.Status.Phase != v1.PodPhase(phase) {
			return fmt.Errorf("phase %q", p.Status.Phase)
		}
		return nil
	})
}

// instances returns the pod's container instances named name, oldest first.
func instances(t *testing.T, pod, name string) []*runtimeapi.Container {
	t.Helper()
	cs, err := shared.rt.ListContainers(context.Background(), &runtimeapi.ContainerFilter{LabelSelector: map[string]string{
		podspec.LabelPodName: pod, podspec.LabelContainerName: name}})
	if err != nil {
		t.Fatal(err)
	}
	sort.Slice(cs, func(i, j int) bool { return cs[i].CreatedAt < cs[j].CreatedAt })
	return cs
}

func exitPod(name, policy string, code int) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s}
spec:
  restartPolicy: %s
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: busybox:1.35
    command: ["sh", "-c", "sleep 1; exit %d"]
`, name, policy, code)
}

// Each restart policy with exit codes 0 and 1, as the kubelet does it.
func TestRestartPolicies(t *testing.T) {
	n, dir, _ := lifecycleNodelet(t, "restart")
	cases := []struct {
		name, policy string
		code         int
		restarts     bool
		phase        string // final phase for pods that do not restart
	}{
		{"always-0", "Always", 0, true, ""},
		{"always-1", "Always", 1, true, ""},
		{"onfailure-0", "OnFailure", 0, false, "Succeeded"},
		{"onfailure-1", "OnFailure", 1, true, ""},
		{"never-0", "Never", 0, false, "Succeeded"},
		{"never-1", "Never", 1, false, "Failed"},
	}
	for _, c := range cases {
		writeManifest(t, dir, c.name+".yaml", exitPod(c.name, c.policy, c.code))
	}
	for _, c := range cases {
		pod := c.name + "-e2e"
		if c.restarts {
			eventually(t, 60*time.Second, pod+" restarted", func() error {
				if got := len(instances(t, pod, "main")); got < 2 {
					return fmt.Errorf("%d instances", got)
				}
				return nil
			})
			continue
		}
		waitPhase(t, n, pod, c.phase, 60*time.Second)
	}
	// Pods that finished were not restarted, however long nodelet looks at
	// them.
	api := n.api(t)
	waitRuntimeLists(t, api, 3)
	for _, c := range cases {
		if !c.restarts {
			if got := len(instances(t, c.name+"-e2e", "main")); got != 1 {
				t.Errorf("%s: %d instances, want 1 (no restart)", c.name, got)
			}
		}
	}
	// The status says why: exit 1 under Always ends up in CrashLoopBackOff.
	waitPod(t, api, "always-1-e2e", 60*time.Second, "main in CrashLoopBackOff", waitingWith("main", "CrashLoopBackOff", ""))
}

const initPod = `apiVersion: v1
kind: Pod
metadata: {name: %s}
spec:
  restartPolicy: %s
  terminationGracePeriodSeconds: 1
  initContainers:
  - {name: first, image: "busybox:1.35", command: ["sh", "-c", "sleep 1"]}
  - {name: second, image: "busybox:1.35", command: ["sh", "-c", "sleep 1; exit %d"]}
  containers:
  - {name: app, image: "busybox:1.35", command: ["sh", "-c", "sleep 3600"]}
`

// Init containers run one at a time in order, before the app; a failing
// one fails the pod under Never and is retried otherwise.
func TestInitContainers(t *testing.T) {
	n, dir, _ := lifecycleNodelet(t, "init")
	writeManifest(t, dir, "ok.yaml", fmt.Sprintf(initPod, "init-ok", "Always", 0))
	writeManifest(t, dir, "fail-never.yaml", fmt.Sprintf(initPod, "init-never", "Never", 1))
	writeManifest(t, dir, "fail-always.yaml", fmt.Sprintf(initPod, "init-always", "Always", 1))

	waitContainerRunning(t, 60*time.Second, "init-ok-e2e", "app")
	first, second, app := instances(t, "init-ok-e2e", "first"), instances(t, "init-ok-e2e", "second"), instances(t, "init-ok-e2e", "app")
	if len(first) != 1 || len(second) != 1 || len(app) != 1 {
		t.Fatalf("instances first=%d second=%d app=%d, want 1 each", len(first), len(second), len(app))
	}
	firstDone := finishedAt(t, first[0].Id)
	if second[0].CreatedAt < firstDone {
		t.Errorf("second init container created before the first finished")
	}
	if app[0].CreatedAt < finishedAt(t, second[0].Id) {
		t.Errorf("app container created before the init containers finished")
	}

	waitPhase(t, n, "init-never-e2e", "Failed", 60*time.Second)
	if got := len(instances(t, "init-never-e2e", "app")); got != 0 {
		t.Errorf("init-never: app created %d times after its init container failed", got)
	}
	eventually(t, 60*time.Second, "init-always retried", func() error {
		if got := len(instances(t, "init-always-e2e", "second")); got < 2 {
			return fmt.Errorf("second ran %d times", got)
		}
		return nil
	})
	if got := len(instances(t, "init-always-e2e", "app")); got != 0 {
		t.Errorf("init-always: app created while its init container fails")
	}
}

func finishedAt(t *testing.T, id string) int64 {
	t.Helper()
	st, err := shared.rt.ContainerStatus(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return st.GetStatus().GetFinishedAt()
}

const termPod = `apiVersion: v1
kind: Pod
metadata: {name: graceful}
spec:
  terminationGracePeriodSeconds: 20
  containers:
  - name: main
    image: busybox:1.35
    command: ["sh", "-c", "trap 'echo got TERM; sleep 2; echo bye; exit 0' TERM; echo %s; while true; do sleep 0.2; done"]
`

// Editing a manifest replaces the pod; deleting it stops the container with
// SIGTERM and waits for it within the grace period.
func TestManifestEditAndDelete(t *testing.T) {
	_, dir, _ := lifecycleNodelet(t, "edit")
	ctx := context.Background()
	writeManifest(t, dir, "graceful.yaml", fmt.Sprintf(termPod, "v1"))
	var v1c *runtimeapi.Container
	eventually(t, 60*time.Second, "v1 running", func() (err error) {
		v1c, err = runningContainer(ctx, shared.rt, "graceful-e2e", "main")
		return err
	})
	v1uid := v1c.Labels[podspec.LabelPodUID]

	writeManifest(t, dir, "graceful.yaml", fmt.Sprintf(termPod, "v2"))
	eventually(t, 60*time.Second, "v2 replaced v1", func() error {
		c, err := runningContainer(ctx, shared.rt, "graceful-e2e", "main")
		if err != nil {
			return err
		}
		if c.Labels[podspec.LabelPodUID] == v1uid {
			return fmt.Errorf("still the v1 pod")
		}
		return nil
	})
	// v1 was stopped gracefully: its trap ran and it exited 0.
	st, err := shared.rt.ContainerStatus(ctx, v1c.Id)
	if err == nil && st.GetStatus().GetExitCode() != 0 {
		t.Errorf("v1 exit code %d, want 0 (trap ran within the grace period)", st.GetStatus().GetExitCode())
	}
	v2, _ := runningContainer(ctx, shared.rt, "graceful-e2e", "main")
	os.Remove(filepath.Join(dir, "graceful.yaml"))
	start := time.Now()
	eventually(t, 60*time.Second, "v2 stopped", func() error {
		st, err := shared.rt.ContainerStatus(ctx, v2.Id)
		if err != nil {
			return nil // removed already
		}
		if st.GetStatus().GetState() != runtimeapi.ContainerState_CONTAINER_EXITED {
			return fmt.Errorf("state %v", st.GetStatus().GetState())
		}
		if code := st.GetStatus().GetExitCode(); code != 0 {
			t.Errorf("v2 exit code %d, want 0 (SIGTERM trap, not SIGKILL)", code)
		}
		return nil
	})
	if took := time.Since(start); took < 2*time.Second {
		t.Errorf("v2 stopped after %v; its trap needs 2s of the 20s grace period", took)
	}
}

// A broken manifest and two files naming the same pod do not disturb the
// good pods; an event about the node names each file.
func TestBadManifestsAndDuplicates(t *testing.T) {
	n, dir, _ := lifecycleNodelet(t, "bad")
	api := n.api(t)
	ctx := context.Background()
	writeManifest(t, dir, "good.yaml", fmt.Sprintf(sleeperPod, "good"))
	writeManifest(t, dir, "a-dup.yaml", fmt.Sprintf(sleeperPod, "dup"))
	writeManifest(t, dir, "b-dup.yaml", fmt.Sprintf(sleeperPod, "dup"))
	writeManifest(t, dir, "broken.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: broken}\nspec: {containers: [{name: x, image: ''}]}\n")
	writeManifest(t, dir, "service.yaml", "apiVersion: v1\nkind: Service\nmetadata: {name: s}\n")
	for _, pod := range []string{"good-e2e", "dup-e2e"} {
		eventually(t, 60*time.Second, pod+" running", func() error {
			_, err := runningContainer(ctx, shared.rt, pod, "main")
			return err
		})
	}
	file := func(name string) string { return filepath.Join(dir, name) }
	waitEvent(t, api, 30*time.Second, "broken.yaml refused", manifestEvent(file("broken.yaml"), `spec\.containers\[0\]\.image: Required value`))
	waitEvent(t, api, 30*time.Second, "service.yaml refused", manifestEvent(file("service.yaml"), `kind "Service" apiVersion "v1" is not a Pod`))
	waitEvent(t, api, 30*time.Second, "b-dup.yaml loses to a-dup.yaml",
		manifestEvent(file("b-dup.yaml"), `pod default/dup(-e2e)? is also defined in `+regexp.QuoteMeta(file("a-dup.yaml"))))
	dup := waitPod(t, api, "dup-e2e", 10*time.Second, "from a-dup.yaml", func(p *v1.Pod) error {
		if got := p.Annotations[podspec.AnnotationConfigFile]; got != file("a-dup.yaml") {
			return fmt.Errorf("from %s", got)
		}
		return nil
	})

	// Rescans (a file written now is seen, then the sync loop has had its
	// turns) keep the same dup pod, with one sandbox.
	writeManifest(t, dir, "zz-later.yaml", "not: [a manifest\n")
	waitEvent(t, api, 30*time.Second, "zz-later.yaml refused (a rescan)", manifestEvent(file("zz-later.yaml"), `.`))
	waitRuntimeLists(t, api, 3)
	sbs, _ := shared.rt.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{podspec.LabelPodName: "dup-e2e"}})
	if len(sbs) != 1 {
		t.Errorf("dup: %d sandboxes, want 1", len(sbs))
	}
	if p, err := api.pod("dup-e2e"); err != nil || p.UID != dup.UID || p.Annotations[podspec.AnnotationConfigFile] != file("a-dup.yaml") {
		t.Errorf("dup after rescans: %v (err %v), want the pod %s of a-dup.yaml", p, err, dup.UID)
	}
}

// 20 pods, then nodelet restarted: the same containers afterwards, none
// restarted, no sandbox recreated.
func TestRestartAdoptsTwentyPods(t *testing.T) {
	n, dir, args := lifecycleNodelet(t, "adopt")
	ctx := context.Background()
	for i := 0; i < 20; i++ {
		writeManifest(t, dir, fmt.Sprintf("p%02d.yaml", i), fmt.Sprintf(sleeperPod, fmt.Sprintf("adopt%02d", i)))
	}
	before := map[string]string{}
	eventually(t, 120*time.Second, "20 pods running", func() error {
		for i := 0; i < 20; i++ {
			pod := fmt.Sprintf("adopt%02d-e2e", i)
			c, err := runningContainer(ctx, shared.rt, pod, "main")
			if err != nil {
				return err
			}
			before[pod] = c.Id
		}
		return nil
	})
	if err := n.stop(t); err != nil {
		t.Fatalf("nodelet exit: %v", err)
	}
	api := startNodelet(t, args...).api(t)
	// The new nodelet has synced every pod and reports the container it
	// found; then it relists and syncs some more.
	for pod, id := range before {
		waitPod(t, api, pod, 60*time.Second, "adopted", runsContainer("main", id))
	}
	waitRuntimeLists(t, api, adoptLists)
	for pod, id := range before {
		c, err := runningContainer(ctx, shared.rt, pod, "main")
		if err != nil || c.Id != id {
			t.Errorf("%s: container %v (err %v), want the same %s", pod, c, err, id)
		}
		if got := len(instances(t, pod, "main")); got != 1 {
			t.Errorf("%s: %d instances after restart", pod, got)
		}
		sbs, _ := shared.rt.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{podspec.LabelPodName: pod}})
		if len(sbs) != 1 {
			t.Errorf("%s: %d sandboxes after restart", pod, len(sbs))
		}
	}
}

// A pod that asks for more than the node has is Failed with the kubelet's
// reason and nothing of it is started; the pods next to it run.
func TestAdmissionRejects(t *testing.T) {
	n, dir, _ := lifecycleNodelet(t, "admit")
	ctx := context.Background()
	writeManifest(t, dir, "huge.yaml", `apiVersion: v1
kind: Pod
metadata: {name: huge}
spec:
  containers:
  - name: main
    image: busybox:1.35
    command: ["sleep", "3600"]
    resources: {requests: {cpu: "1000"}}
`)
	writeManifest(t, dir, "small.yaml", fmt.Sprintf(sleeperPod, "small"))
	waitContainerRunning(t, 60*time.Second, "small-e2e", "main")
	api := n.api(t)
	waitPod(t, api, "huge-e2e", 30*time.Second, "rejected", hasPhase(v1.PodFailed, "OutOfcpu"))
	waitRuntimeLists(t, api, 3)
	sbs, _ := shared.rt.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{podspec.LabelPodName: "huge-e2e"}})
	if len(sbs) != 0 {
		t.Errorf("rejected pod got %d sandboxes", len(sbs))
	}
}

// Pods from --manifest-url run next to the manifest directory's.
func TestManifestURL(t *testing.T) {
	body := fmt.Sprintf(sleeperPod, "fromurl")
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Node") != "e2e" {
			http.Error(w, "missing header", http.StatusForbidden)
			return
		}
		w.Header().Set("ETag", `"v1"`)
		if r.Header.Get("If-None-Match") == `"v1"` {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		fmt.Fprint(w, body)
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Close()
	manifests := filepath.Join(shared.work, "manifests-url")
	os.MkdirAll(manifests, 0o755)
	startNodelet(t, "--container-runtime-endpoint", shared.endpoint, "--root-dir", filepath.Join(shared.work, "root-url"),
		"--pod-manifest-path", manifests, "--hostname-override", "e2e", "--pod-logs-dir", filepath.Join(shared.work, "logs-url"),
		"--manifest-url", "http://"+ln.Addr().String()+"/pods", "--manifest-url-header", "X-Node:e2e", "--http-check-frequency", "1s")
	waitContainerRunning(t, 60*time.Second, "fromurl-e2e", "main")
}
